"""container-runtime on containerd 2.4.2 (config version 4, the real node's build) run by the test (C4, R-READY):
configured through a drop-in that carries only the handler, restarted once, ready only once the running
daemon reports the handler; a re-render that drops our import is repaired with an Event and no restart."""

from __future__ import annotations

import pathlib

import tomlkit

from metax_core.runtime import containerd, handler

from .conftest import RuntimeNode

ROOT = """version = 4
{paths}
# the node's own settings, kept as they are
[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
  SystemdCgroup = false
"""


def test_configured_restarted_once_and_ready(containerd24: RuntimeNode) -> None:
    node = containerd24
    original = ROOT.format(paths=node.daemon_paths(4))
    node.root_config.write_text(original)
    node.start()
    assert handler.RUNTIME_HANDLER not in node.handlers()
    agent = node.agent(interval=3600.0)  # only a watch event or the files' change makes a round due now
    agent.tick()
    assert node.signal().ready, node.signal().reason
    assert node.supervisor.restarts == 1
    assert node.handlers()["metax"]["options"]["BinaryName"] == str(node.toolkit / handler.WRAPPER_NAME)
    dropin = tomlkit.parse(pathlib.Path(containerd.dropin_path(str(node.root_config), 4)).read_text()).unwrap()
    assert dropin["version"] == 4
    assert set(dropin["plugins"]["io.containerd.cri.v1.runtime"]["containerd"]["runtimes"]) == {"metax"}

    # config management re-renders the root file without our import: repaired, Event, no restart (the daemon
    # still has the handler loaded)
    agent.tick()  # nothing changed, nothing due: no round
    assert "RuntimeConfigRepaired" not in node.reasons()
    node.root_config.write_text(original + "# re-rendered\n")
    agent.tick()  # the root file's stat changed: the round runs at once
    assert "RuntimeConfigRepaired" in node.reasons()
    assert containerd.dropin_path(str(node.root_config), 4) in node.root_config.read_text()
    assert node.supervisor.restarts == 1 and node.signal().ready

    # uninstall: the re-rendered text comes back (our part gone), the daemon restarted once more, no handler
    assert agent.containerd.uninstall() == []
    assert node.root_config.read_text() == original + "# re-rendered\n"
    assert node.supervisor.restarts == 2 and handler.RUNTIME_HANDLER not in node.handlers()
