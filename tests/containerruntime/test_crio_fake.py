"""container-runtime on a CRI-O older than it supports (C4, R-COMPAT): left alone, on the fake CRI-O (`fake_crio`),
since the real CRI-O built here (`metax_dev.crio_host`) is one version, 1.35. The fake answers ``--version`` as CRI-O
1.22.5 and serves its socket as a running CRI-O does; `test_crio_contract` keeps its files' verdicts the real one's.

Covered: the agent publishes the version floor as its reason (``RuntimeUnsupported``), writes nothing, restarts
nothing; and the oldest supported minor, 1.23, is configured (one restart, the handler in ``GET /config``)."""

from __future__ import annotations

import pytest

from metax_core.runtime import handler
from metax_dev.containerd_host import DEBIAN_RUNC

from .conftest import FakeCrioNode

ADMIN_CONF = f"""# the distribution's file
[crio.runtime]
default_runtime = "runc"
cgroup_manager = "systemd"

[crio.runtime.runtimes.runc]
runtime_path = "{DEBIAN_RUNC}"
"""


@pytest.fixture
def node(fake_crio: FakeCrioNode) -> FakeCrioNode:
    fake_crio.config.write_text(ADMIN_CONF)
    fake_crio.supervisor.start()
    fake_crio.running()
    return fake_crio


def test_a_crio_older_than_supported_is_left_alone(node: FakeCrioNode) -> None:
    node.set_version("1.22.5")
    before = node.tree()
    node.agent().tick()
    signal = node.signal()
    assert not signal.ready and "1.22.5 is too old; 1.23 or later" in signal.reason
    assert "RuntimeUnsupported" in node.reasons() and node.supervisor.restarts == 0
    assert node.tree() == before


def test_the_oldest_supported_crio_is_configured(node: FakeCrioNode) -> None:
    node.set_version("1.23.0")
    node.agent().tick()
    signal = node.signal()
    assert signal.ready, signal.reason
    assert signal.version == "crio 1.23.0" and node.supervisor.restarts == 1
    wrapper = str(node.base / "var/lib/metax/toolkit" / handler.WRAPPER_NAME)
    assert node.running()["crio"]["runtime"]["runtimes"]["metax"]["runtime_path"] == wrapper
