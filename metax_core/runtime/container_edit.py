"""What a MetaX container's OCI spec gets at its start (R-MACA, R-SGPU): the one pure edit the container-edit
service applies to the ``config.json`` the runtime wrapper sends (`metax_core.runtime.edit_wire`).

A container is a MetaX one when gpu-device's Allocate put ``METAX_VISIBLE_DEVICES`` in its environment, or a
CDI annotation (``cdi.k8s.io/…``) names a ``metax-tech.com/gpu`` device. Other containers are left alone.
For a MetaX container, in this order:

1. **SDK** (R-MACA): ``METAX_MACA_VERSION`` is resolved by `metax_core.versions.resolve` (the same function
   ``metax-operator maca resolve`` uses) against the installed versions; the newest match is bind-mounted
   read-only at `sdk.MOUNT_PATH` with its environment appended (`sdk.environment`). ``maca``, ``maca-``, a
   malformed prefix or no match is a `Refusal` naming the request and the installed versions: the container
   does not start, never a silent fallback.
2. **CDI devices** for runtimes without CDI (containerd 1.6): the ``containerEdits`` of every requested
   device in the node's CDI spec (device nodes, env, mounts), each applied only when missing, so on a runtime
   that injected them already nothing changes. Devices come from the CDI annotations only, never from the
   environment: a pod may set any variable, but only the kubelet sets a container's CDI annotations.
3. **sGPU** (R-SGPU): an sGPU container (``METAX_SGPU_SHARES`` set by Allocate) carries a QoS policy that is
   one of Table 3.19's; a missing one is filled from the node's policy, an unknown one is refused.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from metax_core import versions
from metax_core.errors import InvalidSpec
from metax_core.node import cdi, devices
from metax_core.runtime import sdk

CDI_ANNOTATION_PREFIX = "cdi.k8s.io/"


@attrs.frozen
class DeviceInfo:
    """What the host says of a device node (the CDI spec may omit it): its type and numbers."""

    type: str
    major: int
    minor: int


@attrs.frozen
class Inputs:
    installed: tuple[versions.Version, ...] = ()
    """The SDK versions on the node (`sdk.installed`)."""
    sdk_host_dir: str = sdk.HOST_DIR
    cdi_spec: Mapping[str, Any] | None = None
    """The node's MetaX CDI spec (gpu-device's), None when there is none."""
    device_info: Mapping[str, DeviceInfo] = attrs.field(factory=dict)
    """Host device node path → its type and numbers."""
    node_qos: devices.QosPolicy | None = None


@attrs.frozen
class Edited:
    config: Mapping[str, Any]
    changed: bool
    maca: versions.Version | None = None
    """The SDK version the container got (for the in-use record)."""


class Refusal(Exception):
    """The container must not start; ``message`` is one line for its start error (``kubectl describe pod``)."""

    def __init__(self, message: str) -> None:
        self.message = message
        super().__init__(message)


def _env(config: Mapping[str, Any]) -> list[str]:
    env = (config.get("process") or {}).get("env") or []
    if not isinstance(env, list) or not all(isinstance(e, str) for e in env):
        raise Refusal("config.json: process.env must be a list of strings")
    return list(env)


def env_value(env: Sequence[str], name: str) -> str | None:
    """The last value of ``name`` in an OCI env list (the last one wins, as in execve's environment)."""
    found = None
    for entry in env:
        key, eq, value = entry.partition("=")
        if eq and key == name:
            found = value
    return found


def cdi_requests(config: Mapping[str, Any]) -> list[str]:
    """The MetaX CDI device names the container's CDI annotations ask for, in order."""
    annotations = config.get("annotations") or {}
    names: list[str] = []
    if isinstance(annotations, Mapping):
        for key, value in sorted(annotations.items()):
            if str(key).startswith(CDI_ANNOTATION_PREFIX) and isinstance(value, str):
                for item in value.split(","):
                    kind, eq, name = item.strip().partition("=")
                    if eq and kind == cdi.KIND and name and name not in names:
                        names.append(name)
    return names


def is_metax(config: Mapping[str, Any]) -> bool:
    return bool(env_value(_env(config), devices.VISIBLE_DEVICES_ENV)) or bool(cdi_requests(config))


def edit(config: Mapping[str, Any], inputs: Inputs) -> Edited:
    """The edited spec of a container, or the unchanged one; `Refusal` when it must not start."""
    if not isinstance(config, Mapping):
        raise Refusal("config.json must be a JSON object")
    if not is_metax(config):
        return Edited(config, False)
    out: dict[str, Any] = copy.deepcopy(dict(config))
    version = _sdk(out, inputs)
    _devices(out, inputs)
    _sgpu(out, inputs)
    return Edited(out, out != config, version)


def _set_env(out: dict[str, Any], env: list[str]) -> None:
    out.setdefault("process", {})["env"] = env


def _sdk(out: dict[str, Any], inputs: Inputs) -> versions.Version | None:
    env = _env(out)
    request = env_value(env, versions.ENV_VAR)
    if request is None:
        return None
    shown = ", ".join(str(v) for v in inputs.installed) or "none"
    try:
        chosen = versions.resolve(request, [str(v) for v in inputs.installed])
    except versions.NoMatchingVersion:
        raise Refusal(
            f"{versions.ENV_VAR}={request!r}: no installed MXMACA version matches (installed on this node: {shown})"
        ) from None
    except InvalidSpec as exc:
        why = "; ".join(e.message for e in exc.errors)
        raise Refusal(f"{versions.ENV_VAR}={request!r} is not a version request: {why} (installed: {shown})") from None
    mounts = out.setdefault("mounts", [])
    if any(isinstance(m, Mapping) and m.get("destination", "").rstrip("/") == sdk.MOUNT_PATH for m in mounts):
        raise Refusal(f"{versions.ENV_VAR}={request!r}: the container already mounts {sdk.MOUNT_PATH}")
    mounts.append(sdk.mount(inputs.sdk_host_dir, chosen))
    _set_env(out, sdk.environment(env, chosen))
    return chosen


def _devices(out: dict[str, Any], inputs: Inputs) -> None:
    wanted = cdi_requests(out)
    if not wanted:
        return
    entries = {d.get("name"): d for d in (inputs.cdi_spec or {}).get("devices", ()) if isinstance(d, Mapping)}
    missing = [n for n in wanted if n not in entries]
    if missing:
        names = ", ".join(cdi.qualified_name(n) for n in missing)
        raise Refusal(f"CDI device(s) {names} are not in this node's CDI spec (kind {cdi.KIND})")
    for name in wanted:
        edits = entries[name].get("containerEdits") or {}
        for node in edits.get("deviceNodes") or ():
            _device_node(out, node, inputs)
        env = _env(out)
        for entry in edits.get("env") or ():
            if env_value(env, str(entry).partition("=")[0]) is None:
                env.append(str(entry))
        _set_env(out, env)
        mounts = out.setdefault("mounts", [])
        for m in edits.get("mounts") or ():
            if not any(have.get("destination") == m.get("containerPath") for have in mounts):
                mounts.append(
                    {"destination": m["containerPath"], "source": m["hostPath"], "type": m.get("type", "bind")}
                    | ({"options": list(m["options"])} if m.get("options") else {})
                )


def _device_node(out: dict[str, Any], node: Mapping[str, Any], inputs: Inputs) -> None:
    path = str(node.get("path", ""))
    host = str(node.get("hostPath") or path)
    linux = out.setdefault("linux", {})
    have = linux.setdefault("devices", [])
    if any(d.get("path") == path for d in have):
        return
    info = inputs.device_info.get(host)
    if "major" in node and "minor" in node:
        info = DeviceInfo(str(node.get("type", "c")), int(node["major"]), int(node["minor"]))
    if info is None:
        raise Refusal(f"device node {host} of the CDI spec is not on this host")
    have.append({"path": path, "type": info.type, "major": info.major, "minor": info.minor, "fileMode": 0o666})
    allow = {"allow": True, "type": info.type, "major": info.major, "minor": info.minor, "access": "rwm"}
    rules = linux.setdefault("resources", {}).setdefault("devices", [])
    if allow not in rules:
        rules.append(allow)


def _sgpu(out: dict[str, Any], inputs: Inputs) -> None:
    env = _env(out)
    if env_value(env, devices.SHARES_ENV) is None:
        return
    qos = env_value(env, devices.QOS_ENV)
    allowed = ", ".join(p.value for p in devices.QosPolicy)
    if qos is None:
        env.append(f"{devices.QOS_ENV}={(inputs.node_qos or devices.QosPolicy.BEST_EFFORT).value}")
        _set_env(out, env)
        return
    if qos not in {p.value for p in devices.QosPolicy}:
        raise Refusal(f"{devices.QOS_ENV}={qos!r} is not a QoS policy (allowed: {allowed})")
