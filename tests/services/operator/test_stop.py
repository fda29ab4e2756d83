"""A stop requested while the operator's caches are still listing (SIGTERM to a new pod on a large cluster) ends
its start at once: the process exits within its pod's grace period, not after every informer's 60 s wait."""

from __future__ import annotations

import threading
import time
from typing import Any

from harness import ApiWrapper, Harness

from metax_k8s.api import Api


class SlowNodeList(ApiWrapper):
    """The cluster's API, with every list of Nodes held until ``release`` is set (a list of 5,000 nodes)."""

    def __init__(self, inner: Api) -> None:
        super().__init__(inner)
        self.release = threading.Event()
        self.listing = threading.Event()

    def list(self, api_version: str, kind: str, **kwargs: Any) -> Any:
        if kind == "Node":
            self.listing.set()
            self.release.wait(120)
        return self.inner.list(api_version, kind, **kwargs)


def test_a_stop_while_the_caches_list_ends_the_start_at_once() -> None:
    slow: list[SlowNodeList] = []

    def wrap(api: Api) -> Api:
        slow.append(SlowNodeList(api))
        return slow[0]  # type: ignore[return-value]

    h = Harness(api=wrap)
    starting = threading.Thread(target=h.op.start)
    try:
        starting.start()
        assert slow[0].listing.wait(10)
        began = time.monotonic()
        h.op.request_stop()
        starting.join(10)
        assert not starting.is_alive()
        assert time.monotonic() - began < 2.0  # one 0.2 s poll of the sync wait, not its 60 s
        assert h.op.reconciles == 0  # the worker never started
    finally:
        slow[0].release.set()
        h.stop()
