"""maca's part of the uninstall (R-INSTALL): every version it installed removed, unless a live container
still uses it (its bind mount would lose its files), then the records and the directory itself."""

from __future__ import annotations

from metax_core.ports import node as node_ports
from metax_core.runtime import sdk


def undo(s: node_ports.SdkStore) -> list[str]:
    """Remove the versions and records; returns what stays and why (the uninstall's ``kept``)."""
    s.clean()
    live, gone = s.uses()
    s.forget(gone)
    kept: list[str] = []
    for version in s.installed():
        users = sorted(u.container_id for u in live if u.version == sdk.version_dir(version))
        if users or not s.remove(version):
            kept.append(f"MXMACA {version}: used by container(s) {', '.join(users) or 'started meanwhile'}")
    if not kept:
        s.tidy()
    return kept
