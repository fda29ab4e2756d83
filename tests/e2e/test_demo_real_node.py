"""``metax-dev demo --cluster real --real-node`` (issue 26 item 2; R-INSTALL, R-MACA, R-EXPORTER, R-DRA, C9): the
demo on a real node of the session's control plane, from the product's images, judged through the API server and
the node's host, not through what the demo prints.

The demo calls the test's observer twice: once its node is Ready and before anything of the product is on it, and
after its scenario, before its teardown. Between the two the demo installed the chart, ran a GPU workload placed
through the extender, scraped it, moved the node to DRA and back, and uninstalled; the test checks what that
left: the node's Events (the kubelet started each component's image and both workloads on this node), nothing of
the product on the API server or the Node, the fake host's agent directories as before (but for the empty
directories the kubelet makes for hostPath volumes), and the node's containerd root file byte for byte and mode for
mode: container-runtime and maca ran as pods, configured and restarted the node's containerd and undid it all.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from metax_core import release
from metax_core.runtime import containerd
from metax_dev.controlplane import cluster as controlplane
from metax_dev.demo import cli, realnode
from metax_dev.productnode import helm_release
from metax_dev.productnode.helm_release import NAMESPACE, Release

pytestmark = pytest.mark.realnode

PREFIX = "metax-tech.com/"
#: What the kubelet creates for the agents' hostPath volumes (``DirectoryOrCreate``) and nothing removes: an empty
#: directory where there was none (docs/operator.md, "What stays on a host").
KUBELET_MADE = {"var/log/metax"}


def snapshot(release: Release) -> dict[str, Any]:
    root = release.fake.root
    files = {
        str(p.relative_to(root))
        for d in helm_release.AGENT_HOST_DIRS
        if (root / d).exists()
        for p in [root / d, *(root / d).rglob("*")]
    }
    config = release.member.containerd_layout.config
    return {
        "node": release.node,
        "root": str(root),
        "files": files,
        "containerd": release.runtime_config(),
        "dropin": Path(containerd.dropin_path(str(config), 3)).exists(),
        "releases": release.helm("list", "-A", "-q").stdout.split(),
        "objects": {
            kind: [
                o["metadata"]["name"]
                for o in json.loads(
                    release.kubectl("get", kind, "-n", NAMESPACE, "-o", "json").stdout or '{"items": []}'
                )["items"]
            ]
            for kind in ("pods", "daemonsets", "deployments", "jobs", "services")
        },
    }


def test_the_real_node_demo_runs_the_product_from_its_images_and_gives_the_node_back(
    realnode_plane: controlplane.ControlPlane, kube: client.CoreV1Api
) -> None:
    started = datetime.now(UTC).replace(microsecond=0)
    seen: list[dict[str, Any]] = []

    def observe(release: Release) -> None:
        seen.append(snapshot(release))
        if len(seen) == 2:  # after the scenario: the Node and the cluster-scoped objects, while the node is there
            meta = kube.read_node(release.node).metadata
            seen[-1]["keys"] = [k for k in {**(meta.labels or {}), **(meta.annotations or {})} if k.startswith(PREFIX)]
            seen[-1]["operators"] = json.loads(release.kubectl("get", "clusteroperators", "-o", "json").stdout)["items"]

    code = cli.main(["--cluster", "real", "--real-node", "--no-live"], control_plane=realnode_plane, observe=observe)

    assert code == 0
    assert len(seen) == 2
    before, after = seen
    node = before["node"]
    assert node.startswith(realnode.NODE_PREFIX)
    # the kubelet of this node started every component from its own image, and both workloads
    events = [
        e
        for namespace in (NAMESPACE, realnode.WORKLOAD_NS)
        for e in kube.list_namespaced_event(namespace).items
        if e.source.host == node and (e.last_timestamp or e.event_time or started) >= started
    ]
    images = {
        e.message.split('"')[1] for e in events if e.reason == "Pulled" and e.involved_object.namespace == NAMESPACE
    }
    for name in (*helm_release.AGENTS, *helm_release.DEPLOYMENTS, "metax-operator"):
        assert f"{helm_release.IMPORTED_REGISTRY}/{name}:{release.running()}" in images, sorted(images)
    workloads = {
        e.involved_object.name
        for e in events
        if e.reason == "Started" and e.involved_object.namespace == realnode.WORKLOAD_NS
    }
    assert workloads == {realnode.WORKLOAD, realnode.CLAIMED}
    # the scheduler (with the extender) placed the workload on this node
    scheduled = [
        e.message
        for e in kube.list_namespaced_event(realnode.WORKLOAD_NS).items
        if e.reason == "Scheduled" and e.involved_object.name == realnode.WORKLOAD
    ]
    assert any(m.endswith(f"/{realnode.WORKLOAD} to {node}") for m in scheduled), scheduled
    # nothing of the product left: no release, object, ClusterOperator or Node key
    assert before["releases"] == [] and after["releases"] == []
    assert after["objects"] == {kind: [] for kind in after["objects"]}
    assert after["operators"] == [] and after["keys"] == []
    # the host: as before, but for the empty directories the kubelet made
    assert before["files"] <= after["files"]
    assert after["files"] - before["files"] <= KUBELET_MADE
    root = Path(after["root"])
    assert not [p for d in KUBELET_MADE if (root / d).exists() for p in (root / d).iterdir()]
    assert after["containerd"] == before["containerd"] and not after["dropin"]
