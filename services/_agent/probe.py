"""The readiness probe file of a node agent's pod: present exactly while the agent does its job on the node.

The kubelet asks it with ``exec: [test, -f, <file>]``, rendered from `metax_core.components`
(`ComponentInfo.probe`, R-READY). Its presence means *works*, not *alive*: driver-manager keeps it only
while the wanted driver version is loaded with its parameters read back, gpu-device while every resource
it offers is registered with the kubelet, vfio-manager while the selection is applied, gpu-label while the
labels are published. A round that fails or finds the component not ready removes it; so does stopping.
The content is the ready reason, for people (``cat`` it in the pod). Quiet in steady state: the file is
written only when its content changes and removed only when it may exist.

Why a file and not an HTTP endpoint (docs/agents.md): the agents listen on no port, and a privileged
host-PID container should not start to; an exec probe needs nothing but ``test`` in the image; and the
answer is the agent's own last decision, not a second code path that could disagree with it.
"""

from __future__ import annotations

import logging
import pathlib

from metax_hw import hostfiles

log = logging.getLogger(__name__)

DEFAULT = "/tmp/metax-agent-ready"


class ProbeFile:
    def __init__(self, path: pathlib.Path | str | None) -> None:
        self.path = pathlib.Path(path) if path else None
        self._last: str | None = None
        self._maybe_present = True
        """A file left by an earlier run of the agent may exist until the first removal."""

    def report(self, ready: bool, reason: str) -> None:
        """Ready: the file holds ``reason``; not ready: there is no file."""
        if ready:
            self.ready(reason)
        else:
            self.not_ready()

    def ready(self, message: str) -> None:
        if self.path is None or message == self._last:
            return
        try:
            hostfiles.atomic_write(self.path, message.rstrip("\n") + "\n")
        except OSError as exc:
            log.warning("cannot write the readiness probe file %s: %s", self.path, exc)
            return
        self._last = message
        self._maybe_present = True

    def not_ready(self) -> None:
        if self.path is None or not self._maybe_present:
            return
        try:
            hostfiles.remove_file(self.path)
        except OSError as exc:
            log.warning("cannot remove the readiness probe file %s: %s", self.path, exc)
            return
        self._last = None
        self._maybe_present = False

    @property
    def present(self) -> bool:
        """Whether the kubelet's probe passes now (for tests)."""
        return self.path is not None and self.path.is_file()
