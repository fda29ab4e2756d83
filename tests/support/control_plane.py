"""The test control plane, as a pytest plugin (registered in tests/conftest.py): fixtures for every test
folder that talks to a real Kubernetes control plane on loopback (tests/integration, tests/contract/cluster).

Why this module exists: integration tests must talk to the real kube-apiserver (with
etcd, controller-manager, scheduler and kwok nodes), not to a fake. Starting one costs a
few seconds, so one control plane serves the whole session; each test gets its own API
client and, if it wants, its own namespace.

Fixtures:

* ``control_plane`` (session): a started :class:`metax_dev.controlplane.cluster.ControlPlane`
  with ``SESSION_NODES`` kwok nodes (``control_plane.node_names``), its
  ``kubeconfig_path``, ``server_url``, ``ca_path`` and ``restart_apiserver()``.
* ``oldest_control_plane`` (session): a second control plane, started only when a test asks for it, whose
  kube-apiserver, kube-controller-manager and kube-scheduler are of the oldest Kubernetes minor the chart
  supports (R-COMPAT; ``build.build_oldest``), with the session's etcd and kwok and ``SESSION_NODES`` kwok
  nodes. Tests that use it are marked ``oldest_kubernetes`` (a test that uses it without the marker fails).
* ``kube_api`` (function): a ``kubernetes.client.ApiClient`` with admin credentials,
  closed after the test.
* ``kube_namespace`` (function): a fresh namespace name, deleted after the test.
* ``record_timing`` (function): ``record_timing(label, seconds)`` adds a line to the
  timing table printed at the end of the session.
* ``real_api`` (session): a ``metax_k8s.client.HttpApi`` on the session control plane, with the
  contract suite's test-only Widget CRD installed.
* ``process_node`` (session): a `metax_dev.processnode.node.ProcessNode` registered on the session control
  plane (``process-node-0``): pods that tolerate its taint and select its label run as local processes
  (docs/processnode.md).

Tests that restart the session's kube-apiserver are marked ``restarts_apiserver`` and run at the end of the
session: kube-controller-manager takes minutes to see changes again after a restart (docs/controlplane.md), and
no later test should inherit that. A test that restarts it without the marker fails; after one that does, kwok,
kube-controller-manager and kube-scheduler are started again (their client-go back-off is not reset for minutes).

The binaries are built (or found in the cache) right after collection, outside any test
timeout. Without Go the tests that need the control plane fail with the reason; they are
never skipped.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterator

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from metax_dev.controlplane import build, errors
from metax_dev.controlplane import (
    cluster as controlplane,  # "cluster" is the contract suite's fixture (tests/contract/cluster)
)
from metax_dev.processnode import node as processnode
from metax_k8s import client as metax_client
from tests.support.cluster import (
    WIDGET_API,
    WIDGET_CRD,
    wait_served,
)

logger = logging.getLogger(__name__)

#: kwok nodes in the session's control plane.
SESSION_NODES = 3

_build_error: errors.ControlPlaneError | None = None
_oldest_build_error: errors.ControlPlaneError | None = None
_timings: list[tuple[str, float]] = []
_session_plane: list[controlplane.ControlPlane] = []  # the started session control plane, once there is one
_controller_restarts: list[float] = []  # seconds of each restart of kwok and the controllers after a restart test

RESTARTS_APISERVER = "restarts_apiserver"
OLDEST_KUBERNETES = "oldest_kubernetes"


def _needs_control_plane(item: pytest.Item) -> bool:
    return bool({"control_plane", "oldest_control_plane"} & set(getattr(item, "fixturenames", ())))


def _needs_oldest(item: pytest.Item) -> bool:
    return "oldest_control_plane" in getattr(item, "fixturenames", ())


def pytest_collection_finish(session: pytest.Session) -> None:
    """Build the control-plane binaries before any test runs (a cold build takes minutes)."""
    global _build_error, _oldest_build_error
    if session.config.option.collectonly or not any(_needs_control_plane(i) for i in session.items):
        return
    try:
        result = build.build()
    except errors.ControlPlaneError as exc:
        _build_error = exc
        return
    _timings.append((f"control-plane binaries ({'cached' if result.cached else 'built'})", result.seconds))
    if not any(_needs_oldest(i) for i in session.items):
        return
    try:
        oldest = build.build_oldest()
    except errors.ControlPlaneError as exc:
        _oldest_build_error = exc
        return
    how = "cached" if oldest.cached else "built"
    _timings.append((f"oldest-minor binaries, kubernetes {oldest.versions['kubernetes']} ({how})", oldest.seconds))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Move the tests that restart the session's kube-apiserver to the end, keeping the order within each part."""
    items.sort(key=lambda item: item.get_closest_marker(RESTARTS_APISERVER) is not None)


@pytest.fixture(autouse=True)
def _restarts_are_marked(request: pytest.FixtureRequest) -> Iterator[None]:
    """Fail a test that restarted the session's kube-apiserver without saying so (it would not run last); after
    one that did, start kwok and the controllers again, so the next test does not inherit their back-off
    (`ControlPlane.restart_controllers`; a test that needs them in its own teardown calls it itself)."""
    before = _restart_count()
    yield
    if _restart_count() > before and request.node.get_closest_marker(RESTARTS_APISERVER) is None:
        pytest.fail(f"this test restarts the session's kube-apiserver: mark it @pytest.mark.{RESTARTS_APISERVER}")
    for plane in _session_plane:
        if plane.controllers_behind:
            _controller_restarts.append(plane.restart_controllers())


@pytest.fixture(autouse=True)
def _oldest_is_marked(request: pytest.FixtureRequest) -> None:
    """Fail a test that uses the oldest-minor control plane without the marker that lets it be selected."""
    if "oldest_control_plane" in request.fixturenames and request.node.get_closest_marker(OLDEST_KUBERNETES) is None:
        pytest.fail(f"this test uses oldest_control_plane: mark it @pytest.mark.{OLDEST_KUBERNETES}")


def _restart_count() -> int:
    return sum(len(plane.timings.apiserver_restarts) for plane in _session_plane)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if _controller_restarts:
        label = f"kwok and controllers started again after {len(_controller_restarts)} restart test(s)"
        _timings.append((label, sum(_controller_restarts)))
        _controller_restarts.clear()
    if not _timings:
        return
    terminalreporter.section("test control plane timings")
    width = max(len(label) for label, _ in _timings)
    for label, seconds in _timings:
        terminalreporter.write_line(f"{label:<{width}}  {seconds:8.1f}s")


@pytest.fixture(scope="session")
def control_plane() -> Iterator[controlplane.ControlPlane]:
    if _build_error is not None:
        pytest.fail(f"test control plane unavailable: {_build_error}", pytrace=False)
    plane = controlplane.ControlPlane(nodes=SESSION_NODES)
    try:
        try:
            plane.start()
        except errors.ControlPlaneError as exc:
            pytest.fail(f"test control plane failed to start: {exc}", pytrace=False)
        if plane.timings.first_api is not None:
            _timings.append(("session control plane: first usable API", plane.timings.first_api))
        if plane.timings.total is not None:
            _timings.append((f"session control plane: ready with {SESSION_NODES} kwok nodes", plane.timings.total))
        _session_plane.append(plane)
        yield plane
    finally:
        plane.stop()


@pytest.fixture(scope="session")
def oldest_control_plane() -> Iterator[controlplane.ControlPlane]:
    if _build_error is not None or _oldest_build_error is not None:
        pytest.fail(f"oldest-minor control plane unavailable: {_build_error or _oldest_build_error}", pytrace=False)
    plane = controlplane.ControlPlane(
        nodes=SESSION_NODES,
        bin_dir=build.build(quiet=True).bin_dir,
        kubernetes_bin_dir=build.build_oldest(quiet=True).bin_dir,
    )
    try:
        try:
            plane.start()
        except errors.ControlPlaneError as exc:
            pytest.fail(f"oldest-minor control plane failed to start: {exc}", pytrace=False)
        if plane.timings.total is not None:
            _timings.append((f"oldest-minor control plane: ready with {SESSION_NODES} kwok nodes", plane.timings.total))
        yield plane
    finally:
        plane.stop()


@pytest.fixture
def kube_api(control_plane: controlplane.ControlPlane) -> Iterator[client.ApiClient]:
    api = control_plane.api_client()
    try:
        yield api
    finally:
        api.close()  # type: ignore[no-untyped-call]  # untyped in the kubernetes client


@pytest.fixture
def kube_namespace(kube_api: client.ApiClient) -> Iterator[str]:
    core = client.CoreV1Api(kube_api)
    name = f"it-{uuid.uuid4().hex[:10]}"
    core.create_namespace(client.V1Namespace.model_validate({"metadata": {"name": name}}))
    try:
        yield name
    finally:
        try:
            core.delete_namespace(name)
        except ApiException as exc:
            if exc.status != 404:
                raise


@pytest.fixture
def record_timing() -> Callable[[str, float], None]:
    def record(label: str, seconds: float) -> None:
        logger.info("%s: %.1fs", label, seconds)
        _timings.append((label, seconds))

    return record


@pytest.fixture(scope="session")
def real_api(control_plane: controlplane.ControlPlane) -> metax_client.HttpApi:
    api = metax_client.HttpApi(metax_client.api_client(control_plane.kubeconfig_path))
    api.apply(WIDGET_CRD, field_manager="contract-tests", force=True)
    wait_served(api, WIDGET_API, "Widget")
    return api


@pytest.fixture(scope="session")
def process_node(
    control_plane: controlplane.ControlPlane, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[processnode.ProcessNode]:
    node = processnode.ProcessNode.for_control_plane(control_plane, tmp_path_factory.mktemp("process-node"))
    node.start()
    try:
        node.wait_ready()
        yield node
    finally:
        node.stop()
