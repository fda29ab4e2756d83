"""One round of container-runtime on a containerd node: backup, write, validate, restart, check (C4, R-READY).

The steps, each safe to be killed after:

1. **plan** — `metax_core.runtime.containerd.configure` on the root file as it is now: the drop-in's text and
   the root's text (the same text when our import is still there). Nothing to write: go to 4.
2. **backup** — the record (`files.Ledger`) is written first, holding each file's text before us.
3. **write** — the drop-in, then the root file, each through a rename.
4. **validate** — ``containerd --config <root> config dump`` with the host's own binary: it must load and
   declare the handler. If not, the files go back to what they were this round and nothing is restarted
   (`RuntimeConfigInvalid`).
5. **restart** — only when the *running* daemon lacks the handler (CRI ``Status``): a re-render we repaired
   while the daemon still has the handler restarts nothing, and neither does a reboot. The restart goes
   through the service manager; the daemon must then serve with the handler within ``restart_wait``. If not,
   every recorded file is restored to its text before us and the runtime restarted again
   (`RuntimeRestartFailed`); the same inputs are not tried again until they change.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import attrs

from metax_core.errors import HardwareError, InvalidSpec
from metax_core.runtime import containerd, detect, record
from metax_core.wire import event_reasons
from metax_hw import container_runtime
from services.container_runtime import files

log = logging.getLogger(__name__)


@attrs.frozen
class Outcome:
    ready: bool
    reason: str


class ContainerdRound:
    def __init__(
        self,
        *,
        host: container_runtime.Containerd,
        service: Any,
        files_: files.HostFiles,
        ledger: files.Ledger,
        root_path: str,
        wrapper: str,
        restart_wait: float,
        event: Callable[[str, str, bool], None],
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.host = host
        self.service = service
        self.files = files_
        self.ledger = ledger
        self.root_path = root_path
        self.wrapper = wrapper
        self.restart_wait = restart_wait
        self.event = event
        self.sleep = sleep
        self.clock = clock
        self.validated: tuple[str, str] | None = None
        """The root and drop-in texts the host's containerd last loaded in a dry run."""
        self.failed_inputs: tuple[str | None, str] | None = None
        """The root file's text and schema of a restart that failed: not tried again until they change."""

    @property
    def dropin_path(self) -> str:
        return containerd.dropin_path(self.root_path)

    def run(self, schema: detect.ContainerdSchema) -> Outcome:
        for path in (self.root_path, self.dropin_path, self.ledger.path):
            self.files.clean_temporaries(path)  # what a write killed midway left (never read by containerd)
        root_now = self.files.read(self.root_path)
        dropin_now = self.files.read(self.dropin_path)
        try:
            planned = containerd.configure(root_now, root_path=self.root_path, schema=schema, wrapper=self.wrapper)
        except InvalidSpec as exc:
            message = f"cannot configure containerd: {exc}"
            self.event(event_reasons.RUNTIME_CONFIG_INVALID, message, True)
            return Outcome(False, message)
        inputs = (root_now, str(schema.daemon))
        if self.failed_inputs == inputs:
            return Outcome(False, "a restart with our configuration failed; waiting for the configuration to change")
        previous = {self.root_path: root_now, self.dropin_path: dropin_now}
        previous_record = self.ledger.load()
        changed = self._write(planned, root_now, dropin_now)
        validated = (planned.root_text, planned.dropin_text)
        loads, why = (True, "") if validated == self.validated else self._validate()
        if not loads:
            if changed:
                self._restore(previous)
                self.ledger.save(previous_record)
            message = f"containerd does not load the configuration with runtime handler metax: {why}"
            self.event(event_reasons.RUNTIME_CONFIG_INVALID, message, True)
            return Outcome(False, message)
        self.validated = validated  # these texts load: not dumped again until they change
        loaded, reason = self.loaded()
        if loaded:
            return Outcome(True, reason)
        log.info("restarting containerd (%s): %s", self.service.name, reason)
        if self._restart_and_wait():
            loaded, reason = self.loaded()
            self.event(event_reasons.RUNTIME_CONFIGURED, f"containerd {schema.daemon_text}: {reason}", False)
            return Outcome(True, reason)
        self.failed_inputs = inputs
        self.rollback()
        message = (
            f"containerd did not come back with runtime handler metax within {self.restart_wait:.0f}s "
            f"({self.last_error}); the previous configuration was restored and containerd restarted"
        )
        self.event(event_reasons.RUNTIME_RESTART_FAILED, message, True)
        return Outcome(False, message)

    def _write(self, planned: containerd.Configured, root_now: str | None, dropin_now: str | None) -> bool:
        root_changes = planned.root_text != root_now
        if not root_changes and planned.dropin_text == dropin_now:
            return False
        rec = self.ledger.load() or record.Record(detect.RuntimeKind.CONTAINERD.value)
        old_root = rec.file(self.root_path)
        repaired = old_root is not None and root_changes and root_now not in (old_root.before, old_root.after)
        rec = rec.with_file(
            record.remember(rec.file(self.dropin_path), self.dropin_path, dropin_now, planned.dropin_text, (), True)
        )
        if root_changes or old_root is None:
            rec = rec.with_file(
                record.remember(old_root, self.root_path, root_now, planned.root_text, planned.edits, False)
            )
        self.ledger.save(rec)  # backup: before any file changes
        self.files.write(self.dropin_path, planned.dropin_text)
        if root_changes:
            self.files.write(self.root_path, planned.root_text)
        if repaired:
            self.event(
                event_reasons.RUNTIME_CONFIG_REPAIRED,
                f"{self.root_path} was rewritten without the import of {self.dropin_path}; it is added again",
                True,
            )
        log.info("wrote %s%s", self.dropin_path, f" and {self.root_path}" if root_changes else "")
        return True

    def _validate(self) -> tuple[bool, str]:
        ok, output = self.host.dump(self.root_path)
        if not ok:
            return False, output
        return containerd.dumped_handler(output, self.wrapper)

    last_error = ""

    def loaded(self) -> tuple[bool, str]:
        """Whether the running daemon has the handler (CRI status), and why not."""
        try:
            config = self.host.cri_config()
        except HardwareError as exc:
            self.last_error = str(exc)
            return False, f"containerd does not answer: {exc}"
        ok, reason = containerd.handler_loaded(config, self.wrapper)
        self.last_error = "" if ok else reason
        return ok, reason

    def serving(self) -> bool:
        try:
            self.host.cri_config()
        except HardwareError as exc:
            self.last_error = str(exc)
            return False
        return True

    def _restart_and_wait(self, until: Callable[[], bool] | None = None) -> bool:
        check = until or (lambda: self.loaded()[0])
        try:
            self.service.restart()
        except HardwareError as exc:
            self.last_error = str(exc)
            log.warning("restart of %s failed: %s", self.service.name, exc)
        deadline = self.clock() + self.restart_wait
        while True:
            if check():
                return True
            if self.clock() >= deadline:
                return False
            self.sleep(0.2)

    def _restore(self, texts: dict[str, str | None]) -> None:
        for path in (self.root_path, self.dropin_path):  # root first: it must not import a missing drop-in
            self.files.put(path, texts[path])

    def rollback(self) -> None:
        """Every recorded file back to its text before us, the record gone, the runtime restarted."""
        self.validated = None
        self.undo_files()
        if not self._restart_and_wait(self.serving):
            log.error("containerd does not serve after the rollback either: %s", self.last_error)

    def undo_files(self, *, clear: bool = True) -> bool:
        """Reverse what the record says (uninstall, rollback); False when there is no record."""
        rec = self.ledger.load()
        if rec is None:
            return False
        current = {f.path: self.files.read(f.path) for f in rec.files}
        plan = record.undo_plan(rec, current, lambda e, text: containerd.unconfigure(text, e.edits, e.path))
        order = sorted(plan, key=lambda p: p != self.root_path)  # the root file first, then the drop-in
        for path in order:
            self.files.put(path, plan[path])
        if clear:
            self.ledger.clear()
        return True

    def uninstall(self) -> list[str]:
        """Our drop-in removed, the root file restored, containerd restarted once if it still runs our handler.

        The record goes last: an uninstall killed before the restart still knows, on its next start, that the
        running daemon's handler is ours to take away."""
        self.validated = None
        if not self.undo_files(clear=False):
            return []
        kept: list[str] = []
        if self.loaded()[0] and not self._restart_and_wait(lambda: self.serving() and not self.loaded()[0]):
            kept.append(f"containerd did not come back without runtime handler metax: {self.last_error}")
        self.ledger.clear()
        return kept
