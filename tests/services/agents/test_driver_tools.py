"""The driver's own tools reach every agent through the host (issue 21; R-DRIVER, R-READY, R-INSTALL).

MetaX's ``mx-smi`` is in no image (not in Debian, not redistributable): it comes with the driver payload
(``bin/``, with ``lib/`` for libmxsml; `metax_core.node.payload_layout`). driver-manager stages them per driver
version and points ``/var/lib/metax/drivers/current`` at the running driver's; the production hardware adapter of
any agent (`metax_hw.host.open_host`, no tool path given) finds mx-smi there before its own PATH.

Covers: staged and linked once the payload's driver runs, then quiet (no rewrite in later rounds); the staged
tool is the one the production adapter runs (the GPUs' health read through it, on the fake host mounted where
the agent's ``METAX_HOST_ROOT`` says, as in a pod); no link while the running driver is another version (a
tool of another version may not speak to it); uninstall leaves the host as it was found.
"""

from __future__ import annotations

import os
import pathlib
import sys

import pytest

from metax_core.node import payload_layout, uninstall
from metax_core.spec import model as spec
from metax_core.wire import agent_env
from metax_dev import agents as dev_agents
from metax_hw import host as hw_host
from metax_hw_fake import builder, snapshot

from .conftest import NODE, PAYLOAD_VERSION, Node, make_node
from .test_driver_kernels import manager


@pytest.fixture
def node(tmp_path: pathlib.Path) -> Node:
    n = make_node(tmp_path, builder.FakeHostBuilder().gpus(2).host_driver("2.18.0"))
    dev_agents.write_payload(n.payload, PAYLOAD_VERSION)  # with the fake host's portable bin/mx-smi
    return n


def link(n: Node) -> pathlib.Path:
    return n.root / payload_layout.HOST_CURRENT.lstrip("/")


def staged_smi(n: Node) -> pathlib.Path:
    return (
        n.root / payload_layout.host_version_dir(PAYLOAD_VERSION).lstrip("/") / payload_layout.TOOLS_SUBDIR / "mx-smi"
    )


def test_the_running_payload_drivers_tools_are_staged_and_found_by_the_production_adapter(
    node: Node, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dm = manager(node, tmp_path)
    dm.tick()
    assert dm.outcome is not None and dm.outcome.ready.ready, dm.outcome
    staged = staged_smi(node)
    assert staged.read_bytes() == (node.payload / "bin" / "mx-smi").read_bytes()
    assert os.access(staged, os.X_OK)
    assert os.readlink(link(node)) == PAYLOAD_VERSION
    assert (node.root / payload_layout.HOST_TOOLS_DIR.lstrip("/") / "mx-smi").read_bytes() == staged.read_bytes()

    before = staged.stat().st_mtime_ns, link(node).lstat().st_mtime_ns
    node.clock.advance(3600)
    dm.tick()
    assert (staged.stat().st_mtime_ns, link(node).lstat().st_mtime_ns) == before  # quiet in steady state

    # An agent's production adapter, given no tool path (as in its pod), runs the staged mx-smi; the fake
    # host's own tools are not on its PATH, only the interpreter that has this package (the image's python3).
    monkeypatch.setenv("PATH", os.path.dirname(sys.executable) + ":/usr/bin:/bin")
    monkeypatch.setenv(agent_env.HOST_ROOT, str(node.root))
    adapter = hw_host.open_host(node.root)
    health = adapter.monitor.health()
    assert sorted(health) == node.fake.gpu_addresses()
    assert all(h.healthy for h in health.values()), health
    node.fake.break_mx_smi("fail")  # the same fake kernel: a broken tool is seen through the staged one too
    with pytest.raises(Exception, match="mx-smi"):
        adapter.monitor.health()


def test_no_tools_while_another_version_runs(node: Node, tmp_path: pathlib.Path) -> None:
    """PreferHost keeps the host's 2.18.0: the payload's 2.20.0 tools are staged but not linked."""
    dm = manager(node, tmp_path, deploy_policy=spec.DeployPolicy.PREFER_HOST)
    dm.tick()
    assert node.fake.module_version("metax") == "2.18.0"
    assert staged_smi(node).is_file()
    assert not link(node).is_symlink()


def test_uninstall_removes_the_tools_and_leaves_the_host_as_found(node: Node, tmp_path: pathlib.Path) -> None:
    before = snapshot.take(node.root)
    dm = manager(node, tmp_path)
    dm.tick()
    assert link(node).is_symlink()
    node.k8s.node_metadata.patch_node_metadata(NODE, annotations=uninstall.render_request("uid-1"))
    node.clock.advance(3600)
    dm.tick()
    assert uninstall.answers(node.annotations())["driver"] == uninstall.Done("uid-1")
    assert not link(node).exists() and not link(node).is_symlink()
    assert snapshot.diff(before, snapshot.take(node.root)) == []
