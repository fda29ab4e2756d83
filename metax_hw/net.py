"""The node's network interfaces and where they sit (PCI function, NUMA node), for GPU-NIC affinity.

Why: the topology worker (C7) pairs GPUs with the NICs on the same switch or NUMA node. The link list
comes from one of two sources, and which one is right depends on the pod, not on taste:

- pyroute2 (`pyroute2_links`, an RTM_GETLINK dump) sees the network namespace the agent runs in. That is
  the host's only on a bare host or with hostNetwork — and no MetaX component has hostNetwork (000 Table
  1.3.1), so inside a pod it would list the pod's veth.
- sysfs (`sysfs_links`) lists ``<root>/sys/class/net``, which shows the namespace of whoever mounted that
  sysfs: the host's, when the pod mounts the host's ``/sys``. The fake host uses this source too.

`metax_hw.host.open_host` picks pyroute2 for root ``/`` and sysfs otherwise. Placement always comes from
``<root>/sys/class/net/<if>/device``, resolved to the nearest PCI function (virtio NICs sit one level below
theirs).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

import attrs

from metax_core import errors
from metax_core.inventory import NetworkInterface, PciAddress
from metax_core.wire import host
from metax_hw import pci, sysfs

logger = logging.getLogger(__name__)

_OP = "list network interfaces"
IFF_UP = 0x1


@attrs.frozen
class LinkInfo:
    """What the link source knows: name, MAC, administratively up."""

    name: str
    mac: str | None = None
    up: bool = False


LinkSource = Callable[[], Sequence[LinkInfo]]


def pyroute2_links() -> list[LinkInfo]:
    """An RTM_GETLINK dump of the agent's network namespace."""
    from pyroute2 import (
        IPRoute,  # imported here: pyroute2 opens nothing at import, but keep startup light
    )

    links: list[LinkInfo] = []
    try:
        with IPRoute() as ipr:
            for message in ipr.get_links():
                name = message.get_attr("IFLA_IFNAME")
                if not name:
                    continue
                mac = message.get_attr("IFLA_ADDRESS")
                flags = int(message["flags"])
                links.append(LinkInfo(name=str(name), mac=str(mac) if mac else None, up=bool(flags & IFF_UP)))
    except OSError as exc:
        raise errors.HardwareError(_OP, None, f"netlink link dump failed: {sysfs.describe_os_error(exc)}") from exc
    return links


def sysfs_links(tree: sysfs.HostTree) -> list[LinkInfo]:
    """``<root>/sys/class/net/*``: name, ``address`` and the IFF_UP bit of ``flags``."""
    base = tree.path(host.NET_CLASS_DIR)
    links: list[LinkInfo] = []
    for name in tree.listdir(base):
        mac = tree.read(base / name / "address", operation=_OP, device=name)
        flags = tree.read_int(base / name / "flags", operation=_OP, device=name)
        links.append(LinkInfo(name=name, mac=mac or None, up=bool((flags or 0) & IFF_UP)))
    return links


class PyrouteNetworkInterfaces:
    """`metax_core.ports.hardware.NetworkInterfaces`: links from a source (pyroute2 by default), placement
    from sysfs."""

    def __init__(self, tree: sysfs.HostTree, source: LinkSource | None = None) -> None:
        self.tree = tree
        self.source: LinkSource = source if source is not None else pyroute2_links

    def interfaces(self) -> Sequence[NetworkInterface]:
        found: list[NetworkInterface] = []
        for link in self.source():
            path = self.pci_path(link.name)
            address = path[-1] if path else None
            numa = None
            if address is not None:
                numa = self.tree.read_int(
                    self.tree.path(pci.PCI_DEVICES) / address / "numa_node", operation=_OP, device=link.name
                )
            found.append(
                NetworkInterface(
                    name=link.name,
                    pci_address=address,
                    numa_node=numa if numa is not None and numa >= 0 else None,
                    mac=link.mac,
                    up=link.up,
                    pcie_path=path[:-1],
                )
            )
        return sorted(found, key=lambda i: i.name)

    def pci_address(self, name: str) -> PciAddress | None:
        """The PCI function behind an interface: the last PCI address on its resolved ``device`` path."""
        path = self.pci_path(name)
        return path[-1] if path else None

    def pci_path(self, name: str) -> tuple[PciAddress, ...]:
        """Every PCI address on the interface's resolved ``device`` path, root port first (empty: none)."""
        device = self.tree.path(host.NET_CLASS_DIR) / name / "device"
        if not device.is_symlink() and not device.exists():
            return ()
        try:
            resolved = self.tree.resolve(device)
        except OSError as exc:
            raise errors.HardwareError(_OP, name, sysfs.describe_os_error(exc)) from exc
        addresses = [p for p in resolved.relative_to(self.tree.root).parts if pci.is_pci_address(p)]
        return tuple(PciAddress(a) for a in addresses)


class SysfsNetworkInterfaces(PyrouteNetworkInterfaces):
    """The same, with the link list read from ``<root>/sys/class/net`` (the right source inside a pod)."""

    def __init__(self, tree: sysfs.HostTree) -> None:
        super().__init__(tree, source=lambda: sysfs_links(tree))
