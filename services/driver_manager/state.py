"""What driver-manager remembers on the host between runs: the parameters it loaded, the firmware it flashed.

Why on the host: the container restarts on every upgrade and crash, but the kernel keeps the module and the
GPUs keep flashed firmware. Knowing the parameters it applied lets a parameter removed from driver-config
trigger a reload (`driver_config.module_params_decision`); knowing what it flashed stops a second flash of
the same image before the reboot that activates it. The file is replaced atomically; an unreadable one is
treated as empty (the worst case is one extra reload or one repeated flash of the same image).
"""

from __future__ import annotations

import json
import logging
import pathlib
from typing import Any

import attrs

from metax_k8s.deviceplugin import hostfiles

log = logging.getLogger(__name__)

STATE_FILE = "/var/lib/metax/driver-manager/state.json"


@attrs.define
class HostState:
    params: dict[str, str] | None = None
    """Module parameters of the last load we did (None: we never loaded)."""
    flashed: dict[str, str] = attrs.field(factory=dict)
    """PCI address → VBIOS version we flashed and that waits for a reboot."""


class StateFile:
    def __init__(self, host_root: pathlib.Path) -> None:
        self.path = host_root / STATE_FILE.lstrip("/")

    def read(self) -> HostState:
        try:
            doc: Any = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return HostState()
        except (OSError, ValueError) as exc:
            log.warning("ignoring unreadable %s: %s", self.path, exc)
            return HostState()
        params = doc.get("params") if isinstance(doc, dict) else None
        flashed = doc.get("flashed") if isinstance(doc, dict) else None
        return HostState(
            params={str(k): str(v) for k, v in params.items()} if isinstance(params, dict) else None,
            flashed={str(k): str(v) for k, v in flashed.items()} if isinstance(flashed, dict) else {},
        )

    def write(self, state: HostState) -> None:
        doc = {"params": state.params, "flashed": state.flashed}
        hostfiles.atomic_write(self.path, json.dumps(doc, indent=2, sort_keys=True) + "\n")
