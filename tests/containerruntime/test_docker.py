"""container-runtime on Docker 20.10 from Debian (``docker.io``), a real dockerd the test runs with its own data
root, exec root, socket and /etc/docker (C4, R-INSTALL): the edited ``daemon.json`` loads (the running
daemon's ``/info`` lists runtime ``metax`` with the wrapper), one restart, and uninstall gives the file back
byte for byte. Docker 20.10 has no CDI (25.0+) and no ``--validate`` (23.0+): the wrapper is its only way in."""

from __future__ import annotations

import json
import pathlib
import shutil
import time
from collections.abc import Iterator

import pytest

from metax_core.errors import HardwareError
from metax_core.runtime import handler
from metax_dev import containerd_host
from metax_hw import container_runtime, cri_calls, hostfiles
from metax_k8s.inmemory import cluster as inmemory
from services._agent import cluster
from services.container_runtime import agent, bootstrap, config

NODE = "docker-node"
ORIGINAL = '{\n    "log-level": "info",\n    "max-concurrent-downloads": 2\n}\n'  # not our two-space layout


@pytest.fixture
def dockerd(tmp_path: pathlib.Path) -> Iterator[containerd_host.Supervisor]:
    if not containerd_host.DEBIAN_DOCKERD.is_file():
        pytest.fail("Debian's dockerd is missing: ./run installs the 'docker.io' package", pytrace=False)
    base = tmp_path / "d"  # unix socket paths hold at most 107 bytes
    supervisor = containerd_host.docker_supervisor(base)
    supervisor.config_path.write_text(ORIGINAL)
    supervisor.start()
    try:
        _wait_serving(base / "docker.sock")
        yield supervisor
    finally:
        supervisor.stop()
        shutil.rmtree(base, ignore_errors=True)


def _wait_serving(socket: pathlib.Path, timeout: float = 60.0) -> dict[str, object]:
    deadline = time.monotonic() + timeout
    while True:
        try:
            return dict(json.loads(cri_calls.unix_http_get(str(socket), "/info")))
        except HardwareError:
            if time.monotonic() > deadline:
                raise
        time.sleep(0.2)


def test_dockerd_loads_the_edited_daemon_json_and_uninstall_restores_it(dockerd: containerd_host.Supervisor) -> None:
    base = dockerd.config_path.parents[2]
    wrapper_source = base / "image" / handler.WRAPPER_NAME
    wrapper_source.parent.mkdir(parents=True)
    containerd_host.stand_in_wrapper(wrapper_source, containerd_host.DEBIAN_RUNC, base / "calls")
    info = _wait_serving(base / "docker.sock")
    assert str(info["ServerVersion"]).startswith("20.10.") and "metax" not in info["Runtimes"]  # type: ignore[operator]

    k8s = inmemory.InMemoryCluster()
    k8s.add_node(NODE)
    settings = config.from_env(
        {},
        node_name=NODE,
        host_root=pathlib.Path("/"),
        runtime="docker",
        docker_config=str(dockerd.config_path),
        docker_binary=str(containerd_host.DEBIAN_DOCKERD),
        runtime_socket=str(base / "docker.sock"),
        host_namespaces=False,
        wrapper_source=str(wrapper_source),
        toolkit_dir=str(base / "toolkit"),
        state_dir=str(base / "state"),
        interval=0.0,
    )
    board = hostfiles.FileReadinessBoard(base / "board")
    runtime = bootstrap.bootstrap(
        settings,
        hw=agent.Hardware(container_runtime.HostProgram(host_namespaces=False), dockerd),
        ports=cluster.in_memory(k8s, "container-runtime", NODE),
        board=board,
    )
    runtime.tick()
    signal = board.read_all()["container-runtime"]
    assert signal.ready, signal.reason
    assert "CDI is off on this dockerd" in signal.reason
    assert dockerd.restarts == 1
    wrapper = str(base / "toolkit" / handler.WRAPPER_NAME)
    loaded = _wait_serving(base / "docker.sock")["Runtimes"]
    assert loaded["metax"]["path"] == wrapper  # type: ignore[index]
    written = json.loads(dockerd.config_path.read_text())
    assert written == {**json.loads(ORIGINAL), "runtimes": {"metax": {"path": wrapper}}}

    runtime.wake()
    runtime.tick()  # steady: nothing written, nothing restarted
    assert dockerd.restarts == 1

    assert runtime.docker.uninstall() == []
    assert dockerd.config_path.read_text() == ORIGINAL
    assert dockerd.restarts == 2
    assert "metax" not in _wait_serving(base / "docker.sock")["Runtimes"]  # type: ignore[operator]
