"""Copying the payload image's driver and firmware onto the host, atomically and versioned.

Why: the driver container's image holds the ``.ko`` files, but insmod runs against the host (its kernel,
possibly its mount namespace), so they must sit on the host first, at ``/var/lib/metax/drivers/<version>/``
(`metax_core.node.driver_plan.HOST_DRIVER_DIR`). The copy goes to a hidden sibling directory and is renamed
into place in one step, so a driver-manager killed mid-copy leaves either no version directory or a whole
one; leftovers of an interrupted copy are removed on the next run. A version directory that exists is never
rewritten (versions are immutable), so two rounds never race on it.
"""

from __future__ import annotations

import logging
import pathlib
import shutil
import tempfile

from metax_core.errors import HardwareError
from metax_core.node import driver_plan, policy
from metax_core.node.policy import FirmwareImage

log = logging.getLogger(__name__)

DRIVER_SUBDIR = "driver"
FIRMWARE_SUBDIR = "firmware"


def install_driver(payload_dir: pathlib.Path, host_root: pathlib.Path, version: str) -> pathlib.Path:
    """Make ``/var/lib/metax/drivers/<version>/`` hold the payload's ``.ko`` files; returns the host dir."""
    target = host_root / driver_plan.HOST_DRIVER_DIR.lstrip("/") / version
    if (target / "metax.ko").is_file():
        return target
    source = payload_dir / DRIVER_SUBDIR
    modules = sorted(source.glob("*.ko*")) if source.is_dir() else []
    if not any(m.name.startswith("metax.ko") for m in modules):
        raise HardwareError(
            "install payload driver", version, f"the payload has no metax.ko under {source} (wrong driver image?)"
        )
    _copy_tree(modules, target, f"driver {version}")
    return target


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
