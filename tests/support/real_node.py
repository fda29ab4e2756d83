"""Fixtures for tests on real nodes: a kubelet + containerd + runc built here, running real pods (a plugin of
tests/conftest.py, so that tests/realnode and tests/e2e share one control plane and one GPU node).

Why this module exists: some behaviours need pods that really run (a device plugin's devices really
injected into a container, logs read back), which kwok nodes cannot give. Starting a real node costs
a few seconds, so one control plane and one GPU node (on a fake MetaX host whose device nodes are
real character devices) serve the whole session.

Fixtures:

* ``realnode_plane`` (session): a :class:`metax_dev.controlplane.cluster.ControlPlane` without kwok
  nodes, for real nodes only.
* ``gpu_host`` (session): a fake host (``metax_hw_fake``) with :data:`GPUS` GPUs and vfio-pci loaded; its
  ``/dev/dri/*``, ``/dev/vfio/*`` and ``/dev/mxcd`` are character devices with the numbers of ``/dev/null``
  (harmless when opened).
* ``gpu_node`` (session): a real node whose namespace shows ``gpu_host``'s device nodes at ``/dev``
  and whose containerd reads ``gpu_host``'s CDI directory.
* ``kube`` (function): a ``kubernetes.client.CoreV1Api`` (admin) on ``realnode_plane``.
* ``namespace`` (function): a fresh namespace, deleted (and its pods awaited gone) after the test.
* ``kubectl`` (session): runs the kubectl built with the control plane and returns its stdout.
* ``gpu_agent`` (session): the project's gpu-device agent, a host process in ``gpu_node``'s namespace
  on ``gpu_host``, with the readiness signals it waits for published as ready.

The binaries are built (or found in the cache) right after collection, outside any test timeout.
When something is missing (Go, a Debian package, a tool), the tests fail with the reason; they are
never skipped.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from metax_core.node import readiness
from metax_dev.controlplane import build, errors, processes
from metax_dev.controlplane import cluster as controlplane
from metax_dev.images import build as images_build
from metax_dev.realnode import devnodes, launcher, node
from metax_hw import hostfiles
from metax_hw_fake import builder, host
from services.gpu_device import config
from tests.realnode import pods

#: GPUs on the session's fake host.
GPUS = 4
DEVICE_NUMBERS = devnodes.DEVICE_NUMBERS
make_device_nodes_real = devnodes.make_device_nodes_real

_build_error: errors.ControlPlaneError | None = None
#: The test modules that run the product's images (built before the session's first test when any is selected).
IMAGE_TESTS = ("test_product", "test_demo_real_node")


def pytest_collection_finish(session: pytest.Session) -> None:
    """Build (or find) the binaries before any test runs (a cold build takes minutes)."""
    global _build_error
    wanted = any("realnode_plane" in getattr(i, "fixturenames", ()) for i in session.items)
    if session.config.option.collectonly or not wanted:
        return
    try:
        build.build()
    except errors.ControlPlaneError as exc:
        _build_error = exc
    if any(i.module.__name__.endswith(IMAGE_TESTS) for i in session.items if i.module is not None):
        images_build.build()  # the product's images (docs/images.md): cached, seconds when nothing changed


@pytest.fixture(scope="session")
def realnode_plane(request: pytest.FixtureRequest) -> controlplane.ControlPlane:
    if _build_error is not None:
        pytest.fail(f"binaries unavailable: {_build_error}", pytrace=False)
    plane = controlplane.ControlPlane(nodes=0)
    request.addfinalizer(plane.stop)
    try:
        plane.start()
    except errors.ControlPlaneError as exc:
        pytest.fail(f"test control plane failed to start: {exc}", pytrace=False)
    return plane


def fake_gpu_host(made: builder.FakeHostBuilder, prefix: str) -> Iterator[host.FakeHost]:
    """A fake host built by ``made`` in a temporary directory, with real device nodes; removed afterwards."""
    root = Path(tempfile.mkdtemp(prefix=prefix))
    fake = made.build(root / "host")
    if not make_device_nodes_real(fake.root):
        pytest.fail(f"the fake host under {fake.root} has no device nodes", pytrace=False)
    try:
        yield fake
    finally:
        shutil.rmtree(root, ignore_errors=True)


def start_real_node(
    request: pytest.FixtureRequest, plane: controlplane.ControlPlane, fake: host.FakeHost, prefix: str
) -> node.RealNode:
    """A real node on ``plane`` showing ``fake``'s devices, stopped at the end of ``request``'s scope."""
    nodes = launcher.RealNodes(plane, 0, prefix=prefix)
    request.addfinalizer(nodes.stop)
    try:
        nodes.start()
        return nodes.add_node(device_root=fake.root)
    except errors.ControlPlaneError as exc:
        pytest.fail(f"real node failed to start: {exc}", pytrace=False)


@pytest.fixture(scope="session")
def gpu_host() -> Iterator[host.FakeHost]:
    yield from fake_gpu_host(builder.FakeHostBuilder().gpus(GPUS).vfio(True), "metax-gpuhost-")


@pytest.fixture(scope="session")
def gpu_node(
    request: pytest.FixtureRequest, realnode_plane: controlplane.ControlPlane, gpu_host: host.FakeHost
) -> node.RealNode:
    return start_real_node(request, realnode_plane, gpu_host, "gpu-node")


@pytest.fixture
def kube(realnode_plane: controlplane.ControlPlane) -> Iterator[client.CoreV1Api]:
    api = realnode_plane.api_client()
    try:
        yield client.CoreV1Api(api)
    finally:
        api.close()  # type: ignore[no-untyped-call]  # untyped in the kubernetes client


@pytest.fixture
def namespace(kube: client.CoreV1Api) -> Iterator[str]:
    name = f"rn-{uuid.uuid4().hex[:10]}"
    kube.create_namespace({"metadata": {"name": name}})
    try:
        yield name
    finally:
        # Pods first, awaited gone, so that a later test finds the node's devices free again.
        kube.delete_collection_namespaced_pod(name, grace_period_seconds=0)
        pods.wait(lambda: not kube.list_namespaced_pod(name).items, "pods deleted", timeout=60)
        try:
            kube.delete_namespace(name)
        except ApiException as exc:
            if exc.status != 404:
                raise


@pytest.fixture(scope="session")
def kubectl(realnode_plane: controlplane.ControlPlane) -> Callable[..., str]:
    assert realnode_plane.bin_dir is not None
    binary = realnode_plane.bin_dir / "kubectl"

    def run(*args: str) -> str:
        done = subprocess.run(
            [str(binary), f"--kubeconfig={realnode_plane.kubeconfig_path}", *args],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, f"kubectl {' '.join(args)} failed: {done.stderr}"
        return done.stdout

    return run


#: How often the agent looks at things, in seconds: fast, for tests.
AGENT_ENV = {
    "METAX_HEALTHY_INTERVAL": "1",
    "METAX_READINESS_INTERVAL": "0.5",
    "METAX_LABEL_INTERVAL": "1",
    "METAX_INVENTORY_INTERVAL": "1",
    "METAX_PROBE_INTERVAL": "2",
    "METAX_LOG_LEVEL": "INFO",
}


def spawn_gpu_agent(
    plane: controlplane.ControlPlane, fake: host.FakeHost, member: node.RealNode, **env: str
) -> processes.Process:
    """The project's gpu-device agent (``python -m services.gpu_device``) as a host process in ``member``'s
    namespace, on ``fake``, with every component it waits for reported ready (``env`` adds or overrides)."""
    board = hostfiles.FileReadinessBoard(fake.root)
    for component in config.default_required():
        board.publish(readiness.ComponentReadiness(component, True, "test: ready"))
    environment = {
        **AGENT_ENV,
        "NODE_NAME": member.name,
        "METAX_HOST_ROOT": str(fake.root),
        "METAX_POD_RESOURCES_SOCKET": str(member.pod_resources_socket),
        "KUBECONFIG": str(plane.kubeconfig_path),
        "PATH": fake.env()["PATH"],
        "PYTHONPATH": str(Path(__file__).resolve().parents[2]),
        **env,
    }
    return member.spawn("gpu-device", [sys.executable, "-m", "services.gpu_device"], environment)


@pytest.fixture(scope="session")
def gpu_agent(
    request: pytest.FixtureRequest,
    realnode_plane: controlplane.ControlPlane,
    gpu_host: host.FakeHost,
    gpu_node: node.RealNode,
) -> processes.Process:
    """The project's gpu-device agent on the session's GPU node (`spawn_gpu_agent`)."""
    agent = spawn_gpu_agent(realnode_plane, gpu_host, gpu_node)
    request.addfinalizer(agent.stop)
    return agent
