"""A launcher killed outright (SIGKILL) leaves the containers' cgroups and the pod network behind; its processes
die with it (the control plane by parent-death signal, and every process of a node, containers and shims
included, with the node's PID namespace, whose init is the namespace holder, which dies by parent-death signal);
``python -m metax_dev.realnode down`` finds its work dir and removes what is left: no process of it, no container
or tracking cgroup, no pod network (the node's nat chain, its /24 claim, the pod's veth), the sysctls as before,
no work dir."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from metax_dev.controlplane import processes
from metax_dev.realnode import hygiene, launcher, podnet

from . import pods

pytestmark = pytest.mark.realnode

REPO = Path(__file__).resolve().parents[2]


def test_down_cleans_up_after_a_killed_launcher(tmp_path: Path) -> None:
    before = hygiene.snapshot(["/nonexistent-marker"])
    log = (tmp_path / "up.log").open("w+")
    up = subprocess.Popen(
        [sys.executable, "-m", "metax_dev.realnode", "up", "--nodes", "1"],
        cwd=REPO,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        text = pods.wait(
            lambda: Path(log.name).read_text() if "Ctrl-C" in Path(log.name).read_text() else "",
            "the launcher to come up",
            timeout=180,
        )
        kubeconfig = next(line.split("=", 1)[1] for line in text.splitlines() if line.startswith("export KUBECONFIG="))
        kubectl = next(line.split()[1] for line in text.splitlines() if line.startswith("kubectl:"))
        workdir = Path(next(line.split()[2] for line in text.splitlines() if line.startswith("work dir:")))
        pod = pods.busybox_pod("orphan", "real-node-0", "sleep 3600")
        subprocess.run(
            [kubectl, f"--kubeconfig={kubeconfig}", "apply", "-f", "-"],
            input=json.dumps(pod),
            text=True,
            check=True,
            capture_output=True,
        )
        pods.wait(
            lambda: (
                "Running"
                in subprocess.run(
                    [kubectl, f"--kubeconfig={kubeconfig}", "get", "pod", "orphan", "-o", "jsonpath={.status.phase}"],
                    capture_output=True,
                    text=True,
                    check=False,
                ).stdout
            ),
            "pod orphan Running",
        )
        containers = workdir / "real-node-0/containerd/state/io.containerd.runtime.v2.task/k8s.io"
        ids = sorted(p.name for p in containers.iterdir())
        network = podnet.PodNetwork(**json.loads((workdir / "real-node-0" / podnet.RECORD).read_text()))
    finally:
        os.kill(up.pid, signal.SIGKILL)
        up.wait()
        log.close()

    # the node's processes, its shims and containers too, die with its PID namespace
    pods.wait(lambda: not hygiene.snapshot([str(workdir)]).processes, "every process of the node gone")
    # what is left is the reason for `down`: the containers' cgroup directories and the pod network
    assert ids and any((h / "k8s.io" / i).exists() for h in hygiene.hierarchies() for i in ids)
    assert any(network.chain in rule for rule in podnet.host_state()["iptables"])  # left by the killed launcher

    done = subprocess.run(
        [sys.executable, "-m", "metax_dev.realnode", "down"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert f"cleaned up after launcher pid {up.pid}: {workdir}" in done.stdout
    pods.wait(lambda: not hygiene.snapshot([str(workdir)]).processes, "no process of the killed launcher")
    after = hygiene.snapshot([str(workdir)])
    assert not [str(h / "k8s.io" / i) for h in hygiene.hierarchies() for i in ids if (h / "k8s.io" / i).exists()]
    assert not (hygiene.tracking_hierarchy() / hygiene.TRACKING_DIR / f"{workdir.name}-real-node-0").exists()
    assert after.sysctls == before.sysctls
    assert after.mounts == before.mounts
    assert not workdir.exists()
    state = podnet.host_state()
    assert not [r for r in state["iptables"] if network.chain in r], state
    assert not [r for r in state["routes"] if network.subnet in r], state
    assert not [link for link in state["links"] if link.startswith(network.veth_prefix)], state
    processes.reap_stale_workdirs(Path("/tmp"))  # the killed control plane's own work dir
    assert launcher.reap_stale() == []
