"""An air-gapped real node (issue 39 item 4; docs/realnode.md, "An air-gapped node"; `metax_dev.realnode.airgap`).

One node whose processes and pods may reach the API server and nothing else comes up Ready and runs a pod from
its imported images with its fence dropping 0 packets: the kubelet, containerd, the CNI plugin and the pod's
sandbox need nothing beyond this machine. Reaching for a TEST-NET address from the node's processes and from the
pod is refused and counted. Teardown leaves no chain, jump or cgroup of the fence.
"""

from __future__ import annotations

import pytest
from kubernetes import client

from metax_dev.controlplane import cluster as controlplane
from metax_dev.realnode import airgap, launcher

from . import pods

pytestmark = pytest.mark.realnode


def test_an_air_gapped_node_runs_a_pod_and_reaches_for_nothing_else(
    realnode_plane: controlplane.ControlPlane, kube: client.CoreV1Api, namespace: str
) -> None:
    nodes = launcher.RealNodes(realnode_plane, 0, prefix="airgap")
    try:
        nodes.start()
        member = nodes.add_node(airgap_allowed=[])
        assert len(airgap.host_state()) >= 3  # its chain and the two jumps into it
        kube.create_namespaced_pod(namespace, pods.busybox_pod("fenced", member.name, "sleep 3600"))
        pods.wait_running(kube, namespace, "fenced")
        assert member.airgap_dropped() == 0
        member.airgap_probe()  # the fence is up (above): the probe's packet cannot leave
        from_node = member.airgap_dropped()
        assert from_node > 0
        # busybox's nc (its static wget crashes resolving even an address)
        reach = "nc -w 2 198.51.100.1 443 </dev/null && echo REACHED || echo REFUSED; sleep 3600"
        kube.create_namespaced_pod(namespace, pods.busybox_pod("reacher", member.name, reach))
        assert "REFUSED" in pods.wait_logs(kube, namespace, "reacher", "RE")
        assert member.airgap_dropped() > from_node
        group = airgap.cgroup_dir(member.dir)
        assert group.is_dir()
    finally:
        nodes.stop()
    assert airgap.host_state() == []
    assert not group.exists()
