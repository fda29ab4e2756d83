"""A coalescing work queue with capped exponential back-off, like client-go's rate-limited queue.

Why: watches fire in bursts (a DaemonSet rolling out on 1,000 nodes sends thousands of events), but the
reconcile is level-triggered and reads everything anyway, so a key queued many times runs once. A key being
processed is never handed out twice; if it is added meanwhile it runs again right after. Failures come back
after base·2^n seconds, capped; a success forgets the count. ``add_after`` schedules a recheck (the rollout's
``recheckTime``, the periodic resync).
"""

from __future__ import annotations

import heapq
import threading
import time
from collections.abc import Callable


class WorkQueue:
    def __init__(
        self, *, base: float = 0.5, cap: float = 300.0, monotonic: Callable[[], float] = time.monotonic
    ) -> None:
        self._cond = threading.Condition()
        self._ready: list[str] = []
        self._queued: set[str] = set()
        self._active: set[str] = set()
        self._again: set[str] = set()
        self._later: list[tuple[float, int, str]] = []
        self._seq = 0
        self._due: dict[str, float] = {}
        self._failures: dict[str, int] = {}
        self._base, self._cap = base, cap
        self._monotonic = monotonic
        self._closed = False

    def add(self, key: str) -> None:
        with self._cond:
            if key in self._active:
                self._again.add(key)
            elif key not in self._queued:
                self._queued.add(key)
                self._ready.append(key)
                self._cond.notify()

    def add_after(self, key: str, delay: float) -> None:
        if delay <= 0:
            self.add(key)
            return
        with self._cond:
            due = self._monotonic() + delay
            if key in self._due and self._due[key] <= due:
                return  # an earlier run is already scheduled: one timer per key
            self._due[key] = due
            self._seq += 1
            heapq.heappush(self._later, (due, self._seq, key))
            self._cond.notify()

    def retry(self, key: str) -> float:
        """Requeue after a failure; returns the delay chosen."""
        with self._cond:
            n = self._failures.get(key, 0)
            self._failures[key] = n + 1
        delay = float(min(self._cap, self._base * (2**n)))
        self.add_after(key, delay)
        return delay

    def forget(self, key: str) -> None:
        with self._cond:
            self._failures.pop(key, None)

    def _promote(self) -> None:
        now = self._monotonic()
        while self._later and self._later[0][0] <= now:
            due, _, key = heapq.heappop(self._later)
            if self._due.get(key) != due:
                continue  # superseded by an earlier timer
            del self._due[key]
            if key in self._active:
                self._again.add(key)
            elif key not in self._queued:
                self._queued.add(key)
                self._ready.append(key)

    def get(self, timeout: float | None = None) -> str | None:
        """The next key (marked active until `done`), or None on timeout or close."""
        deadline = None if timeout is None else self._monotonic() + timeout
        with self._cond:
            while not self._closed:
                self._promote()
                if self._ready:
                    key = self._ready.pop(0)
                    self._queued.discard(key)
                    self._active.add(key)
                    return key
                waits = []
                if self._later:
                    waits.append(self._later[0][0] - self._monotonic())
                if deadline is not None:
                    left = deadline - self._monotonic()
                    if left <= 0:
                        return None
                    waits.append(left)
                self._cond.wait(max(0.0, min(waits)) if waits else None)
            return None

    def done(self, key: str) -> None:
        with self._cond:
            self._active.discard(key)
            if key in self._again:
                self._again.discard(key)
                if key not in self._queued:
                    self._queued.add(key)
                    self._ready.append(key)
                    self._cond.notify()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def pending(self) -> int:
        """Keys ready or being processed (timers not counted)."""
        with self._cond:
            return len(self._ready) + len(self._active)
