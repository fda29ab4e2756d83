"""containerd's part of the round (`rounds.RuntimeRound`): the drop-in + ``imports`` edit planned over every file
containerd loads (`metax_core.runtime.containerd_imports`), ``containerd config dump`` before and after as the dry
run (`metax_core.runtime.containerd_dump`: nothing lost but what we add), the CRI ``Status`` as the running
daemon's word (docs/container-runtime.md)."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import Any

from metax_core.errors import HardwareError
from metax_core.runtime import containerd, containerd_dump, containerd_imports, detect, handler, record
from metax_hw import container_runtime
from services.container_runtime import rounds

Outcome = rounds.Outcome

GATHER_LIMIT = 256
"""At most this many files and globs are read for one plan (an import loop is cut by containerd's own rule; this
bounds a directory of thousands of drop-ins)."""


class ContainerdRound(rounds.RuntimeRound):
    runtime = detect.RuntimeKind.CONTAINERD.value
    unit = "containerd"

    def __init__(self, *, host: container_runtime.Containerd, root_path: str, **common: Any) -> None:
        super().__init__(**common)
        self.host = host
        self.root_path = root_path
        self.planned: containerd.Configured | None = None
        """The last plan (its load order is watched for changes: `watched`)."""

    @property
    def paths(self) -> tuple[str, ...]:
        return (*containerd.dropin_paths(self.root_path), self.root_path)

    @property
    def watched(self) -> tuple[str, ...]:
        loaded = self.planned.loaded if self.planned is not None else ()
        return tuple(dict.fromkeys((*self.paths, *loaded)))

    def gather(self, root_text: str | None) -> tuple[dict[str, str | None], dict[str, tuple[str, ...]]]:
        """Every file the root imports (transitively) and every import glob's matches, read from the host."""
        texts: dict[str, str | None] = {self.root_path: root_text}
        globs: dict[str, tuple[str, ...]] = {}
        ours: dict[str, dict[str, object]] = {p: {} for p in containerd.dropin_paths(self.root_path)}
        for _ in range(GATHER_LIMIT):
            walked = containerd_imports.walk(self.root_path, texts, globs, replace=ours)
            if walked.complete:
                break
            for path in walked.wanted_files:
                texts[path] = self.files.read(path)
            for pattern in walked.wanted_globs:
                globs[pattern] = self.files.glob(pattern)
        return texts, globs

    def plan(self, current: Mapping[str, str | None], context: Any) -> rounds.Planned:
        schema: detect.ContainerdSchema = context
        texts, globs = self.gather(current[self.root_path])
        done = containerd.configure(
            current[self.root_path],
            root_path=self.root_path,
            schema=schema,
            wrapper=self.wrapper,
            loaded={p: t for p, t in texts.items() if p != self.root_path},
            globs=globs,
        )
        self.planned = done
        wanted: dict[str, str | None] = {done.dropin: done.dropin_text}
        wanted |= {p: None for p in done.stale if current.get(p) is not None}
        wanted[self.root_path] = done.root_text
        mode = record.created_mode([self.files.stat(p) for p in done.copies])
        return rounds.Planned(
            wanted,
            {self.root_path: done.edits},
            frozenset(containerd.dropin_paths(self.root_path)),
            create_modes={done.dropin: mode},
            note=done.note,
        )

    def reverse(self, entry: record.FileRecord, text: str) -> str:
        return containerd.unconfigure(text, entry.edits, entry.path)

    def baseline(self, planned: rounds.Planned, current: Mapping[str, str | None]) -> rounds.Baseline | None:
        """``config dump`` of the node's files without our import, from a scratch copy of the root file beside it
        (relative imports resolve the same; the name matches no glob and is removed at once)."""
        root = current[self.root_path]
        if root is None:
            return rounds.Baseline(True, "")
        scratch = self.files.scratch(self.root_path, containerd.without_our_imports(root, self.root_path))
        try:
            ok, output = self.host.dump(scratch)
        finally:
            with contextlib.suppress(HardwareError):
                self.files.remove(scratch)
        return rounds.Baseline(ok, output if ok else f"{self.root_path}: {output}", scratch)

    def validate(self, baseline: rounds.Baseline | None = None) -> tuple[bool, str]:
        ok, output = self.host.dump(self.root_path)
        if not ok:
            return False, output
        loaded, why = containerd.dumped_handler(output, self.wrapper)
        if not loaded or baseline is None or not baseline.text:
            return loaded, why
        done = self.planned
        ours = (*containerd.dropin_paths(self.root_path), self.root_path, baseline.scratch)
        lost = containerd_dump.differences(
            baseline.text, output, ours=ours, cdi_added=done is not None and done.cdi_added
        )
        if lost:
            return False, (
                "its effective configuration would change beyond runtime handler metax: "
                + containerd_dump.summary(lost)
                + self._origins(lost)
            )
        return True, why

    def _origins(self, lost: tuple[str, ...]) -> str:
        """Which files the node's effective CRI section came from, for the message."""
        done = self.planned
        if done is None:
            return ""
        files = [p for p in done.loaded if p not in containerd.dropin_paths(self.root_path)]
        return f" (the files containerd loads, in order: {', '.join(files)})" if files else ""

    def version_output(self) -> str | None:
        try:
            return self.host.version_text()
        except HardwareError:
            return None

    def ask(self) -> Mapping[str, Any]:
        return self.host.cri_config()

    def handler_in(self, answer: Mapping[str, Any]) -> tuple[bool, str]:
        return containerd.handler_loaded(answer, self.wrapper)

    def sandboxes(self) -> list[str]:
        return self.host.sandboxes(handler.RUNTIME_HANDLER)

    def repaired(self, path: str) -> str:
        dropin = self.planned.dropin if self.planned is not None else "our drop-in"
        return f"{path} was rewritten without the import of {dropin}; it is added again"
