"""Operator → vfio-manager on the real control plane (C1, C10, R-VFIO, issue 20).

What the operator writes is what vfio-manager reads: the test sets ``vfioManager.vfioConfig`` in the CR, the
operator (a local process) renders its own ``metax-vfio-config``, and vfio-manager (a local process on a fake
host of one kwok GPU node, as its DaemonSet pod would run there) binds the selected GPUs to vfio-pci and
publishes ``metax-tech.com/gpu-vfio``. The test writes no ConfigMap of its own. Aspects: the selected GPUs
of the matching node are bound and annotated, the node the regex does not match keeps every GPU native, and
editing the CR moves the selection (re-rendered by the operator, re-applied by the agent).
"""

from __future__ import annotations

import pathlib
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from typing import Any

import pytest
from operator_helpers import NS, Env, cluster_operator, wait_for

from metax_core.errors import ClusterError
from metax_core.inventory import METAX_MODULE, VFIO_DRIVER
from metax_core.node import vfio, vfio_config_map
from metax_dev import agents
from metax_hw_fake import builder
from metax_hw_fake import host as fake_host

pytestmark = pytest.mark.integration

REPO = pathlib.Path(__file__).resolve().parents[3]


class VfioNode:
    """One kwok node's fake host with vfio-manager running on it as a local process."""

    def __init__(self, name: str, workdir: pathlib.Path, kubeconfig: pathlib.Path) -> None:
        self.name = name
        self.dir = workdir / name
        self.fake: fake_host.FakeHost = builder.FakeHostBuilder().gpus(4).host_driver("2.18.0").build(self.dir)
        env = agents.environment(
            self.fake, node_name=name, kubeconfig=kubeconfig, namespace=NS, payload=agents.write_payload(workdir / "p")
        )
        self.log_path = workdir / f"{name}-vfio-manager.log"
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(
                agents.command("vfio-manager"),
                env={**env, "METAX_VFIO_INTERVAL": "2"},
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=REPO,
            )

    def drivers(self) -> list[str | None]:
        """Each GPU's driver, by index (sorted PCI address, as R-VFIO indexes them)."""
        return [self.fake.driver_of(a) for a in sorted(self.fake.gpu_addresses())]

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-3000:]

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.process.kill()


@pytest.fixture
def vfio_nodes(operator_env: Env) -> Iterator[list[VfioNode]]:
    workdir = pathlib.Path(tempfile.mkdtemp(prefix="vf", dir="/tmp"))
    nodes = [VfioNode(n, workdir, operator_env.kubeconfig) for n in operator_env.gpu_nodes]
    try:
        yield nodes
    finally:
        for n in nodes:
            n.stop()  # before the CR's deletion, so the finalizer's node cleanup is the last write
        shutil.rmtree(workdir, ignore_errors=True)


def _annotation(env: Env, node: str) -> str | None:
    value: str | None = (env.api.get("v1", "Node", node)["metadata"].get("annotations") or {}).get(vfio.ANNOTATION)
    return value


def _spec(selection: list[dict[str, Any]]) -> dict[str, Any]:
    spec = cluster_operator()["spec"]
    spec["vfioManager"] = {"vfioConfig": selection}
    return spec


def test_the_operators_vfio_config_makes_vfio_manager_bind_the_selected_gpus(
    operator_env: Env, vfio_nodes: list[VfioNode]
) -> None:
    env = operator_env
    chosen, other = vfio_nodes
    assert chosen.fake.module_version(METAX_MODULE) == "2.18.0"
    pattern = chosen.name.replace(".", "\\.")
    env.api.apply(cluster_operator(_spec([{"nodeName": pattern, "gpus": "0,2"}])), field_manager="helm")
    env.start_operator()

    def rendered() -> dict[str, Any] | None:
        try:
            cm: dict[str, Any] = env.api.get("v1", "ConfigMap", vfio_config_map.NAME, NS)
        except ClusterError:
            return None
        return cm

    cm = wait_for("the operator's metax-vfio-config", rendered)
    assert list(cm["data"]) == [vfio_config_map.KEY]
    want = '{"0":1,"2":1}'
    wait_for(f"{vfio.ANNOTATION}={want} on {chosen.name}", lambda: _annotation(env, chosen.name) == want)
    assert chosen.drivers() == [VFIO_DRIVER, METAX_MODULE, VFIO_DRIVER, METAX_MODULE], chosen.log()
    assert other.drivers() == [METAX_MODULE] * 4
    assert _annotation(env, other.name) is None
    assert "InvalidVfioConfig" not in chosen.log() + other.log()

    # An edit of the CR reaches the node: the operator re-renders, vfio-manager gives GPU 0 back and binds 1.
    env.api.apply(cluster_operator(_spec([{"nodeName": pattern, "gpus": "1,2"}])), field_manager="helm")
    want = '{"1":1,"2":1}'
    wait_for(f"{vfio.ANNOTATION}={want} on {chosen.name}", lambda: _annotation(env, chosen.name) == want)
    assert chosen.drivers() == [METAX_MODULE, VFIO_DRIVER, VFIO_DRIVER, METAX_MODULE], chosen.log()
    assert all(n.process.poll() is None for n in vfio_nodes), [n.log() for n in vfio_nodes]
