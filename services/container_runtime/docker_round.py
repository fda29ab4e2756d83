"""Docker's part of the round (`rounds.RuntimeRound`): the recorded ``daemon.json`` edit, ``dockerd --validate``
as the dry run where it exists (23.0+; before, the file is only parsed), ``GET /info`` as the running
daemon's word (docs/container-runtime.md)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from metax_core.runtime import detect, docker, record
from metax_hw import container_runtime
from services.container_runtime import rounds


class DockerRound(rounds.RuntimeRound):
    runtime = detect.RuntimeKind.DOCKER.value
    unit = "docker"

    def __init__(self, *, host: container_runtime.Dockerd, config_path: str, **common: Any) -> None:
        super().__init__(**common)
        self.host = host
        self.config_path = config_path
        self.version: detect.Version = (0, 0, 0)
        self.cdi = False

    @property
    def paths(self) -> tuple[str, ...]:
        return (self.config_path,)

    def plan(self, current: Mapping[str, str | None], context: Any) -> rounds.Planned:
        self.version = context
        done = docker.configure(
            current[self.config_path], version=self.version, wrapper=self.wrapper, path=self.config_path
        )
        self.cdi = done.cdi
        return rounds.Planned({self.config_path: done.text}, {self.config_path: done.edits}, frozenset())

    def reverse(self, entry: record.FileRecord, text: str) -> str:
        return docker.unconfigure(text, entry.edits, entry.path)

    def validate(self, baseline: rounds.Baseline | None = None) -> tuple[bool, str]:
        if self.version[:2] < (23, 0):
            return True, "dockerd before 23.0 has no --validate: the file was parsed as JSON only"
        return self.host.validate(self.config_path)

    def version_output(self) -> str | None:
        done = self.host.program.run([self.host.binary, "--version"], check=False)
        return done.stdout if done.returncode == 0 else None

    def ask(self) -> Mapping[str, Any]:
        return self.host.info()

    def handler_in(self, answer: Mapping[str, Any]) -> tuple[bool, str]:
        ok, reason = docker.handler_loaded(answer, self.wrapper)
        if ok and not self.cdi:
            reason += "; CDI is off on this dockerd (before 25.0, or features.cdi false): the wrapper injects"
        return ok, reason

    def repaired(self, path: str) -> str:
        return f"{path} was rewritten without runtime {docker.RUNTIME_KEY}; it is added again"
