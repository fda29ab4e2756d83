"""container-runtime on the real node's containerd 2.4.2 (C4, R-READY, R-INSTALL): the agent configures the
running node's containerd, restarts it through the harness (`runtime_agent.HarnessService`: the launcher
supervises containerd, as systemd does on a node), the pod that was running keeps running (same container, no
restart), a pod with ``runtimeClassName: metax`` starts through the installed wrapper (a test-only stand-in
that logs its call and execs runc), and uninstall gives the node's config back byte for byte.

The agent runs in the test process (`runtime_agent`). The real wrapper with the maca and container-edit
services on the GPU node: test_maca_runtime.py."""

from __future__ import annotations

import pathlib
from collections.abc import Callable, Iterator

import pytest
from kubernetes import client

from metax_core.runtime import containerd, handler
from metax_dev.controlplane import cluster as controlplane
from metax_dev.controlplane import errors
from metax_dev.productnode import runtime_agent
from metax_dev.realnode import launcher, node

from . import pods

pytestmark = pytest.mark.realnode


@pytest.fixture(scope="module")
def runtime_node(request: pytest.FixtureRequest, realnode_plane: controlplane.ControlPlane) -> node.RealNode:
    nodes = launcher.RealNodes(realnode_plane, 0, prefix="runtime-node")
    request.addfinalizer(nodes.stop)
    try:
        nodes.start()
        return nodes.add_node()
    except errors.ControlPlaneError as exc:
        pytest.fail(f"real node failed to start: {exc}", pytrace=False)


@pytest.fixture
def runtime_class(kube: client.CoreV1Api) -> Iterator[str]:
    api = client.NodeV1Api(kube.api_client)
    api.create_runtime_class({"metadata": {"name": "metax"}, "handler": handler.RUNTIME_HANDLER})
    try:
        yield "metax"
    finally:
        api.delete_runtime_class("metax")


def test_configured_on_a_running_node_pods_keep_running_and_uninstall_restores(
    kube: client.CoreV1Api,
    namespace: str,
    runtime_node: node.RealNode,
    runtime_class: str,
    kubectl: Callable[..., str],
) -> None:
    real = runtime_node
    work = real.dir / "container-runtime"
    image = work / "image" / handler.WRAPPER_NAME
    calls = work / "wrapper-calls"
    image.parent.mkdir(parents=True)
    image.write_text(
        "#!/bin/sh\n# TEST-ONLY stand-in for metax-container-runtime: logs the call, then runs runc unchanged.\n"
        f'echo "$@" >> {calls}\nexec {real.bin_dir / "runc"} "$@"\n'
    )
    image.chmod(0o755)
    root_config = real.containerd_layout.config
    original = root_config.read_bytes()

    kube.create_namespaced_pod(namespace, pods.busybox_pod("steady", real.name, "sleep 3600"))
    pods.wait_running(kube, namespace, "steady")
    before = kube.read_namespaced_pod("steady", namespace).status.container_statuses[0]

    runtime = runtime_agent.build(real, work, image)
    service = runtime_agent.service(runtime)
    runtime.tick()
    signal = runtime_agent.signal(work)
    assert signal.ready, signal.reason
    assert service.restarts == 1
    # the root file (version 3, imports conf.d/*.toml) needed no edit: only our drop-in was added
    assert root_config.read_bytes() == original
    assert pathlib.Path(containerd.dropin_path(str(root_config), 3)).is_file()

    def echo() -> str:
        try:
            return kubectl("exec", "-n", namespace, "steady", "--", "echo", "still here")
        except AssertionError:  # the kubelet's CRI connection redials the new containerd with a back-off
            return ""

    assert pods.wait(echo, "kubectl exec through the restarted containerd", timeout=30) == "still here\n"
    after = kube.read_namespaced_pod("steady", namespace).status.container_statuses[0]
    assert after.container_id == before.container_id and after.restart_count == 0

    gpu_pod = pods.busybox_pod("through-metax", real.name, "echo started through metax; sleep 3600")
    gpu_pod["spec"]["runtimeClassName"] = runtime_class
    kube.create_namespaced_pod(namespace, gpu_pod)
    pods.wait_running(kube, namespace, "through-metax")
    assert "create" in calls.read_text()  # runc's create of that pod's containers went through the wrapper
    steady_id = after.container_id.split("//", 1)[1]
    assert steady_id not in calls.read_text()  # a pod without the RuntimeClass never passes through it

    # while a pod of the handler runs, its shim needs the wrapper to stop it: the wrapper stays, and says why
    kept = runtime._remove_wrapper()
    assert len(kept) == 1 and "1 pod sandbox(es) still run with runtime handler metax" in kept[0]
    assert (work / "toolkit" / handler.WRAPPER_NAME).is_file()

    # uninstall: the pods of the handler go first (their shim runs the wrapper until they stop)
    kube.delete_namespaced_pod("through-metax", namespace, grace_period_seconds=0)
    pods.wait(lambda: not _exists(kube, namespace, "through-metax"), "pod through-metax deleted", timeout=60)
    # its sandbox stays until the kubelet's garbage collection removes it (containerd stops and deletes it
    # through the handler's runtime, the wrapper): until then the wrapper stays
    pods.wait(lambda: not runtime.containerd.host.sandboxes("metax"), "the kubelet removes the sandbox", timeout=180)
    assert runtime.containerd.uninstall() == [] and runtime._remove_wrapper() == []
    assert not (work / "toolkit").exists()
    assert service.restarts == 2
    assert root_config.read_bytes() == original
    assert not pathlib.Path(containerd.dropin_path(str(root_config), 3)).exists()
    assert pods.wait(echo, "kubectl exec after the uninstall's restart", timeout=30) == "still here\n"


def _exists(kube: client.CoreV1Api, namespace: str, name: str) -> bool:
    return any(p.metadata.name == name for p in kube.list_namespaced_pod(namespace).items)
