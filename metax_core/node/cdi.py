"""The CDI (Container Device Interface) spec that gpu-device writes for MetaX GPUs.

Container runtimes with CDI support (containerd ≥ 1.7, CRI-O ≥ 1.23, Docker ≥ 25) inject a device by its
fully qualified name ``metax-tech.com/gpu=<name>``, which the device plugin returns from Allocate. This
module builds the spec document and checks it against the CDI rules, so a bad file is never written.

Version: the CDI project's own generators write the *minimum* spec version that the content needs, not
the newest one, because a runtime rejects any version newer than the CDI library it was built with
(containerd 1.7 knows up to 0.6.0). We do the same (`minimum_version`), from the version table of the
current spec (`KNOWN_VERSIONS`, up to 1.1.0).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from metax_core.errors import FieldError, InvalidSpec

VENDOR = "metax-tech.com"
CLASS = "gpu"
KIND = f"{VENDOR}/{CLASS}"

KNOWN_VERSIONS = ("0.3.0", "0.4.0", "0.5.0", "0.6.0", "0.7.0", "0.8.0", "1.0.0", "1.1.0")
"""Released CDI spec versions a runtime may accept (0.1.0/0.2.0 predate the current format)."""
LATEST_VERSION = KNOWN_VERSIONS[-1]

_NAME = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9_.-]*[A-Za-z0-9])?\Z")
_DNS_LABEL = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\Z")
_CLASS = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?\Z")


@attrs.frozen
class CdiDevice:
    """One named device and the device nodes (same path on host and in the container) it brings."""

    name: str
    device_nodes: tuple[str, ...] = ()


def device_name(address: str) -> str:
    """CDI device name of a PCI function: ``0000:09:00.0`` → ``0000-09-00.0`` (names allow no colons)."""
    return address.replace(":", "-")


def qualified_name(name: str, kind: str = KIND) -> str:
    return f"{kind}={name}"


def spec_file_name(kind: str = KIND) -> str:
    """``metax-tech.com-gpu.json``: one file per kind, so rewriting it replaces every device at once."""
    return kind.replace("/", "-") + ".json"


def kind_errors(kind: str) -> list[FieldError]:
    """Problems with a ``vendor/class`` kind: vendor a DNS subdomain, class a name of at most 63 chars."""
    vendor, slash, klass = kind.partition("/")
    if not slash or not vendor or not klass:
        return [FieldError("kind", f"{kind!r} is not of the form vendor/class")]
    errors = []
    if len(vendor) > 253 or not all(_DNS_LABEL.match(label) for label in vendor.split(".")):
        errors.append(FieldError("kind", f"vendor {vendor!r} is not a DNS subdomain"))
    if not _CLASS.match(klass):
        errors.append(FieldError("kind", f"class {klass!r} must be alphanumerics, '-', '_', '.' (at most 63)"))
    return errors


def name_errors(name: str, path: str) -> list[FieldError]:
    if _NAME.match(name):
        return []
    return [FieldError(path, f"device name {name!r} must start and end alphanumeric, with '-', '_', '.' inside")]


def build_spec(devices: Sequence[CdiDevice], kind: str = KIND) -> dict[str, Any] | None:
    """The spec document for ``devices``; None when there is none (a CDI spec needs at least one device).

    Raises InvalidSpec, listing every problem, when a name, the kind or a device node path is not valid.
    """
    if not devices:
        return None
    errors = kind_errors(kind)
    seen: set[str] = set()
    for i, d in enumerate(devices):
        errors += name_errors(d.name, f"devices[{i}].name")
        if d.name in seen:
            errors.append(FieldError(f"devices[{i}].name", f"{d.name!r} is used twice"))
        seen.add(d.name)
        errors += [
            FieldError(f"devices[{i}].containerEdits.deviceNodes", f"path {p!r} is not absolute")
            for p in d.device_nodes
            if not p.startswith("/")
        ]
    if errors:
        raise InvalidSpec(errors)
    body: dict[str, Any] = {
        "kind": kind,
        "devices": [
            {"name": d.name, "containerEdits": {"deviceNodes": [{"path": p} for p in d.device_nodes]}} for d in devices
        ],
    }
    return {"cdiVersion": minimum_version(body), **body}


def _edits(spec: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    edits = [d.get("containerEdits") or {} for d in spec.get("devices", ())]
    return [*edits, spec.get("containerEdits") or {}]


def minimum_version(spec: Mapping[str, Any]) -> str:
    """The lowest known CDI version that allows every feature ``spec`` uses (the CDI library's rules)."""
    edits = _edits(spec)
    devices = spec.get("devices", ())
    klass = str(spec.get("kind", "")).partition("/")[2]
    rdt = [e["intelRdt"] for e in edits if e.get("intelRdt") is not None]
    if any(e.get("netDevices") for e in edits) or any("schemata" in r or r.get("enableMonitoring") for r in rdt):
        return "1.1.0"
    if rdt or any(e.get("additionalGids") for e in edits):
        return "0.7.0"
    if spec.get("annotations") or any(d.get("annotations") for d in devices) or "." in klass:
        return "0.6.0"
    digit_name = any(str(d.get("name", "x"))[:1].isdigit() for d in devices)
    if digit_name or any(n.get("hostPath") for e in edits for n in e.get("deviceNodes", ())):
        return "0.5.0"
    if any(m.get("type") for e in edits for m in e.get("mounts", ())):
        return "0.4.0"
    return "0.3.0"


def render(spec: Mapping[str, Any]) -> str:
    """Stable text of a spec (sorted keys), so an unchanged spec is recognised and not rewritten."""
    return json.dumps(spec, indent=2, sort_keys=True) + "\n"
