"""One call that wires every real adapter to one host root: `open_host(root) -> Host`.

Why: services, the CLI and the fake host all need the same bundle (inventory, binder, modules, monitor,
firmware, network) built the same way, with the same root, writer, tool search path and timeouts. Keeping
the wiring here means `metax_hw_fake` swaps exactly two things — the sysfs write primitive and the tools on
the search path — and everything else under test is the production code.
"""

from __future__ import annotations

import enum
from collections.abc import Collection, Sequence
from pathlib import Path

import attrs

from metax_core import inventory
from metax_hw import binding, gpus, kmod, net, pci, sysfs, tools


class NetSource(enum.Enum):
    AUTO = "auto"
    """pyroute2 when the root is ``/`` (same network namespace as the host), sysfs otherwise."""
    PYROUTE2 = "pyroute2"
    SYSFS = "sysfs"


@attrs.frozen
class Host:
    """The hardware port of one node, every part backed by the real adapter on ``root``."""

    root: Path
    tree: sysfs.HostTree
    devices: pci.SysfsDeviceInventory
    binder: binding.SysfsDriverBinder
    modules: kmod.ModprobeKernelModules
    monitor: gpus.MxSmiMonitor
    firmware: gpus.MxSmiFirmware
    network: net.PyrouteNetworkInterfaces


def open_host(
    root: Path | str = "/",
    *,
    vendor_id: int = inventory.METAX_VENDOR_ID,
    device_ids: Collection[int] | None = None,
    native_driver: str = inventory.METAX_MODULE,
    writer: sysfs.SysfsWriter | None = None,
    tool_path: Sequence[str] | None = None,
    module_tools: tools.ExecMode = tools.ExecMode.DIRECT,
    timeout: float = tools.DEFAULT_TIMEOUT,
    net_source: NetSource = NetSource.AUTO,
    link_source: net.LinkSource | None = None,
) -> Host:
    """Build the adapters for the host mounted at ``root``.

    ``vendor_id`` and ``device_ids`` say which PCI functions are managed (MetaX's vendor id, every device id,
    by default; see `pci.SysfsDeviceInventory`). ``tool_path`` replaces PATH for finding tools (None: the
    agent's PATH, and for mx-smi first the running driver's tools, `tools.driver_tools_path`). ``module_tools`` is
    `tools.ExecMode.HOST` in the driver container (host kmod through nsenter) and DIRECT elsewhere; mx-smi always
    runs DIRECT. ``link_source`` overrides where the interface list comes from.
    """
    tree = sysfs.mounted_tree(root, writer)
    devices = pci.SysfsDeviceInventory(tree, vendor_id, device_ids)
    smi_runner = tools.ToolRunner(
        tool_path if tool_path is not None else tools.driver_tools_path(tree.root), tools.ExecMode.DIRECT, timeout
    )
    kmod_runner = tools.ToolRunner(tool_path, module_tools, timeout)
    gpu_monitor = gpus.MxSmiMonitor(smi_runner, devices, native_driver)
    if link_source is not None:
        network = net.PyrouteNetworkInterfaces(tree, link_source)
    elif net_source is NetSource.PYROUTE2 or (net_source is NetSource.AUTO and tree.root == Path("/")):
        network = net.PyrouteNetworkInterfaces(tree)
    else:
        network = net.SysfsNetworkInterfaces(tree)
    return Host(
        root=tree.root,
        tree=tree,
        devices=devices,
        binder=binding.SysfsDriverBinder(tree, devices, native_driver),
        modules=kmod.ModprobeKernelModules(tree, kmod_runner, local_runner=smi_runner),
        monitor=gpu_monitor,
        firmware=gpus.MxSmiFirmware(smi_runner, devices, gpu_monitor),
        network=network,
    )
