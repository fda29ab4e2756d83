"""`LeaderLock` (metax_core.ports.cluster) on a coordination.k8s.io/v1 Lease.

Why our own: the `kubernetes` Python package only ships a ConfigMap lock, and ConfigMap locks are
deprecated in client-go. This follows client-go's leaderelection algorithm:

- The lease is free when it does not exist, has no holder, or its holder has not renewed it for
  ``leaseDurationSeconds`` *as observed by us*: expiry is measured on our own monotonic clock from the moment
  we first saw the current version of the lease record, never by comparing another host's ``renewTime``
  with our wall clock, so clock skew between nodes cannot make two candidates lead at once. The price: a
  candidate that starts while an old holder's lease is stale waits one lease duration before taking over.
- Every write carries the resourceVersion it was decided on (PUT), so when two candidates race for a free
  lease the API server lets exactly one of them win; the loser gets 409 and is not leader.
- The holder renews by writing ``renewTime``; it must stop acting as leader if it cannot renew within
  ``lease_duration`` of its last success (callers use `K8sLeaseLock.valid_until`).

Timings (defaults, as client-go): lease 15 s; callers renew every 2 s (`RENEW_PERIOD`) and give up
leadership 10 s after the last successful renewal (`RENEW_DEADLINE`).
"""

from __future__ import annotations

import datetime as dt
import logging
import math
import time
from collections.abc import Callable
from typing import Any

from metax_core.errors import Conflict, NotFound
from metax_k8s import retry
from metax_k8s.api import Api
from metax_k8s.events import micro_time
from metax_k8s.objects import retrying

log = logging.getLogger(__name__)

API_VERSION = "coordination.k8s.io/v1"
LEASE_DURATION = 15.0
RENEW_DEADLINE = 10.0
RENEW_PERIOD = 2.0


def _utc_now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def _without_managed_fields(metadata: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in metadata.items() if key != "managedFields"}


class K8sLeaseLock:
    """One candidate (``identity``) for the Lease ``namespace/name``, over any `Api`."""

    def __init__(
        self,
        api: Api,
        *,
        name: str,
        namespace: str,
        identity: str,
        lease_duration: float = LEASE_DURATION,
        monotonic: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], dt.datetime] = _utc_now,
        policy: retry.RetryPolicy | None = None,
    ) -> None:
        self.api = retrying(api, policy)
        self.name = name
        self.namespace = namespace
        self.identity = identity
        self.lease_duration = lease_duration
        self.monotonic = monotonic
        self.wall_clock = wall_clock
        self._observed_version: str | None = None
        self._observed_at = 0.0
        self._renewed_at: float | None = None

    @property
    def valid_until(self) -> float | None:
        """Monotonic time until which we may act as leader (None: we do not hold the lease)."""
        if self._renewed_at is None:
            return None
        return self._renewed_at + self.lease_duration

    def _observe(self, lease: dict[str, Any], now: float) -> None:
        version = str(lease["metadata"]["resourceVersion"])
        if version != self._observed_version:
            self._observed_version = version
            self._observed_at = now

    def _spec(self, previous: dict[str, Any], now: dt.datetime) -> dict[str, Any]:
        ours = previous.get("holderIdentity") == self.identity
        transitions = int(previous.get("leaseTransitions") or 0)
        return {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": max(1, math.ceil(self.lease_duration)),
            "acquireTime": previous.get("acquireTime") if ours else micro_time(now),
            "renewTime": micro_time(now),
            "leaseTransitions": transitions if ours or not previous.get("holderIdentity") else transitions + 1,
        }

    def try_acquire_or_renew(self) -> bool:
        now = self.monotonic()
        try:
            lease = self.api.get(API_VERSION, "Lease", self.name, self.namespace)
        except NotFound:
            lease = None
        if lease is None:
            body = {
                "apiVersion": API_VERSION,
                "kind": "Lease",
                "metadata": {"name": self.name, "namespace": self.namespace},
                "spec": {**self._spec({}, self.wall_clock()), "leaseTransitions": 0},
            }
            try:
                created = self.api.create(body, field_manager=self.identity)
            except Conflict:
                log.debug("lease %s/%s: another candidate created it first", self.namespace, self.name)
                return self._lost()
            self._observe(created, now)
            return self._won(now)
        self._observe(lease, now)
        spec = lease.get("spec") or {}
        holder = spec.get("holderIdentity")
        duration = float(spec.get("leaseDurationSeconds") or self.lease_duration)
        if holder and holder != self.identity and now < self._observed_at + duration:
            return self._lost()
        if holder and holder != self.identity:
            log.info(
                "lease %s/%s: %s has not renewed for %.0fs; taking over", self.namespace, self.name, holder, duration
            )
        body = {
            "apiVersion": API_VERSION,
            "kind": "Lease",
            "metadata": _without_managed_fields(lease["metadata"]),
            "spec": self._spec(spec, self.wall_clock()),
        }
        try:
            updated = self.api.replace(body, field_manager=self.identity)
        except Conflict:
            log.debug("lease %s/%s changed while we wrote it; not leader", self.namespace, self.name)
            return self._lost()
        self._observe(updated, now)
        return self._won(now)

    def _won(self, now: float) -> bool:
        if self._renewed_at is None:
            log.info("lease %s/%s: %s is now leader", self.namespace, self.name, self.identity)
        self._renewed_at = now
        return True

    def _lost(self) -> bool:
        if self._renewed_at is not None:
            log.warning("lease %s/%s: %s is no longer leader", self.namespace, self.name, self.identity)
        self._renewed_at = None
        return False

    def release(self) -> None:
        """Give the lease up now (only if we hold it), so the next candidate need not wait for expiry."""
        self._renewed_at = None
        try:
            lease = self.api.get(API_VERSION, "Lease", self.name, self.namespace)
        except NotFound:
            return
        spec = lease.get("spec") or {}
        if spec.get("holderIdentity") != self.identity:
            return
        body = {
            "apiVersion": API_VERSION,
            "kind": "Lease",
            "metadata": _without_managed_fields(lease["metadata"]),
            "spec": {
                **spec,
                "holderIdentity": None,
                "leaseDurationSeconds": 1,
                "renewTime": micro_time(self.wall_clock()),
            },
        }
        try:
            self.api.replace(body, field_manager=self.identity)
            log.info("lease %s/%s released by %s", self.namespace, self.name, self.identity)
        except (Conflict, NotFound) as exc:
            log.info("lease %s/%s: nothing to release (%s)", self.namespace, self.name, exc)
