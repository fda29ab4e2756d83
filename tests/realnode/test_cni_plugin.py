"""The minimal CNI plugin speaks CNI as containerd calls it (``CNI_COMMAND`` + config on stdin):

- VERSION lists the versions it supports;
- ADD brings ``lo`` up in the pod's network namespace, creates a veth pair (``eth0`` in the pod, the node's
  prefix + a hash on the host) with the next free /32 of the node's range (leases survive in files, one per
  address; the same container gets the same address), a default route through the gateway the host end
  carries, and the host's route to the pod: a process in the namespace reaches the host's gateway address
  and the host reaches the pod's;
- as ``loopback`` (containerd's own loopback network) ADD reports ``lo`` with 127.0.0.1;
- DEL releases the lease and removes the host end; CHECK, STATUS and GC succeed; an unknown command is a CNI
  error object.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from metax_dev.realnode import cni

pytestmark = pytest.mark.realnode


@pytest.fixture
def netns(tmp_path: Path) -> Iterator[Path]:
    """A fresh network namespace bound to a file (``lo`` down), removed afterwards."""
    path = tmp_path / "netns"
    path.touch()
    subprocess.run(["unshare", f"--net={path}", "true"], check=True)
    try:
        yield path
    finally:
        subprocess.run(["umount", str(path)], check=False)


def run_plugin(
    bin_dir: Path, name: str, command: str, conf: dict[str, object], **env: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(bin_dir / name)],
        input=json.dumps(conf),
        env={**os.environ, "CNI_COMMAND": command, **env},
        capture_output=True,
        text=True,
        check=False,
        timeout=30,
    )


def lo_state(netns: Path) -> str:
    done = subprocess.run(
        ["nsenter", f"--net={netns}", "ip", "-o", "link", "show", "lo"], capture_output=True, text=True, check=True
    )
    return "UP" if "UP" in done.stdout.split(">")[0] else "DOWN"


#: A /24 of the real nodes' range that the test claims like a node (a blackhole route) while it runs.
SUBNET = "198.19.255.0/24"


@pytest.fixture
def subnet() -> Iterator[str]:
    subprocess.run(["ip", "route", "add", "blackhole", SUBNET], check=True)
    try:
        yield SUBNET
    finally:
        subprocess.run(["ip", "route", "del", "blackhole", SUBNET], check=True)


def link_exists(name: str) -> bool:
    return subprocess.run(["ip", "link", "show", name], capture_output=True, check=False).returncode == 0


def test_add_plumbs_a_routed_veth_and_leases_addresses(tmp_path: Path, netns: Path, subnet: str) -> None:
    cni.install(tmp_path / "bin", tmp_path / "conf", tmp_path / "leases", subnet, "198.19.255.1", "mxrtest")
    conf = json.loads((tmp_path / "conf/10-metax-test.conflist").read_text())
    plugin_conf = {"cniVersion": conf["cniVersion"], "name": conf["name"], **conf["plugins"][0]}
    assert lo_state(netns) == "DOWN"

    first = run_plugin(
        tmp_path / "bin", cni.PLUGIN, "ADD", plugin_conf, CNI_NETNS=str(netns), CNI_CONTAINERID="a", CNI_IFNAME="eth0"
    )
    assert first.returncode == 0, first.stdout + first.stderr
    result = json.loads(first.stdout)
    host_end = cni.host_veth("mxrtest", "a")
    assert result["interfaces"] == [{"name": host_end}, {"name": "eth0", "sandbox": str(netns)}]
    assert result["ips"] == [{"address": "198.19.255.2/32", "gateway": "198.19.255.1", "interface": 1}]
    assert lo_state(netns) == "UP" and link_exists(host_end)
    assert Path(f"/proc/sys/net/ipv4/conf/{host_end}/route_localnet").read_text().strip() == "1"
    # Both ways: the pod reaches the gateway address (the host), the host reaches the pod's address.
    ping = ["busybox", "ping", "-c", "1", "-W", "2"]  # busybox-static (README packages)
    to_host = subprocess.run(["nsenter", f"--net={netns}", *ping, "198.19.255.1"], capture_output=True, check=False)
    assert to_host.returncode == 0, to_host.stdout
    to_pod = subprocess.run([*ping, "198.19.255.2"], capture_output=True, check=False)
    assert to_pod.returncode == 0, to_pod.stdout

    again = run_plugin(tmp_path / "bin", cni.PLUGIN, "ADD", plugin_conf, CNI_NETNS=str(netns), CNI_CONTAINERID="a")
    other = run_plugin(tmp_path / "bin", cni.PLUGIN, "ADD", plugin_conf, CNI_NETNS=str(netns), CNI_CONTAINERID="b")
    assert json.loads(again.stdout)["ips"][0]["address"] == "198.19.255.2/32"
    assert other.returncode == 1 and "File exists" in other.stdout  # one eth0 per namespace
    assert json.loads(other.stdout)["msg"].startswith(cni.PLUGIN)

    deleted = run_plugin(tmp_path / "bin", cni.PLUGIN, "DEL", plugin_conf, CNI_NETNS=str(netns), CNI_CONTAINERID="a")
    assert deleted.returncode == 0 and deleted.stdout == ""
    assert not link_exists(host_end)
    assert sorted(p.name for p in (tmp_path / "leases").iterdir() if p.name[0].isdigit()) == ["198.19.255.3"]


def test_loopback_network_version_and_errors(tmp_path: Path, netns: Path) -> None:
    cni.install(tmp_path / "bin", tmp_path / "conf", tmp_path / "leases", SUBNET, "198.19.255.1", "mxrtest")
    lo_conf = {"cniVersion": "1.0.0", "name": "cni-loopback", "type": "loopback"}
    added = run_plugin(tmp_path / "bin", cni.LOOPBACK_PLUGIN, "ADD", lo_conf, CNI_NETNS=str(netns), CNI_CONTAINERID="x")
    assert json.loads(added.stdout)["ips"] == [{"address": "127.0.0.1/8", "interface": 0}]
    assert lo_state(netns) == "UP"

    version = run_plugin(tmp_path / "bin", cni.PLUGIN, "VERSION", {})
    assert "1.0.0" in json.loads(version.stdout)["supportedVersions"]
    for command in ("CHECK", "STATUS", "GC"):
        assert run_plugin(tmp_path / "bin", cni.PLUGIN, command, lo_conf).returncode == 0
    bad = run_plugin(tmp_path / "bin", cni.PLUGIN, "FROB", lo_conf)
    assert bad.returncode == 1
    assert json.loads(bad.stdout)["code"] == 999 and "FROB" in json.loads(bad.stdout)["msg"]
