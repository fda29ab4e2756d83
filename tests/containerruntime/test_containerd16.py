"""container-runtime on Debian's containerd 1.6 (config version 2, no CDI), a real daemon the test runs (C4, R-READY,
R-INSTALL): the agent configures it, restarts it once, the daemon reports the ``metax`` handler, a container
runs through the installed wrapper, and uninstall gives back the files byte for byte."""

from __future__ import annotations

import pathlib
import subprocess

import tomlkit

from metax_core.runtime import containerd, handler
from metax_dev.realnode import images

from .conftest import RuntimeNode

DEBIAN_STYLE = """# containerd as a distribution package ships it: only what differs from the defaults.
version = 2
{paths}
[plugins]
  [plugins."io.containerd.grpc.v1.cri"]
    restrict_oom_score_adj = true
    # the distribution's CNI plugins
    [plugins."io.containerd.grpc.v1.cri".cni]
      bin_dir = "/usr/lib/cni"
      conf_dir = "/etc/cni/net.d"
"""


def _configured(node: RuntimeNode) -> str:
    text = DEBIAN_STYLE.format(paths=node.daemon_paths())
    node.root_config.write_text(text)
    node.start()
    return text


def test_the_agent_configures_restarts_once_and_publishes_ready(containerd16: RuntimeNode) -> None:
    node = containerd16
    original = _configured(node)
    assert set(node.handlers()) == {"runc"}
    agent = node.agent()
    agent.tick()
    wrapper = str(node.toolkit / handler.WRAPPER_NAME)
    signal = node.signal()
    assert signal.ready, signal.reason
    assert node.supervisor.restarts == 1
    loaded = node.handlers()
    assert loaded["metax"]["options"]["BinaryName"] == wrapper
    assert set(loaded) == {"runc", "metax"}  # the drop-in replaced the CRI section and kept the default runtime
    assert "RuntimeConfigured" in node.reasons()
    # the root file gained only the import; the drop-in is at version 2 with the whole CRI section
    after = node.root_config.read_text()
    assert after.replace(f'imports = ["{containerd.dropin_path(str(node.root_config), 2)}"]\n', "") == original
    dropin = tomlkit.parse(pathlib.Path(containerd.dropin_path(str(node.root_config), 2)).read_text()).unwrap()
    cri = dropin["plugins"]["io.containerd.grpc.v1.cri"]
    assert dropin["version"] == 2 and cri["cni"]["bin_dir"] == "/usr/lib/cni" and "enable_cdi" not in cri
    # the daemon's CNI settings are still the root file's (1.x replaces whole sections: ours carries them)
    assert cri["restrict_oom_score_adj"] is True

    # a second round: nothing written, nothing restarted
    before = node.tree()
    pid = node.supervisor.pid
    agent.wake()
    agent.tick()
    assert node.tree() == before and node.supervisor.pid == pid and node.supervisor.restarts == 1


def test_a_container_runs_through_the_installed_wrapper(containerd16: RuntimeNode) -> None:
    node = containerd16
    _configured(node)
    node.agent().tick()
    assert node.signal().ready
    archives = images.write_test_images(node.base / "images", pause=images.BUSYBOX)
    ctr = node.supervisor.enter(
        [str(node.binary.parent / "ctr"), "--address", str(node.socket), "--namespace", "metax-runtime-test"]
    )
    for archive in archives:
        subprocess.run([*ctr, "images", "import", str(archive)], check=True, capture_output=True, timeout=60)
    wrapper = node.toolkit / handler.WRAPPER_NAME
    run = subprocess.run(
        [*ctr, "run", "--rm", "--runc-binary", str(wrapper), images.BUSYBOX_IMAGE, "metax-c1", "/bin/echo", "hello"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    try:
        assert run.returncode == 0, run.stderr + node.log_tail()
        assert run.stdout.strip() == "hello"
        assert "create" in node.calls.read_text()  # runc's create went through the wrapper
    finally:
        subprocess.run([*ctr, "containers", "rm", "metax-c1"], check=False, capture_output=True)
        _remove_cgroups("metax-runtime-test")


def _remove_cgroups(name: str) -> None:
    for hierarchy in pathlib.Path("/sys/fs/cgroup").iterdir():
        for directory in (hierarchy / name, hierarchy / "unified" / name):
            if directory.is_dir():
                for child in sorted(directory.rglob("*"), reverse=True):
                    if child.is_dir():
                        child.rmdir()
                directory.rmdir()


def test_uninstall_gives_the_files_back_byte_for_byte_and_restarts_once(containerd16: RuntimeNode) -> None:
    node = containerd16
    _configured(node)
    before = node.tree()
    agent = node.agent()
    agent.tick()
    assert node.signal().ready and node.tree() != before
    kept = agent.containerd.uninstall()
    assert kept == []
    assert node.supervisor.restarts == 2
    assert set(node.handlers()) == {"runc"}
    assert node.without_wrapper() == before


def test_an_administrators_edit_made_meanwhile_survives_uninstall(containerd16: RuntimeNode) -> None:
    node = containerd16
    original = _configured(node)
    agent = node.agent()
    agent.tick()
    edited = node.root_config.read_text().replace('conf_dir = "/etc/cni/net.d"', 'conf_dir = "/etc/cni/site.d"')
    node.root_config.write_text(edited)
    assert agent.containerd.uninstall() == []
    assert node.root_config.read_text() == original.replace("/etc/cni/net.d", "/etc/cni/site.d")
    assert not pathlib.Path(containerd.dropin_path(str(node.root_config), 2)).exists()


def test_the_uninstall_request_on_its_node_undoes_answers_and_leaves_the_host_as_found(
    containerd16: RuntimeNode,
) -> None:
    from metax_core.node import labels, uninstall

    node = containerd16
    _configured(node)
    before = node.tree()
    agent = node.agent()
    agent.tick()
    assert node.signal().ready
    ready_label = node.k8s.api.get("v1", "Node", "runtime-node")["metadata"]["labels"].get(labels.RUNTIME_READY)
    assert ready_label == labels.TRUE  # the readiness label docs/labels.md promises (issue 41 item 4)
    node.k8s.node_metadata.patch_node_metadata("runtime-node", annotations=uninstall.render_request("uid-1"))
    agent.wake()
    agent.tick()
    metadata = node.k8s.api.get("v1", "Node", "runtime-node")["metadata"]
    assert uninstall.answers(metadata["annotations"]) == {"container-runtime": uninstall.Done("uid-1")}
    assert labels.RUNTIME_READY not in (metadata.get("labels") or {})
    assert node.signal() is None  # withdrawn
    assert node.tree() == before  # drop-in, root edit, wrapper, toolkit and state directories: all gone
    assert not node.toolkit.exists() and not node.state_dir.exists()
    assert set(node.handlers()) == {"runc"} and node.supervisor.restarts == 2
    agent.wake()
    agent.tick()  # stays uninstalled: nothing configured again
    assert node.tree() == before and node.supervisor.restarts == 2


def test_a_daemon_its_administrator_stopped_is_not_started_by_the_agent(containerd16: RuntimeNode) -> None:
    node = containerd16
    _configured(node)
    agent = node.agent()
    agent.tick()
    assert node.signal().ready and node.supervisor.restarts == 1
    node.supervisor.stop()  # maintenance
    agent.wake()
    agent.tick()
    signal = node.signal()
    assert not signal.ready
    assert f"no container runtime socket found; looked for containerd ({node.socket})" in signal.reason
    assert node.supervisor.pid is None and node.supervisor.restarts == 1
    node.start()  # the administrator starts it again: it reads our files, no restart of ours needed
    agent.wake()
    agent.tick()
    assert node.signal().ready and node.supervisor.restarts == 1


def test_a_pod_sandbox_through_the_metax_handler_runs_the_wrapper(containerd16: RuntimeNode) -> None:
    """What the kubelet does for a pod with ``runtimeClassName: metax``: CRI RunPodSandbox with runtime handler
    ``metax`` (host network, so no CNI); containerd 1.6 starts its pause container through the wrapper."""
    from metax_dev.containerd_host import harness_bin

    from . import cri

    node = containerd16
    text = DEBIAN_STYLE.format(paths=node.daemon_paths()).replace(
        "    restrict_oom_score_adj = true\n",
        f'    restrict_oom_score_adj = true\n    sandbox_image = "{images.PAUSE_IMAGE}"\n',
    )
    node.root_config.write_text(text)
    node.start()
    node.agent().tick()
    assert node.signal().ready
    ctr = node.supervisor.enter(
        [str(node.binary.parent / "ctr"), "--address", str(node.socket), "--namespace", "k8s.io"]
    )
    for archive in images.write_test_images(node.base / "images", pause=harness_bin() / "pause"):
        subprocess.run([*ctr, "images", "import", str(archive)], check=True, capture_output=True, timeout=60)
    (node.base / "logs").mkdir()
    sandbox = ""
    try:
        sandbox = cri.run_pod_sandbox(
            str(node.socket), "metax-pod", handler="metax", log_dir=str(node.base / "logs"),
            cgroup_parent="/metax-runtime-test",
        )  # fmt: skip
        assert node.agent().containerd.sandboxes() == [sandbox]
        calls = node.calls.read_text()
        assert "create" in calls and sandbox in calls  # the pause container was created by the wrapper
    finally:
        if sandbox:
            cri.remove_pod_sandbox(str(node.socket), sandbox)
        _remove_cgroups("metax-runtime-test")
