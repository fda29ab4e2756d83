"""The platforms the product's images are built for: linux/amd64 (this machine's own) and linux/arm64.

Why a module of its own: everything that differs between the two lives here, so `metax_dev.images.build` has
one code path. An image for another architecture is made on this machine with Debian's tools: ``mmdebstrap
--arch`` bootstraps its base from the same apt sources, its programs (dpkg's maintainer scripts, ``buildah run``
steps) run under ``qemu-user-static`` through the kernel's binfmt_misc, its wheels are downloaded for its
platform tags, and its static C program (the runtime wrapper) comes from Debian's cross compiler.
"""

from __future__ import annotations

import os
import platform as host
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from metax_dev.images import buildah


@dataclass(frozen=True)
class Platform:
    name: str
    """``linux/arm64``: what ``./run images --platform`` takes and the image configuration says."""
    arch: str
    """Debian's and OCI's name of the architecture (``arm64``)."""
    machine: str
    """The kernel's, the wheels' and the GNU triplet's name (``aarch64``)."""
    elf_machine: int
    """``e_machine`` of its ELF binaries (62 EM_X86_64, 183 EM_AARCH64)."""
    cc: str
    """The C compiler that makes its static binaries."""

    @property
    def slug(self) -> str:
        """``linux-arm64``: the platform in file names and cache keys."""
        return self.name.replace("/", "-")


AMD64: Final = Platform("linux/amd64", "amd64", "x86_64", 62, "gcc")
ARM64: Final = Platform("linux/arm64", "arm64", "aarch64", 183, "aarch64-linux-gnu-gcc")
DEFAULT: Final = AMD64
PLATFORMS: Final = {p.name: p for p in (AMD64, ARM64)}

GLIBC_MINOR: Final = 36
"""Debian bookworm's glibc is 2.36: the newest ``manylinux_2_N`` wheel the image's Python can load."""
BINFMT_MISC: Final = Path("/proc/sys/fs/binfmt_misc")
BINFMT_CONF: Final = Path("/usr/lib/binfmt.d")
"""Where Debian's ``qemu-user-static`` ships its registrations (``qemu-aarch64.conf``), for systemd-binfmt."""


def get(name: str) -> Platform:
    try:
        return PLATFORMS[name]
    except KeyError:
        raise buildah.ImageBuildError(f"unknown platform {name!r}: one of {', '.join(PLATFORMS)}") from None


def parse(spec: str) -> tuple[Platform, ...]:
    """``all``, one platform or a comma list (``linux/amd64,linux/arm64``), in that order, without repeats."""
    if spec.strip() == "all":
        return tuple(PLATFORMS.values())
    names = [n.strip() for n in spec.split(",") if n.strip()]
    if not names:
        raise buildah.ImageBuildError(f"no platform in {spec!r}: one of {', '.join(PLATFORMS)} or all")
    return tuple(dict.fromkeys(get(n) for n in names))


def archive_dir(out: Path, p: Platform) -> Path:
    """Where the platform's archives go: `out` itself for linux/amd64 (what the chart's tests and the e2e
    import), ``out/linux-arm64`` for the other."""
    return out if p == DEFAULT else out / p.slug


def wheel_platforms(p: Platform) -> list[str]:
    """The ``pip download --platform`` tags of the image's Python on `p`, most preferred first (as a native
    pip on bookworm orders them): every ``manylinux_2_N`` down to ``2_17`` = ``manylinux2014``, the oldest
    the locked wheels use (grpcio, cffi, PyYAML: 2014; google-re2: 2_28; cryptography: 2_34 on x86_64)."""
    return [*(f"manylinux_2_{n}_{p.machine}" for n in range(GLIBC_MINOR, 16, -1)), f"manylinux2014_{p.machine}"]


def is_native(p: Platform) -> bool:
    return host.machine() == p.machine


def ensure_emulation(p: Platform, *, binfmt_misc: Path = BINFMT_MISC, conf_dir: Path = BINFMT_CONF) -> None:
    """Make sure this machine runs `p`'s programs: nothing to do natively, else binfmt_misc mounted and
    qemu-user-static's interpreter registered with the F flag (the kernel opens it at registration, so it works
    inside the chroots of mmdebstrap and ``buildah run``, which do not have it). Registers it from Debian's
    ``.conf`` when it is not registered yet; an existing registration is used as is if it can serve."""
    if is_native(p):
        return
    conf = conf_dir / f"qemu-{p.machine}.conf"
    if not conf.is_file():
        raise buildah.ImageBuildError(
            f"{p.name}: {conf} is missing: install Debian's qemu-user-static (./run installs it) to run "
            f"{p.machine} programs on this {host.machine()} machine"
        )
    line = next(
        (s.strip() for s in conf.read_text().splitlines() if s.strip() and not s.lstrip().startswith(("#", ";"))), ""
    )
    fields = line[1:].split(line[:1]) if line else []
    if len(fields) != 7:
        raise buildah.ImageBuildError(
            f"{conf}: not a binfmt_misc registration (:name:type:offset:magic:mask:interpreter:flags)"
        )
    name, interpreter, flags = fields[0], fields[5], fields[6]
    if "F" not in flags:
        line = line[: len(line) - len(flags)] + flags + "F"
    if not (binfmt_misc / "register").exists():
        try:
            buildah.run(["mount", "-t", "binfmt_misc", "binfmt_misc", str(binfmt_misc)], "mount binfmt_misc")
        except buildah.ImageBuildError as exc:
            raise buildah.ImageBuildError(
                f"{p.name}: binfmt_misc is not mounted at {binfmt_misc} and mounting it failed (root and a kernel "
                f"with binfmt_misc are needed to run {p.machine} programs): {exc}"
            ) from exc
    entry = binfmt_misc / name
    if not entry.exists():
        if not os.path.exists(interpreter):
            raise buildah.ImageBuildError(
                f"{p.name}: {interpreter} (from {conf}) is missing: reinstall qemu-user-static"
            )
        try:
            (binfmt_misc / "register").write_text(line)
        except OSError as exc:
            raise buildah.ImageBuildError(
                f"{p.name}: cannot register {name} with {binfmt_misc / 'register'} ({exc}): root in the machine's "
                "own user namespace is needed (a container must have it registered by its host, with the F flag)"
            ) from exc
        if not entry.exists():
            raise buildah.ImageBuildError(f"{p.name}: wrote {line!r} to {binfmt_misc / 'register'}: no {entry} came")
    state = entry.read_text().splitlines()
    entry_flags = next((s.split(":", 1)[1].strip() for s in state if s.startswith("flags:")), "")
    problem = "disabled" if not state or state[0] != "enabled" else "" if "F" in entry_flags else "without the F flag"
    if problem:
        raise buildah.ImageBuildError(
            f"{p.name}: {entry} is registered but {problem} (flags {entry_flags!r}): chroots cannot reach its "
            f"interpreter; `echo -1 > {entry}` and build again"
        )
    if (binfmt_misc / "status").read_text().strip() != "enabled":
        raise buildah.ImageBuildError(f"{p.name}: binfmt_misc is disabled ({binfmt_misc / 'status'}): echo 1 to it")
