"""One round of container-runtime on a runtime: backup, write, validate, restart, check (C4, R-READY).

The steps, each safe to be killed after (`RuntimeRound.run`; the runtime's own parts are the subclass's:
`containerd_round`, `docker_round`, `crio_round`):

1. **plan** — the pure core (`metax_core.runtime`) on the files as they are now: the wanted text of each file
   (our drop-in, the root file's smallest edit). Configuring its own output changes nothing: a steady node
   writes nothing.
2. **backup** — the record (`runtime_files.Ledger`) is written first, holding each file's text before us.
3. **write** — owned files first, the root file last, each through a rename.
4. **validate** — the runtime's own dry run with the host's binary (``containerd config dump``, ``crio config``); if it
   refuses, or the effective configuration lost anything but what we add (containerd: a dump taken before the
   write, `baseline`, against one after), the files and the record go back to what they were and nothing is
   restarted (`RuntimeConfigInvalid`). Texts that loaded once are not dry-run again until they change.
5. **restart** — only when the *running* daemon lacks the handler (asked over its API; a daemon that does not
   answer is not started by us: its administrator stopped it, or it is starting and reads our files): a
   re-render we repaired while the daemon still has the handler restarts nothing, nor does a reboot. The restart goes
   through the service manager (`restart`: systemd, a signal to the daemon whose supervisor starts it again, or
   none: the administrator restarts it); the daemon must then serve with the handler within ``restart_wait``. If
   not, every recorded file is restored to its text (and mode) before us and the runtime restarted again
   (`RuntimeRestartFailed`); the same inputs are not tried again until they change.

Every file keeps its mode and owner; a file we create gets the mode `Planned.create_modes` says (no more
permissive than what it copies), the record 0600.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

import attrs

from metax_core.errors import HardwareError, InvalidSpec
from metax_core.ports import node as node_ports
from metax_core.runtime import handler, record
from metax_core.wire import event_reasons
from metax_hw import runtime_files

log = logging.getLogger(__name__)


@attrs.frozen
class Outcome:
    ready: bool
    reason: str


@attrs.frozen
class Planned:
    texts: Mapping[str, str | None]
    """Each file's wanted text, in write order (owned files first, the root file last); None: an owned file of
    ours that is no longer wanted (removed, and dropped from the record)."""
    edits: Mapping[str, tuple[record.RootEdit, ...]]
    owned: frozenset[str]
    create_modes: Mapping[str, record.FileMode] = attrs.field(factory=dict)
    """The mode and owner of a file this plan creates (`record.created_mode`); absent: 0644."""
    note: str = ""
    """Said with the readiness reason when ready (containerd 1.7 with CDI off)."""


@attrs.frozen
class Baseline:
    """What the dry run needs from before the write (containerd: the effective configuration without us)."""

    ok: bool
    text: str = ""
    """The dump, or why the node's files do not load even without our change."""
    scratch: str = ""
    """The scratch file the dump was taken from (its name appears in the dump's ``imports``)."""


class RuntimeRound:
    runtime = "runtime"
    """Its name in messages and the record (``containerd``, ``docker``)."""
    unit = "runtime"
    """The service manager's name for it (the agent's ``METAX_RUNTIME_SERVICE`` overrides)."""

    def __init__(
        self,
        *,
        service: node_ports.ServiceManager | None,
        files_: node_ports.RuntimeFiles,
        ledger: runtime_files.Ledger,
        wrapper: str,
        restart_wait: float,
        event: Callable[[str, str, bool], None],
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.restart = service
        """What restarts the runtime; None: nothing does (restart mode ``none``: the administrator restarts it)."""
        self.files = files_
        self.ledger = ledger
        self.wrapper = wrapper
        self.restart_wait = restart_wait
        self.event = event
        self.sleep = sleep
        self.clock = clock
        self.last_error = ""
        self.created_now: tuple[str, ...] = ()
        """The directories the last write created (removed again when its files go back)."""
        self.validated: tuple[str | None, ...] | None = None
        """The texts the host's runtime last loaded in a dry run."""
        self.failed_inputs: tuple[Any, ...] | None = None
        """The files' texts and the runtime's version of a restart that failed: not retried until they change."""
        self.seen: dict[str, str] = {}
        """The texts this process last saw in place and loaded: an owned file that differs later was changed or
        removed by someone else (a removal is told from a write killed before it only this way)."""

    # -- the runtime's parts ---------------------------------------------------------------------------------

    @property
    def paths(self) -> tuple[str, ...]:
        """Every file this round may write, in write order."""
        raise NotImplementedError

    @property
    def watched(self) -> tuple[str, ...]:
        """The files whose change is looked at every tick (ours, and what the plan read)."""
        return self.paths

    def plan(self, current: Mapping[str, str | None], context: Any) -> Planned:
        raise NotImplementedError

    def reverse(self, entry: record.FileRecord, text: str) -> str:
        """``text`` with ``entry``'s recorded edits undone (a file someone changed after us)."""
        raise NotImplementedError

    def baseline(self, planned: Planned, current: Mapping[str, str | None]) -> Baseline | None:
        """Taken before a write (None: this runtime's dry run needs nothing from before)."""
        return None

    def validate(self, baseline: Baseline | None = None) -> tuple[bool, str]:
        raise NotImplementedError

    def ask(self) -> Mapping[str, Any]:
        """What the running daemon loaded (raises HardwareError when it does not answer)."""
        raise NotImplementedError

    def handler_in(self, answer: Mapping[str, Any]) -> tuple[bool, str]:
        raise NotImplementedError

    def sandboxes(self) -> list[str]:
        """Pods still running with the handler (their shims call the wrapper)."""
        return []

    def version_output(self) -> str | None:
        """What the host's runtime binary prints for ``--version`` (None: it does not run)."""
        raise NotImplementedError

    def repaired(self, path: str) -> str:
        return f"{path} was rewritten without our part; it is added again"

    def repaired_owned(self, path: str) -> str:
        return f"{path} (ours) was removed or changed by someone else; it is written again"

    # -- the round -------------------------------------------------------------------------------------------

    def run(self, context: Any, version: str) -> Outcome:
        for path in (*self.paths, self.ledger.path):
            self.files.clean_temporaries(path)  # what a write killed midway left (never read by the runtime)
        current = {p: self.files.read(p) for p in self.paths}
        try:
            planned = self.plan(current, context)
        except InvalidSpec as exc:
            return self._invalid(f"cannot configure {self.runtime}: {exc}")
        inputs = (tuple(current.values()), version)
        if self.failed_inputs == inputs:
            return Outcome(False, "a restart with our configuration failed; waiting for the configuration to change")
        previous_record = self.ledger.load()
        pending = any(text != current.get(p) for p, text in planned.texts.items())
        baseline = self.baseline(planned, current) if pending else None
        if baseline is not None and not baseline.ok:
            return self._invalid(
                f"{self.runtime} does not load the node's configuration even without our change: {baseline.text}"
            )
        changed = self._write(planned, current)
        validated = tuple(planned.texts.values())
        loads, why = (True, "") if validated == self.validated else self.validate(baseline)
        if not loads:
            if changed:
                self._restore(current)
                for directory in reversed(self.created_now):
                    self.files.remove_dir_if_empty(directory)
                self.ledger.save(previous_record)
            return self._invalid(f"{self.runtime} does not load the configuration with runtime handler metax: {why}")
        self.validated = validated
        self.seen = {p: t for p, t in planned.texts.items() if t is not None}
        if not self.serving():  # stopped by its administrator, or starting: it reads our files when it starts
            return Outcome(False, f"{self.runtime} does not answer ({self.last_error}); not restarted by us")
        loaded, reason = self.loaded()
        if loaded:
            return Outcome(True, reason + planned.note)
        if self.restart is None:
            return Outcome(
                False, f"{reason}; restart {self.runtime} to load it (restart mode none: the agent does not)"
            )
        log.info("restarting %s (%s): %s", self.runtime, self.restart.name, reason)
        if self._restart_and_wait():
            loaded, reason = self.loaded()
            self.event(event_reasons.RUNTIME_CONFIGURED, f"{self.runtime} {version}: {reason}", False)
            return Outcome(True, reason + planned.note)
        self.failed_inputs = inputs
        self.rollback()
        message = (
            f"{self.runtime} did not come back with runtime handler metax within {self.restart_wait:.0f}s "
            f"({self.last_error}); the previous configuration was restored and {self.runtime} restarted"
        )
        self.event(event_reasons.RUNTIME_RESTART_FAILED, message, True)
        return Outcome(False, message)

    def _invalid(self, message: str) -> Outcome:
        self.event(event_reasons.RUNTIME_CONFIG_INVALID, message, True)
        return Outcome(False, message)

    def _write(self, planned: Planned, current: Mapping[str, str | None]) -> bool:
        changes = [p for p, text in planned.texts.items() if text != current.get(p)]
        if not changes:
            return False
        rec = self.ledger.load() or record.Record(self.runtime)
        repaired = []
        for path, text in planned.texts.items():
            old = rec.file(path)
            if text is None:  # an owned file of ours the plan no longer wants
                rec = rec.without(path)
                continue
            if path not in changes and old is not None:
                continue
            owned = path in planned.owned
            if old is not None and record.changed_by_others(old, current.get(path), self.seen.get(path)):
                repaired.append(path)
            edits = planned.edits.get(path, ())
            mode = self.files.stat(path) if current.get(path) is not None else None
            rec = rec.with_file(record.remember(old, path, current.get(path), text, edits, owned, mode))
        self.created_now = tuple(
            dict.fromkeys(d for p in changes if planned.texts[p] is not None for d in self.files.missing_dirs(p))
        )
        rec = rec.with_dirs(self.created_now)
        self.ledger.save(rec)  # backup: before any file changes
        for path in changes:
            exists = current.get(path) is not None
            self.files.put(path, planned.texts[path], None if exists else planned.create_modes.get(path))
        for path in repaired:
            message = self.repaired_owned(path) if path in planned.owned else self.repaired(path)
            self.event(event_reasons.RUNTIME_CONFIG_REPAIRED, message, True)
        log.info("wrote %s", " and ".join(changes))
        return True

    def loaded(self) -> tuple[bool, str]:
        """Whether the running daemon has the handler, and why not."""
        try:
            answer = self.ask()
        except HardwareError as exc:
            self.last_error = str(exc)
            return False, f"{self.runtime} does not answer: {exc}"
        ok, reason = self.handler_in(answer)
        self.last_error = "" if ok else reason
        return ok, reason

    def serving(self) -> bool:
        try:
            self.ask()
        except HardwareError as exc:
            self.last_error = str(exc)
            return False
        return True

    def _restart_and_wait(self, until: Callable[[], bool] | None = None) -> bool:
        check = until or (lambda: self.loaded()[0])
        if self.restart is None:
            return check()
        try:
            self.restart.restart(self.unit)
        except HardwareError as exc:
            self.last_error = str(exc)
            log.warning("restart of %s failed: %s", self.restart.name, exc)
        deadline = self.clock() + self.restart_wait
        while True:
            if check():
                return True
            if self.clock() >= deadline:
                return False
            self.sleep(0.2)

    def _restore(self, texts: Mapping[str, str | None]) -> None:
        for path in reversed(self.paths):  # the root first: it must not name a missing drop-in
            self.files.put(path, texts[path])  # a file that was there kept its mode and owner through our write

    def rollback(self) -> None:
        """Every recorded file back to its text before us, the record gone, the runtime restarted."""
        self.validated = None
        self.undo_files()
        if not self._restart_and_wait(self.serving):
            log.error("%s does not serve after the rollback either: %s", self.runtime, self.last_error)

    def undo_files(self, *, clear: bool = True) -> bool:
        """Reverse what the record says (uninstall, rollback); False when there is no record."""
        self.seen = {}
        rec = self.ledger.load()
        if rec is None:
            return False
        current = {f.path: self.files.read(f.path) for f in rec.files}
        plan = record.undo_plan(rec, current, self.reverse)
        owned = {f.path for f in rec.files if f.owned}
        for path in sorted(plan, key=lambda p: p in owned):  # the root file first, then the drop-in
            entry = rec.file(path)
            # back as it was before us: its mode and owner too; reversed edits in someone's text: their mode stays
            mode = entry.before_mode if entry is not None and plan[path] == entry.before else None
            self.files.put(path, plan[path], mode)
        for directory in reversed(rec.created_dirs):  # innermost first; one someone else filled stays
            self.files.remove_dir_if_empty(directory)
        if clear:
            self.ledger.clear()
        return True

    def uninstall(self) -> list[str]:
        """Our files removed, the root file restored, the runtime restarted once if it still runs our handler.

        The record goes last: an uninstall killed before the restart still knows, on its next start, that the
        running daemon's handler is ours to take away."""
        self.validated = None
        if not self.undo_files(clear=False):
            return []
        kept: list[str] = []
        if self.restart is None and self.loaded()[0]:
            kept.append(f"{self.runtime} still runs runtime handler {handler.RUNTIME_HANDLER} until it is restarted")
        elif self.loaded()[0] and not self._restart_and_wait(lambda: self.serving() and not self.loaded()[0]):
            kept.append(
                f"{self.runtime} did not come back without runtime handler {handler.RUNTIME_HANDLER}: {self.last_error}"
            )
        self.ledger.clear()
        return kept
