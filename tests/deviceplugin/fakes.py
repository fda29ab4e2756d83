"""The smallest fakes of the hardware and cluster ports that gpu-device needs, keeping state tests can change.

They honour the port Protocols (`DeviceInventory`, `GpuMonitor`, `NodeMetadata`) and nothing more;
`test_fakes_contract.py` runs the same contract against them and against the real adapters (on the fake
host and the in-memory API server), so they cannot drift from what production does.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from metax_core import inventory
from metax_core.errors import HardwareError
from metax_core.health.faults import Fault, FaultKind
from metax_core.inventory import (
    FunctionKind,
    GpuHealth,
    GpuMetrics,
    PciAddress,
    PciFunction,
)


def address(bus: int, function: int = 0) -> PciAddress:
    return PciAddress(f"0000:{bus:02x}:00.{function}")


def gpu(
    bus: int,
    *,
    numa: int | None = 0,
    path: Sequence[int] = (),
    driver: str | None = "metax",
    group: int | None = None,
    numvfs: int = 0,
) -> PciFunction:
    """A PF on bus ``bus`` behind the bridges on buses ``path`` (root port first)."""
    return PciFunction(
        address=address(bus),
        vendor_id=inventory.METAX_VENDOR_ID,
        device_id=0x4000,
        numa_node=numa,
        iommu_group=bus if group is None else group,
        driver=driver,
        sriov_totalvfs=8,
        sriov_numvfs=numvfs,
        pcie_path=tuple(address(b) for b in path),
    )


def vf(pf: PciFunction, n: int, *, driver: str | None = "metax") -> PciFunction:
    return PciFunction(
        address=PciAddress(pf.address[:-1] + str(n + 1)),
        vendor_id=pf.vendor_id,
        device_id=0x4001,
        kind=FunctionKind.VF,
        physfn=pf.address,
        numa_node=pf.numa_node,
        iommu_group=(pf.iommu_group or 0) * 100 + n + 1,
        driver=driver,
        pcie_path=pf.pcie_path,
    )


class FakeInventory:
    """`DeviceInventory` over a list tests edit; ``fail`` makes every call raise."""

    def __init__(self, functions: Iterable[PciFunction] = (), *, iommu: bool = True) -> None:
        self.present: list[PciFunction] = list(functions)
        self.iommu = iommu
        self.fail: HardwareError | None = None
        self._lock = threading.Lock()

    def set(self, functions: Iterable[PciFunction]) -> None:
        with self._lock:
            self.present = list(functions)

    def functions(self) -> Sequence[PciFunction]:
        if self.fail:
            raise self.fail
        with self._lock:
            return sorted(self.present, key=lambda f: f.address)

    def iommu_enabled(self) -> bool:
        return self.iommu

    def device_nodes(self, address: PciAddress) -> Sequence[str]:
        index = [f.address for f in self.functions()].index(address)
        return [f"/dev/dri/card{index}", f"/dev/dri/renderD{128 + index}", "/dev/mxcd"]


class FakeMonitor:
    """`GpuMonitor` reporting every present metax-bound function healthy unless listed in ``unhealthy``."""

    def __init__(self, inventory: FakeInventory) -> None:
        self.inventory = inventory
        self.unhealthy: dict[PciAddress, str] = {}
        self.fail: HardwareError | None = None
        self.calls = 0

    def health(self) -> Mapping[PciAddress, GpuHealth]:
        self.calls += 1
        if self.fail:
            raise self.fail
        sick = dict(self.unhealthy)
        return {
            f.address: GpuHealth(f.address, (Fault(FaultKind.STATE, sick[f.address]),) if f.address in sick else ())
            for f in self.inventory.present
            if f.driver == "metax"
        }

    def metrics(self) -> Sequence[GpuMetrics]:
        return []


class FakeNodeMetadata:
    """`NodeMetadata` over an in-memory node object."""

    def __init__(self, name: str, labels: Mapping[str, str] | None = None) -> None:
        self.nodes: dict[str, dict[str, Any]] = {name: {"metadata": {"name": name, "labels": dict(labels or {})}}}
        self._lock = threading.Lock()

    def get_node(self, name: str) -> Mapping[str, Any] | None:
        with self._lock:
            node = self.nodes.get(name)
            return copy.deepcopy(node) if node is not None else None

    def patch_node_metadata(
        self,
        name: str,
        *,
        labels: Mapping[str, str | None] | None = None,
        annotations: Mapping[str, str | None] | None = None,
    ) -> None:
        with self._lock:
            meta = self.nodes[name]["metadata"]
            for key, changes in (("labels", labels), ("annotations", annotations)):
                target = meta.setdefault(key, {})
                for k, v in (changes or {}).items():
                    if v is None:
                        target.pop(k, None)
                    else:
                        target[k] = v
