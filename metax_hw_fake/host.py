"""`FakeHost`: a built fake host, the real adapters wired to it, fault injection and state inspection.

Why: other components (device plugin, driver manager, VFIO manager, exporter, end-to-end nodes) need one
handle: "give me the hardware port of this fake node", "break it this way", "what does it look like now".
The adapters handed out are `metax_hw`'s own classes on the fake root — only the sysfs write primitive
(`metax_hw_fake.kernel.FakeKernel`) and the tool search path (the fake executables) differ from production.
A FakeHost can be reopened from its directory by another process (`FakeHost.open`).
"""

from __future__ import annotations

import errno
import logging
import os
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from metax_core.inventory import PciAddress
from metax_hw import binding, gpus, host, kmod, net, pci
from metax_hw_fake import audit, kernel, layout, mxsml, pcidev, state

logger = logging.getLogger(__name__)

SMI_MODES = (None, "hang", "garbage", "fail")


class FakeHost:
    """A fake node under ``root``; ``hw`` is the real adapter bundle (`metax_hw.host.Host`) on it."""

    def __init__(self, root: Path, *, timeout: float = 10.0) -> None:
        self.root = Path(root).absolute()
        if not layout.state_file(self.root).exists():
            raise FileNotFoundError(f"{self.root} is not a fake host (no {layout.PRIVATE}/state.json)")
        self.kernel = kernel.FakeKernel(self.root)
        self.bin_dir = layout.bin_dir(self.root)
        self.hw = self.adapters(timeout=timeout)

    @classmethod
    def open(cls, root: Path | str, *, timeout: float = 10.0) -> FakeHost:
        """Attach to a fake host built earlier (by this or another process)."""
        return cls(Path(root), timeout=timeout)

    def adapters(self, *, timeout: float = 10.0) -> host.Host:
        """A fresh real-adapter bundle on this root (e.g. with a short tool timeout for a hang test)."""
        return host.open_host(
            self.root,
            writer=self.kernel,
            tool_path=[str(self.bin_dir)],
            timeout=timeout,
            net_source=host.NetSource.SYSFS,
        )

    # The port implementations, for callers that want one part.
    @property
    def devices(self) -> pci.SysfsDeviceInventory:
        return self.hw.devices

    @property
    def binder(self) -> binding.SysfsDriverBinder:
        return self.hw.binder

    @property
    def modules(self) -> kmod.ModprobeKernelModules:
        return self.hw.modules

    @property
    def monitor(self) -> gpus.MxSmiMonitor:
        return self.hw.monitor

    @property
    def firmware(self) -> gpus.MxSmiFirmware:
        return self.hw.firmware

    @property
    def network(self) -> net.PyrouteNetworkInterfaces:
        return self.hw.network

    def env(self) -> dict[str, str]:
        """An environment whose PATH finds the fake tools first (for child processes such as node agents)."""
        return dict(os.environ, PATH=os.pathsep.join([str(self.bin_dir), os.environ.get("PATH", os.defpath)]))

    # --- inspection ------------------------------------------------------------------------------------

    def state(self) -> dict[str, Any]:
        return state.load(self.root)

    def gpu_addresses(self) -> list[PciAddress]:
        """The PFs (MetaX GPUs) the host was built with and still has, sorted."""
        return sorted(PciAddress(a) for a in self.state()["gpus"] if pcidev.exists(self.root, a))

    def exists(self, address: str) -> bool:
        return pcidev.exists(self.root, address)

    def driver_of(self, address: str) -> str | None:
        return pcidev.driver_of(self.root, address)

    def override_of(self, address: str) -> str | None:
        return pcidev.override_of(self.root, address)

    def vfs_of(self, pf: str) -> list[PciAddress]:
        path = layout.devices_dir(self.root) / pf
        links = sorted((e for e in path.iterdir() if e.name.startswith("virtfn")), key=lambda e: int(e.name[6:]))
        return [PciAddress(n) for n in (layout.link_name(e) for e in links) if n is not None]

    def module_params(self, name: str) -> dict[str, str] | None:
        """``/sys/module/<name>/parameters`` as a dict, or None when the module is not loaded."""
        directory = layout.module_dir(self.root, name)
        if not (directory / "initstate").exists():
            return None
        params = directory / "parameters"
        return {p.name: layout.get(p) or "" for p in sorted(params.iterdir())} if params.is_dir() else {}

    def module_version(self, name: str) -> str | None:
        return layout.get(layout.module_dir(self.root, name) / "version")

    def dev_nodes(self) -> list[str]:
        """Every node under ``<root>/dev`` as a host path, sorted."""
        base = layout.dev(self.root)
        return sorted("/" + str(p.relative_to(self.root)) for p in base.rglob("*") if p.is_file())

    def dmesg(self) -> list[str]:
        return list(self.state()["dmesg"])

    def vbios(self, address: str) -> tuple[str, str | None]:
        """(running VBIOS, flashed VBIOS waiting for a reboot)."""
        record = self.state()["gpus"][address]
        return str(record["vbios"]), record.get("vbios_pending")

    def audit(self) -> list[str]:
        """Broken kernel invariants (empty when the fake host is consistent)."""
        return audit.audit(self.root)

    # --- changes and faults ----------------------------------------------------------------------------

    def set_gpu(self, address: str, **values: Any) -> None:
        """Change what mx-smi reports for a GPU or VF: ``state``, ``temp``, ``util``, ``power``, ``mem_used_mib``..."""
        with state.transaction(self.root) as st:
            if address in st["gpus"]:
                st["gpus"][address].update(values)
            else:  # a VF: what mx-smi prints for it on top of what it inherits from its PF
                st.setdefault("vf_values", {}).setdefault(address, {}).update(values)

    def add_process(self, address: str, pid: int, name: str, mem_mib: int = 1024) -> None:
        """A process holding the GPU (mx-smi lists it; the driver module is then in use)."""
        with state.transaction(self.root) as st:
            st["processes"].append({"address": address, "pid": pid, "name": name, "mem_mib": mem_mib})

    def clear_processes(self) -> None:
        with state.transaction(self.root) as st:
            st["processes"] = []

    def fall_off_bus(self, address: str, *, removed: bool = False) -> None:
        """The GPU stops answering: config space reads 0xffff, mx-smi drops it, binds fail (ENODEV).
        With ``removed`` the kernel also removes it (surprise hot-unplug)."""
        with state.transaction(self.root) as st:
            if removed:
                pcidev.remove_function(self.root, st, address)
                return
            for function in [address, *self.vfs_of(address)]:  # its VFs die with it
                st["faults"]["fallen"].append(function)
                layout.put(pcidev.device_dir(self.root, function) / "config", b"\xff" * 64)

    def stop_answering(self, address: str, answering: bool = False) -> None:
        """The GPU stays on the bus and bound, but mx-smi no longer reports it (a hung GPU: the tool's table
        leaves it out, health says "not listed"); ``answering=True`` brings it back."""
        with state.transaction(self.root) as st:
            silent = st["faults"].setdefault("silent", [])
            if answering and address in silent:
                silent.remove(address)
            elif not answering and address not in silent:
                silent.append(address)

    def degrade_link(self, address: str, speed: str = "8.0 GT/s PCIe", width: int = 8) -> None:
        """The GPU's PCIe link retrains slower and narrower than its maximum (a bad riser or slot): sysfs shows
        it; `clear_faults` trains it at its best again."""
        directory = pcidev.device_dir(self.root, address)
        layout.put(directory / "current_link_speed", speed)
        layout.put(directory / "current_link_width", str(width))
        with state.transaction(self.root) as st:
            st["faults"].setdefault("links", []).append(address)

    def install_mxsml(self, library: Path | None = None) -> Path:
        """Put the fake libmxsml (``library``, default `mxsml.build`'s) at the host's ``/opt/mxdriver/lib``
        with its state file; from now on every change of this host's state re-writes that file."""
        target = self.root / layout.MXSML_LIBRARY
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(library or mxsml.build(), target)
        with state.transaction(self.root) as st:
            st.setdefault("mxsml", {"init": 0, "pf_ids": False})
            mxsml.export(self.root, st)
        return target

    def fail_mxsml_init(self, code: int) -> None:
        """What the fake libmxsml's ``mxSmlInit`` returns from now on (0: success)."""
        with state.transaction(self.root) as st:
            st.setdefault("mxsml", {})["init"] = code

    def number_pfs_from_100(self, on: bool = True) -> None:
        """The fake libmxsml numbers PFs that have VFs from 100, as libmxsml does on an SR-IOV host (default:
        every function from 0, in mx-smi's order)."""
        with state.transaction(self.root) as st:
            st.setdefault("mxsml", {})["pf_ids"] = on

    def refuse_bind(self, address: str, driver: str = "*", code: int = errno.EBUSY) -> None:
        """Probing ``address`` with ``driver`` ("*": any) fails with ``code``."""
        with state.transaction(self.root) as st:
            st["faults"]["bind_refused"][address] = {"driver": driver, "errno": code}

    def fail_module_load(
        self,
        name: str = "metax",
        message: str = "Unknown symbol in module, or unknown parameter (see dmesg)",
        *,
        version: str | None = None,
    ) -> None:
        """The kernel refuses to load the module (only its ``version`` when given; others still load)."""
        key = name.replace("-", "_") + (f"@{version}" if version else "")
        with state.transaction(self.root) as st:
            st["faults"]["load_fails"][key] = message

    def hold_module(self, name: str = "metax") -> None:
        """Something on the host uses the module: rmmod fails with "in use"."""
        with state.transaction(self.root) as st:
            st["faults"]["in_use"].append(name.replace("-", "_"))

    def break_mx_smi(self, mode: str | None) -> None:
        """``hang`` (never answers), ``garbage`` (unparseable output), ``fail`` (exit 255), None (healthy)."""
        if mode not in SMI_MODES:
            raise ValueError(f"mx-smi mode {mode!r} not one of {SMI_MODES}")
        with state.transaction(self.root) as st:
            st["faults"]["smi"] = mode

    def fail_flash(self, address: str = "*", message: str = "image checksum mismatch") -> None:
        with state.transaction(self.root) as st:
            st["faults"]["flash_fails"][address] = message

    def add_group_mate(self, address: str, driver: str = "mlx5_core") -> PciAddress:
        """Put a non-MetaX device, bound to a host driver, in ``address``'s IOMMU group (a bad ACS layout)."""
        with state.transaction(self.root) as st:
            gpu = pcidev.device_dir(self.root, address)
            group = layout.link_name(gpu / "iommu_group")
            if group is None:
                raise ValueError(f"{address} has no IOMMU group (IOMMU off?)")
            domain, bus_no, _, _ = layout.split_address(address)
            mate = layout.address(domain, bus_no, 0x1F, 0)
            pcidev.create_function(
                self.root,
                st,
                gpu.parent,
                mate,
                0x15B3,
                0x101B,
                0x020000,
                int(layout.get(gpu / "numa_node") or "-1"),
                group=int(group),
            )
            st["driver_ids"].setdefault(driver, [])
            if not (layout.drivers_dir(self.root) / driver).is_dir():
                for attribute in ("bind", "unbind", "new_id", "remove_id"):
                    layout.put(layout.drivers_dir(self.root) / driver / attribute, "")
            pcidev.attach(self.root, st, mate, driver)
        return PciAddress(mate)

    def clear_faults(self) -> None:
        """Forget injected faults (a fallen GPU's config space is restored too)."""
        with state.transaction(self.root) as st:
            for address in st["faults"]["fallen"]:
                if pcidev.exists(self.root, address):
                    vendor, device, klass = pcidev.ids_of(self.root, address)
                    layout.put(
                        pcidev.device_dir(self.root, address) / "config", pcidev.config_space(vendor, device, klass)
                    )
            for address in st["faults"].get("links", []):
                if pcidev.exists(self.root, address):
                    for name, value in pcidev.FULL_LINK.items():
                        layout.put(pcidev.device_dir(self.root, address) / name, value)
            st["faults"] = {
                "fallen": [],
                "bind_refused": {},
                "load_fails": {},
                "in_use": [],
                "smi": None,
                "flash_fails": {},
                "silent": [],
            }

    def reboot_firmware(self) -> list[str]:
        """Apply flashed VBIOS images (what a reboot does to firmware); returns the GPUs that changed."""
        changed: list[str] = []
        with state.transaction(self.root) as st:
            for address, record in st["gpus"].items():
                if record.get("vbios_pending"):
                    record["vbios"] = record.pop("vbios_pending")
                    record.pop("virt_pending", None)
                    changed.append(address)
        return changed

    def describe(self) -> Sequence[str]:
        """A short human summary (for the dev CLI)."""
        lines = [f"fake host at {self.root}"]
        for address in self.gpu_addresses():
            lines.append(f"  {address} driver={self.driver_of(address) or '-'} vfs={len(self.vfs_of(address))}")
        lines.append(
            f"  metax module: {self.module_version('metax') or 'not loaded'} {self.module_params('metax') or ''}"
        )
        lines.append(f"  tools: {self.bin_dir}")
        return lines
