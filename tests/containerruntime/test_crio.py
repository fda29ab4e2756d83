"""container-runtime on CRI-O (C4, R-READY, R-INSTALL), on a fake CRI-O (`fake_crio`: no CRI-O runs here) under the
harness's service manager (`metax_dev.containerd_host.Supervisor`, a restart = stop + start, as systemd's).

Covered: the round writes only its drop-in (``crio.conf.d/99-metax.conf``, atomically), dry-runs it with ``crio
config``, restarts once, and is ready only when the running daemon's ``GET /config`` has the handler; a steady
round and a new agent restart nothing; a drop-in removed or changed by someone else is written again with an
Event and no restart (the daemon still runs with it); a drop-in the dry run refuses (an administrator's later
drop-in overriding ``metax``, a broken ``crio.conf``) is taken back and nothing restarts; a restart whose daemon
does not come up is rolled back and restarted with an Event, not retried; a CRI-O older than 1.23 is not touched;
the agent killed after each step converges; uninstall leaves the host byte-identical and restarts once."""

from __future__ import annotations

import pathlib
import sys
import time
from collections.abc import Iterator
from typing import Any

import attrs
import pytest

from metax_core.errors import HardwareError
from metax_core.node import uninstall
from metax_core.runtime import crio, handler, record
from metax_dev import containerd_host
from metax_hw import container_runtime, hostfiles
from metax_k8s.inmemory import cluster as inmemory
from services._agent import cluster
from services.container_runtime import agent, bootstrap, config, crio_round, files

from . import fake_crio

NODE = "crio-node"
ADMIN_CONF = '# the distribution\'s file\n[crio.runtime]\ncgroup_manager = "systemd"\n'
ADMIN_DROPIN = "[crio.runtime]\nlog_level = 'info'\n"


@attrs.define
class CrioNode:
    base: pathlib.Path
    supervisor: containerd_host.Supervisor
    k8s: inmemory.InMemoryCluster

    @property
    def etc(self) -> pathlib.Path:
        return self.base / "etc" / "crio"

    @property
    def dropin(self) -> pathlib.Path:
        return pathlib.Path(crio.dropin_path(str(self.etc / "crio.conf.d")))

    @property
    def socket(self) -> pathlib.Path:
        return self.base / "crio.sock"

    def agent(self, **extra: Any) -> agent.ContainerRuntime:
        settings = config.from_env(
            {},
            node_name=NODE,
            host_root=pathlib.Path("/"),
            runtime="crio",
            crio_config=str(self.etc / "crio.conf"),
            crio_config_dir=str(self.etc / "crio.conf.d"),
            crio_binary=str(self.base / "bin" / "crio"),
            runtime_socket=str(self.socket),
            host_namespaces=False,
            wrapper_source=str(self.base / "image" / handler.WRAPPER_NAME),
            toolkit_dir=str(self.base / "var" / "lib" / "metax" / "toolkit"),
            state_dir=str(self.base / "var" / "lib" / "metax" / "container-runtime"),
            **{"interval": 0.0, "restart_wait": 10.0, **extra},
        )
        return bootstrap.bootstrap(
            settings,
            hw=agent.Hardware(container_runtime.HostProgram(host_namespaces=False), self.supervisor),
            ports=cluster.in_memory(self.k8s, "container-runtime", NODE),
            board=hostfiles.FileReadinessBoard(self.base / "board"),
        )

    def signal(self) -> Any:
        return hostfiles.FileReadinessBoard(self.base / "board").read_all().get("container-runtime")

    def reasons(self) -> list[str]:
        return sorted(e.get("reason", "") for e in self.k8s.objects.list("events.k8s.io/v1", "Event", "default").items)

    def running(self) -> dict[str, Any]:
        """The running daemon's configuration (``GET /config``), waiting for it to serve."""
        deadline = time.monotonic() + 10
        while True:
            try:
                return dict(crio.parse(container_runtime.unix_http_get(str(self.socket), "/config").decode(), "t"))
            except HardwareError:
                if time.monotonic() > deadline:
                    raise
            time.sleep(0.05)

    def handlers(self) -> dict[str, Any]:
        return dict(self.running()["crio"]["runtime"]["runtimes"])

    def tree(self) -> dict[str, bytes]:
        out = {}
        for top in (self.base / "etc", self.base / "var"):
            for p in sorted(top.rglob("*")):
                out[str(p.relative_to(self.base))] = p.read_bytes() if p.is_file() else b"<dir>"
        return out


@pytest.fixture
def node(tmp_path: pathlib.Path) -> Iterator[CrioNode]:
    base = tmp_path / "n"  # unix socket paths hold at most 107 bytes
    (base / "bin").mkdir(parents=True)
    binary = base / "bin" / "crio"
    binary.write_text(f'#!/bin/sh\nexec {sys.executable} {fake_crio.__file__} "$@"\n')
    binary.chmod(0o755)
    (base / "image").mkdir()
    containerd_host.stand_in_wrapper(base / "image" / handler.WRAPPER_NAME, containerd_host.DEBIAN_RUNC, base / "calls")
    etc = base / "etc" / "crio"
    (etc / "crio.conf.d").mkdir(parents=True)
    (etc / "crio.conf").write_text(ADMIN_CONF)
    (etc / "crio.conf.d" / "10-admin.conf").write_text(ADMIN_DROPIN)
    (base / "var" / "lib" / "metax").mkdir(parents=True)  # the DaemonSet's host path (shared by the agents)
    args = [
        "--config",
        str(etc / "crio.conf"),
        "--config-dir",
        str(etc / "crio.conf.d"),
        "--listen",
        str(base / "crio.sock"),
    ]
    supervisor = containerd_host.Supervisor(
        binary, etc / "crio.conf", base / "crio.log", {"PATH": "/usr/bin:/bin"}, args=args
    )
    k8s = inmemory.InMemoryCluster()
    k8s.add_node(NODE)
    k8s.objects.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "default"}}, field_manager="t")
    crio_node = CrioNode(base, supervisor, k8s)
    supervisor.start()
    crio_node.running()
    try:
        yield crio_node
    finally:
        supervisor.stop()


def _without_wrapper(tree: dict[str, bytes]) -> dict[str, bytes]:
    return {k: v for k, v in tree.items() if not k.startswith("var/lib/metax/toolkit")}


def test_configured_once_steady_after_and_the_uninstall_request_gives_the_host_back(node: CrioNode) -> None:
    before = node.tree()
    runtime = node.agent()
    runtime.tick()
    signal = node.signal()
    assert signal.ready, signal.reason
    assert signal.version == f"crio {fake_crio.VERSION}"
    wrapper = str(node.base / "var/lib/metax/toolkit" / handler.WRAPPER_NAME)
    assert node.handlers()["metax"] == {"runtime_path": wrapper, "runtime_type": "oci", "runtime_root": "/run/runc"}
    assert node.running()["crio"]["runtime"]["log_level"] == "info"  # the administrator's drop-in still loads
    assert node.supervisor.restarts == 1 and "RuntimeConfigured" in node.reasons()
    after = node.tree()
    assert after.pop(str(node.dropin.relative_to(node.base))) == crio.dropin(wrapper).encode()
    # nothing of the administrator's changed: only our drop-in, the wrapper and the record are new
    assert {k: v for k, v in after.items() if k in before} == before
    assert sorted(set(after) - set(before)) == [
        "var/lib/metax/container-runtime",
        "var/lib/metax/container-runtime/record.json",
        "var/lib/metax/toolkit",
        f"var/lib/metax/toolkit/{handler.WRAPPER_NAME}",
        f"var/lib/metax/toolkit/{handler.WRAPPER_NAME}.conf",
    ]

    runtime.wake()
    runtime.tick()  # steady: nothing written, nothing restarted
    node.agent().tick()  # nor by a new agent (a reboot or an upgrade of ours)
    assert node.supervisor.restarts == 1 and node.signal().ready

    # the uninstall request on its Node: undone, answered, signal withdrawn, the host as found, one restart
    node.k8s.node_metadata.patch_node_metadata(NODE, annotations=uninstall.render_request("uid-1"))
    runtime.wake()
    runtime.tick()
    annotations = node.k8s.api.get("v1", "Node", NODE)["metadata"]["annotations"]
    assert uninstall.answers(annotations) == {"container-runtime": uninstall.Done("uid-1")}
    assert node.signal() is None
    assert node.supervisor.restarts == 2
    assert "metax" not in node.handlers()
    assert node.tree() == before  # byte for byte, no directory left behind
    runtime.wake()
    runtime.tick()  # stays uninstalled
    assert node.tree() == before and node.supervisor.restarts == 2


@pytest.mark.parametrize("how", ["removed", "changed"])
def test_a_dropin_someone_removed_or_changed_is_written_again_with_an_event(node: CrioNode, how: str) -> None:
    runtime = node.agent()
    runtime.tick()
    ours = node.dropin.read_text()
    if how == "removed":
        node.dropin.unlink()
    else:
        node.dropin.write_text(ours.replace("/run/runc", "/run/other"))
    runtime.tick()  # the stat changed: the round runs at once
    assert node.dropin.read_text() == ours
    assert "RuntimeConfigRepaired" in node.reasons()
    assert node.supervisor.restarts == 1  # the running daemon kept the handler: no restart for a file
    assert node.signal().ready


def test_a_dropin_written_before_the_agent_was_killed_is_not_called_a_repair(node: CrioNode) -> None:
    """A record with no drop-in on disk is also what a first write killed before its rename leaves: a new
    agent cannot tell that from a removal, so it writes the drop-in without an Event."""
    runtime = node.agent()
    runtime.tick()
    node.dropin.unlink()
    node.agent().tick()
    assert node.dropin.is_file() and "RuntimeConfigRepaired" not in node.reasons()


@pytest.mark.parametrize("why", ["an administrator's later drop-in names another metax", "a broken crio.conf"])
def test_a_configuration_the_dry_run_refuses_is_taken_back_and_nothing_restarts(node: CrioNode, why: str) -> None:
    if why.startswith("a broken"):
        (node.etc / "crio.conf").write_text(ADMIN_CONF + "[crio.runtime\n")
    else:
        (node.etc / "crio.conf.d" / "99-zz-admin.conf").write_text(
            "[crio.runtime.runtimes.metax]\nruntime_path = '/usr/bin/true'\n"
        )
    before = node.tree()
    pid = node.supervisor.pid
    node.agent().tick()
    signal = node.signal()
    assert not signal.ready and "does not load the configuration" in signal.reason
    assert "RuntimeConfigInvalid" in node.reasons()
    assert node.supervisor.pid == pid and node.supervisor.restarts == 0
    assert _without_wrapper(node.tree()) == before  # the drop-in and the record are gone again


def test_a_restart_that_does_not_come_up_is_rolled_back_once(node: CrioNode) -> None:
    before = node.tree()
    node.supervisor.fail_starts = 1  # the next start exits at once
    runtime = node.agent(restart_wait=2.0)
    runtime.tick()
    signal = node.signal()
    assert not signal.ready and "previous configuration was restored" in signal.reason
    assert "RuntimeRestartFailed" in node.reasons()
    assert node.supervisor.restarts == 2  # ours, then the rollback's
    assert "metax" not in node.handlers()
    assert _without_wrapper(node.tree()) == before
    runtime.wake()
    runtime.tick()  # the same inputs are not tried again
    assert node.supervisor.restarts == 2


def test_a_crio_older_than_supported_is_left_alone(node: CrioNode) -> None:
    before = node.tree()
    script = node.base / "bin" / "crio"
    script.write_text('#!/bin/sh\n[ "$1" = --version ] && { echo "crio version 1.22.5"; exit 0; }\nexit 1\n')
    node.agent().tick()
    signal = node.signal()
    assert not signal.ready and "1.22.5 is too old; 1.23 or later" in signal.reason
    assert "RuntimeUnsupported" in node.reasons() and node.supervisor.restarts == 0
    assert node.tree() == before


class Killed(BaseException):
    pass


STEPS = ("backup", "write drop-in", "validate", "restart")


@pytest.mark.parametrize("step", STEPS)
def test_killed_after_a_step_converges_on_restart(node: CrioNode, monkeypatch: pytest.MonkeyPatch, step: str) -> None:
    before = node.tree()

    owner, name = {
        "backup": (files.Ledger, "save"),
        "write drop-in": (files.HostFiles, "write"),
        "validate": (crio_round.CrioRound, "validate"),
        "restart": (containerd_host.Supervisor, "restart"),
    }[step]
    real = getattr(owner, name)

    def then_killed(self: Any, *args: Any, **kwargs: Any) -> Any:
        real(self, *args, **kwargs)  # the step's real work, then nothing more of the agent runs (as SIGKILL)
        raise Killed(step)

    with monkeypatch.context() as patch:
        patch.setattr(owner, name, then_killed)
        with pytest.raises(Killed):
            node.agent().tick()
    if step == "restart":
        node.running()  # the daemon the killed agent restarted is coming up
    assert list(node.base.rglob(".*.tmp")) == []  # nothing half-written
    again = node.agent()
    again.tick()
    signal = node.signal()
    assert signal.ready, signal.reason
    assert node.supervisor.restarts == 1  # the interrupted restart counted; none after it
    rec = record.parse((node.base / "var/lib/metax/container-runtime" / record.FILE_NAME).read_text())
    entry = rec.file(str(node.dropin))
    assert entry is not None and entry.owned and entry.before is None
    assert "RuntimeConfigRepaired" not in node.reasons()
    assert again.crio.uninstall() == [] and again._remove_wrapper(again.crio) == []
    assert node.tree() == before
