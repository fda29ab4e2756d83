"""Copying the payload image's driver and firmware onto the host, atomically and versioned
(`metax_core.ports.node.DriverPayload`, driver-manager's).

Why: the driver container's image holds the ``.ko`` files, but insmod runs against the host (its kernel,
possibly its mount namespace), so they must sit on the host first, at
``/var/lib/metax/drivers/<version>/<kernel-release>/`` (`metax_core.node.payload_layout`, which also says
how the image keeps one module per kernel and which one the running kernel takes). The copy goes to a
hidden sibling directory and is renamed into place in one step, so a driver-manager killed mid-copy leaves
either no directory or a whole one; leftovers of an interrupted copy are removed on the next run. A
directory that exists is never rewritten (versions are immutable), so two rounds never race on it.
"""

from __future__ import annotations

import logging
import os
import pathlib
import shutil
import tempfile
from collections.abc import Callable

from metax_core.errors import HardwareError
from metax_core.node import driver_plan, payload_layout, policy
from metax_core.node.policy import FirmwareImage

log = logging.getLogger(__name__)

DRIVER_SUBDIR = payload_layout.DRIVER_SUBDIR
FIRMWARE_SUBDIR = payload_layout.FIRMWARE_SUBDIR


class HostDriverPayload:
    """The payload at ``payload_dir`` (the driver container's own files) and its copies under ``host_root``."""

    def __init__(self, payload_dir: pathlib.Path, host_root: pathlib.Path) -> None:
        self.payload_dir = payload_dir
        self.host_root = host_root

    def modules(self, vermagic: Callable[[str], payload_layout.Vermagic]) -> list[payload_layout.PayloadModule]:
        return payload_modules(self.payload_dir, vermagic)

    def install_driver(self, version: str, choice: payload_layout.ModuleChoice) -> str:
        return install_driver(self.payload_dir, self.host_root, version, choice)

    def install_user_space(self, version: str) -> bool:
        return install_user_space(self.payload_dir, self.host_root, version)

    def point_current(self, running_version: str | None) -> str | None:
        return point_current(self.host_root, running_version)

    def vbios(self, enable_virt: bool) -> str | None:
        return payload_vbios(self.payload_dir, enable_virt)

    def install_firmware(self, image: policy.FirmwareImage) -> str:
        return install_firmware(self.payload_dir, self.host_root, image)


def payload_modules(
    payload_dir: pathlib.Path, vermagic: Callable[[str], payload_layout.Vermagic]
) -> list[payload_layout.PayloadModule]:
    """Every ``metax.ko`` of the payload (the flat one and one per kernel directory) with its vermagic."""
    driver = payload_dir / DRIVER_SUBDIR
    found: list[payload_layout.PayloadModule] = []
    locations = [payload_layout.FLAT]
    if driver.is_dir():
        locations += sorted(d.name for d in driver.iterdir() if d.is_dir() and _release_dir(d.name))
    for location in locations:
        file = driver / location / payload_layout.MODULE_FILE if location else driver / payload_layout.MODULE_FILE
        if not file.is_file():
            continue
        try:
            found.append(payload_layout.PayloadModule(location, vermagic(str(file))))
        except HardwareError as exc:
            found.append(payload_layout.PayloadModule(location, None, exc.detail))
    return found


def _release_dir(name: str) -> bool:
    try:
        payload_layout.check_release(name)
    except ValueError:
        return False
    return not name.startswith(".")


def install_driver(
    payload_dir: pathlib.Path, host_root: pathlib.Path, version: str, choice: payload_layout.ModuleChoice
) -> str:
    """Make the host hold the chosen kernel's ``.ko`` files of driver ``version``; returns the module's
    host-absolute path (for insmod)."""
    host_path = payload_layout.host_module_path(version, choice.release)
    target = host_root / host_path.lstrip("/")
    if target.is_file():
        return host_path
    source = (payload_dir / choice.module.relpath).parent
    files = sorted(f for f in source.glob("*.ko*") if f.is_file())
    if not any(f.name == payload_layout.MODULE_FILE for f in files):
        raise HardwareError(
            "install payload driver", version, f"the payload has no {payload_layout.MODULE_FILE} under {source}"
        )
    _copy_tree(files, target.parent, f"driver {version} for {choice.release}")
    return host_path


def _copy_tree(files: list[pathlib.Path], target: pathlib.Path, what: str) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    for stale in target.parent.glob(f".{target.name}.*.partial"):
        shutil.rmtree(stale, ignore_errors=True)
    staging: pathlib.Path | None = None
    try:
        staging = pathlib.Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}.", suffix=".partial"))
        for f in files:
            shutil.copy2(f, staging / f.name)
        staging.chmod(0o755)
        staging.rename(target)
    except OSError as exc:
        if staging is not None:
            shutil.rmtree(staging, ignore_errors=True)
        if target.is_dir():
            return  # another round finished first: versions are immutable
        raise HardwareError("install payload", what, f"cannot copy to {target}: {exc}") from exc
    log.info("installed %s at %s", what, target)


def install_user_space(payload_dir: pathlib.Path, host_root: pathlib.Path, version: str) -> bool:
    """Stage the payload's ``bin/`` and ``lib/`` (the driver's tools and library: mx-smi, libmxsml) as driver
    ``version``'s on the host, each once (versions are immutable); False when the payload brings neither."""
    brought = False
    for sub in payload_layout.USER_SPACE:
        source = payload_dir / sub
        files = sorted(f for f in source.iterdir() if f.is_file()) if source.is_dir() else []
        if not files:
            continue
        brought = True
        target = host_root / payload_layout.host_version_dir(version).lstrip("/") / sub
        if not target.is_dir():
            _copy_tree(files, target, f"driver {version}'s {sub}/")
    return brought


def point_current(host_root: pathlib.Path, running_version: str | None) -> str | None:
    """Point `payload_layout.HOST_CURRENT` at the running driver's staged user space, or remove it when that
    driver brought none (`payload_layout.current_link`); replaced in one rename, so an agent never finds it half
    made. Returns where it points."""
    drivers = host_root / payload_layout.HOST_DRIVER_DIR.lstrip("/")
    staged = (
        [
            d.name
            for d in drivers.iterdir()
            if not d.is_symlink() and any((d / sub).is_dir() for sub in payload_layout.USER_SPACE)
        ]
        if drivers.is_dir()
        else []
    )
    wanted = payload_layout.current_link(running_version, staged)
    link = host_root / payload_layout.HOST_CURRENT.lstrip("/")
    current = os.readlink(link) if link.is_symlink() else None
    if current == wanted:
        return wanted
    try:
        if wanted is None:
            link.unlink(missing_ok=True)
        else:
            fresh = link.with_name(f".{link.name}.new")
            fresh.unlink(missing_ok=True)
            fresh.symlink_to(wanted)
            fresh.rename(link)
    except OSError as exc:
        raise HardwareError("point the driver's user space", str(link), str(exc)) from exc
    log.info("the driver's user space at %s: %s", payload_layout.HOST_CURRENT, wanted or "none (removed)")
    return wanted


def firmware_version(payload_dir: pathlib.Path, image: FirmwareImage) -> tuple[str, pathlib.Path] | None:
    """(VBIOS version, file) of the payload's firmware image of this build, from ``mxvbios-<version>.bin``."""
    directory = payload_dir / FIRMWARE_SUBDIR / image.value
    found = sorted(directory.glob("mxvbios-*.bin")) if directory.is_dir() else []
    if not found:
        return None
    path = found[-1]
    return path.name.removeprefix("mxvbios-").removesuffix(".bin"), path


def payload_vbios(payload_dir: pathlib.Path, enable_virt: bool) -> str | None:
    image = FirmwareImage.VIRT if enable_virt else FirmwareImage.NON_VIRT
    found = firmware_version(payload_dir, image)
    return found[0] if found else None


def install_firmware(payload_dir: pathlib.Path, host_root: pathlib.Path, image: policy.FirmwareImage) -> str:
    """Copy the payload's firmware image to the host; returns its host-absolute path."""
    found = firmware_version(payload_dir, image)
    if found is None:
        raise HardwareError("install payload firmware", image.value, f"the payload has no {image.value} image")
    version, source = found
    host_dir = f"{driver_plan.HOST_FIRMWARE_DIR}/{version}/{image.value}"
    target = host_root / host_dir.lstrip("/")
    if not (target / source.name).is_file():
        _copy_tree([source], target, f"firmware {version} ({image.value})")
    return f"{host_dir}/{source.name}"
