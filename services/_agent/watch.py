"""Wake an agent when its own Node or one of its ConfigMaps changes: watches by name, with a slow resync.

Why only a wake-up: the agent's step reads what it needs (a GET per object when its chore is due), so the
watch carries no state to keep consistent; it only makes a chore due now instead of at the next resync.
Each watched object gets one daemon thread that runs `Objects.watch` with a ``metadata.name`` field
selector; the watch ends every ``resync`` seconds and starts again with a relist, which is the slow resync
(a missed event costs at most that long). Errors are logged once and retried with back-off, never raised.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from typing import Protocol

import attrs

from metax_core.errors import MetaxError
from metax_core.ports.cluster import Objects
from services._agent import loop

log = logging.getLogger(__name__)


@attrs.frozen
class Target:
    """One object to watch, and the chore its change makes due."""

    api_version: str
    kind: str
    name: str
    namespace: str | None
    chore: str


class Watches:
    """Daemon threads, one per target, that call ``on_change(chore)`` when the target changes."""

    def __init__(self, objects: Objects, on_change: Callable[[str], None], *, resync: float = 300.0) -> None:
        self.objects = objects
        self.on_change = on_change
        self.resync = resync
        self.stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._say = loop.Say(log)

    def start(self, *targets: Target) -> None:
        for target in targets:
            thread = threading.Thread(target=self._run, args=(target,), name=f"watch-{target.name}", daemon=True)
            thread.start()
            self._threads.append(thread)

    def close(self) -> None:
        self.stop.set()

    def _run(self, target: Target) -> None:
        failures = 0
        topic = f"{target.kind}/{target.name}"
        while not self.stop.is_set():
            try:
                for _event in self.objects.watch(
                    target.api_version,
                    target.kind,
                    namespace=target.namespace,
                    field_selector=f"metadata.name={target.name}",
                    timeout_seconds=max(1, int(self.resync)),
                ):
                    if self.stop.is_set():
                        return
                    self.on_change(target.chore)
                failures = 0
                self._say.forget(topic)
            except MetaxError as exc:
                failures += 1
                self._say(topic, f"watch of {topic} failed, retrying: {exc}", logging.WARNING)
                self.stop.wait(loop.backoff(failures, base=1.0, cap=60.0))


class Wakeable(loop.Agent, Protocol):
    """An agent whose chores a watch can make due at once."""

    def wake(self, chore: str) -> None: ...


def runner(
    agent: Wakeable, objects: Objects, targets: Sequence[Target], *, resync: float, tick: float
) -> Callable[[threading.Event], None]:
    """What every node agent runs: ``agent``'s rounds until the stop event, each watched target's change waking
    the chore it names at once (and the slow resync catching what a watch missed)."""
    wake = threading.Event()

    def changed(chore: str) -> None:
        agent.wake(chore)
        wake.set()

    def run(stop: threading.Event) -> None:
        watches = Watches(objects, changed, resync=resync)
        watches.start(*targets)
        try:
            loop.serve(agent, stop, tick=tick, wake=wake)
        finally:
            watches.close()

    return run
