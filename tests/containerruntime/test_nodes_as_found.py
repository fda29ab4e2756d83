"""container-runtime on nodes as administrators have them, on the real containerd 1.6 (C4, R-INSTALL, R-SECURITY;
issue 37 items 1, 2 and 4).

* A node another vendor configured first (NVIDIA's toolkit in drop-in mode: the root imports ``conf.d/*.toml``,
  ``conf.d/99-nvidia.toml`` sorts after our old drop-in and carries the whole CRI section): the daemon ends up with
  ``nvidia`` *and* ``metax``; before, the NVIDIA section replaced ours, the dry run rolled back and the node never
  became ready.
* Protected files: a 0600 root file (registry credentials) stays 0600 through configure, the drop-in (a copy of
  the section, credentials included) is 0600, the record 0600, and uninstall gives the root back byte for byte
  *and* mode for mode.
* The guard: a plan that would drop another vendor's runtime (the copy of the root's section alone, what the
  agent wrote before) is caught by the dumps before and after, taken back, and containerd is not restarted.
* Restart mode ``signal``: the agent finds the daemon by its socket's peer credentials, stops it, and its
  supervisor starts it again with the handler; a socket served by something else is refused.
"""

from __future__ import annotations

import os
import pathlib
import socket
import stat
from typing import Any

import pytest

from metax_core.errors import HardwareError
from metax_core.runtime import containerd, handler
from metax_hw import container_runtime

from .conftest import RuntimeNode

NVIDIA_SECTION = """version = 2

[plugins."io.containerd.grpc.v1.cri"]
  [plugins."io.containerd.grpc.v1.cri".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia.options]
        BinaryName = "/usr/bin/nvidia-container-runtime"
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".registry.configs."registry.example".auth]
    username = "node"
    password = "s3cret"
"""


def _nvidia_node(node: RuntimeNode) -> tuple[bytes, pathlib.Path]:
    conf_d = node.root_config.parent / "conf.d"
    conf_d.mkdir()
    nvidia = conf_d / "99-nvidia.toml"
    nvidia.write_text(NVIDIA_SECTION)
    nvidia.chmod(0o600)
    node.root_config.write_text(f'version = 2\nimports = ["{conf_d}/*.toml"]\n{node.daemon_paths()}')
    node.root_config.chmod(0o600)
    node.start()
    assert set(node.handlers()) == {"runc", "nvidia"}
    return node.root_config.read_bytes(), nvidia


def _mode(path: pathlib.Path | str) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_a_node_nvidia_configured_first_gets_metax_and_keeps_nvidia_and_its_modes(containerd16: RuntimeNode) -> None:
    node = containerd16
    original, nvidia = _nvidia_node(node)
    agent = node.agent()
    agent.tick()
    signal = node.signal()
    assert signal.ready, signal.reason
    assert set(node.handlers()) == {"runc", "nvidia", "metax"}
    assert node.supervisor.restarts == 1
    dropin = containerd.dropin_path(str(node.root_config), 2)
    assert _mode(node.root_config) == 0o600 and _mode(dropin) == 0o600  # the drop-in carries the credentials
    assert _mode(node.state_dir / "record.json") == 0o600
    assert 's3cret"' in pathlib.Path(dropin).read_text()

    agent.tick()  # steady: nothing written, nothing restarted
    assert node.supervisor.restarts == 1

    assert agent.containerd.uninstall() == []
    assert node.root_config.read_bytes() == original and _mode(node.root_config) == 0o600
    assert nvidia.read_text() == NVIDIA_SECTION and _mode(nvidia) == 0o600
    assert not pathlib.Path(dropin).exists() and not (node.root_config.parent / "metax").exists()
    assert set(node.handlers()) == {"runc", "nvidia"}


def test_a_plan_that_would_drop_a_vendors_runtime_is_taken_back_without_a_restart(
    containerd16: RuntimeNode, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The drop-in the agent wrote before issue 37 (a copy of the root's section only) on a node whose section is
    NVIDIA's: containerd loads it, but nvidia and the registry credentials would be gone."""
    node = containerd16
    original, _ = _nvidia_node(node)
    agent = node.agent()
    round_ = agent.containerd
    real_plan = round_.plan

    def root_section_only(current: Any, context: Any) -> Any:
        planned = real_plan(current, context)
        ours = containerd.dropin_path(str(node.root_config), 2)
        lossy = containerd.HEADER + (
            'version = 2\n[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.metax]\n'
            '  runtime_type = "io.containerd.runc.v2"\n'
            '  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.metax.options]\n'
            f'    BinaryName = "{node.toolkit / handler.WRAPPER_NAME}"\n'
        )
        return type(planned)(
            {**planned.texts, ours: lossy}, planned.edits, planned.owned, planned.create_modes, planned.note
        )

    monkeypatch.setattr(round_, "plan", root_section_only)
    agent.tick()
    signal = node.signal()
    assert not signal.ready
    assert "runtimes.nvidia lost" in signal.reason and "registry" in signal.reason
    assert node.reasons().count("RuntimeConfigInvalid") == 1
    assert node.supervisor.restarts == 0  # never restarted with it
    assert node.root_config.read_bytes() == original and _mode(node.root_config) == 0o600
    assert not pathlib.Path(containerd.dropin_path(str(node.root_config), 2)).exists()
    assert set(node.handlers()) == {"runc", "nvidia"}


def test_restart_mode_signal_stops_the_daemon_and_its_supervisor_brings_it_back(containerd16: RuntimeNode) -> None:
    node = containerd16
    node.root_config.write_text(f"version = 2\n{node.daemon_paths()}")
    node.start()
    node.supervisor.supervise()
    before = container_runtime.peer_pid(str(node.socket))
    agent = node.agent(restart_mode="signal")
    agent.tick()
    signal = node.signal()
    assert signal.ready, signal.reason
    after = container_runtime.peer_pid(str(node.socket))
    assert after != before and node.supervisor.exits == 1 and node.supervisor.restarts == 0
    assert "metax" in node.handlers() and "RuntimeConfigured" in node.reasons()

    assert agent.containerd.uninstall() == []
    assert node.supervisor.exits == 2 and "metax" not in node.handlers()


def test_restart_mode_none_configures_and_waits_for_the_administrator(containerd16: RuntimeNode) -> None:
    node = containerd16
    node.root_config.write_text(f"version = 2\n{node.daemon_paths()}")
    node.start()
    agent = node.agent(restart_mode="none")
    agent.tick()
    signal = node.signal()
    assert not signal.ready and "restart mode none" in signal.reason
    assert node.supervisor.restarts == 0 and pathlib.Path(containerd.dropin_path(str(node.root_config), 2)).exists()
    node.supervisor.restart()  # the administrator
    node.wait_serving()
    agent.tick()
    assert node.signal().ready


def test_a_socket_served_by_another_program_is_not_signalled(tmp_path: pathlib.Path) -> None:
    """Socket activation: the listening socket belongs to another process (systemd), which must never get it."""
    path = str(tmp_path / "containerd.sock")
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(1)  # a connection waits in the backlog: enough for the peer's credentials
    try:
        with pytest.raises(HardwareError, match=r"not containerd: a socket-activated service\?"):
            container_runtime.SignalRestart(path, "containerd").restart("containerd")
    finally:
        server.close()
