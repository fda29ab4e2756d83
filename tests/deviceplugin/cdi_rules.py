"""The CDI spec's rules, written down independently of `metax_core.node.cdi`, to check the files gpu-device writes.

From the CDI specification (cncf-tags/container-device-interface SPEC.md and specs-go): the known
``cdiVersion`` values; ``kind`` is ``vendor/class`` with the vendor a DNS subdomain and the class a name
of at most 63 characters; device names start and end alphanumeric with ``-``, ``_``, ``.`` allowed inside
(a leading digit needs 0.5.0); at least one device; unique device names; only the spec's fields at each
level; device node paths absolute; features newer than the declared version are refused.
"""

from __future__ import annotations

import re
from typing import Any

VERSIONS = ["0.3.0", "0.4.0", "0.5.0", "0.6.0", "0.7.0", "0.8.0", "1.0.0", "1.1.0"]
SPEC_FIELDS = {"cdiVersion", "kind", "annotations", "devices", "containerEdits"}
DEVICE_FIELDS = {"name", "annotations", "containerEdits"}
EDIT_FIELDS = {"env", "deviceNodes", "hooks", "mounts", "intelRdt", "additionalGids", "netDevices"}
NODE_FIELDS = {"path", "hostPath", "type", "major", "minor", "fileMode", "permissions", "uid", "gid"}
NAME = re.compile(r"^[a-zA-Z0-9]$|^[a-zA-Z0-9][a-zA-Z0-9_.\-]*[a-zA-Z0-9]$")
LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def problems(spec: Any) -> list[str]:
    found: list[str] = []
    if not isinstance(spec, dict):
        return ["the spec is not an object"]
    found += [f"unknown field {k}" for k in set(spec) - SPEC_FIELDS]
    version = spec.get("cdiVersion")
    if version not in VERSIONS:
        found.append(f"cdiVersion {version!r} is not a released version")
    vendor, _, klass = str(spec.get("kind", "")).partition("/")
    if not vendor or not klass or "/" in klass:
        found.append(f"kind {spec.get('kind')!r} is not vendor/class")
    elif not all(LABEL.match(p) and len(p) <= 63 for p in vendor.split(".")) or len(vendor) > 253:
        found.append(f"vendor {vendor!r} is not a DNS subdomain")
    elif not NAME.match(klass) or len(klass) > 63:
        found.append(f"class {klass!r} is not a valid name")
    elif "." in klass and _older(version, "0.6.0"):
        found.append("a '.' in the class needs cdiVersion 0.6.0")
    devices = spec.get("devices")
    if not isinstance(devices, list) or not devices:
        return [*found, "a spec needs at least one device"]
    names = [d.get("name") for d in devices]
    if len(set(names)) != len(names):
        found.append("device names repeat")
    for d in devices:
        found += [f"device {d.get('name')}: unknown field {k}" for k in set(d) - DEVICE_FIELDS]
        name = str(d.get("name", ""))
        if not NAME.match(name):
            found.append(f"device name {name!r} is invalid")
        elif name[0].isdigit() and _older(version, "0.5.0"):
            found.append(f"device name {name!r} starts with a digit: needs cdiVersion 0.5.0")
        edits = d.get("containerEdits")
        if not isinstance(edits, dict):
            found.append(f"device {name}: containerEdits missing")
            continue
        found += [f"device {name}: unknown edit {k}" for k in set(edits) - EDIT_FIELDS]
        for n in edits.get("deviceNodes", []):
            found += [f"device {name}: unknown device node field {k}" for k in set(n) - NODE_FIELDS]
            if not str(n.get("path", "")).startswith("/"):
                found.append(f"device {name}: device node path {n.get('path')!r} is not absolute")
            if "hostPath" in n and _older(version, "0.5.0"):
                found.append("hostPath needs cdiVersion 0.5.0")
    return found


def _older(version: Any, than: str) -> bool:
    return version in VERSIONS and VERSIONS.index(version) < VERSIONS.index(than)
