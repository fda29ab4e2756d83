"""Where things live in a fake host root, and the small filesystem moves the fake kernel makes.

Why: the builder, the fake kernel and the fake tools must agree on every path, and sysfs is made of
*relative* symlinks (so the tree stays inside its root wherever it is mounted). Standard library only: the
fake tools import this at every call.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

PRIVATE = ".metax-fake"
"""The fake's own area under the root (state, lock, tools); the real adapter never reads it."""

PCI_ADDRESS = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")


def private(root: Path) -> Path:
    return root / PRIVATE


def state_file(root: Path) -> Path:
    return private(root) / "state.json"


def lock_file(root: Path) -> Path:
    return private(root) / "lock"


def bin_dir(root: Path) -> Path:
    return private(root) / "bin"


MXSML_LIBRARY = "opt/mxdriver/lib/libmxsml.so"
"""Where the fake libmxsml goes when a test installs it (`metax_hw_fake.mxsml`): the library's usual place."""


def mxsml_state(root: Path) -> Path:
    """The fake libmxsml's state file (next to the library: it finds it from its own path)."""
    return root / (MXSML_LIBRARY + ".state")


def bus(root: Path) -> Path:
    return root / "sys" / "bus" / "pci"


def devices_dir(root: Path) -> Path:
    return bus(root) / "devices"


def drivers_dir(root: Path) -> Path:
    return bus(root) / "drivers"


def iommu_groups(root: Path) -> Path:
    return root / "sys" / "kernel" / "iommu_groups"


def module_dir(root: Path, module: str) -> Path:
    return root / "sys" / "module" / module.replace("-", "_")


def dev(root: Path) -> Path:
    return root / "dev"


def modules_root(root: Path, release: str) -> Path:
    return root / "lib" / "modules" / release


def address(domain: int, bus_no: int, device: int, function: int) -> str:
    return f"{domain:04x}:{bus_no:02x}:{device:02x}.{function:x}"


def split_address(text: str) -> tuple[int, int, int, int]:
    domain, bus_no, rest = text.split(":")
    device, function = rest.split(".")
    return int(domain, 16), int(bus_no, 16), int(device, 16), int(function, 16)


def relink(link: Path, target: Path) -> None:
    """Make ``link`` a relative symlink to ``target`` (replacing whatever was there)."""
    if link.is_symlink() or link.exists():
        link.unlink()
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(os.path.relpath(target, link.parent))


def unlink(path: Path) -> None:
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.is_dir():
        shutil.rmtree(path)


def put(path: Path, value: str | bytes) -> None:
    """Write an attribute file as the kernel would show it (text gets a trailing newline)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(value, bytes):
        path.write_bytes(value)
    else:
        path.write_text(value if value.endswith("\n") else value + "\n")


def get(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except (FileNotFoundError, NotADirectoryError):
        return None


def link_name(path: Path) -> str | None:
    try:
        return Path(os.readlink(path)).name
    except OSError:
        return None


def real_dir(root: Path, path: Path) -> Path:
    """Resolve symlinks of ``path`` and check the result stays under ``root`` (the fake only makes relative links)."""
    resolved = Path(os.path.realpath(path))
    resolved.relative_to(Path(os.path.realpath(root)))
    return resolved
