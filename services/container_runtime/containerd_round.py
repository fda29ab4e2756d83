"""containerd's part of the round (`rounds.RuntimeRound`): the drop-in + ``imports`` edit, ``containerd config
dump`` as the dry run, the CRI ``Status`` as the running daemon's word (docs/container-runtime.md)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from metax_core.runtime import containerd, detect, record
from metax_hw import container_runtime
from services.container_runtime import rounds

Outcome = rounds.Outcome


class ContainerdRound(rounds.RuntimeRound):
    runtime = detect.RuntimeKind.CONTAINERD.value
    unit = "containerd"

    def __init__(self, *, host: container_runtime.Containerd, root_path: str, **common: Any) -> None:
        super().__init__(**common)
        self.host = host
        self.root_path = root_path

    @property
    def dropin_path(self) -> str:
        return containerd.dropin_path(self.root_path)

    @property
    def paths(self) -> tuple[str, ...]:
        return (self.dropin_path, self.root_path)

    def plan(self, current: Mapping[str, str | None], context: Any) -> rounds.Planned:
        schema: detect.ContainerdSchema = context
        done = containerd.configure(
            current[self.root_path], root_path=self.root_path, schema=schema, wrapper=self.wrapper
        )
        return rounds.Planned(
            {self.dropin_path: done.dropin_text, self.root_path: done.root_text},
            {self.root_path: done.edits},
            frozenset({self.dropin_path}),
        )

    def reverse(self, entry: record.FileRecord, text: str) -> str:
        return containerd.unconfigure(text, entry.edits, entry.path)

    def validate(self) -> tuple[bool, str]:
        ok, output = self.host.dump(self.root_path)
        if not ok:
            return False, output
        return containerd.dumped_handler(output, self.wrapper)

    def ask(self) -> Mapping[str, Any]:
        return self.host.cri_config()

    def handler_in(self, answer: Mapping[str, Any]) -> tuple[bool, str]:
        return containerd.handler_loaded(answer, self.wrapper)

    def sandboxes(self) -> list[str]:
        from metax_core.runtime import handler

        return self.host.sandboxes(handler.RUNTIME_HANDLER)

    def repaired(self, path: str) -> str:
        return f"{path} was rewritten without the import of {self.dropin_path}; it is added again"
