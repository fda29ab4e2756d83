"""An air-gapped real node: its own firewall counts and drops every new connection its processes and its pods open
to anything but the endpoints it may reach (issue 39 item 4; docs/realnode.md, "An air-gapped node").

Why this module exists: an administrator's air-gapped cluster reaches its private registry and its API server and
nothing else, and a defect that makes containerd, the kubelet or one of our pods reach for Docker Hub (an image
named without a registry, a pause image by tag, a default that dials out) only shows where nothing else is
reachable. A real node's processes share this machine's network namespace (docs/realnode.md, "What runs"), so the
fence is drawn around them instead: they join a cgroup v2 group of the node's own (``cgroup.procs`` of `cgroup_dir`,
beside the tracking cgroup of v1), and the ``mangle`` table sends every packet a socket of that group sends
(``OUTPUT -m cgroup --path``) and every packet the node's pods send (``PREROUTING -i`` their veths: before the
routing decision and the Service's DNAT, so a pod's packet to anywhere is seen) through one chain, ``MXAG-<node>``:
replies to connections others opened and new connections to the allowed endpoints (the API server and its
``kubernetes`` Service address, the test registry, the node's own containerd stream server) and to the node's own
pods (the kubelet's probes) pass; everything else is dropped, so nothing ever leaves the machine, and counted by the
chain's last rules (`dropped`). A test proves the fence is live by reaching for a TEST-NET address from inside it
(`probe`) and seeing the count grow.

Set up before the node's containerd starts (`seal`), recorded in ``<node dir>/airgap.json``, undone by `release`
(also by the reaper after a launcher killed outright). Needs root, Debian's ``iptables`` (the ``cgroup`` and
``conntrack`` matches) and a cgroup v2 hierarchy (hybrid: ``/sys/fs/cgroup/unified``).
"""

from __future__ import annotations

import contextlib
import json
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Final

from metax_dev.realnode import errors, hygiene, podnet

CHAIN_PREFIX: Final = "MXAG-"
TABLE: Final = "mangle"
RECORD: Final = "airgap.json"
CGROUP_PARENT: Final = "metax-realnode-airgap"
"""The v2 group every air-gapped node's own group is made under (``<v2 root>/metax-realnode-airgap/<node>``)."""
PROBE_ADDRESS: Final = "198.51.100.1"
"""RFC 5737's TEST-NET-2: never routed on the internet; what `probe` reaches for from inside the fence."""


def v2_root() -> Path:
    """The cgroup v2 hierarchy: ``/sys/fs/cgroup/unified`` on a hybrid host, ``/sys/fs/cgroup`` on a v2 one."""
    for root in hygiene.hierarchies():
        if (root / "cgroup.controllers").is_file() and root.is_relative_to(hygiene.CGROUP_ROOT):
            return root
    raise errors.NodeError("an air-gapped node needs a cgroup v2 hierarchy (none is mounted under /sys/fs/cgroup)")


@dataclass(frozen=True)
class Airgap:
    """One node's fence: its chain, its cgroup v2 group, its pods' veths and the endpoints it may reach."""

    chain: str
    cgroup: str
    """The group's path below the v2 root (what ``-m cgroup --path`` matches)."""
    cgroup_dir: str
    veth_prefix: str
    pod_subnet: str
    allowed: tuple[str, ...]
    """``IP:PORT`` of every endpoint the node may open a connection to."""

    def rules(self) -> list[list[str]]:
        """The chain's rules (arguments after ``iptables -A <chain>``); the last two drop and count."""
        passes = [["-m", "conntrack", "--ctstate", "ESTABLISHED,RELATED", "-j", "RETURN"]]
        for endpoint in self.allowed:
            ip, port = endpoint.rsplit(":", 1)
            passes.append(["-d", f"{ip}/32", "-p", "tcp", "--dport", port, "-j", "RETURN"])
        passes.append(["-d", self.pod_subnet, "-j", "RETURN"])
        return [*passes, ["-p", "tcp", "-j", "DROP"], ["-j", "DROP"]]

    def jumps(self) -> list[list[str]]:
        return [
            ["OUTPUT", "-m", "cgroup", "--path", self.cgroup, "-j", self.chain],
            ["PREROUTING", "-i", f"{self.veth_prefix}+", "-j", self.chain],
        ]


def _run(command: Sequence[str], *, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(list(command), capture_output=True, text=True, check=False, timeout=30)
    if check and done.returncode != 0:
        raise errors.NodeError(f"{' '.join(command)} failed: {done.stderr.strip() or done.stdout.strip()}")
    return done


def cgroup_dir(node_dir: Path) -> Path:
    """The node's cgroup v2 group (made by `make_cgroup`), named like its tracking cgroup."""
    return v2_root() / CGROUP_PARENT / f"{node_dir.parent.name}-{node_dir.name}"


def make_cgroup(node_dir: Path) -> Path:
    """The node's group, before its first process starts (every process of the node joins it)."""
    directory = cgroup_dir(node_dir)
    directory.mkdir(parents=True, exist_ok=True)
    return directory


def seal(node_dir: Path, network: podnet.PodNetwork, allowed: Sequence[str]) -> Airgap:
    """Program the node's fence (its group made by `make_cgroup`); recorded for `release`."""
    directory = cgroup_dir(node_dir)
    fence = Airgap(
        chain=network.chain.replace(podnet.CHAIN_PREFIX, CHAIN_PREFIX),
        cgroup=str(directory.relative_to(v2_root())),
        cgroup_dir=str(directory),
        veth_prefix=network.veth_prefix,
        pod_subnet=network.subnet,
        allowed=tuple(allowed),
    )
    (node_dir / RECORD).write_text(json.dumps(asdict(fence)) + "\n")
    iptables = podnet.iptables_path()
    try:
        _run([iptables, "-w", "-t", TABLE, "-N", fence.chain])
        for rule in fence.rules():
            _run([iptables, "-w", "-t", TABLE, "-A", fence.chain, *rule])
        for jump in fence.jumps():
            _run([iptables, "-w", "-t", TABLE, "-I", *jump])
    except errors.NodeError:
        release(node_dir)
        raise
    return fence


def _recorded(node_dir: Path) -> Airgap | None:
    record = node_dir / RECORD
    if not record.is_file():
        return None
    fields = json.loads(record.read_text())
    return Airgap(**{**fields, "allowed": tuple(fields["allowed"])})


def dropped(node_dir: Path) -> int:
    """Packets the node's fence dropped so far (the chain's two last rules), 0 for a node without one."""
    fence = _recorded(node_dir)
    if fence is None:
        return 0
    listing = _run([podnet.iptables_path(), "-w", "-t", TABLE, "-L", fence.chain, "-v", "-x", "-n"]).stdout.splitlines()
    drops = [line.split() for line in listing[2:] if line.split()[2:3] == ["DROP"]]
    return sum(int(fields[0]) for fields in drops)


def probe(wrap: Callable[[list[str]], list[str]]) -> None:
    """Reach for `PROBE_ADDRESS` from inside the fence: ``wrap`` makes a command one of the node's processes
    (`metax_dev.realnode.hostns.MountNamespace.wrap`); the connection must not be made."""
    code = (
        "import socket\n"
        "s = socket.socket()\n"
        "s.settimeout(1.0)\n"
        f"raise SystemExit(0 if s.connect_ex(({PROBE_ADDRESS!r}, 443)) == 0 else 1)\n"
    )
    done = subprocess.run(wrap(["python3", "-c", code]), capture_output=True, text=True, timeout=30, check=False)
    if done.returncode == 0:
        raise errors.NodeError(f"the air-gapped node reached {PROBE_ADDRESS}:443: its fence is not in place")


def release(node_dir: Path) -> None:
    """Undo `seal` and `make_cgroup` (after the node's processes are gone); safe to call twice."""
    fence = _recorded(node_dir)
    if fence is not None:
        iptables = podnet.iptables_path()
        for jump in fence.jumps():
            while _run([iptables, "-w", "-t", TABLE, "-D", *jump], check=False).returncode == 0:
                pass
        if _run([iptables, "-w", "-t", TABLE, "-F", fence.chain], check=False).returncode == 0:
            _run([iptables, "-w", "-t", TABLE, "-X", fence.chain])
        (node_dir / RECORD).unlink()
    if fence is not None:
        directory = Path(fence.cgroup_dir)
    else:  # sealing failed, or a reaper's look at any node: its group if one was made
        try:
            directory = cgroup_dir(node_dir)
        except errors.NodeError:
            return  # no cgroup v2 hierarchy: no group was ever made
    if directory.is_dir():
        hygiene.remove_cgroup(directory)
        with contextlib.suppress(OSError):  # another node's group may still be in it
            directory.parent.rmdir()


def host_state() -> list[str]:
    """The fences the host carries now (for hygiene checks: empty when no air-gapped node runs)."""
    rules = _run([podnet.iptables_path(), "-w", "-t", TABLE, "-S"], check=False).stdout.splitlines()
    return sorted(r for r in rules if CHAIN_PREFIX in r)
