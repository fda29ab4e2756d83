"""CRI-O's drop-in for the ``metax`` runtime handler (C4): one file we own in ``/etc/crio/crio.conf.d/``.

CRI-O reads every file of ``crio.conf.d`` in order after ``crio.conf`` and merges them key by key, so the
drop-in holds only ``[crio.runtime.runtimes.metax]``; no file of the administrator's is edited, and uninstall
removes ours. CRI-O has CDI on. The handler is not the default (``default_runtime`` is not touched).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import tomlkit

from metax_core.runtime import handler

DROPIN_DIR = "/etc/crio/crio.conf.d"
DROPIN = f"{DROPIN_DIR}/99-metax.conf"
HEADER = (
    "# Written by the MetaX GPU operator's container-runtime agent (runtime handler 'metax'); uninstall removes it.\n"
)


def dropin(wrapper: str, runtime_root: str = "/run/runc") -> str:
    table = {"runtime_path": wrapper, "runtime_type": "oci", "runtime_root": runtime_root}
    return HEADER + tomlkit.dumps({"crio": {"runtime": {"runtimes": {handler.RUNTIME_HANDLER: table}}}})


def handler_entry(config: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """``crio.runtime.runtimes.metax`` of a parsed CRI-O config (a drop-in, or the running daemon's ``/config``)."""
    node: Any = config
    for key in ("crio", "runtime", "runtimes", handler.RUNTIME_HANDLER):
        if not isinstance(node, Mapping) or key not in node:
            return None
        node = node[key]
    return node if isinstance(node, Mapping) else None
