"""container-runtime on a real CRI-O (C4, R-READY, R-INSTALL, R-COMPAT, R-MACA): CRI-O 1.35 built from its Go module,
Debian's conmon and the harness's runc, run by the harness's service manager in the node's own mount namespace
(`metax_dev.crio_host`; a restart = stop + start, as systemd's).

Covered: the round writes only its drop-in (``crio.conf.d/99-metax.conf``), dry-runs it with the real ``crio
config`` and restarts once; the administrator's ``crio.conf`` and drop-in stay byte-identical and still load (the
real ``crio config`` and the running daemon's ``GET /config``); ready only when the running daemon has the
handler; a steady round and a new agent restart nothing; a drop-in removed or changed by someone else is written
again with an Event and no restart; a drop-in the real dry run refuses (an administrator's later drop-in naming
another ``metax``, a ``crio.conf`` that does not parse) is taken back and nothing restarts; a restart whose daemon
does not come up is rolled back and restarted once, not retried; the agent killed after the backup, the write, the
validation and the restart converges with one restart in all; uninstall leaves the host byte-identical with one
more restart. And through the ``metax`` handler (what the kubelet sends for ``runtimeClassName: metax``): a pod
that ran before the agent's restart keeps running; a GPU container created with CRI (the environment and CDI
device gpu-device's Allocate gives) runs through the REAL wrapper and gets its devices (CRI-O's CDI) and the MXMACA
SDK its ``METAX_MACA_VERSION`` chose from the real container-edit service and maca agent; a bad prefix fails its
creation with the message; a container without a GPU on the handler runs untouched; the pod gone, uninstall takes
the handler and the wrapper away with one more restart while the first pod still runs. Expected and failing today
a pod still on the handler at uninstall keeps the drop-in and the wrapper and can still be stopped, after which the
uninstall completes. And CRI-O is built once from its module and reused (`metax_dev.controlplane.build.build_crio`).

CRI-O older than 1.23 is refused without a change: `test_crio_fake` (the real binary is one version); the fake and
this CRI-O give the same verdicts: `test_crio_contract`."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
from typing import Any

import attrs
import grpc
import pytest
import tomlkit

from metax_core.node import cdi, uninstall
from metax_core.runtime import crio, handler, record
from metax_dev import containerd_host, crio_host, wrapper
from metax_dev.controlplane import build, targets
from metax_dev.productnode import runtime_agent
from metax_dev.realnode import images
from metax_hw import runtime_files
from services.container_runtime import crio_round

from . import cri
from .conftest import CrioNode, harness_bin

pytestmark = pytest.mark.realnode  # root, mount namespaces, cgroups, the harness's runc (-m 'not realnode')

ADMIN_DROPIN = '[crio.api]\nstream_idle_timeout = "5m"\n'
"""The administrator's own drop-in (``10-admin.conf``): an option both the dry run and the daemon show."""
VERSIONS = ("2.18.0.3", "2.9.1")
SLEEPER = ["sh", "-c", "trap 'exit 0' TERM; sleep 3600 & wait"]
"""A long-running container that stops at once on SIGTERM (a plain ``sleep`` as PID 1 would ignore it)."""
DEVICE = containerd_host.GPU_DEVICE

REPO = pathlib.Path(__file__).resolve().parents[2]


def test_crio_is_built_from_its_module_once_and_reused(crio: CrioNode) -> None:
    """Built right after collection (conftest: ``crio`` asks for it); asked again, the cached set is reused."""
    again = build.build_crio(quiet=True)
    assert again.cached and again.versions["cri-o"] == "v1.35.2"
    assert {p.name for p in again.bin_dir.iterdir()} >= set(targets.CRIO)
    done = subprocess.run([str(again.binary("crio")), "--version"], capture_output=True, text=True, check=True)
    assert done.stdout.splitlines()[0] == "crio version 1.35.2"
    assert "seccomp" in done.stdout and "SeccompEnabled:   true" in done.stdout


def _started(node: CrioNode) -> CrioNode:
    node.config.write_text(node.admin_config())
    (node.config_dir / "10-admin.conf").write_text(ADMIN_DROPIN)
    node.start()
    return node


@pytest.fixture
def started(crio: CrioNode) -> CrioNode:
    return _started(crio)


def _effective(node: CrioNode) -> dict[str, Any]:
    """The real dry run's effective configuration (it must load)."""
    done = node.crio_config()
    assert done.returncode == 0, done.stderr[-2000:]
    return dict(tomlkit.parse(done.stdout).unwrap())


def _without_wrapper(tree: dict[str, bytes]) -> dict[str, bytes]:
    return {k: v for k, v in tree.items() if not k.startswith("var/lib/metax/toolkit")}


def test_configured_once_steady_after_and_the_uninstall_request_gives_the_host_back(started: CrioNode) -> None:
    node = started
    before = node.tree()
    assert set(node.handlers()) == {"runc"}
    runtime = node.agent()
    runtime.tick()
    signal = node.signal()
    assert signal.ready, signal.reason
    assert signal.version == "crio 1.35.2"
    wrapper_path = str(node.wrapper)
    loaded = node.handlers()
    assert set(loaded) == {"runc", "metax"}
    metax = loaded["metax"]
    assert (metax["runtime_path"], metax["runtime_type"], metax["runtime_root"]) == (wrapper_path, "oci", "/run/runc")
    assert node.supervisor.restarts == 1 and "RuntimeConfigured" in node.reasons()
    # the administrator's files are byte-identical and still load, in the real dry run and in the running daemon
    after = node.tree()
    assert after.pop(str(node.dropin.relative_to(node.base))) == crio.dropin(wrapper_path).encode()
    assert {k: v for k, v in after.items() if k in before} == before
    assert sorted(set(after) - set(before)) == [
        "var/lib/metax/container-runtime",
        "var/lib/metax/container-runtime/record.json",
        "var/lib/metax/toolkit",
        f"var/lib/metax/toolkit/{handler.WRAPPER_NAME}",
        f"var/lib/metax/toolkit/{handler.WRAPPER_NAME}.conf",
    ]
    effective = _effective(node)
    assert effective["crio"]["runtime"]["runtimes"]["metax"]["runtime_path"] == wrapper_path
    assert effective["crio"]["runtime"]["cgroup_manager"] == "cgroupfs"  # crio.conf
    assert effective["crio"]["api"]["stream_idle_timeout"] == "5m"  # 10-admin.conf
    running = node.running()
    assert running["crio"]["runtime"]["cgroup_manager"] == "cgroupfs"
    assert running["crio"]["api"]["stream_idle_timeout"] == "5m"

    pid = node.supervisor.pid
    runtime.wake()
    runtime.tick()  # steady: nothing written, nothing restarted
    node.agent().tick()  # nor by a new agent (a reboot or an upgrade of ours)
    assert node.supervisor.restarts == 1 and node.supervisor.pid == pid and node.signal().ready
    assert node.tree() == after | {str(node.dropin.relative_to(node.base)): crio.dropin(wrapper_path).encode()}

    # the uninstall request on its Node: undone, answered, signal withdrawn, the host as found, one restart
    node.k8s.node_metadata.patch_node_metadata(crio_host.NODE, annotations=uninstall.render_request("u1"))
    runtime.wake()
    runtime.tick()
    annotations = node.k8s.api.get("v1", "Node", crio_host.NODE)["metadata"]["annotations"]
    assert uninstall.answers(annotations) == {"container-runtime": uninstall.Done("u1")}
    assert node.signal() is None
    assert node.supervisor.restarts == 2
    assert set(node.handlers()) == {"runc"}
    assert node.tree() == before  # byte for byte, no directory left behind
    runtime.wake()
    runtime.tick()  # stays uninstalled
    assert node.tree() == before and node.supervisor.restarts == 2


@pytest.mark.parametrize("how", ["removed", "changed"])
def test_a_dropin_someone_removed_or_changed_is_written_again_with_an_event(started: CrioNode, how: str) -> None:
    node = started
    runtime = node.agent()
    runtime.tick()
    ours = node.dropin.read_text()
    pid = node.supervisor.pid
    if how == "removed":
        node.dropin.unlink()
    else:
        node.dropin.write_text(ours.replace("/run/runc", "/run/other"))
    runtime.tick()  # the stat changed: the round runs at once
    assert node.dropin.read_text() == ours
    assert "RuntimeConfigRepaired" in node.reasons()
    assert node.supervisor.restarts == 1 and node.supervisor.pid == pid  # the daemon kept the handler: no restart
    assert node.signal().ready
    assert node.handlers()["metax"]["runtime_root"] == "/run/runc"


def test_a_dropin_written_before_the_agent_was_killed_is_not_called_a_repair(started: CrioNode) -> None:
    """A record with no drop-in on disk is also what a first write killed before its rename leaves: a new
    agent cannot tell that from a removal, so it writes the drop-in without an Event."""
    node = started
    node.agent().tick()
    node.dropin.unlink()
    node.agent().tick()
    assert node.dropin.is_file() and "RuntimeConfigRepaired" not in node.reasons()
    assert node.supervisor.restarts == 1


@pytest.mark.parametrize("why", ["an administrator's later drop-in names another metax", "a broken crio.conf"])
def test_a_configuration_the_dry_run_refuses_is_taken_back_and_nothing_restarts(crio: CrioNode, why: str) -> None:
    node = _started(crio)
    if why.startswith("a broken"):
        node.config.write_text(node.admin_config() + "[crio.runtime\n")
        refused = node.crio_config()
        assert refused.returncode != 0 and "crio.conf" in refused.stderr  # the real dry run says which file
    else:
        (node.config_dir / "99-zz-admin.conf").write_text("[crio.runtime.runtimes.metax]\nruntime_path = '/bin/true'\n")
    before = node.tree()
    pid = node.supervisor.pid
    node.agent().tick()
    signal = node.signal()
    assert not signal.ready and "does not load the configuration" in signal.reason
    assert "RuntimeConfigInvalid" in node.reasons()
    assert node.supervisor.pid == pid and node.supervisor.restarts == 0
    assert _without_wrapper(node.tree()) == before  # the drop-in and the record are gone again
    assert set(node.handlers()) == {"runc"}


def test_a_restart_that_does_not_come_up_is_rolled_back_once(started: CrioNode) -> None:
    node = started
    before = node.tree()
    node.supervisor.fail_starts = 1  # the next start exits at once
    runtime = node.agent(restart_wait=3.0)
    runtime.tick()
    signal = node.signal()
    assert not signal.ready and "previous configuration was restored" in signal.reason
    assert "RuntimeRestartFailed" in node.reasons()
    assert node.supervisor.restarts == 2  # ours, then the rollback's
    assert set(node.handlers()) == {"runc"}
    assert _without_wrapper(node.tree()) == before
    runtime.wake()
    runtime.tick()  # the same inputs are not tried again
    assert node.supervisor.restarts == 2


class Killed(BaseException):
    pass


STEPS = ("backup", "write drop-in", "validate", "restart")


@pytest.mark.parametrize("step", STEPS)
def test_killed_after_a_step_converges_on_restart(
    started: CrioNode, monkeypatch: pytest.MonkeyPatch, step: str
) -> None:
    node = started
    before = node.tree()
    owner, name = {
        "backup": (runtime_files.Ledger, "save"),
        "write drop-in": (runtime_files.HostFiles, "write"),
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
    assert "metax" in node.handlers()
    rec = record.parse((node.state_dir / record.FILE_NAME).read_text())
    entry = rec.file(str(node.dropin))
    assert entry is not None and entry.owned and entry.before is None
    assert "RuntimeConfigRepaired" not in node.reasons()
    assert again.crio.uninstall() == [] and again._remove_wrapper(again.crio) == []
    assert node.supervisor.restarts == 2 and set(node.handlers()) == {"runc"}
    assert node.tree() == before


# -- containers through the handler ------------------------------------------------------------------------------


@attrs.frozen
class Pod:
    """A pod sandbox as the kubelet makes it for a pod that does not share its process namespace (PID namespace
    mode CONTAINER: CRI-O then runs no infra container, pinns holds its namespaces), on the node's network."""

    node: CrioNode
    id: str
    config: bytes

    @classmethod
    def run(cls, node: CrioNode, name: str, runtime_handler: str = "") -> Pod:
        where: dict[str, Any] = {
            "log_dir": str(node.log_dir),
            "cgroup_parent": node.cgroup_parent,
            "pid": cri.CONTAINER,
        }
        sandbox = cri.run_pod_sandbox(str(node.socket), name, handler=runtime_handler, **where)
        return cls(node, sandbox, cri.sandbox_config(name, **where))

    def create(self, name: str, command: list[str], **extra: Any) -> str:
        socket = str(self.node.socket)
        return cri.create_container(
            socket, self.id, self.config, name, image=images.BUSYBOX_IMAGE, command=command, pid=cri.CONTAINER, **extra
        )

    def start(self, name: str, command: list[str], **extra: Any) -> str:
        container = self.create(name, command, **extra)
        cri.start_container(str(self.node.socket), container)
        return container

    def output(self, name: str, container: str) -> tuple[int, list[str]]:
        """A container's exit code and output lines, once it exited."""
        status = cri.wait_exited(str(self.node.socket), container)
        return status.exit_code, cri.log_lines(self.node.log_dir / f"{name}.log")

    def state(self, container: str) -> int:
        return cri.container_status(str(self.node.socket), container).state

    def remove(self) -> None:
        cri.remove_pod_sandbox(str(self.node.socket), self.id)


def _with_images(crio: CrioNode) -> CrioNode:
    node = _started(crio)
    node.import_images(harness_bin() / "pause")
    return node


def test_containers_through_the_metax_handler_get_their_devices_and_sdk(crio: CrioNode, tmp_path: pathlib.Path) -> None:
    node = _with_images(crio)
    containerd_host.gpu_cdi_spec(node.base, node.cdi_dir)  # gpu-device's spec for one GPU, in cdi_spec_dirs
    sdk = runtime_agent.sdk_side(tmp_path / "maca", crio_host.NODE, VERSIONS)
    try:
        # a pod of the node's default runtime runs before the agent restarts CRI-O, and keeps running after
        plain = Pod.run(node, "plain")
        sleeper = plain.start("sleeper", SLEEPER)
        assert plain.state(sleeper) == cri.RUNNING

        # the agent installs the REAL wrapper (its .conf: the harness's runc, the edit service's socket)
        runtime = node.agent(
            wrapper_source=str(wrapper.build()), wrapper_runc=str(node.runc), edit_socket=str(sdk.socket)
        )
        runtime.tick()
        signal = node.signal()
        assert signal.ready, signal.reason
        assert node.supervisor.restarts == 1
        assert plain.state(sleeper) == cri.RUNNING  # held by its conmon across the restart

        # what the kubelet sends for a pod with runtimeClassName: metax whose container asks for a GPU: the
        # environment and the CDI device gpu-device's Allocate answered, and the pod's METAX_MACA_VERSION
        pod = Pod.run(node, "gpu", handler.RUNTIME_HANDLER)
        allocated: dict[str, Any] = {
            "envs": {"METAX_VISIBLE_DEVICES": DEVICE.replace("-", ":", 2)},
            "cdi_devices": [cdi.qualified_name(DEVICE)],
        }
        script = (
            "cat /opt/maca/version; echo PATH=$PATH; maca-version; stat -c '%n %F %t:%T' /dev/dri/card7 /dev/mxcd; "
            "touch /opt/maca/x 2>&1 | sed 's/^/TOUCH /'"
        )
        asks = {**allocated, "envs": {**allocated["envs"], "METAX_MACA_VERSION": "maca-2.18"}}
        code, lines = pod.output("sdk", pod.start("sdk", ["sh", "-c", script], **asks))
        assert code == 0, lines
        null = os.stat("/dev/null").st_rdev
        assert lines[0] == "2.18.0.3"  # the SDK the prefix chose, from the real edit service and maca agent
        assert lines[1].startswith("PATH=") and lines[1].endswith(":/opt/maca/bin:/opt/maca/mxgpu_llvm/bin")
        assert lines[2] == "MXMACA 2.18.0.3"
        assert lines[3:5] == [  # its devices, injected by CRI-O's CDI before the wrapper
            f"/dev/dri/card7 character special file {os.major(null):x}:{os.minor(null):x}",
            f"/dev/mxcd character special file {os.major(null):x}:{os.minor(null):x}",
        ]
        assert lines[5].startswith("TOUCH ") and "Read-only file system" in lines[5]

        # a bad prefix: the create fails with the edit service's one line, nothing runs
        bad = {**allocated, "envs": {**allocated["envs"], "METAX_MACA_VERSION": "maca-3"}}
        with pytest.raises(grpc.RpcError, match="no installed MXMACA version matches") as refused:
            pod.create("bad", ["true"], **bad)
        assert "METAX_MACA_VERSION='maca-3'" in str(refused.value) and "2.18.0.3, 2.9.1" in str(refused.value)

        # a container without a GPU on the same handler runs untouched
        untouched = pod.start(
            "plain", ["sh", "-c", "test -e /opt/maca || echo NO-SDK"], envs={"METAX_MACA_VERSION": "maca-2"}
        )
        assert pod.output("plain", untouched) == (0, ["NO-SDK"])

        # the pod goes (as the kubelet removes it), then the uninstall: handler and wrapper gone, one more restart
        pod.remove()
        assert runtime.crio.uninstall() == [] and runtime._remove_wrapper(runtime.crio) == []
        assert node.supervisor.restarts == 2 and "metax" not in node.handlers() and not node.wrapper.exists()
        assert plain.state(sleeper) == cri.RUNNING  # two restarts later, the same container
    finally:
        sdk.close()


def test_uninstall_keeps_what_a_pod_still_on_the_handler_needs(crio: CrioNode) -> None:
    """A pod still on the handler when the uninstall request comes (docs/container-runtime.md "pods still on the
    handler at uninstall"): the agent sees it (CRI-O's ListPodSandbox leaves ``runtime_handler`` empty: the verbose
    PodSandboxStatus names it) and undoes nothing, since a CRI-O restarted without the handler cannot stop the pod;
    the pod still stops, and the next uninstall round undoes everything."""
    node = _with_images(crio)
    runtime = node.agent()
    runtime.tick()
    assert node.signal().ready
    pod = Pod.run(node, "gpu", handler.RUNTIME_HANDLER)
    try:
        container = pod.start("app", SLEEPER)
        assert pod.state(container) == cri.RUNNING and "create" in node.calls.read_text()  # through the wrapper
        assert runtime.crio.sandboxes() == [pod.id]
        restarts = node.supervisor.restarts
        kept = runtime.crio.uninstall()
        assert kept and "still run with runtime handler metax" in kept[0]
        kept = runtime._remove_wrapper(runtime.crio)
        assert kept and node.wrapper.is_file() and node.dropin.is_file()
        assert node.supervisor.restarts == restarts
    finally:
        pod.remove()  # the kubelet stops and removes the pod later: it must still work
    assert runtime.crio.sandboxes() == []
    assert runtime.crio.uninstall() == [] and runtime._remove_wrapper(runtime.crio) == []
    assert not node.dropin.exists() and not node.wrapper.exists()


def test_a_write_killed_midway_leaves_nothing_crio_reads(started: CrioNode, tmp_path: pathlib.Path) -> None:
    """CRI-O reads every file of crio.conf.d, hidden ones too (test_crio_contract: a truncated temporary there stops
    it from starting): the agent's temporary is made beside the directory and renamed in. Killed outright (SIGKILL)
    between writing it and the rename, the agent leaves it outside crio.conf.d, and the real ``crio config`` loads."""
    node = started
    script = (
        "import os, pathlib, signal\n"
        "from metax_hw import runtime_files as files\n"
        "hf = files.HostFiles(pathlib.Path('/'))\n"
        f"hf.stage_outside({str(node.config_dir)!r})\n"
        "os.replace = lambda *a: os.kill(os.getpid(), signal.SIGKILL)\n"
        f"hf.write({str(node.dropin)!r}, '[crio.runtime]\\n# half of it')\n"
    )
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, check=False)
    assert done.returncode == -9, done.stderr
    assert [p.name for p in node.config_dir.iterdir() if p.name.startswith(".")] == []
    left = [p for p in node.etc.iterdir() if p.name.startswith(f".{node.dropin.name}.")]
    assert len(left) == 1 and left[0].read_text() == "[crio.runtime]\n# half of it"
    _effective(node)  # loads
    runtime = node.agent()
    runtime.tick()  # the next round removes the leftover and configures
    assert node.signal().ready and not left[0].exists()
