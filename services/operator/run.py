"""The operator process: informers, leader election, and the worker that drains the queue.

Why a module of its own: the loop's rules are small but easy to get wrong — reconcile only while leading;
a failure requeues with capped exponential back-off (never a crash loop); a success forgets the failures
and schedules the next run at the rollout's recheck time or the periodic resync (≥ 10 minutes), whichever
comes first; SIGTERM stops cleanly and releases the Lease so the other replica takes over at once. When
``cluster-operator`` is gone (uninstalled: the finalizer has run), the Lease is deleted instead (R-INSTALL:
nothing the operator created stays). Each replica does so on its way out, so the last one leaves none, even
if the other renewed (recreated) it in between.
"""

from __future__ import annotations

import logging
import threading
import time

from metax_core.cluster import wakes
from metax_core.errors import MetaxError
from metax_core.spec import model as spec
from metax_k8s.events import BackgroundEvents
from services.operator import leader, reconciler, settings
from services.operator.caches import Caches
from services.operator.workqueue import WorkQueue

log = logging.getLogger(__name__)
KEY = spec.OBJECT_NAME
SYNC_SECONDS = 60.0
"""How long the start waits for each informer's first list before it goes on without it."""
EVENTS_GRACE = 5.0
"""How long a stop waits for the Events still waiting to be recorded."""


class Pace:
    """How long reported progress waits before it reconciles (`wakes.progress_delay`): the operator's pace, and
    more while its reconciles take long (the worker records how long the last one took)."""

    def __init__(self, base: float) -> None:
        self.base = base
        self.last_reconcile = 0.0

    def delay(self) -> float:
        return wakes.progress_delay(self.base, self.last_reconcile)


class Operator:
    def __init__(
        self,
        s: settings.Settings,
        *,
        reconciler: reconciler.Reconciler,
        caches: Caches,
        queue: WorkQueue,
        leadership: leader.Leadership,
        events: BackgroundEvents,
        pace: Pace,
    ) -> None:
        self.settings = s
        self.reconciler = reconciler
        self.caches = caches
        self.queue = queue
        self.leadership = leadership
        self.events = events
        self.pace = pace
        self._stop = threading.Event()
        self._worker: threading.Thread | None = None
        self.reconciles = 0
        """Reconciles started."""
        self.completed = 0
        """Reconciles finished (returned or failed): one worker runs them in turn, so once ``completed`` reaches
        ``reconciles`` as it was plus one, a reconcile that started after that moment has finished."""
        self.failures = 0

    def start(self) -> None:
        """Informers first, each given up to `SYNC_SECONDS` to list; then leader election and the worker. A stop
        requested meanwhile (SIGTERM while a large cluster is still being listed) returns at once, so the process
        exits within its pod's grace period instead of after every informer's wait."""
        for informer in self.caches.all:
            informer.start()
        for informer in self.caches.all:
            deadline = time.monotonic() + SYNC_SECONDS
            while not informer.synced.wait(0.2) and time.monotonic() < deadline:
                if self._stop.is_set():
                    log.info("stop requested while the %s cache was still listing: not starting", informer.kind)
                    return
        if self._stop.is_set():
            return
        self.leadership.start()
        self._worker = threading.Thread(target=self._work, name="reconcile", daemon=True)
        self._worker.start()
        self.queue.add(KEY)

    def run_once(self) -> float | None:
        """One reconcile now (tests on the in-memory cluster drive the operator with this)."""
        return self.reconciler.reconcile()

    def _work(self) -> None:
        while not self._stop.is_set():
            key = self.queue.get(timeout=1.0)
            if key is None:
                continue
            try:
                if not self.leadership.is_leader():
                    self.leadership.became_leader.wait(1.0)
                    self.queue.add_after(key, 1.0)
                    continue
                self.reconciles += 1
                began = time.monotonic()
                try:
                    again = self.reconciler.reconcile()
                finally:
                    self.pace.last_reconcile = time.monotonic() - began
                    self.completed += 1
                self.queue.forget(key)
                delay = self.settings.resync_seconds if again is None else min(again, self.settings.resync_seconds)
                self.queue.add_after(key, delay)
            except MetaxError as exc:
                self.failures += 1
                delay = self.queue.retry(key)
                log.warning("reconcile failed: %s; again in %.1fs", exc, delay)
            except Exception:
                self.failures += 1
                delay = self.queue.retry(key)
                log.exception("reconcile crashed; again in %.1fs", delay)
            finally:
                self.queue.done(key)

    def stop(self) -> None:
        self._stop.set()
        self.queue.close()
        for informer in self.caches.all:
            informer.stop()
        if self._worker is not None:
            self._worker.join(10)
        self.events.close(EVENTS_GRACE)
        self.leadership.stop()
        self._delete_lease_if_uninstalled()

    def _delete_lease_if_uninstalled(self) -> None:
        if self.leadership.lock is None:
            return
        objects, s = self.reconciler.objects, self.settings
        try:
            if objects.get(reconciler.CR_API, spec.KIND, spec.OBJECT_NAME) is not None:
                return
            if objects.delete("coordination.k8s.io/v1", "Lease", s.lease_name, s.namespace):
                log.info("cluster-operator is gone: deleted the leader Lease %s/%s", s.namespace, s.lease_name)
        except MetaxError as exc:
            log.warning("cannot delete the leader Lease after uninstall: %s", exc)

    def request_stop(self) -> None:
        self._stop.set()

    def wait(self) -> None:
        self._stop.wait()
