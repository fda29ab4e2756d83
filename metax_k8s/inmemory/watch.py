"""The change history of the in-memory API server, and the watch streams served from it.

Why separate from the store: this is the part that models time — which versions a watch can still start
from (older than the retained history is 410 Gone, as with the real watch cache or an etcd compaction), what
a restart does to open streams, and how a selective watcher sees an object move in or out of its selector.
All methods run under the server's condition variable, which they share.
"""

from __future__ import annotations

import bisect
import copy
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import attrs

from metax_core.ports.cluster import WatchEvent, WatchEventType
from metax_k8s import retry
from metax_k8s.inmemory import kinds

Matcher = Callable[[Mapping[str, Any]], bool]


@attrs.frozen
class Change:
    version: int
    api_version: str
    kind: str
    namespace: str
    type: WatchEventType
    old: Mapping[str, Any] | None
    new: Mapping[str, Any]


class History:
    """Changes after ``oldest``, bounded by ``limit``; ``epoch`` counts restarts."""

    def __init__(self, cond: threading.Condition, start_version: int, limit: int) -> None:
        self._cond = cond
        self.oldest = start_version
        self.limit = limit
        self.epoch = 0
        self._changes: list[Change] = []
        self._versions: list[int] = []

    def record(self, change: Change) -> None:
        self._changes.append(change)
        self._versions.append(change.version)
        if len(self._changes) > self.limit:
            cut = len(self._changes) // 2
            self.oldest = self._versions[cut - 1]
            self._changes, self._versions = self._changes[cut:], self._versions[cut:]
        self._cond.notify_all()

    def forget(self, current_version: int, *, break_watches: bool) -> None:
        self._changes, self._versions = [], []
        self.oldest = current_version
        if break_watches:
            self.epoch += 1
        self._cond.notify_all()

    def check(self, position: int, what: str) -> None:
        if position < self.oldest:
            raise retry.Gone("watch", what, f"too old resource version: {position} ({self.oldest})", 410)

    def stream(
        self,
        info: kinds.KindInfo,
        matches: Matcher,
        what: str,
        initial: list[WatchEvent],
        position: int,
        epoch: int,
        deadline: float,
        current_version: Callable[[], int],
    ) -> Iterator[WatchEvent]:
        """Events after ``position`` until ``deadline``, then a bookmark at the server's current version."""
        yield from initial
        while True:
            bookmark: dict[str, Any] | None = None
            with self._cond:
                while True:
                    if self.epoch != epoch:
                        raise retry.Unavailable("watch", what, "watch stream broken: the API server restarted")
                    self.check(position, what)
                    batch = self._changes[bisect.bisect_right(self._versions, position) :]
                    if batch:
                        position = batch[-1].version
                        break
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        bookmark = {
                            "apiVersion": info.api_version,
                            "kind": info.kind,
                            "metadata": {"resourceVersion": str(current_version())},
                        }
                        break
                    self._cond.wait(remaining)
            if bookmark is not None:
                yield WatchEvent(WatchEventType.BOOKMARK, bookmark)
                return
            for change in batch:
                event = translate(change, info, matches)
                if event is not None:
                    yield event


def translate(change: Change, info: kinds.KindInfo, matches: Matcher) -> WatchEvent | None:
    """What a watcher of ``info`` with ``matches`` sees of ``change`` (label changes move objects in/out)."""
    if (change.api_version, change.kind) != (info.api_version, info.kind):
        return None
    was = change.old is not None and matches(change.old)
    now = change.type is not WatchEventType.DELETED and matches(change.new)
    new = copy.deepcopy(dict(change.new))
    if change.type is WatchEventType.DELETED:
        return WatchEvent(WatchEventType.DELETED, new) if was else None
    if was and now:
        return WatchEvent(change.type, new)
    if now:
        return WatchEvent(WatchEventType.ADDED, new)
    if was:
        return WatchEvent(WatchEventType.DELETED, new)
    return None
