"""What driver-manager remembers on the host between runs: the parameters it loaded, the firmware it flashed.

Why on the host: the container restarts on every upgrade and crash, but the kernel keeps the module and the
GPUs keep flashed firmware. Knowing the parameters it applied lets a parameter removed from driver-config
trigger a reload (`driver_config.module_params_decision`); knowing what it flashed stops a second flash of
the same image before the reboot that activates it; knowing the driver it unloaded for a reload (version,
file, parameters, VF counts: `driver_plan.RunningDriver`) lets it load that driver again when the new one
is refused, also after a restart between the unload and the load.

Why pure here: what the file says and how it is read back are decisions (an unreadable or odd file is read as
empty: the worst case is one extra reload or one repeated flash of the same image); the file itself is
`metax_hw.driver_files.StateFile` behind `ports.node.DriverStateStore`.
"""

from __future__ import annotations

import json
from typing import Any

import attrs

from metax_core.node import driver_plan

STATE_FILE = "/var/lib/metax/driver-manager/state.json"


@attrs.define
class HostState:
    params: dict[str, str] | None = None
    """Module parameters of the last load we did (None: we never loaded)."""
    flashed: dict[str, str] = attrs.field(factory=dict)
    """PCI address → VBIOS version we flashed and that waits for a reboot."""
    version: str | None = None
    """The driver version of the last load we did."""
    module_file: str | None = None
    """The host-absolute file of the last load we did (None: modprobe, the host's own module)."""
    previous: driver_plan.RunningDriver | None = None
    """The driver we unloaded for a reload that has not succeeded yet: what to load again if the new one
    does not (recorded before the unload, so a restart between unload and load still knows it)."""


def parse(text: str) -> HostState:
    """The state a file's ``text`` holds; ValueError when it is not JSON (the caller reads that as empty)."""
    doc: Any = json.loads(text)
    if not isinstance(doc, dict):
        return HostState()
    params, flashed = doc.get("params"), doc.get("flashed")
    return HostState(
        params=_strings(params) if isinstance(params, dict) else None,
        flashed=_strings(flashed) if isinstance(flashed, dict) else {},
        version=_text(doc.get("version")),
        module_file=_text(doc.get("moduleFile")),
        previous=_previous(doc.get("previous")),
    )


def render(state: HostState) -> str:
    doc: dict[str, Any] = {"params": state.params, "flashed": state.flashed}
    if state.version is not None:
        doc["version"] = state.version
    if state.module_file is not None:
        doc["moduleFile"] = state.module_file
    if state.previous is not None:
        p = state.previous
        doc["previous"] = {
            "version": p.version,
            "params": dict(p.params),
            "moduleFile": p.module_file,
            "vfCounts": dict(p.vf_counts),
        }
    return json.dumps(doc, indent=2, sort_keys=True) + "\n"


def _strings(value: dict[Any, Any]) -> dict[str, str]:
    return {str(k): str(v) for k, v in value.items()}


def _text(value: object) -> str | None:
    return str(value) if isinstance(value, str) and value else None


def _previous(value: object) -> driver_plan.RunningDriver | None:
    if not isinstance(value, dict):
        return None
    params, vfs = value.get("params"), value.get("vfCounts")
    counts: dict[str, int] = {}
    for pf, n in vfs.items() if isinstance(vfs, dict) else ():
        if isinstance(n, int) and n > 0:
            counts[str(pf)] = n
    return driver_plan.RunningDriver(
        _text(value.get("version")),
        _strings(params) if isinstance(params, dict) else {},
        _text(value.get("moduleFile")),
        counts,
    )
