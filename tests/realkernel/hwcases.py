"""Hardware cases run twice: inside a QEMU guest on a real kernel, and on the fake host (tests/contract).

Why: the fake kernel is only worth trusting where it behaves like the real one. Each case here drives the real
`metax_hw` adapter through a `Rig` (the adapter, one SR-IOV PF, the kernel's write primitive) and checks the
result both through the adapter and by reading sysfs directly; a few cases write sysfs raw to pin down the
kernel rule the adapter's sequence depends on (EBUSY, ERANGE, ENODEV). The guest program
(`tests.realkernel.guest`) runs them on a real kernel against QEMU's SR-IOV NVMe controller; the contract
suite runs them on a fake MetaX host. A case fails by raising; its message is what the host shows.
Standard library, attrs and our packages only: the guest imports this over 9p.
"""

from __future__ import annotations

import errno
import os
import re
import signal
import time
from collections.abc import Callable
from pathlib import Path

import attrs

from metax_core import errors, inventory
from metax_core.inventory import FunctionKind, PciAddress
from metax_core.topology import document, placement
from metax_hw import host, sysfs

VFIO = inventory.VFIO_DRIVER
VFIO_MODULE = "vfio-pci"
VFIO_PARAM = "enable_sriov"
"""A parameter vfio-pci has in the real kernel (``module_param(enable_sriov, bool, 0644)``) and in the fake."""


@attrs.frozen
class Rig:
    """What a case needs: the adapter, the SR-IOV PF it may change, the kernel's write primitive, and a way
    to build another adapter on the same host with a different writer (to kill a process mid-sequence)."""

    hw: host.Host
    pf: PciAddress
    write: sysfs.SysfsWriter
    reopen: Callable[[sysfs.SysfsWriter], host.Host]

    def dev(self, address: str) -> Path:
        return self.hw.tree.path("/sys/bus/pci/devices") / address

    def raw(self, address: str, attribute: str) -> str:
        return (self.dev(address) / attribute).read_text().strip()

    def errno_of(self, path: Path, value: str) -> int | None:
        """Write ``value`` through the kernel primitive: None when accepted, else the errno."""
        try:
            self.write(path, value)
        except OSError as exc:
            return exc.errno
        return None


class CaseFailed(AssertionError):
    pass


def check(condition: bool, message: str) -> None:
    if not condition:
        raise CaseFailed(message)


def expect_error(action: Callable[[], object], pattern: str) -> str:
    try:
        action()
    except errors.HardwareError as exc:
        check(re.search(pattern, str(exc)) is not None, f"error {str(exc)!r} does not match {pattern!r}")
        return str(exc)
    raise CaseFailed(f"no HardwareError (expected one matching {pattern!r})")


def _errname(code: int | None) -> str:
    return "accepted" if code is None else errno.errorcode.get(code, str(code))


def _split(address: str) -> tuple[int, int, int]:
    domain, bus, rest = address.split(":")
    device, function = rest.split(".")
    return int(domain, 16), int(bus, 16), int(device, 16) << 3 | int(function, 16)


def expected_vf_addresses(rig: Rig, count: int) -> list[str]:
    """VF i sits at routing id PF + sriov_offset + i * sriov_stride (PCIe SR-IOV; bus carries over)."""
    offset, stride = int(rig.raw(rig.pf, "sriov_offset")), int(rig.raw(rig.pf, "sriov_stride"))
    domain, bus, devfn = _split(rig.pf)
    found = []
    for index in range(count):
        rid = (bus << 8 | devfn) + offset + index * stride
        found.append(f"{domain:04x}:{rid >> 8:02x}:{(rid & 0xFF) >> 3:02x}.{rid & 7:x}")
    return found


def check_vfs(rig: Rig, count: int) -> list[PciAddress]:
    """The adapter's and the kernel's view of the PF's VFs agree, and the VFs are where SR-IOV puts them."""
    pf = rig.hw.devices.function(rig.pf)
    check(
        pf.sriov_numvfs == count and rig.raw(rig.pf, "sriov_numvfs") == str(count),
        f"sriov_numvfs: adapter {pf.sriov_numvfs}, sysfs {rig.raw(rig.pf, 'sriov_numvfs')}, expected {count}",
    )
    expected = expected_vf_addresses(rig, count)
    check(list(pf.vfs) == expected, f"VFs at {list(pf.vfs)}, SR-IOV offset/stride say {expected}")
    vf_device = rig.raw(rig.pf, "sriov_vf_device")
    check(re.fullmatch(r"[0-9a-f]+", vf_device) is not None, f"sriov_vf_device reads {vf_device!r}, not bare hex")
    listed = {f.address: f for f in rig.hw.devices.functions()}
    for vf in pf.vfs:
        function = listed.get(vf)
        check(function is not None, f"VF {vf} is not in the inventory")
        assert function is not None
        check(function.kind is FunctionKind.VF and function.physfn == rig.pf, f"VF {vf}: {function}")
        check(function.device_id == int(vf_device, 16), f"VF {vf} device {function.device_id:#x} != {vf_device}")
        check(os.path.basename(os.readlink(rig.dev(vf) / "physfn")) == rig.pf, f"{vf}/physfn")
    return list(pf.vfs)


def with_vfs(rig: Rig, count: int) -> list[PciAddress]:
    rig.hw.binder.set_vf_count(rig.pf, count, drivers_autoprobe=False)
    return check_vfs(rig, count)


def clean(rig: Rig) -> None:
    """Back to no VFs (VFs on vfio-pci returned first), whatever a case left behind."""
    pf = rig.hw.devices.function(rig.pf)
    for vf in pf.vfs:
        if rig.hw.devices.driver_of(vf) is not None or rig.hw.devices.function(vf).driver_override:
            rig.hw.binder.reset_driver(vf)
    rig.hw.binder.set_vf_count(rig.pf, 0)


# --- cases ---------------------------------------------------------------------------------------------------


def vf_count_changes_through_zero(rig: Rig) -> None:
    """0 -> 2 -> 3 (or 1 when the device has only 2) -> 0 through the adapter, which goes through zero itself."""
    total = rig.hw.devices.function(rig.pf).sriov_totalvfs
    check(total >= 2, f"the PF offers {total} VFs; the case needs 2")
    rig.hw.binder.set_vf_count(rig.pf, 0)
    check_vfs(rig, 0)
    vfs = with_vfs(rig, 2)
    check(all(rig.hw.devices.driver_of(v) is None for v in vfs), "VFs were probed with sriov_drivers_autoprobe=0")
    check(rig.raw(rig.pf, "sriov_drivers_autoprobe") == "0", "sriov_drivers_autoprobe is not 0")
    second = 3 if total >= 3 else 1
    rig.hw.binder.set_vf_count(rig.pf, second)
    check_vfs(rig, second)
    rig.hw.binder.set_vf_count(rig.pf, 0)
    check_vfs(rig, 0)


def sriov_numvfs_kernel_rules(rig: Rig) -> None:
    """Raw writes: non-zero -> other non-zero is EBUSY, the same value again is accepted, above total ERANGE."""
    with_vfs(rig, 2)
    numvfs = rig.dev(rig.pf) / "sriov_numvfs"
    total = int(rig.raw(rig.pf, "sriov_totalvfs"))
    seen = {value: _errname(rig.errno_of(numvfs, value)) for value in ("1", "2", str(total + 1))}
    check(seen == {"1": "EBUSY", "2": "accepted", str(total + 1): "ERANGE"}, f"kernel answers: {seen}")
    check_vfs(rig, 2)
    check(rig.errno_of(numvfs, "0") is None, "writing 0 was refused")
    check_vfs(rig, 0)


def vf_count_above_total_refused(rig: Rig) -> None:
    total = rig.hw.devices.function(rig.pf).sriov_totalvfs
    expect_error(
        lambda: rig.hw.binder.set_vf_count(rig.pf, total + 1),
        rf"set VF count .*{total + 1} VFs asked, the device supports 0 to {total}",
    )
    check_vfs(rig, 0)
    vf = with_vfs(rig, 1)[0]
    expect_error(lambda: rig.hw.binder.set_vf_count(vf, 1), "is a VF of")


def vfio_bind_and_back(rig: Rig) -> None:
    """A VF to vfio-pci and back; bind without driver_override is ENODEV; drivers_probe on a bound device is 0."""
    vf = with_vfs(rig, 2)[0]
    rig.hw.modules.load(VFIO_MODULE, {})
    drivers = rig.hw.tree.path("/sys/bus/pci/drivers")
    code = rig.errno_of(drivers / VFIO / "bind", vf)
    check(code == errno.ENODEV, f"bind to vfio-pci without driver_override: {_errname(code)}, expected ENODEV")
    rig.hw.binder.bind(vf, VFIO)
    function = rig.hw.devices.function(vf)
    check((function.driver, function.driver_override) == (VFIO, VFIO), f"after bind: {function}")
    group = function.iommu_group
    check(group is not None, "the VF has no IOMMU group")
    check(rig.hw.tree.path(f"/dev/vfio/{group}").exists(), f"/dev/vfio/{group} does not exist")
    nodes = rig.hw.devices.device_nodes(vf)
    check(sorted(nodes) == sorted(["/dev/vfio/vfio", f"/dev/vfio/{group}"]), f"device nodes {nodes}")
    probe = rig.hw.tree.path("/sys/bus/pci/drivers_probe")
    code = rig.errno_of(probe, vf)
    check(code is None, f"drivers_probe on a bound device: {_errname(code)}")
    rig.hw.binder.bind(vf, VFIO)  # again: nothing to do
    now = rig.hw.binder.reset_driver(vf)
    check(now is None, f"with sriov_drivers_autoprobe=0 no driver may claim the VF; {now} did")
    function = rig.hw.devices.function(vf)
    check((function.driver, function.driver_override) == (None, None), f"after reset: {function}")
    check(not rig.hw.tree.path(f"/dev/vfio/{group}").exists(), f"/dev/vfio/{group} outlived the binding")


def raw_kernel_answers(rig: Rig) -> None:
    """The errno of each raw write the adapter's sequences and error messages depend on."""
    vf = with_vfs(rig, 1)[0]
    rig.hw.modules.load(VFIO_MODULE, {})
    drivers = rig.hw.tree.path("/sys/bus/pci/drivers")
    native = rig.hw.binder.native_driver
    dev = rig.dev(vf)
    absent = "0000:ff:1f.7"
    answers: dict[str, str] = {}

    def ask(label: str, path: Path, value: str) -> None:
        answers[label] = _errname(rig.errno_of(path, value))

    ask("unbind an unbound VF", drivers / VFIO / "unbind", vf)
    ask("drivers_probe an absent address", rig.hw.tree.path("/sys/bus/pci/drivers_probe"), absent)
    ask("bind an absent address", drivers / VFIO / "bind", absent)
    ask("sriov_numvfs 'abc'", rig.dev(rig.pf) / "sriov_numvfs", "abc")
    ask("sriov_numvfs '-1'", rig.dev(rig.pf) / "sriov_numvfs", "-1")
    ask("write the read-only vendor", dev / "vendor", "0x1234")
    ask("driver_override vfio-pci", dev / "driver_override", VFIO)
    ask("bind to the PF driver against driver_override", drivers / native / "bind", vf)
    ask("bind to vfio-pci", drivers / VFIO / "bind", vf)
    ask("bind to vfio-pci again", drivers / VFIO / "bind", vf)
    ask("bind the bound VF to the PF driver", drivers / native / "bind", vf)
    ask("clear driver_override", dev / "driver_override", "\n")
    override = rig.raw(vf, "driver_override")
    ask("unbind from vfio-pci", drivers / VFIO / "unbind", vf)
    expected = {
        "unbind an unbound VF": "ENODEV",
        "drivers_probe an absent address": "ENODEV",
        "bind an absent address": "ENODEV",
        "sriov_numvfs 'abc'": "EINVAL",
        "sriov_numvfs '-1'": "EINVAL",
        "write the read-only vendor": "EACCES",
        "driver_override vfio-pci": "accepted",
        "bind to the PF driver against driver_override": "ENODEV",
        "bind to vfio-pci": "accepted",
        "bind to vfio-pci again": "EBUSY",
        "bind the bound VF to the PF driver": "ENODEV",
        "clear driver_override": "accepted",
        "unbind from vfio-pci": "accepted",
    }
    differ = {k: f"{v} (expected {expected[k]})" for k, v in answers.items() if v != expected[k]}
    check(not differ, f"kernel answers differ: {differ}")
    check(override == "(null)", f"a cleared driver_override reads {override!r}")


def pf_without_driver(rig: Rig) -> None:
    """A PF without its driver: sriov_numvfs is ENOENT (0 too, while VFs are left), the adapter refuses,
    reset_driver brings the driver back. Whether VFs outlive the driver is the driver's choice (the kernel only
    warns): nvme leaves them, the fake's metax driver removes them as igb does; both views must agree."""
    with_vfs(rig, 1)
    native = rig.hw.binder.native_driver
    code = rig.errno_of(rig.hw.tree.path("/sys/bus/pci/drivers") / native / "unbind", rig.pf)
    check(code is None, f"unbinding the PF from {native}: {_errname(code)}")
    left = int(rig.raw(rig.pf, "sriov_numvfs"))
    answers = {v: _errname(rig.errno_of(rig.dev(rig.pf) / "sriov_numvfs", v)) for v in ("2", "0")}
    check(
        answers == {"2": "ENOENT", "0": "ENOENT" if left else "accepted"},
        f"without a PF driver: {answers}, {left} VFs left",
    )
    expect_error(lambda: rig.hw.binder.set_vf_count(rig.pf, 2), "no driver is bound to the PF")
    check_vfs(rig, left)
    check(rig.hw.binder.reset_driver(rig.pf) == native, f"the PF did not return to {native}")


def vfio_whole_groups(rig: Rig) -> None:
    """Every function is in the group sysfs says, each VF alone in its own group; the group check passes."""
    vfs = with_vfs(rig, 2)
    check(rig.hw.devices.iommu_enabled(), "the IOMMU is off")
    groups: dict[str, int] = {}
    for address in [rig.pf, *vfs]:
        group = rig.hw.devices.function(address).iommu_group
        check(group is not None, f"{address} has no IOMMU group")
        assert group is not None
        groups[address] = group
        members = list(rig.hw.devices.iommu_group_members(group))
        listed = sorted(os.listdir(rig.hw.tree.path(f"/sys/kernel/iommu_groups/{group}/devices")))
        check(members == listed and address in members, f"group {group}: adapter {members}, sysfs {listed}")
        if address != rig.pf:
            check(members == [address], f"VF {address} shares group {group} with {members}")
            rig.hw.binder.check_vfio_group(address)
    check(len(set(groups.values())) == len(groups), f"groups not distinct: {groups}")


def module_parameter_read_back(rig: Rig) -> None:
    """modinfo, modprobe with a parameter read back from /sys/module, refusals, rmmod — on vfio-pci."""
    modules = rig.hw.modules
    modules.unload(VFIO_MODULE)
    check(modules.state(VFIO_MODULE) is None, "vfio-pci still loaded after unload")
    supported = modules.supported_params(VFIO_MODULE)
    check(VFIO_PARAM in supported, f"modinfo lists {sorted(supported)}")
    modules.load(VFIO_MODULE, {VFIO_PARAM: "1"})
    state = modules.state(VFIO_MODULE)
    raw = rig.hw.tree.path(f"/sys/module/vfio_pci/parameters/{VFIO_PARAM}").read_text().strip()
    check(
        state is not None and state.params.get(VFIO_PARAM) == "Y" and raw == "Y",
        f"{VFIO_PARAM}: adapter {state}, sysfs {raw!r}, expected Y",
    )
    expect_error(lambda: modules.load(VFIO_MODULE, {VFIO_PARAM: "0"}), f"{VFIO_PARAM} is Y after loading, 0 was asked")
    modules.unload(VFIO_MODULE)
    check(
        modules.state(VFIO_MODULE) is None and not rig.hw.tree.path("/sys/module/vfio_pci").exists(),
        "vfio-pci still loaded after unload",
    )
    expect_error(lambda: modules.load(VFIO_MODULE, {"no_such_param": "1"}), "the module has no parameter no_such_param")
    modules.unload(VFIO_MODULE)


def _run_killed(rig: Rig, kill_after: int, action: Callable[[host.Host], object]) -> None:
    """Run ``action`` in a forked process whose adapter is SIGKILLed right after its ``kill_after``-th write."""
    writes = [0]

    def killing_writer(path: Path, value: str) -> None:
        rig.write(path, value)
        writes[0] += 1
        if writes[0] == kill_after:
            os.kill(os.getpid(), signal.SIGKILL)

    pid = os.fork()
    if pid == 0:  # the agent process
        try:
            action(rig.reopen(killing_writer))
        except BaseException:
            os._exit(3)
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    check(
        os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL,
        f"the process was not killed after write {kill_after} (status {status:#x})",
    )


def _check_on_vfio(rig: Rig, vf: PciAddress, when: str) -> None:
    function = rig.hw.devices.function(vf)
    check((function.driver, function.driver_override) == (VFIO, VFIO), f"{when}: {function}")
    check(rig.hw.tree.path(f"/dev/vfio/{function.iommu_group}").exists(), f"{when}: no /dev/vfio node")


def killed_mid_bind_converges(rig: Rig) -> None:
    """A process killed between the writes of a bind (or of the way back): the next run converges."""
    vf = with_vfs(rig, 2)[0]
    rig.hw.modules.load(VFIO_MODULE, {})
    for kill_after in (1, 2):  # driver_override written / drivers_probe written, result not verified
        _run_killed(rig, kill_after, lambda hw: hw.binder.bind(vf, VFIO))
        rig.hw.binder.bind(vf, VFIO)
        _check_on_vfio(rig, vf, f"bind killed after write {kill_after}, then bound again")
        rig.hw.binder.reset_driver(vf)
    rig.hw.binder.bind(vf, VFIO)
    for kill_after in (1, 2):  # override cleared / unbound, not yet probed
        _run_killed(rig, kill_after, lambda hw: hw.binder.reset_driver(vf))
        check(rig.hw.binder.reset_driver(vf) is None, "the way back found a driver")
        function = rig.hw.devices.function(vf)
        check(
            (function.driver, function.driver_override) == (None, None),
            f"way back killed after write {kill_after}, then run again: {function}",
        )
        rig.hw.binder.bind(vf, VFIO)
    _run_killed(rig, 1, lambda hw: hw.binder.reset_driver(vf))  # left on vfio-pci without its override
    rig.hw.binder.bind(vf, VFIO)
    _check_on_vfio(rig, vf, "way back killed after clearing driver_override, then bound again")


def killed_mid_vf_change_converges(rig: Rig) -> None:
    """A process killed between the "0" and the new count of a VF change: the next run sets the count."""
    total = rig.hw.devices.function(rig.pf).sriov_totalvfs
    with_vfs(rig, 2)
    second = 3 if total >= 3 else 1
    _run_killed(rig, 1, lambda hw: hw.binder.set_vf_count(rig.pf, second))
    check_vfs(rig, 0)
    rig.hw.binder.set_vf_count(rig.pf, second)
    check_vfs(rig, second)


_PCI_ADDRESS = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")


def topology_document_matches_sysfs(rig: Rig) -> None:
    """topo-worker's document (C7) built from the adapter: each PF's PCIe path (the bridges on its resolved
    sysfs path) and NUMA node (-1: none) as the kernel shows them, and the free set placed whole."""
    doc = document.build(rig.hw.devices.functions())
    check(rig.pf in [g.address for g in doc.gpus], f"{rig.pf} missing from the topology document")
    for g in doc.gpus:
        parts = [p for p in os.path.realpath(rig.dev(g.address)).split("/") if _PCI_ADDRESS.match(p)]
        check(list(g.pcie_path) == parts[:-1], f"{g.address}: path {list(g.pcie_path)}, sysfs says {parts[:-1]}")
        numa = int(rig.raw(g.address, "numa_node"))
        check(g.numa_node == (None if numa < 0 else numa), f"{g.address}: NUMA {g.numa_node}, sysfs says {numa}")
    whole = placement.best_set(doc, len(doc.gpus))
    check(whole is not None and set(whole.gpus) == set(doc.free), "the whole free set is not placeable")
    check(document.decode(document.encode(doc)) == doc, "the document does not read back")


CASES: dict[str, Callable[[Rig], None]] = {
    case.__name__: case
    for case in (
        vf_count_changes_through_zero,
        sriov_numvfs_kernel_rules,
        vf_count_above_total_refused,
        vfio_bind_and_back,
        raw_kernel_answers,
        pf_without_driver,
        vfio_whole_groups,
        module_parameter_read_back,
        killed_mid_bind_converges,
        killed_mid_vf_change_converges,
        topology_document_matches_sysfs,
    )
}


def run(rig: Rig, name: str) -> tuple[bool, str, float]:
    """Run one case and clean up after it: (passed, message, seconds)."""
    started = time.monotonic()
    try:
        CASES[name](rig)
        ok, message = True, ""
    except Exception as exc:
        ok, message = False, f"{type(exc).__name__}: {exc}"
    try:
        clean(rig)
    except Exception as exc:
        ok, message = False, (message + "; " if message else "") + f"clean-up failed: {type(exc).__name__}: {exc}"
    return ok, message, time.monotonic() - started
