"""The fake kernel's sysfs store handlers: the `SysfsWriter` the fake host injects into the real adapter.

Why: the real adapter does every write through one primitive (`metax_hw.sysfs.SysfsWriter`). Injecting
`FakeKernel.write` gives each write the effect the kernel's store handler would have — and only the writable
attributes the kernel has: anything else is EACCES, as for a read-only sysfs file. The path is resolved
the way the kernel's VFS would, so ``devices/<a>/driver/unbind`` reaches the driver's ``unbind``.
Standard library only.
"""

from __future__ import annotations

import errno
import logging
from pathlib import Path

from metax_hw_fake import layout, pcidev, state

logger = logging.getLogger(__name__)


def _device_id_pair(value: str) -> list[int]:
    fields = value.split()
    if len(fields) < 2:
        raise pcidev.oserror(errno.EINVAL)
    try:
        return [int(fields[0], 16), int(fields[1], 16)]
    except ValueError:
        raise pcidev.oserror(errno.EINVAL) from None


class FakeKernel:
    """Gives sysfs writes under ``root`` their kernel effect (callable as a `SysfsWriter`)."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root).absolute()

    def __call__(self, path: Path, value: str) -> None:
        self.write(path, value)

    def write(self, path: Path, value: str) -> None:
        with state.transaction(self.root) as st:
            self._write(st, Path(path), value)
        logger.debug("fake kernel: %s <- %r", path, value)

    def _write(self, st: state.State, path: Path, value: str) -> None:
        root = self.root
        try:
            parent = layout.real_dir(root, path.parent)
        except (FileNotFoundError, ValueError):
            raise pcidev.oserror(errno.ENOENT, path) from None
        if not (parent / path.name).exists():
            raise pcidev.oserror(errno.ENOENT, path)
        attr, text = path.name, value.strip()
        if parent == layout.real_dir(root, layout.bus(root)):
            if attr == "drivers_probe":
                if not pcidev.exists(root, text):
                    raise pcidev.oserror(errno.ENODEV, path)
                pcidev.probe(root, st, text)
                return
            if attr == "rescan":
                return
        elif parent.parent == layout.real_dir(root, layout.drivers_dir(root)):
            self._driver_attribute(st, parent.name, attr, text, path)
            return
        elif layout.PCI_ADDRESS.match(parent.name) and (parent / "vendor").exists():
            addr = parent.name
            if attr == "driver_override":
                pcidev.set_override(root, addr, value)
                return
            if attr == "sriov_numvfs":
                pcidev.set_numvfs(root, st, addr, text)
                return
            if attr == "sriov_drivers_autoprobe":
                if text not in ("0", "1"):
                    raise pcidev.oserror(errno.EINVAL, path)
                layout.put(parent / attr, text)
                return
            if attr == "remove":
                if text == "1":
                    pcidev.remove_function(root, st, addr)
                return
        raise pcidev.oserror(errno.EACCES, path)

    def _driver_attribute(self, st: state.State, driver: str, attr: str, text: str, path: Path) -> None:
        root = self.root
        if attr in ("bind", "unbind"):
            if not pcidev.exists(root, text):
                raise pcidev.oserror(errno.ENODEV, path)
            if attr == "bind":
                pcidev.bind(root, st, text, driver)
            else:
                pcidev.unbind(root, st, text, driver)
            return
        if attr == "new_id":
            pair = _device_id_pair(text)
            table = st["driver_ids"].setdefault(driver, [])
            if pair in table:
                raise pcidev.oserror(errno.EEXIST, path)
            table.append(pair)
            for entry in sorted(layout.devices_dir(root).iterdir()):
                unclaimed = pcidev.driver_of(root, entry.name) is None and pcidev.override_of(root, entry.name) is None
                if unclaimed and pcidev.claims(root, st, driver, entry.name):
                    pcidev.probe(root, st, entry.name)
            return
        if attr == "remove_id":
            pair = _device_id_pair(text)
            table = st["driver_ids"].get(driver, [])
            if pair not in table:
                raise pcidev.oserror(errno.ENODEV, path)
            table.remove(pair)
            return
        raise pcidev.oserror(errno.EACCES, path)
