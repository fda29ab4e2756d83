"""Leader election on the in-memory cluster: two replicas, only the Lease holder writes."""

from __future__ import annotations

from harness import Harness, cluster_operator, wait_for


def test_only_the_leader_writes_and_the_other_takes_over_when_it_stops() -> None:
    a = Harness(identity="op-a", leader_election=True)
    b = Harness(identity="op-b", leader_election=True, cluster=a.cluster)
    try:
        a.objects.apply(cluster_operator(), field_manager="helm")
        a.start()
        wait_for("a leads", a.op.leadership.is_leader)
        b.start()
        wait_for("status", lambda: (a.cr().get("status") or {}).get("components"))
        a.settle()
        assert not b.op.leadership.is_leader()
        assert b.writes() == 0 and b.op.reconciles == 0
        a.stop()  # releases the Lease
        wait_for("b leads", b.op.leadership.is_leader, timeout=15)
        a.objects.delete("apps/v1", "DaemonSet", "metax-gpu-label", "metax-operator")
        wait_for("b puts it back", lambda: "metax-gpu-label" in b.daemonsets())
    finally:
        a.stop()
        b.stop()
