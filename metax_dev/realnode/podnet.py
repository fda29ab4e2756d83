"""A real node's pod network: routed pod addresses, and the ``kubernetes`` Service reachable from pods.

Why this module exists: real pods of the product need what a cluster network gives them (docs/realnode.md, "The
pod network"): (a) reach the API server through their in-cluster configuration, i.e. the ``kubernetes``
Service's ClusterIP (``KUBERNETES_SERVICE_HOST``), and (b) be reached by the API server at their pod IP (the
operator's webhook behind its Service: the control plane dials a Ready EndpointSlice address, and loopback
addresses are refused there). So each node claims a /24 of 198.19.0.0/16 (the upper half of the RFC 2544
benchmarking range 198.18.0.0/15, never routed on the internet; process nodes take their /32s from the lower
half, `metax_dev.processnode.address`), the CNI plugin gives every pod a veth pair with a /32 of it
(`metax_dev.realnode.cni`), and one iptables chain of the node's own (nat PREROUTING, only for packets from its
pods' veths) translates the ``kubernetes`` ClusterIP:443 to the API server's loopback address and port, which is
what kube-proxy does for a Service. Why not kube-proxy itself: it programs the machine's shared
``KUBE-SERVICES`` chains for every Service of its cluster (two test sessions on one machine, each with a control
plane of the same service range, would overwrite each other) and needs the ``kubernetes`` Service's endpoints,
which this control plane cannot publish (it serves on 127.0.0.1, refused in EndpointSlices; it runs with
``--endpoint-reconciler-type=none``).

The claim is a ``blackhole`` route for the /24 (the kernel refuses a second one: that is the lock between
concurrent launchers; pod /32 routes through their veths are more specific); :func:`release` removes the
chain, its jump and the route; the pods' veths go with their network namespaces. Everything is recorded in
``<node dir>/network.json`` so that ``reap`` can undo it after a launcher killed outright. Needs root
(CAP_NET_ADMIN) and Debian's ``iptables`` and ``iproute2``.
"""

from __future__ import annotations

import ipaddress
import json
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Final

from metax_dev.realnode import errors

#: The pod ranges of real nodes: a /24 each.
RANGE: Final = ipaddress.ip_network("198.19.0.0/16")
#: Host-side veth names start with this plus the node's two hex digits (`PodNetwork.veth_prefix`).
VETH_PREFIX: Final = "mxr"
#: The node's nat chain is this plus the node's two hex digits.
CHAIN_PREFIX: Final = "MXRN-"
RECORD: Final = "network.json"


@dataclass(frozen=True)
class PodNetwork:
    """One node's pod network: its /24, the gateway address every host-side veth carries, the names."""

    subnet: str
    gateway: str
    veth_prefix: str
    chain: str
    service: str  # "<ClusterIP>:<port>" of the kubernetes Service
    apiserver: str  # "127.0.0.1:<port>"

    def rules(self) -> list[list[str]]:
        """The chain's rules (arguments after ``iptables -t nat -A <chain>``)."""
        ip, port = self.service.rsplit(":", 1)
        return [["-d", f"{ip}/32", "-p", "tcp", "--dport", port, "-j", "DNAT", "--to-destination", self.apiserver]]

    def jump(self) -> list[str]:
        return ["PREROUTING", "-i", f"{self.veth_prefix}+", "-j", self.chain]


def _run(command: Sequence[str], *, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(list(command), capture_output=True, text=True, check=False, timeout=30)
    if check and done.returncode != 0:
        raise errors.NodeError(f"{' '.join(command)} failed: {done.stderr.strip() or done.stdout.strip()}")
    return done


def iptables_path() -> str:
    """Debian's ``iptables`` (the real nodes' pod networks and air-gap fences need it)."""
    found = shutil.which("iptables")
    if found is None:
        raise errors.NodeError("iptables is not on PATH (Debian: iptables); real nodes' pod networks need it")
    return found


def claim(node_dir: Path, service: str, apiserver: str) -> PodNetwork:
    """Claim a free /24 for the node at ``node_dir`` and program its Service chain; recorded for `release`."""
    iptables = iptables_path()
    for subnet in RANGE.subnets(new_prefix=24):
        tag = f"{subnet.network_address.packed[2]:02x}"
        done = _run(["ip", "route", "add", "blackhole", str(subnet)], check=False)
        if done.returncode != 0:
            if "File exists" in done.stderr:
                continue  # another node's
            raise errors.NodeError(f"claiming {subnet} for pods: {done.stderr.strip()} (needs CAP_NET_ADMIN)")
        network = PodNetwork(
            subnet=str(subnet),
            gateway=str(subnet.network_address + 1),
            veth_prefix=f"{VETH_PREFIX}{tag}",
            chain=f"{CHAIN_PREFIX}{tag}",
            service=service,
            apiserver=apiserver,
        )
        (node_dir / RECORD).write_text(json.dumps(asdict(network)) + "\n")
        try:
            _run([iptables, "-w", "-t", "nat", "-N", network.chain])
            for rule in network.rules():
                _run([iptables, "-w", "-t", "nat", "-A", network.chain, *rule])
            _run([iptables, "-w", "-t", "nat", "-A", *network.jump()])
        except errors.NodeError:
            release(node_dir)
            raise
        return network
    raise errors.NodeError(f"no free /24 left in {RANGE} for a real node's pods")


def release(node_dir: Path) -> None:
    """Undo `claim` for the node at ``node_dir`` (nothing recorded: nothing to do); safe to call twice."""
    record = node_dir / RECORD
    if not record.is_file():
        return
    network = PodNetwork(**json.loads(record.read_text()))
    iptables = iptables_path()
    while _run([iptables, "-w", "-t", "nat", "-D", *network.jump()], check=False).returncode == 0:
        pass
    if _run([iptables, "-w", "-t", "nat", "-F", network.chain], check=False).returncode == 0:
        _run([iptables, "-w", "-t", "nat", "-X", network.chain])
    # The pods' /32 routes and veths went with their network namespaces; stragglers of a killed node too.
    for link in _our_links(network.veth_prefix):
        _run(["ip", "link", "del", link], check=False)
    _run(["ip", "route", "del", "blackhole", network.subnet], check=False)
    record.unlink()


def _our_links(prefix: str) -> list[str]:
    done = _run(["ip", "-o", "link", "show"], check=False)
    names = [line.split(":", 2)[1].strip().split("@", 1)[0] for line in done.stdout.splitlines() if ":" in line]
    return [n for n in names if n.startswith(prefix)]


def host_state() -> dict[str, list[str]]:
    """What of the real nodes' pod networks the host carries now: chains, jumps, routes, links (for hygiene
    checks: empty when no real node runs)."""
    iptables = shutil.which("iptables")
    rules = _run([iptables, "-w", "-t", "nat", "-S"], check=False).stdout.splitlines() if iptables else []
    routes = _run(["ip", "route", "show", "root", str(RANGE)], check=False).stdout.splitlines()
    return {
        "iptables": sorted(r for r in rules if CHAIN_PREFIX in r),
        "routes": sorted(routes),
        "links": sorted(_our_links(VETH_PREFIX)),
    }
