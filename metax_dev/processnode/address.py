"""The process node's own IPv4 address: a /32 on the loopback interface, outside 127.0.0.0/8.

Why this module exists: the API server refuses loopback addresses in EndpointSlices and Endpoints
(``ValidateEndpointIP`` in k8s.io/kubernetes pkg/apis/core/validation: "may not be in the loopback range"),
so a pod whose IP is 127.0.0.1 never gets an endpoint, and a webhook Service could not reach it even with
``--enable-aggregator-routing``. A process node therefore claims an address of the benchmarking range
198.18.0.0/15 (RFC 2544: never routed on the internet) on ``lo``: traffic to it never leaves the machine,
and its pods (host network) share it as their pod IP. The address carries the label ``lo:mx<pid>`` so that
a later node removes addresses whose owner died without cleaning up. Needs CAP_NET_ADMIN (the test
machines run as root, as the real-node tests do); without it the node fails to start, saying so.
"""

from __future__ import annotations

import ipaddress
import os
import re
import subprocess

from metax_dev.controlplane import processes

RANGE = ipaddress.ip_network("198.18.0.0/15")
LABEL_PREFIX = "lo:mx"


class AddressError(Exception):
    """The address could not be added or listed (``ip`` failed: usually no CAP_NET_ADMIN)."""


def _ip(*args: str) -> str:
    try:
        done = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=10, check=False)
    except OSError as exc:
        raise AddressError(f"ip {' '.join(args)}: {exc} (the process node needs iproute2)") from exc
    if done.returncode != 0:
        raise AddressError(f"ip {' '.join(args)} failed: {done.stderr.strip()} (the process node needs CAP_NET_ADMIN)")
    return done.stdout


_LINE = re.compile(r"inet (\d+\.\d+\.\d+\.\d+)/32 .*?(lo:mx\d+)")


def ours() -> dict[str, int]:
    """Addresses on ``lo`` claimed by process nodes: address -> owner pid."""
    found = {}
    for line in _ip("-4", "-o", "addr", "show", "dev", "lo").splitlines():
        match = _LINE.search(line)
        if match:
            found[match.group(1)] = int(match.group(2)[len(LABEL_PREFIX) :])
    return found


def reap_stale() -> None:
    """Remove addresses whose owner process is gone."""
    for address, pid in ours().items():
        if not processes.pid_alive(pid):
            _ip("addr", "del", f"{address}/32", "dev", "lo")


def _taken() -> set[str]:
    taken = set()
    for line in _ip("-4", "-o", "addr", "show").splitlines():
        match = re.search(r"inet (\d+\.\d+\.\d+\.\d+)/", line)
        if match:
            taken.add(match.group(1))
    return taken


def claim() -> str:
    """A free address of `RANGE`, added to ``lo`` with this process's label."""
    reap_stale()
    taken = _taken()
    pid = os.getpid()
    start = (pid * 7919) % (RANGE.num_addresses - 2) + 1
    for offset in range(RANGE.num_addresses - 2):
        candidate = str(RANGE[(start + offset) % (RANGE.num_addresses - 2) + 1])
        if candidate in taken:
            continue
        _ip("addr", "add", f"{candidate}/32", "dev", "lo", "label", f"{LABEL_PREFIX}{pid}")
        return candidate
    raise AddressError(f"no free address in {RANGE}")


def release(address: str) -> None:
    if address in ours():
        _ip("addr", "del", f"{address}/32", "dev", "lo")
