"""What a process node runs for one container: its argv, environment and probes, read from the pod spec.

Why a module of its own: this is the part a real kubelet takes from the container runtime and the image, and
the part a process node must refuse clearly when it cannot honour it (no image, so no entrypoint; a command
that is not installed; a reference it cannot resolve). Everything here is a function of the pod object and a
few lookups, so the rules are unit-tested without a cluster.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from metax_dev.processnode import standins

#: Reads ``key`` of a ConfigMap (``kind`` "ConfigMap") or Secret (``kind`` "Secret", decoded) in the pod's
#: namespace; raises `KeyError` when the object or the key is missing.
Lookup = Callable[[str, str, str], str]


class PlanError(Exception):
    """The container cannot be started: ``reason`` is the container status reason, the text says why."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


@attrs.frozen
class Probe:
    """One probe of a container (kubelet's defaults where the spec leaves a field out)."""

    action: str  # httpGet | exec | tcpSocket
    port: int = 0
    path: str = "/"
    scheme: str = "HTTP"
    host: str = ""
    command: tuple[str, ...] = ()
    initial_delay: float = 0.0
    period: float = 10.0
    timeout: float = 1.0
    success_threshold: int = 1
    failure_threshold: int = 3


@attrs.frozen
class ContainerPlan:
    name: str
    image: str
    argv: tuple[str, ...]
    env: Mapping[str, str]
    readiness: Probe | None
    liveness: Probe | None


@attrs.frozen
class PodFacts:
    """What the environment of a pod's containers may refer to besides the spec itself."""

    node_name: str
    pod_ip: str
    host_ip: str


def resolve_command(
    container: Mapping[str, Any],
    bin_dirs: Sequence[Path],
    stand_ins: standins.StandIns | None = None,
    rewrite: Callable[[str], str] = str,
) -> tuple[str, ...]:
    """``command`` + ``args`` with the executable found in ``bin_dirs`` (or given as an absolute path); no
    ``command``: the entrypoint the node's stand-ins name for the image, if any. ``rewrite`` maps the words the
    pod wrote (an absolute executable, the arguments) onto what stands for them; an executable found in
    ``bin_dirs`` is the harness's own path and is never rewritten (the checkout may itself live under ``/tmp``,
    which a pod's emptyDir stands for)."""
    name = container.get("name", "?")
    command = list(container.get("command") or [])
    args = list(container.get("args") or [])
    own = rewrite  # the words the pod wrote are mapped onto what stands for them
    if not command and stand_ins is not None:
        command = list(stand_ins.entrypoint(str(container.get("image", ""))) or [])
        own = str  # the image's entrypoint is the harness's own command line: its paths are this machine's
    if not command:
        raise PlanError(
            "StartError",
            f"container {name}: no command: a process node has no image ({container.get('image')}) to take an "
            "entrypoint from; set spec.containers[].command",
        )
    executable = command[0]
    if "/" in executable:
        path = Path(own(executable))
        found = str(path) if path.is_file() and shutil.which(str(path)) else None
    else:
        found = shutil.which(executable, path=":".join(str(d) for d in bin_dirs))
    if found is None:
        where = ", ".join(str(d) for d in bin_dirs)
        raise PlanError("StartError", f"container {name}: executable {executable!r} not found in {where}")
    return (found, *(own(w) for w in command[1:]), *(rewrite(w) for w in args))


_FIELD_LABEL = re.compile(r"^metadata\.(labels|annotations)\['([^']+)'\]$")


def field_value(pod: Mapping[str, Any], path: str, facts: PodFacts) -> str:
    """A ``fieldRef.fieldPath`` the downward API supports for env (the ones a process node can know)."""
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    simple = {
        "metadata.name": meta.get("name", ""),
        "metadata.namespace": meta.get("namespace", ""),
        "metadata.uid": meta.get("uid", ""),
        "spec.nodeName": spec.get("nodeName") or facts.node_name,
        "spec.serviceAccountName": spec.get("serviceAccountName") or "default",
        "status.podIP": facts.pod_ip,
        "status.podIPs": facts.pod_ip,
        "status.hostIP": facts.host_ip,
        "status.hostIPs": facts.host_ip,
    }
    if path in simple:
        return str(simple[path])
    match = _FIELD_LABEL.match(path)
    if match:
        return str((meta.get(match.group(1)) or {}).get(match.group(2), ""))
    raise PlanError("CreateContainerConfigError", f"fieldRef {path!r} is not supported by the process node")


_REFERENCE = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")


def _expand(value: str, env: Mapping[str, str]) -> str:
    """Kubernetes' ``$(VAR)`` expansion against the variables defined before (``$$`` escapes)."""
    parts = value.split("$$")
    return "$".join(_REFERENCE.sub(lambda m: env.get(m.group(1), m.group(0)), part) for part in parts)


def environment(
    container: Mapping[str, Any], pod: Mapping[str, Any], facts: PodFacts, lookup: Lookup
) -> dict[str, str]:
    """The container's ``env`` in order: values (with ``$(VAR)``), fieldRef, configMapKeyRef, secretKeyRef."""
    name = container.get("name", "?")
    result: dict[str, str] = {}
    for index, item in enumerate(container.get("env") or []):
        var = item["name"]
        where = f"container {name}: env[{index}] {var}"
        source = item.get("valueFrom")
        if source is None:
            result[var] = _expand(str(item.get("value", "")), result)
        elif "fieldRef" in source:
            result[var] = field_value(pod, source["fieldRef"]["fieldPath"], facts)
        elif "configMapKeyRef" in source or "secretKeyRef" in source:
            kind, ref = (
                ("ConfigMap", source["configMapKeyRef"])
                if "configMapKeyRef" in source
                else ("Secret", source["secretKeyRef"])
            )
            try:
                result[var] = lookup(kind, ref["name"], ref["key"])
            except KeyError as exc:
                if ref.get("optional"):
                    continue
                raise PlanError(
                    "CreateContainerConfigError", f"{where}: {kind} {ref['name']} key {ref['key']}: {exc}"
                ) from exc
        else:
            raise PlanError("CreateContainerConfigError", f"{where}: valueFrom {sorted(source)} is not supported")
    if container.get("envFrom"):
        raise PlanError("CreateContainerConfigError", f"container {name}: envFrom is not supported by the process node")
    return result


def _port(container: Mapping[str, Any], value: object) -> int:
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.isdigit():
        return int(value)
    for port in container.get("ports") or []:
        if port.get("name") == value:
            return int(port["containerPort"])
    raise PlanError("CreateContainerConfigError", f"container {container.get('name')}: no port named {value!r}")


def probe(container: Mapping[str, Any], kind: str) -> Probe | None:
    """``readinessProbe`` / ``livenessProbe`` of a container, or None."""
    raw = container.get(kind)
    if not raw:
        return None
    timing: dict[str, Any] = {
        "initial_delay": float(raw.get("initialDelaySeconds", 0)),
        "period": float(raw.get("periodSeconds", 10)),
        "timeout": float(raw.get("timeoutSeconds", 1)),
        "success_threshold": int(raw.get("successThreshold", 1)),
        "failure_threshold": int(raw.get("failureThreshold", 3)),
    }
    if "httpGet" in raw:
        http = raw["httpGet"]
        return Probe(
            "httpGet",
            port=_port(container, http["port"]),
            path=http.get("path", "/"),
            scheme=http.get("scheme", "HTTP"),
            host=http.get("host", ""),
            **timing,
        )
    if "exec" in raw:
        return Probe("exec", command=tuple(raw["exec"].get("command") or ()), **timing)
    if "tcpSocket" in raw:
        socket = raw["tcpSocket"]
        return Probe("tcpSocket", port=_port(container, socket["port"]), host=socket.get("host", ""), **timing)
    raise PlanError("CreateContainerConfigError", f"container {container.get('name')}: {kind}: unsupported handler")


def plan(
    container: Mapping[str, Any],
    pod: Mapping[str, Any],
    facts: PodFacts,
    bin_dirs: Sequence[Path],
    lookup: Lookup,
    paths: standins.PathMap | None = None,
    stand_ins: standins.StandIns | None = None,
) -> ContainerPlan:
    """Everything needed to start one container, or `PlanError` with the reason the status will show. With
    ``paths`` (the container's mount table) every path in its env, argv and exec probes is rewritten onto the
    directory that stands for it, so the process and its probes see the same files."""
    rewrite = paths.rewrite if paths is not None else str
    env = {k: rewrite(v) for k, v in environment(container, pod, facts, lookup).items()}
    argv = resolve_command(container, bin_dirs, stand_ins, lambda word: rewrite(_expand(word, env)))

    def probed(kind: str) -> Probe | None:
        found = probe(container, kind)
        if found is None or found.action != "exec":
            return found
        return attrs.evolve(found, command=tuple(rewrite(_expand(w, env)) for w in found.command))

    return ContainerPlan(
        name=container["name"],
        image=str(container.get("image", "")),
        argv=argv,
        env=env,
        readiness=probed("readinessProbe"),
        liveness=probed("livenessProbe"),
    )


def unsupported(pod: Mapping[str, Any], stand_ins: standins.StandIns | None = None) -> str | None:
    """Why a pod cannot run on a process node at all, or None. Init containers run only when the node's
    stand-ins stage a payload for each one's image (docs/processnode.md)."""
    spec = pod.get("spec") or {}
    unstaged = standins.unstaged_init_images(pod, stand_ins)
    if unstaged:
        return (
            "spec.initContainers are not supported by the process node (no staged payload for "
            + ", ".join(unstaged)
            + ")"
        )
    if spec.get("ephemeralContainers"):
        return "spec.ephemeralContainers are not supported by the process node"
    for index, container in enumerate(spec.get("containers") or []):
        for field in ("startupProbe", "lifecycle"):
            if container.get(field):
                return f"spec.containers[{index}].{field} is not supported by the process node"
    return None
