"""A fake host's files, byte by byte, to compare a host before install with the same host after uninstall.

Why here: the uninstall promise (R-INSTALL, "files it wrote included") is checked on every fake host the
tests build, by the services tests and by the tests on the real control plane alike, with one definition
of "identical": every path under the root (files by content and mode, symlinks by target, directories by
mode), except the fake's own area (``.metax-fake``: the fake kernel's memory, its lock and its tools,
which no host file stands for; the kernel's view of modules and devices is compared through ``/sys`` and
``/dev``). Standard library only.
"""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Iterable, Mapping
from pathlib import Path

from metax_hw_fake import layout

Snapshot = dict[str, str]
"""Host-root relative path → ``file <mode> <sha256>``, ``link <target>`` or ``dir <mode>``."""


def take(root: Path, *, skip: Iterable[str] = ()) -> Snapshot:
    """Every path under ``root`` except the fake's own area and the ``skip`` prefixes (host-root relative)."""
    prefixes = (layout.PRIVATE, *skip)
    found: Snapshot = {}
    for directory, dirs, files in os.walk(root):
        for name in sorted([*dirs, *files]):
            path = Path(directory) / name
            rel = str(path.relative_to(root))
            if any(rel == p or rel.startswith(p.rstrip("/") + "/") for p in prefixes):
                continue
            info = path.lstat()
            mode = oct(stat.S_IMODE(info.st_mode))
            if stat.S_ISLNK(info.st_mode):
                found[rel] = f"link {os.readlink(path)}"
            elif stat.S_ISDIR(info.st_mode):
                found[rel] = f"dir {mode}"
            elif stat.S_ISSOCK(info.st_mode):
                found[rel] = f"socket {mode}"
            else:
                found[rel] = f"file {mode} {hashlib.sha256(path.read_bytes()).hexdigest()}"
    return found


def diff(before: Mapping[str, str], after: Mapping[str, str]) -> list[str]:
    """One line per path that differs: ``+ path`` (added), ``- path`` (gone), ``~ path: before -> after``."""
    lines = []
    for path in sorted(set(before) | set(after)):
        old, new = before.get(path), after.get(path)
        if old == new:
            continue
        if old is None:
            lines.append(f"+ {path} ({new})")
        elif new is None:
            lines.append(f"- {path} ({old})")
        else:
            lines.append(f"~ {path}: {old} -> {new}")
    return lines
