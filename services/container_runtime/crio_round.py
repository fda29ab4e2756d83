"""CRI-O's part of the round (`rounds.RuntimeRound`): one owned drop-in (``crio.conf.d/99-metax.conf``), ``crio
config`` as the dry run, ``GET /config`` on its socket as the running daemon's word (docs/container-runtime.md).

No file of the administrator's is written: the round's record holds the drop-in alone (owned, removed at
uninstall), and a drop-in someone removed or changed is written again with an Event. The restart goes through
the service manager (unit ``crio``) like containerd's: CRI-O reloads some options on SIGHUP, its runtime
handlers only in recent releases (``ReloadRuntimes``), so a restart is the one way that works on every
supported version; CRI-O's containers keep running across it (each is held by its conmon).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from metax_core.errors import HardwareError, InvalidSpec
from metax_core.runtime import crio, detect, handler, record
from metax_hw import container_runtime
from services.container_runtime import rounds


class CrioRound(rounds.RuntimeRound):
    runtime = detect.RuntimeKind.CRIO.value
    unit = "crio"

    def __init__(self, *, host: container_runtime.Crio, config_path: str, config_dir: str, **common: Any) -> None:
        super().__init__(**common)
        self.host = host
        self.config_path = config_path
        self.config_dir = config_dir
        self.files.stage_outside(config_dir)  # CRI-O reads every file of crio.conf.d, hidden ones too

    @property
    def dropin_path(self) -> str:
        return crio.dropin_path(self.config_dir)

    @property
    def paths(self) -> tuple[str, ...]:
        return (self.dropin_path,)

    def plan(self, current: Mapping[str, str | None], context: Any) -> rounds.Planned:
        # ours copies nothing of theirs, and is still no more permissive than CRI-O's own file
        mode = record.created_mode([self.files.stat(self.config_path)])
        return rounds.Planned(
            {self.dropin_path: crio.dropin(self.wrapper)},
            {},
            frozenset({self.dropin_path}),
            create_modes={self.dropin_path: mode},
        )

    def reverse(self, entry: record.FileRecord, text: str) -> str:
        raise AssertionError(f"{entry.path} is owned: uninstall removes it, it has no edits to reverse")

    def validate(self, baseline: rounds.Baseline | None = None) -> tuple[bool, str]:
        ok, output = self.host.check(self.config_path, self.config_dir)
        if not ok:
            return False, output
        return crio.checked(output, self.wrapper)

    def version_output(self) -> str | None:
        done = self.host.program.run([self.host.binary, "--version"], check=False)
        return done.stdout if done.returncode == 0 else None

    def ask(self) -> Mapping[str, Any]:
        text = self.host.config()
        try:
            return crio.parse(text, f"GET /config on {self.host.socket}")
        except InvalidSpec as exc:
            raise HardwareError("read crio's running configuration", self.host.socket, str(exc)) from exc

    def handler_in(self, answer: Mapping[str, Any]) -> tuple[bool, str]:
        return crio.handler_loaded(answer, self.wrapper)

    def sandboxes(self) -> list[str]:
        return self.host.sandboxes(handler.RUNTIME_HANDLER)

    def uninstall(self) -> list[str]:
        """Nothing is undone while pods still run with the handler: a CRI-O restarted without it cannot stop them
        (``StopPodSandbox``: "failed to find runtime handler metax"), so the drop-in and the wrapper stay, and the
        answer says so; the agent asks again every round until they are gone."""
        try:
            running = self.sandboxes()
        except HardwareError as exc:
            return [f"cannot list the pods of runtime handler {handler.RUNTIME_HANDLER}: {exc}; nothing undone yet"]
        if running:
            return [
                f"{len(running)} pod sandbox(es) still run with runtime handler {handler.RUNTIME_HANDLER}: CRI-O "
                "cannot stop them without it, so its drop-in and the wrapper stay until they are gone"
            ]
        return super().uninstall()
