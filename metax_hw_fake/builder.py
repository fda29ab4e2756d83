"""Declarative construction of a fake GPU server: `FakeHostBuilder().gpus(8).host_driver("2.18.0").build(dir)`.

Why: every test and every demo node needs a plausible host — GPUs behind PCIe switches on several NUMA
nodes, each in its own IOMMU group, SR-IOV capable, a NIC next to them, an installed or absent host driver,
firmware images — and building it by hand in each test would make the fakes drift apart. Everything is laid
out as the kernel lays it out (``/sys/devices/pci0000:80/0000:80:01.0/0000:81:00.0/...`` with relative links
from ``/sys/bus/pci/devices``), and loading the host driver or enabling VFs at build time goes through the
same fake-kernel code that the adapter's writes and the fake tools use later.
"""

from __future__ import annotations

import shlex
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Self

import attrs

from metax_hw_fake import host, kmods, layout, pcidev, state

METAX_VENDOR = 0x9999
NIC_VENDOR, NIC_DEVICE, NIC_DRIVER = 0x15B3, 0x101B, "mlx5_core"
DISPLAY_CLASS, BRIDGE_CLASS, NIC_CLASS = 0x038000, 0x060400, 0x020000
METAX_PARAMS = {
    "xcore_page_size": ("int", "10", "xcore page size"),
    "gpu_model": ("int", "0", "GPU model override"),
}
TOOLS = ("modprobe", "insmod", "rmmod", "modinfo", "mx-smi")


@attrs.frozen
class NicSpec:
    """A NIC: on GPU switch ``switch`` (same PCIe switch as those GPUs) or on its own root port of ``numa``."""

    name: str
    switch: int | None = None
    numa: int = 0
    mac: str | None = None
    up: bool = True


@attrs.define
class _Bus:
    """Bus numbers per NUMA node: node n owns host bridge pci0000:<n*0x80> and the buses after it."""

    next: dict[int, int] = attrs.field(factory=dict)

    def take(self, node: int) -> int:
        value = self.next.get(node, node * 0x80 + 1)
        self.next[node] = value + 1
        return value


class FakeHostBuilder:
    """Describe the host, then `build` it under a directory. Every setter returns the builder."""

    def __init__(self) -> None:
        self._gpus = 0
        self._model = "C500"
        self._device_id = 0x4000
        self._vf_device_id = 0x4001
        self._numa = 2
        self._switches = 2
        self._totalvfs = 16
        self._offset, self._stride = 1, 1
        self._memory_mib = 65536
        self._mx_group = 0
        self._host_driver: str | None = "2.18.0"
        self._loaded = True
        self._params: dict[str, str] = {}
        self._payloads: dict[str, tuple[str, str | None]] = {}
        self._vbios = "1.13.0.0"
        self._images: list[tuple[str, bool]] = []
        self._nics: list[NicSpec] = []
        self._iommu = True
        self._vfio_loaded = False
        self._vfs = 0
        self._leaves_vfs = False
        self._release = "5.15.0-91-generic"
        self._maca = "2.32.0.6"

    def gpus(
        self,
        count: int,
        *,
        model: str = "C500",
        device_id: int = 0x4000,
        vf_device_id: int = 0x4001,
        numa_nodes: int = 2,
        switches: int = 2,
        sriov_totalvfs: int = 16,
        memory_mib: int = 65536,
        metaxlink_group: int = 0,
        sriov_offset: int = 1,
        sriov_stride: int = 1,
    ) -> Self:
        """``count`` GPUs spread over ``switches`` PCIe switches (0: each on its own root port), switches over
        NUMA nodes; GPUs in consecutive groups of ``metaxlink_group`` are MetaXLink-connected.
        ``sriov_totalvfs=0`` means non-virtualisation firmware (no SR-IOV capability). VF i of a GPU sits at
        its routing id + ``sriov_offset`` + i * ``sriov_stride`` (the next buses are kept free for them)."""
        self._gpus, self._model, self._device_id, self._vf_device_id = count, model, device_id, vf_device_id
        self._numa, self._switches, self._totalvfs = max(1, numa_nodes), switches, sriov_totalvfs
        self._offset, self._stride = sriov_offset, sriov_stride
        self._memory_mib, self._mx_group = memory_mib, metaxlink_group
        return self

    def host_driver(
        self, version: str | None = "2.18.0", *, loaded: bool = True, params: Mapping[str, str] | None = None
    ) -> Self:
        """The driver installed on the host (None: none installed), loaded at boot or not."""
        self._host_driver, self._loaded, self._params = version, loaded and version is not None, dict(params or {})
        return self

    def payload_driver(self, version: str, path: str | None = None, *, built_for: str | None = None) -> Self:
        """A driver module file shipped by a payload (for `KernelModules.load_file`), host-absolute ``path``;
        ``built_for`` another kernel release than the host's: the kernel refuses it (Invalid module format)."""
        magic = kmods.vermagic(built_for) if built_for else None
        self._payloads[path or f"/var/lib/metax/drivers/{version}/metax.ko"] = (version, magic)
        return self

    def vbios(self, version: str) -> Self:
        self._vbios = version
        return self

    def firmware_image(self, version: str, *, virt: bool = False) -> Self:
        """A VBIOS image under ``/lib/firmware/metax/<model>/`` (see `image_path`)."""
        self._images.append((version, virt))
        return self

    def nics(self, *specs: NicSpec | str) -> Self:
        self._nics += [s if isinstance(s, NicSpec) else NicSpec(s) for s in specs]
        return self

    def iommu(self, enabled: bool = True) -> Self:
        self._iommu = enabled
        return self

    def vfio(self, loaded: bool = True) -> Self:
        self._vfio_loaded = loaded
        return self

    def driver_leaves_vfs(self, leaves: bool = True) -> Self:
        """Whether the GPU driver leaves SR-IOV enabled when it lets go of a PF (nvme does; the default, like
        igb, disables it). The kernel keeps such VFs, and refuses any ``sriov_numvfs`` write (ENOENT) until a
        driver is bound to the PF again."""
        self._leaves_vfs = leaves
        return self

    def vfs(self, count: int) -> Self:
        """Enable ``count`` VFs on every GPU at boot (needs the host driver loaded)."""
        self._vfs = count
        return self

    def kernel_release(self, release: str) -> Self:
        self._release = release
        return self

    def image_path(self, version: str) -> str:
        return f"/lib/firmware/metax/{self._model.lower()}/mxvbios-{version}.bin"

    def build(self, root: Path | str, *, timeout: float = 10.0) -> host.FakeHost:
        base = Path(root).absolute()
        if (base / "sys").exists():
            raise FileExistsError(f"{base} already holds a host tree")
        layout.bin_dir(base).mkdir(parents=True)
        state.save(base, self._initial_state())
        with state.transaction(base) as st:
            self._skeleton(base)
            self._modules(base)
            self._devices(base, st)
            for version, virt in self._images:
                layout.put(base / self.image_path(version).lstrip("/"), f"vbios={version}\nvirt={int(virt)}")
            if self._vfio_loaded:
                self._load(base, st, "vfio-pci", {})
            if self._loaded:
                self._load(base, st, "metax", self._params)
            for pf in list(st["sriov"]) if self._vfs else []:
                pcidev.set_numvfs(base, st, pf, str(self._vfs))
        write_tools(base)
        return host.FakeHost(base, timeout=timeout)

    def _initial_state(self) -> dict[str, Any]:
        return {
            "version": 1,
            "kernel_release": self._release,
            "native_driver": "metax",
            "native_module": "metax",
            "iommu": self._iommu,
            "driver_leaves_vfs": self._leaves_vfs,
            "next_group": 1,
            "maca_version": self._maca,
            "smi_version": "2.2.9",
            "driver_ids": {"pcieport": [], NIC_DRIVER: [[NIC_VENDOR, NIC_DEVICE]]},
            "module_drivers": {},
            "gpus": {},
            "sriov": {},
            "mx_links": [],
            "processes": [],
            "dmesg": [],
            "faults": {
                "fallen": [],
                "bind_refused": {},
                "load_fails": {},
                "in_use": [],
                "smi": None,
                "flash_fails": {},
                "silent": [],
            },
        }

    def _skeleton(self, base: Path) -> None:
        for directory in (
            "sys/bus/pci/devices",
            "sys/kernel/iommu_groups",
            "sys/module",
            "sys/class/net",
            "dev/dri",
            "dev/vfio",
            "lib/firmware",
            "var/lib/metax",
            "run/metax",
        ):
            (base / directory).mkdir(parents=True, exist_ok=True)
        (base / "var/run").symlink_to("../run")  # as on Ubuntu, CentOS and openEuler: /var/run is /run
        layout.put(layout.bus(base) / "drivers_probe", "")
        layout.put(layout.bus(base) / "rescan", "")
        for driver in ("pcieport", NIC_DRIVER):
            for attribute in ("bind", "unbind", "new_id", "remove_id"):
                layout.put(layout.drivers_dir(base) / driver / attribute, "")
        lo = base / "sys/devices/virtual/net/lo"
        layout.put(lo / "address", "00:00:00:00:00:00")
        layout.put(lo / "flags", "0x9")
        layout.put(lo / "operstate", "unknown")
        layout.relink(base / "sys/class/net/lo", lo)

    def _modules(self, base: Path) -> None:
        tree = layout.modules_root(base, self._release)
        dep = ["kernel/drivers/vfio/pci/vfio-pci.ko: kernel/drivers/vfio/vfio.ko"]
        kmods.write_module_file(
            tree / "kernel/drivers/vfio/pci/vfio-pci.ko",
            "vfio-pci",
            None,
            "vfio-pci",
            [],
            {"enable_sriov": ("bool", "N", "Enable support for SR-IOV configuration")},
        )
        if self._host_driver is not None:
            kmods.write_module_file(
                tree / "updates/dkms/metax.ko",
                "metax",
                self._host_driver,
                "metax",
                [(METAX_VENDOR, -1)],
                dict(METAX_PARAMS),
            )
            dep.append("updates/dkms/metax.ko:")
        layout.put(tree / "modules.dep", "\n".join(dep))
        layout.put(base / "proc/sys/kernel/osrelease", self._release)  # what uname -r says on this host
        for path, (version, magic) in self._payloads.items():
            kmods.write_module_file(
                base / path.lstrip("/"),
                "metax",
                version,
                "metax",
                [(METAX_VENDOR, -1)],
                dict(METAX_PARAMS),
                vermagic=magic,
            )

    def _load(self, base: Path, st: state.State, name: str, params: dict[str, str]) -> None:
        path = kmods.installed(base, st, name)
        if path is None:
            raise ValueError(f"cannot load {name} at boot: not installed")
        st["dmesg"] += kmods.load(base, st, kmods.read_module_file(path), params)

    def _devices(self, base: Path, st: state.State) -> None:
        buses = _Bus()
        hosts: dict[int, Path] = {}
        ports: dict[int, int] = {}

        def host_bridge(node: int) -> Path:
            if node not in hosts:
                hosts[node] = base / "sys/devices" / f"pci0000:{node * 0x80:02x}"
                hosts[node].mkdir(parents=True)
            return hosts[node]

        def bridge(parent: Path, addr: str, node: int) -> Path:
            path = pcidev.create_function(base, st, parent, addr, 0x8086, 0x2030, BRIDGE_CLASS, node)
            pcidev.attach(base, st, addr, "pcieport")
            return path

        def root_port(node: int) -> Path:
            ports[node] = ports.get(node, 0) + 1
            return bridge(host_bridge(node), layout.address(0, node * 0x80, ports[node], 0), node)

        switch_count = self._switches if self._gpus else 0
        switches: list[tuple[Path, int, int]] = []  # (downstream bus directory parent, bus, node)
        for s in range(switch_count):
            node = s % self._numa
            upstream = bridge(root_port(node), layout.address(0, buses.take(node), 0, 0), node)
            switches.append((upstream, buses.take(node), node))
        slots = [0] * len(switches)

        def slot(switch: int | None, node: int) -> tuple[Path, int]:
            if switch is None or not switches:
                return root_port(node), node
            upstream, down_bus, sw_node = switches[switch % len(switches)]
            slots[switch % len(switches)] += 1
            return bridge(upstream, layout.address(0, down_bus, slots[switch % len(switches)], 0), sw_node), sw_node

        for i in range(self._gpus):
            switch = i * switch_count // self._gpus if switch_count else None
            parent, node = slot(switch, i % self._numa)
            addr = layout.address(0, buses.take(node), 0, 0)
            extra = dict(pcidev.FULL_LINK)
            if self._totalvfs:
                last = pcidev.vf_address(addr, self._totalvfs - 1, self._offset, self._stride)
                for _ in range(layout.split_address(last)[1] - layout.split_address(addr)[1]):
                    buses.take(node)  # the buses the VFs will use
                extra |= {
                    "sriov_totalvfs": str(self._totalvfs),
                    "sriov_numvfs": "0",
                    "sriov_offset": str(self._offset),
                    "sriov_stride": str(self._stride),
                    "sriov_vf_device": f"{self._vf_device_id:x}",
                    "sriov_drivers_autoprobe": "1",
                }
                st["sriov"][addr] = {"vf_device_id": self._vf_device_id}
            pcidev.create_function(
                base, st, parent, addr, METAX_VENDOR, self._device_id, DISPLAY_CLASS, node, extra=extra
            )
            st["gpus"][addr] = {
                "model": self._model,
                "vbios": self._vbios,
                "util": 0,
                "temp": 35,
                "power": 57,
                "power_cap": 350,
                "mem_used_mib": 826,
                "mem_total_mib": self._memory_mib,
                "state": "Available",
            }
        pfs = sorted(st["gpus"])
        if self._mx_group > 1:
            for g in range(0, len(pfs), self._mx_group):
                group = pfs[g : g + self._mx_group]
                st["mx_links"] += [f"{a}|{b}" for a in group for b in group if a < b]
        for n, nic in enumerate(self._nics):
            parent, node = slot(nic.switch, nic.numa)
            addr = layout.address(0, buses.take(node), 0, 0)
            path = pcidev.create_function(base, st, parent, addr, NIC_VENDOR, NIC_DEVICE, NIC_CLASS, node)
            pcidev.attach(base, st, addr, NIC_DRIVER)
            net = path / "net" / nic.name
            layout.put(net / "address", nic.mac or f"0c:42:a1:00:00:{n:02x}")
            layout.put(net / "flags", "0x1003" if nic.up else "0x1002")
            layout.put(net / "operstate", "up" if nic.up else "down")
            layout.relink(net / "device", path)
            layout.relink(base / "sys/class/net" / nic.name, net)


def portable_tool(tool: str) -> str:
    """A fake tool as a TEST driver payload carries it (``bin/mx-smi``, `metax_core.node.payload_layout`): it
    runs wherever the host is mounted, inside an agent's pod too (the image's ``python3`` has this package), on
    the fake host at the agent's host root (``METAX_HOST_ROOT``, `metax_core.wire.agent_env.HOST_ROOT`)."""
    from metax_core.wire import agent_env

    code = (
        "import os, sys; from metax_hw_fake import tools; "
        f"sys.exit(tools.main({tool!r}, os.environ[{agent_env.HOST_ROOT!r}], sys.argv[1:]))"
    )
    return f'#!/bin/sh\nexec python3 -E -c {shlex.quote(code)} "$@"\n'


def write_tools(root: Path) -> None:
    """The fake executables: tiny sh wrappers exec'ing this interpreter on `metax_hw_fake.tools`."""
    source = str(Path(__file__).resolve().parent.parent)
    for tool in TOOLS:
        code = (
            f"import sys; sys.path.insert(0, {source!r}); from metax_hw_fake import tools; "
            f"sys.exit(tools.main({tool!r}, {str(root)!r}, sys.argv[1:]))"
        )
        script = layout.bin_dir(root) / tool
        script.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} -S -E -c {shlex.quote(code)} "$@"\n')
        script.chmod(0o755)
