"""R-MACA on the real node's containerd 2.4: a pod with ``runtimeClassName: metax`` and ``METAX_MACA_VERSION``
gets the SDK its prefix chose; a bad prefix fails that pod's start visibly, in its Events.

The runtime handler ``metax`` is configured here by hand, as the container-runtime agent will do it: a
drop-in in the node's ``conf.d`` (containerd 2.x merges it) naming the wrapper as the handler's runc binary,
the wrapper installed with its ``.conf`` beside it (runc and the edit socket), a containerd restart, and a
RuntimeClass ``metax``. The SDK versions are installed by the real maca agent from fake payload images; the
edit service listens on a socket the node's namespace sees; gpu-device (the session's agent) hands out the
GPUs, whose devices containerd injects through CDI.

Covered: a GPU pod asking ``maca-2.18`` sees MXMACA 2.18.0.3 at /opt/maca read-only, its tools on PATH and
its devices; ``maca-3`` leaves the pod not running with the request and the installed versions in its
Events; a pod without a GPU on the same handler runs untouched.
"""

from __future__ import annotations

import pathlib
import shutil
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from metax_core.runtime import handler
from metax_dev import fake_sdk, wrapper
from metax_dev.controlplane import cluster as controlplane
from metax_dev.realnode import node
from metax_k8s.inmemory import cluster as inmemory
from services._agent import cluster
from services.container_edit import config as edit_config
from services.container_edit import server
from services.maca import bootstrap
from services.maca import config as maca_config

from . import pods

pytestmark = pytest.mark.realnode

GPU = "metax-tech.com/gpu"
VERSIONS = ("2.18.0.3", "2.9.1")
RUNTIMES = "plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes"


@pytest.fixture(scope="module")
def metax_handler(
    tmp_path_factory: pytest.TempPathFactory,
    realnode_plane: controlplane.ControlPlane,
    gpu_node: node.RealNode,
) -> Iterator[pathlib.Path]:
    tmp = tmp_path_factory.mktemp("maca-rt")
    payload = tmp / "payload"
    refs = []
    for i, version in enumerate(VERSIONS):
        fake_sdk.unpack_payload(fake_sdk.write_payload_image(tmp / "images", version), payload / str(i))
        refs.append(fake_sdk.reference(version))
    k8s = inmemory.InMemoryCluster()
    k8s.add_node("maca-host")
    settings = maca_config.Settings(
        node_name="maca-host",
        host_root=tmp / "host",
        payload_dir=payload,
        payload_images=tuple(refs),  # type: ignore[arg-type]
    )
    maca = bootstrap.bootstrap(settings, ports=cluster.in_memory(k8s, "maca", "maca-host"), board=None)
    maca.tick()
    socket = tmp / "edit.sock"
    edit_settings = edit_config.Settings(
        host_root=pathlib.Path("/"),
        socket=str(socket),  # type: ignore[arg-type]
        sdk_dir=str(maca.store.sdk_dir),  # type: ignore[arg-type]
        in_use_dir=str(maca.store.in_use_dir),  # type: ignore[arg-type]
    )
    stop = threading.Event()
    service = threading.Thread(target=server.serve, args=(edit_settings, stop), daemon=True)
    service.start()
    installed = tmp / "toolkit" / handler.WRAPPER_NAME
    installed.parent.mkdir()
    shutil.copy2(wrapper.build(), installed)
    installed.with_name(installed.name + ".conf").write_text(f"runc={gpu_node.bin_dir / 'runc'}\nsocket={socket}\n")
    layout = gpu_node.containerd_layout
    dropin = layout.dropins / "99-metax-test.toml"
    dropin.write_text(
        "version = 3\n"
        f"[{RUNTIMES}.{handler.RUNTIME_HANDLER}]\n"
        '  runtime_type = "io.containerd.runc.v2"\n'
        f"[{RUNTIMES}.{handler.RUNTIME_HANDLER}.options]\n"
        f'  BinaryName = "{installed}"\n'
        f'  Root = "{layout.runc_root}"\n'
        "  SystemdCgroup = false\n"
    )
    gpu_node.restart_containerd()
    api = realnode_plane.api_client()
    runtime_classes = client.NodeV1Api(api)
    body: dict[str, Any] = {"metadata": {"name": handler.RUNTIME_HANDLER}, "handler": handler.RUNTIME_HANDLER}
    runtime_classes.create_runtime_class(body)
    try:
        while not socket.exists():
            time.sleep(0.01)
        yield tmp
    finally:
        runtime_classes.delete_runtime_class(handler.RUNTIME_HANDLER)
        api.close()  # type: ignore[no-untyped-call]
        dropin.unlink()
        gpu_node.restart_containerd()
        stop.set()
        service.join(10)


def metax_pod(name: str, gpu_node: node.RealNode, script: str, env: dict[str, str], gpu: bool = True) -> dict[str, Any]:
    pod = pods.busybox_pod(name, gpu_node.name, script, resources={GPU: "1"} if gpu else None)
    pod["spec"]["runtimeClassName"] = handler.RUNTIME_HANDLER
    pod["spec"]["containers"][0]["env"] = [{"name": k, "value": v} for k, v in env.items()]
    return pod


def test_a_gpu_pod_gets_the_sdk_its_prefix_chose(
    kube: client.CoreV1Api, namespace: str, gpu_node: node.RealNode, gpu_agent: object, metax_handler: pathlib.Path
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
    kube: client.CoreV1Api, namespace: str, gpu_node: node.RealNode, gpu_agent: object, metax_handler: pathlib.Path
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
    kube: client.CoreV1Api, namespace: str, gpu_node: node.RealNode, metax_handler: pathlib.Path
) -> None:
    script = "test -e /opt/maca || echo NO-SDK; echo DONE; sleep 3600"
    kube.create_namespaced_pod(
        namespace, metax_pod("plain", gpu_node, script, {"METAX_MACA_VERSION": "maca-2"}, gpu=False)
    )
    assert "NO-SDK" in pods.wait_logs(kube, namespace, "plain", "DONE")
