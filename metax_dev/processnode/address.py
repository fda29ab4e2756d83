"""The process node's own IPv4 address: a /32 on the loopback interface, outside 127.0.0.0/8.

Why this module exists: the API server refuses loopback addresses in EndpointSlices and Endpoints
(``ValidateEndpointIP`` in k8s.io/kubernetes pkg/apis/core/validation: "may not be in the loopback range"),
so a pod whose IP is 127.0.0.1 never gets an endpoint, and a webhook Service could not reach it even with
``--enable-aggregator-routing``. A process node therefore claims an address of the benchmarking range
198.18.0.0/16 (the lower half of the RFC 2544 range 198.18.0.0/15, never routed on the internet; real nodes'
pod networks use the upper half, `metax_dev.realnode.podnet`) on ``lo``: traffic to it never leaves the machine,
and its pods (host network) share it as their pod IP. The address carries the label ``lo:mx<pid>`` so that
a later node removes addresses whose owner died without cleaning up. The changes go through netlink (pyroute2)
and need CAP_NET_ADMIN (the test machines run as root, as the real-node tests do); without it the node fails
to start, saying so.
"""

from __future__ import annotations

import ipaddress
import os
import socket
from collections.abc import Iterator
from typing import Any

from pyroute2 import IPRoute
from pyroute2.netlink.exceptions import NetlinkError

from metax_dev.controlplane import processes

RANGE = ipaddress.ip_network("198.18.0.0/16")
LABEL_PREFIX = "lo:mx"


class AddressError(Exception):
    """The address could not be added or listed (netlink refused: usually no CAP_NET_ADMIN)."""


def _addresses(ipr: Any) -> Iterator[tuple[str, int, str]]:
    """(address, interface index, label) of every IPv4 address of this network namespace."""
    for message in ipr.get_addr(family=socket.AF_INET):
        yield message.get_attr("IFA_ADDRESS"), message["index"], message.get_attr("IFA_LABEL") or ""


def _change(ipr: Any, command: str, address: str, label: str | None = None) -> None:
    extra = {"label": label} if label else {}
    try:
        ipr.addr(command, index=ipr.link_lookup(ifname="lo")[0], address=address, prefixlen=32, **extra)
    except NetlinkError as exc:
        raise AddressError(f"{command} {address}/32 on lo: {exc} (the process node needs CAP_NET_ADMIN)") from exc


def ours() -> dict[str, int]:
    """Addresses on ``lo`` claimed by process nodes: address -> owner pid."""
    with IPRoute() as ipr:
        return {
            address: int(label[len(LABEL_PREFIX) :])
            for address, _, label in _addresses(ipr)
            if label.startswith(LABEL_PREFIX) and label[len(LABEL_PREFIX) :].isdigit()
        }


def reap_stale() -> None:
    """Remove addresses whose owner process is gone."""
    stale = [address for address, pid in ours().items() if not processes.pid_alive(pid)]
    with IPRoute() as ipr:
        for address in stale:
            _change(ipr, "del", address)


def claim() -> str:
    """A free address of `RANGE`, added to ``lo`` with this process's label."""
    reap_stale()
    pid = os.getpid()
    size = RANGE.num_addresses - 2
    start = (pid * 7919) % size + 1
    with IPRoute() as ipr:
        taken = {address for address, _, _ in _addresses(ipr)}
        for offset in range(size):
            candidate = str(RANGE[(start + offset) % size + 1])
            if candidate not in taken:
                _change(ipr, "add", candidate, f"{LABEL_PREFIX}{pid}")
                return candidate
    raise AddressError(f"no free address in {RANGE}")


def release(address: str) -> None:
    if address in ours():
        with IPRoute() as ipr:
            _change(ipr, "del", address)
