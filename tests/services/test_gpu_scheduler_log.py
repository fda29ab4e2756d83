"""gpu-scheduler's filter log line names a few turned-away nodes with their reasons, and counts the rest (a
5,000-node cluster must not log 5,000 reasons per pod; docs/scheduler.md)."""

from __future__ import annotations

from services.gpu_scheduler import server


def test_a_few_reasons_are_named_and_the_rest_counted() -> None:
    failed = {f"node-{i}": f"{i} free metax-tech.com/gpu, 8 requested" for i in range(7)}
    text = server._turned_away(failed)
    assert text.count("free metax-tech.com/gpu") == server.LOGGED_REASONS
    assert text.startswith("; node-0: 0 free") and text.endswith("; and 2 more")


def test_every_reason_when_few() -> None:
    assert server._turned_away({"b": "no topology", "a": "1 free"}) == "; a: 1 free; b: no topology"
    assert server._turned_away({}) == ""
