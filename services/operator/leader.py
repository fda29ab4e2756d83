"""Leader election: only the replica holding the Lease reconciles and writes (C1 runs two replicas).

Why a module of its own: the rule "a replica that cannot renew within the renew deadline stops writing at
once" must hold across every write path, so `Leadership.is_leader()` is checked before each reconcile and the
renew loop runs on its own thread. The Lease algorithm itself is `metax_k8s.lease`. A new term starts from
what is stored (the rollout's state lives in ``status.upgradeStatus``), so a failover never repeats a step.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from metax_core.errors import MetaxError
from metax_core.ports.cluster import LeaderLock

log = logging.getLogger(__name__)

RENEW_PERIOD = 2.0
RENEW_DEADLINE = 10.0


class Leadership:
    def __init__(
        self,
        lock: LeaderLock | None,
        *,
        on_started: Callable[[], None] = lambda: None,
        monotonic: Callable[[], float] = time.monotonic,
        renew_period: float = RENEW_PERIOD,
        renew_deadline: float = RENEW_DEADLINE,
    ) -> None:
        self.lock = lock
        self._on_started = on_started
        self._monotonic = monotonic
        self._period = renew_period
        self._deadline = renew_deadline
        self._renewed_at: float | None = None if lock is not None else monotonic()
        self._stop = threading.Event()
        self.became_leader = threading.Event()
        if lock is None:
            self.became_leader.set()

    def is_leader(self) -> bool:
        if self.lock is None:
            return True
        at = self._renewed_at
        return at is not None and self._monotonic() - at < self._deadline

    def tick(self) -> None:
        """One acquire-or-renew attempt."""
        if self.lock is None:
            return
        was = self.is_leader()
        try:
            held = self.lock.try_acquire_or_renew()
        except MetaxError as exc:
            log.warning("leader lease: %s", exc)
            held = False
        if held:
            self._renewed_at = self._monotonic()
            if not was:
                log.info("leading: this replica reconciles now")
                self.became_leader.set()
                self._on_started()
        elif was and not self.is_leader():
            log.warning("lost the leader lease: not writing any more")
            self.became_leader.clear()

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.tick()
            self._stop.wait(self._period)

    def start(self) -> None:
        if self.lock is not None:
            threading.Thread(target=self._loop, name="leader-election", daemon=True).start()

    def stop(self) -> None:
        self._stop.set()
        if self.lock is not None and self.is_leader():
            try:
                self.lock.release()
            except MetaxError as exc:
                log.warning("leader lease: release failed: %s", exc)
