"""The host's sysfs (and /dev) under a root path: reads, symlinks resolved inside the root, and one write.

Why this module exists: every adapter needs the same few things — a host path mapped under the root, an
attribute read that tolerates a missing file, a symlink resolved *inside* the root (sysfs is a forest of
relative links, and an absolute link must not escape a fake or container root), and `OSError` turned into
`HardwareError` with the kernel's words. Above all, every write goes through one injectable primitive,
`SysfsWriter`: the real one is a single write(2); the fake host injects one that gives the write its kernel
effect. The sequence logic (override, unbind, probe, verify) therefore stays in the real adapter.
"""

from __future__ import annotations

import errno
import logging
import os
from collections.abc import Callable
from pathlib import Path, PurePosixPath

from metax_core import errors
from metax_core.wire import host

logger = logging.getLogger(__name__)

SysfsWriter = Callable[[Path, str], None]
"""Write ``value`` to the sysfs attribute at ``path`` (a path under the root) or raise OSError as the kernel
would (EBUSY, ENODEV, EINVAL, ...)."""

_MAX_LINK_HOPS = 40


def write_attribute(path: Path, value: str) -> None:
    """The real primitive: the whole value in one write(2), as sysfs attributes require."""
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, value.encode())
    finally:
        os.close(fd)


def describe_os_error(exc: OSError) -> str:
    """The kernel's message for an OSError (``Device or resource busy``), with the errno name."""
    name = errno.errorcode.get(exc.errno, "") if exc.errno is not None else ""
    text = exc.strerror or str(exc)
    return f"{text} ({name})" if name else text


class HostTree:
    """Paths under a host root, with reads, in-root symlink resolution and the one write primitive."""

    def __init__(self, root: Path | str, writer: SysfsWriter | None = None) -> None:
        self.root = Path(root).absolute()
        self._writer: SysfsWriter = writer if writer is not None else write_attribute

    def path(self, host_path: str) -> Path:
        """``/sys/bus/pci`` -> ``<root>/sys/bus/pci``."""
        return self.root / host_path.lstrip("/")

    def host_path(self, path: Path) -> str:
        """``<root>/dev/dri/card0`` -> ``/dev/dri/card0`` (what the host itself calls it)."""
        try:
            rel = path.relative_to(self.root)
        except ValueError:
            return str(path)
        return "/" + str(rel) if str(rel) != "." else "/"

    def read(self, path: Path, *, operation: str, device: str | None) -> str | None:
        """The stripped text of an attribute, or None when it does not exist."""
        try:
            return path.read_text(errors="replace").strip()
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as exc:
            raise errors.HardwareError(
                operation, device, f"reading {self.host_path(path)}: {describe_os_error(exc)}"
            ) from exc

    def read_int(self, path: Path, *, operation: str, device: str | None) -> int | None:
        """An integer attribute in any base sysfs uses (``0x9999``, ``-1``, ``16``); None when missing."""
        text = self.read(path, operation=operation, device=device)
        if text is None or text == "":
            return None
        try:
            return int(text, 0)
        except ValueError:
            try:
                return int(text, 16)
            except ValueError as exc:
                raise errors.HardwareError(
                    operation, device, f"{self.host_path(path)} holds {text!r}, not a number"
                ) from exc

    def read_bytes(self, path: Path, size: int, *, operation: str, device: str | None) -> bytes | None:
        """The first ``size`` bytes of a binary attribute (PCI ``config``); None when it does not exist."""
        try:
            with path.open("rb") as f:
                return f.read(size)
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as exc:
            raise errors.HardwareError(
                operation, device, f"reading {self.host_path(path)}: {describe_os_error(exc)}"
            ) from exc

    def link_name(self, path: Path) -> str | None:
        """The last component of a symlink's target (``driver`` -> ``vfio-pci``); None when no link."""
        try:
            return PurePosixPath(os.readlink(path)).name
        except (FileNotFoundError, NotADirectoryError, OSError):
            return None

    def listdir(self, path: Path) -> list[str]:
        """Sorted entries of a directory; empty when it does not exist."""
        try:
            return sorted(os.listdir(path))
        except (FileNotFoundError, NotADirectoryError):
            return []

    def resolve(self, path: Path) -> Path:
        """Resolve every symlink in ``path`` as if ``root`` were ``/`` (absolute targets stay inside)."""
        try:
            pending = list(path.relative_to(self.root).parts)
        except ValueError:
            pending = list(path.parts[1:])
        current: list[str] = []
        hops = 0
        while pending:
            part = pending.pop(0)
            if part in ("", "."):
                continue
            if part == "..":
                if current:
                    current.pop()
                continue
            candidate = self.root.joinpath(*current, part)
            if candidate.is_symlink():
                hops += 1
                if hops > _MAX_LINK_HOPS:
                    raise OSError(errno.ELOOP, "Too many levels of symbolic links", str(path))
                target = PurePosixPath(os.readlink(candidate))
                if target.is_absolute():
                    current = []
                    pending = list(target.parts[1:]) + pending
                else:
                    pending = list(target.parts) + pending
            else:
                current.append(part)
        return self.root.joinpath(*current)

    def write(self, path: Path, value: str, *, operation: str, device: str | None) -> None:
        """Write through the injected primitive; the kernel's refusal becomes a HardwareError."""
        logger.debug("sysfs write %s <- %r", self.host_path(path), value)
        try:
            self._writer(path, value)
        except OSError as exc:
            shown = value.strip() or "(empty)"
            raise errors.HardwareError(
                operation, device, f"writing {shown} to {self.host_path(path)}: {describe_os_error(exc)}"
            ) from exc


def mounted_tree(root: Path | str, writer: SysfsWriter | None = None) -> HostTree:
    """The host tree at ``root``, refusing one without ``/sys``: an agent whose pod lacks its host mounts says so
    once, at start, instead of reporting an empty host."""
    tree = HostTree(root, writer)
    if not tree.path(host.SYS).is_dir():
        raise errors.HardwareError(
            "open the host",
            None,
            f"{tree.path(host.SYS)} does not exist: the host's /sys is not mounted under {tree.root}",
        )
    return tree
