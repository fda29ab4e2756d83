"""Faults on a real containerd (Debian's 1.6): the agent killed between any two steps converges when it starts
again, with no lost or half-written file; a restart whose daemon does not come up is rolled back (C4, R-INSTALL).

"Killed" is a BaseException raised right after the step's real work, so nothing of the agent runs after it,
as with SIGKILL; a fresh agent (new process state, same host) then runs."""

from __future__ import annotations

import pytest

from metax_core.runtime import containerd, detect, record
from metax_hw import runtime_files
from services.container_runtime import containerd_round

from .conftest import RuntimeNode
from .test_containerd16 import DEBIAN_STYLE


class Killed(BaseException):
    pass


STEPS = ("backup", "write drop-in", "write root", "validate", "restart")


def _kill_after(monkeypatch: pytest.MonkeyPatch, step: str, node: RuntimeNode) -> None:
    def after(owner: object, name: str, when: object = None) -> None:
        real = getattr(owner, name)

        def wrapped(self: object, *args: object, **kwargs: object) -> object:
            result = real(self, *args, **kwargs)
            if when is None or when(*args):
                raise Killed(step)
            return result

        monkeypatch.setattr(owner, name, wrapped)

    dropin = containerd.dropin_path(str(node.root_config), 2)
    if step == "backup":
        after(runtime_files.Ledger, "save")
    elif step == "write drop-in":
        after(runtime_files.HostFiles, "write", lambda path, *_: path == dropin)
    elif step == "write root":
        after(runtime_files.HostFiles, "write", lambda path, *_: path == str(node.root_config))
    elif step == "validate":
        after(containerd_round.ContainerdRound, "validate")
    else:
        monkeypatch.setattr(type(node.supervisor), "restart", _restart_then_die)


def _restart_then_die(self: object, unit: str = "containerd") -> None:
    type(self).stop(self)  # type: ignore[attr-defined]
    type(self).start(self)  # type: ignore[attr-defined]
    self.restarts += 1  # type: ignore[attr-defined]
    raise Killed("restart")


@pytest.mark.parametrize("step", STEPS)
def test_killed_after_a_step_converges_on_restart(
    containerd16: RuntimeNode, monkeypatch: pytest.MonkeyPatch, step: str
) -> None:
    node = containerd16
    node.root_config.write_text(DEBIAN_STYLE.format(paths=node.daemon_paths()))
    node.start()
    before = node.tree()
    with monkeypatch.context() as patch:
        _kill_after(patch, step, node)
        with pytest.raises(Killed):
            node.agent().tick()
    # nothing half-written: every file parses, no temporary file is left beside them
    leftovers = list(node.base.rglob(".*.tmp"))
    assert leftovers == []
    if step == "restart":
        node.wait_serving()  # the daemon the killed agent restarted is coming up (a round before would wait)
    again = node.agent()
    again.tick()
    signal = node.signal()
    assert signal.ready, signal.reason
    assert node.handlers()["metax"]["options"]["BinaryName"].endswith("metax-container-runtime")
    assert node.supervisor.restarts == 1  # the interrupted restart counted; the new agent needed none after it
    rec = record.parse((node.state_dir / record.FILE_NAME).read_text())
    root = rec.file(str(node.root_config))
    assert root is not None and root.before == before["etc/containerd/config.toml"].decode()
    # and the uninstall after it still gives the host back byte for byte
    assert again.containerd.uninstall() == []
    assert node.without_wrapper() == before


def test_a_restart_that_does_not_come_up_is_rolled_back(containerd16: RuntimeNode) -> None:
    node = containerd16
    node.root_config.write_text(DEBIAN_STYLE.format(paths=node.daemon_paths()))
    node.start()
    before = node.tree()
    node.supervisor.fail_starts = 1  # the next start exits at once
    agent = node.agent(restart_wait=3.0)
    agent.tick()
    signal = node.signal()
    assert not signal.ready and "previous configuration was restored" in signal.reason
    assert "RuntimeRestartFailed" in node.reasons()
    assert node.supervisor.restarts == 2  # ours, then the rollback's
    node.wait_serving()
    assert set(node.handlers()) == {"runc"}
    assert node.without_wrapper() == before
    # the same inputs are not tried again (no restart loop); a changed root file is
    agent.wake()
    agent.tick()
    assert node.supervisor.restarts == 2
    node.root_config.write_text(node.root_config.read_text() + "\n# edited\n")
    agent.tick()  # the files' stat changed: the round runs at once
    assert node.signal().ready and node.supervisor.restarts == 3


def test_a_configuration_that_does_not_load_is_not_restarted(containerd16: RuntimeNode) -> None:
    """The validation's verdict alone decides: here the host's binary refuses every file (``false`` in place of
    ``containerd config dump``), so the files go back as they were and the running daemon is not touched."""
    node = containerd16
    node.root_config.write_text(DEBIAN_STYLE.format(paths=node.daemon_paths()))
    node.start()
    before = node.tree()
    pid = node.supervisor.pid
    agent = node.agent()
    agent.containerd.host.binary = "/bin/false"
    outcome = agent.containerd.run(detect.containerd_schema((1, 6, 20)), "1.6.20")
    assert not outcome.ready and "does not load" in outcome.reason
    assert "RuntimeConfigInvalid" in node.reasons()
    assert node.supervisor.pid == pid and node.supervisor.restarts == 0
    assert set(node.handlers()) == {"runc"}
    assert node.tree() == before  # the record of the refused edit is gone with it
