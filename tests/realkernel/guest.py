"""The program the QEMU guest runs: every hardware case against the real kernel, results on the console.

Why: the host cannot see the guest's sysfs, only its serial console. This program opens the real adapter on
``/`` for QEMU's NVMe controller (vendor 0x1b36, device 0x0010; its PF driver is ``nvme``), runs each case
of `tests.realkernel.hwcases` once, then driver-manager's payload cases (`tests.realkernel.payloadcases`),
and prints one ``@@RK <json>`` line per case plus facts the documentation quotes (VF offset/stride, IOMMU
groups, how long disabling VFs took). The host parses those lines.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from metax_core.inventory import FunctionKind
from metax_hw import host, sysfs
from tests.realkernel import hwcases, payloadcases

MARKER = "@@RK "
PAYLOADS_ENV = "METAX_RK_PAYLOADS"
"""Where the host staged the unpacked test payloads (`payloadcases`); unset: no payload cases."""
VENDOR, DEVICE, PF_DRIVER = 0x1B36, 0x0010, "nvme"


def say(record: dict[str, object]) -> None:
    sys.stdout.write(MARKER + json.dumps(record, sort_keys=True) + "\n")
    sys.stdout.flush()


def adapter(writer: sysfs.SysfsWriter | None = None) -> host.Host:
    return host.open_host(
        "/",
        vendor_id=VENDOR,
        device_ids=[DEVICE],
        native_driver=PF_DRIVER,
        writer=writer,
        net_source=host.NetSource.SYSFS,
    )


def facts(rig: hwcases.Rig) -> dict[str, object]:
    started = time.monotonic()
    rig.hw.binder.set_vf_count(rig.pf, 2, drivers_autoprobe=False)
    enable = time.monotonic() - started
    vfs = rig.hw.devices.function(rig.pf).vfs
    groups = {a: rig.hw.devices.function(a).iommu_group for a in [rig.pf, *vfs]}
    started = time.monotonic()
    rig.hw.binder.set_vf_count(rig.pf, 0)
    disable = time.monotonic() - started
    return {
        "pf": rig.pf,
        "vfs": list(vfs),
        "iommu_groups": groups,
        "sriov": {
            a: rig.raw(rig.pf, a)
            for a in ("sriov_totalvfs", "sriov_offset", "sriov_stride", "sriov_vf_device", "vendor", "device")
        },
        "enable_2_vfs_s": round(enable, 2),
        "disable_2_vfs_s": round(disable, 2),
    }


def main(argv: list[str]) -> int:
    selected = argv or list(hwcases.CASES)
    hw = adapter()
    pfs = [f for f in hw.devices.functions() if f.kind is FunctionKind.PF and f.sriov_totalvfs]
    say({"pfs": [f.address for f in pfs]})
    if not pfs:
        say({"fatal": "no SR-IOV capable NVMe PF in the guest"})
        return 1
    rig = hwcases.Rig(hw=hw, pf=pfs[0].address, write=sysfs.write_attribute, reopen=adapter)
    try:
        say({"facts": facts(rig)})
    except Exception as exc:
        say({"facts_error": f"{type(exc).__name__}: {exc}"})
    for name in selected:
        ok, message, seconds = hwcases.run(rig, name)
        say({"case": name, "ok": ok, "message": message, "seconds": round(seconds, 2)})
    payloads = os.environ.get(PAYLOADS_ENV)
    if payloads:
        payloadcases.run_all(Path(payloads), say)
    say({"done": True})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
