"""The readiness probe file of a node agent's DaemonSet (``exec: [test, -f, <file>]``).

Why a file and not an HTTP endpoint: the agents are host-networked-free DaemonSets with no port to open,
and kubelet's exec probe needs nothing but ``test``. The file exists while the agent's last round
succeeded (its content says what it did) and is removed when a round fails or the agent stops; it is written
only when its content changes.
"""

from __future__ import annotations

import logging
import pathlib

from metax_k8s.deviceplugin import hostfiles

log = logging.getLogger(__name__)

DEFAULT = "/tmp/metax-agent-ready"


class ProbeFile:
    def __init__(self, path: pathlib.Path | str | None) -> None:
        self.path = pathlib.Path(path) if path else None
        self._last: str | None = None

    def ready(self, message: str) -> None:
        if self.path is None or message == self._last:
            return
        try:
            hostfiles.atomic_write(self.path, message.rstrip("\n") + "\n")
        except OSError as exc:
            log.warning("cannot write the readiness probe file %s: %s", self.path, exc)
            return
        self._last = message

    def not_ready(self) -> None:
        if self.path is None:
            return
        self._last = None
        try:
            self.path.unlink(missing_ok=True)
        except OSError as exc:
            log.warning("cannot remove the readiness probe file %s: %s", self.path, exc)
