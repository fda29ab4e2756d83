"""Real nodes leave the host as they found it.

Two nodes with a running pod each are brought up and torn down; afterwards the host has the same
mount table (also while they run: every node mount lives in the node's own namespace), no process of
theirs (kubelet, containerd, shims, containers, namespace holders), the sysctls the kubelet changes
back at their earlier values, no new cgroup directory (the containers' ``/k8s.io/<id>`` and the nodes'
tracking cgroups gone), none of the host paths a kubelet or containerd would create by default,
no pod network of theirs (while they ran: each node's nat chain and its jump, its /24 claim, a veth per pod;
afterwards none of them: docs/realnode.md "The pod network"), no work directory and no Node objects.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from metax_dev.controlplane import cluster as controlplane
from metax_dev.controlplane import processes
from metax_dev.realnode import hygiene, launcher, podnet

from . import pods

pytestmark = pytest.mark.realnode


def test_teardown_leaves_nothing_behind(
    realnode_plane: controlplane.ControlPlane, kube: client.CoreV1Api, namespace: str
) -> None:
    before = hygiene.snapshot(["/nonexistent-marker"])
    nodes = launcher.RealNodes(realnode_plane, 2, prefix="clean")
    try:
        nodes.start()
        assert nodes.workdir is not None
        workdir = nodes.workdir
        for member in nodes.nodes:
            kube.create_namespaced_pod(namespace, pods.busybox_pod(f"on-{member.name}", member.name, "sleep 3600"))
        for member in nodes.nodes:
            pods.wait_running(kube, namespace, f"on-{member.name}")
        during = hygiene.snapshot([str(workdir)])
        holders = [m.namespace.pid for m in nodes.nodes if m.namespace is not None]
        containers = {m.name: m.containerd_layout.container_ids() for m in nodes.nodes}
        networks = [m.network for m in nodes.nodes if m.network is not None]
        network_during = podnet.host_state()
        names = nodes.names
    finally:
        nodes.stop()
    after = hygiene.snapshot([str(workdir)])
    network_after = podnet.host_state()

    # While the nodes ran, their processes were there and their mounts were not visible on the host.
    assert len(during.processes) >= 2 * 3, during.processes  # containerd, kubelet, a shim per pod
    assert during.mounts == before.mounts
    assert all(len(ids) >= 2 for ids in containers.values()), containers  # sandbox + container
    assert len(holders) == 2
    if before.sysctls["vm/overcommit_memory"] != "1":
        assert during.sysctls["vm/overcommit_memory"] == "1"  # the kubelet did change it

    assert after.mounts == before.mounts
    assert not after.processes, after.processes
    assert not [pid for pid in holders if processes.pid_alive(pid)]
    assert after.sysctls == before.sysctls
    # New cgroups would be ours; others may vanish meanwhile (another node's pods being torn down).
    assert not after.cgroups - before.cgroups, sorted(after.cgroups - before.cgroups)
    leftover = [
        str(h / ns / cid)
        for h in hygiene.hierarchies()
        for ns in hygiene.CONTAINERD_NAMESPACES
        for ids in containers.values()
        for cid in ids
        if (h / ns / cid).exists()
    ]
    assert not leftover
    assert after.paths == before.paths
    # Other sessions on this machine may have real nodes of their own: look at this launcher's names only.
    assert len(networks) == 2 and len({n.subnet for n in networks}) == 2

    def ours(state: dict[str, list[str]]) -> list[str]:
        return [
            item
            for n in networks
            for item in (*state["iptables"], *state["routes"], *state["links"])
            if n.chain in item or n.subnet in item or item.startswith(n.veth_prefix)
        ]

    for n in networks:
        assert f"-A PREROUTING -i {n.veth_prefix}+ -j {n.chain}" in network_during["iptables"], network_during
        assert any(n.subnet in route for route in network_during["routes"]), network_during
        assert len([link for link in network_during["links"] if link.startswith(n.veth_prefix)]) >= 1
    assert ours(network_after) == [], network_after
    assert not Path(workdir).exists()
    for name in names:
        with pytest.raises(ApiException) as missing:
            kube.read_node(name)
        assert missing.value.status == 404
