"""R-MACA on the real node's containerd 2.4: a pod with ``runtimeClassName: metax`` and ``METAX_MACA_VERSION``
gets the SDK its prefix chose; a bad prefix fails that pod's start visibly, in its Events.

The node is set up as the product does it: the real container-runtime agent configures the node's containerd
(its drop-in in ``conf.d``, the real static wrapper built by `metax_dev.wrapper` installed with its ``.conf``:
the node's runc and the edit socket; one restart through the launcher, `runtime_agent`), the RuntimeClass is
the operator's (`metax_core.cluster.supporting.runtime_class`, whose scheduling adds the GPU node label, so the
test puts that label on the node), the SDK versions are installed by the real maca agent from fake payload
images, and the real container-edit service listens on a socket the node's namespace sees; gpu-device (the
session's agent) hands out the GPUs, whose devices containerd injects through CDI.

Covered: a GPU pod asking ``maca-2.18`` sees MXMACA 2.18.0.3 at /opt/maca read-only, its tools on PATH and
its devices; ``maca-3`` leaves the pod not running with the request and the installed versions in its
Events; a pod without a GPU on the same handler runs untouched; uninstall gives the node's containerd config
back byte for byte (the last test).
"""

from __future__ import annotations

import pathlib
from collections.abc import Iterator
from typing import Any

import attrs
import pytest
from kubernetes import client

from metax_core.cluster import supporting
from metax_core.runtime import containerd, handler
from metax_dev import wrapper
from metax_dev.controlplane import cluster as controlplane
from metax_dev.productnode import runtime_agent
from metax_dev.realnode import node
from services.container_runtime import agent

from . import pods

pytestmark = pytest.mark.realnode

GPU = "metax-tech.com/gpu"
VERSIONS = ("2.18.0.3", "2.9.1")


@attrs.define
class Handler:
    """The configured node: the agent (its uninstall is the last test's), and the config before it."""

    runtime: agent.ContainerRuntime
    work: pathlib.Path
    original: bytes


@pytest.fixture(scope="module")
def metax_handler(
    tmp_path_factory: pytest.TempPathFactory,
    realnode_plane: controlplane.ControlPlane,
    gpu_node: node.RealNode,
) -> Iterator[Handler]:
    tmp = tmp_path_factory.mktemp("maca-rt")
    sdk = runtime_agent.sdk_side(tmp / "maca", "maca-host", VERSIONS)
    socket = sdk.socket
    # the container-runtime agent configures the node's containerd: our drop-in (the root file imports conf.d),
    # the real static wrapper installed with its .conf (the node's runc, the edit socket), one restart
    work = tmp / "container-runtime"
    original = gpu_node.containerd_layout.config.read_bytes()
    runtime = runtime_agent.build(
        gpu_node, work, wrapper.build(), wrapper_runc=str(gpu_node.bin_dir / "runc"), edit_socket=str(socket)
    )
    runtime.tick()
    signal = runtime_agent.signal(work)
    assert signal.ready, signal.reason
    assert runtime_agent.service(runtime).restarts == 1
    # the RuntimeClass the operator renders (only on GPU nodes: its scheduling adds the GPU node label)
    api = realnode_plane.api_client()
    core, runtime_classes = client.CoreV1Api(api), client.NodeV1Api(api)
    body = supporting.runtime_class()
    for key, value in body["scheduling"]["nodeSelector"].items():
        core.patch_node(gpu_node.name, {"metadata": {"labels": {key: value}}})
    runtime_classes.create_runtime_class(body)
    try:
        yield Handler(runtime, work, original)
    finally:
        runtime_classes.delete_runtime_class(handler.RUNTIME_HANDLER)
        for key in body["scheduling"]["nodeSelector"]:
            core.patch_node(gpu_node.name, {"metadata": {"labels": {key: None}}})
        api.close()  # type: ignore[no-untyped-call]
        runtime.containerd.uninstall()  # done by the last test already, unless it failed before
        sdk.close()


def metax_pod(name: str, gpu_node: node.RealNode, script: str, env: dict[str, str], gpu: bool = True) -> dict[str, Any]:
    pod = pods.busybox_pod(name, gpu_node.name, script, resources={GPU: "1"} if gpu else None)
    pod["spec"]["runtimeClassName"] = handler.RUNTIME_HANDLER
    pod["spec"]["containers"][0]["env"] = [{"name": k, "value": v} for k, v in env.items()]
    return pod


def test_a_gpu_pod_gets_the_sdk_its_prefix_chose(
    kube: client.CoreV1Api, namespace: str, gpu_node: node.RealNode, gpu_agent: object, metax_handler: Handler
) -> None:
    pods.wait(
        lambda: (kube.read_node(gpu_node.name).status.allocatable or {}).get(GPU, "0") != "0", f"{GPU} allocatable"
    )
    script = (
        'echo "PATH=$PATH"; echo "RESOLVED=$METAX_MACA_RESOLVED"; maca-version; '
        "touch /opt/maca/x 2>&1 | sed 's/^/TOUCH /'; ls /dev/mxcd; echo DONE; sleep 3600"
    )
    kube.create_namespaced_pod(namespace, metax_pod("sdk", gpu_node, script, {"METAX_MACA_VERSION": "maca-2.18"}))
    text = pods.wait_logs(kube, namespace, "sdk", "DONE")
    assert "MXMACA 2.18.0.3" in text.splitlines()
    assert "RESOLVED=2.18.0.3" in text
    path = next(line for line in text.splitlines() if line.startswith("PATH="))
    assert path.endswith(":/opt/maca/bin:/opt/maca/mxgpu_llvm/bin")
    assert "Read-only file system" in text
    assert "/dev/mxcd" in text.splitlines()  # its devices, injected by containerd (CDI) before the wrapper


def test_a_bad_prefix_fails_the_pods_start_visibly(
    kube: client.CoreV1Api, namespace: str, gpu_node: node.RealNode, gpu_agent: object, metax_handler: Handler
) -> None:
    kube.create_namespaced_pod(namespace, metax_pod("bad", gpu_node, "echo started", {"METAX_MACA_VERSION": "maca-3"}))

    def refused() -> str:
        for event in kube.list_namespaced_event(namespace).items:
            if event.involved_object.name == "bad" and "no installed MXMACA version matches" in (event.message or ""):
                return str(event.message)
        return ""

    message = pods.wait(refused, "the refusal in the pod's Events", explain=lambda: pods.describe(kube, namespace))
    assert "METAX_MACA_VERSION='maca-3'" in message and "2.18.0.3, 2.9.1" in message
    assert pods.phase(kube, namespace, "bad") == "Pending"


def test_a_pod_without_a_gpu_runs_untouched_on_the_same_handler(
    kube: client.CoreV1Api, namespace: str, gpu_node: node.RealNode, metax_handler: Handler
) -> None:
    script = "test -e /opt/maca || echo NO-SDK; echo DONE; sleep 3600"
    kube.create_namespaced_pod(
        namespace, metax_pod("plain", gpu_node, script, {"METAX_MACA_VERSION": "maca-2"}, gpu=False)
    )
    assert "NO-SDK" in pods.wait_logs(kube, namespace, "plain", "DONE")


def test_uninstall_gives_the_containerd_config_back(gpu_node: node.RealNode, metax_handler: Handler) -> None:
    """Last in the module: our drop-in goes, the root file is byte for byte what it was, containerd restarted once
    and running without the handler. The wrapper stays while sandboxes of the handler remain (the kubelet removes
    a deleted pod's sandbox later; their shims call it to delete them): the answer says so."""
    runtime = metax_handler.runtime
    kept = runtime.containerd.uninstall()
    assert kept == []
    layout = gpu_node.containerd_layout
    assert layout.config.read_bytes() == metax_handler.original
    assert not pathlib.Path(containerd.dropin_path(str(layout.config), 3)).exists()
    assert runtime_agent.service(runtime).restarts == 2
    assert handler.RUNTIME_HANDLER not in runtime.containerd.host.cri_config()["containerd"]["runtimes"]
    wrapper_kept = runtime._remove_wrapper(runtime.containerd)
    assert all("still run with runtime handler metax" in reason for reason in wrapper_kept)
