"""A driver payload's layout, and which of its kernel modules the running kernel takes (R-DRIVER).

Why: a driver image is built once and runs on nodes with different kernels, and after a kernel update a node
may run a kernel the image was never built for. The kernel refuses (or, with matching symbol CRCs, may even
accept) a module built for another release, so driver-manager must choose by the module's own version magic
(``modinfo -F vermagic``) before it touches the running driver, and say plainly which kernels the image covers
when it covers none. One owner for the layout: the build tooling (`metax_dev.payload`) writes it, driver-manager
(`metax_hw.driver_payload`) reads it.

The layout inside the image (``METAX_PAYLOAD_DIR``, default ``/payload``)::

    driver/<kernel-release>/metax.ko        one directory per kernel the image covers (+ any other .ko)
    driver/metax.ko                         the older flat form: one kernel, whatever its vermagic says
    firmware/{virt,non-virt}/mxvbios-<v>.bin
    bin/mx-smi                              the driver's own tools (MetaX's mx-smi), for this driver version
    lib/libmxsml.so                         the driver's management library (what mx-smi and mx-exporter use)

and on the host, where insmod reads it: ``/var/lib/metax/drivers/<version>/<kernel-release>/metax.ko``.

The user space: MetaX's ``mx-smi`` and ``libmxsml`` are not in Debian and not redistributable, so no agent image
carries them; they come with the driver they belong to (a tool talks to the driver of its own version).
driver-manager stages a payload's ``bin/`` and ``lib/`` at ``/var/lib/metax/drivers/<version>/`` and points
`HOST_CURRENT` at the running driver's version; every agent that runs ``mx-smi`` mounts ``/var/lib/metax``
(000 §1.3.2: files the driver shares) and searches `HOST_TOOLS_DIR` before its own PATH
(`metax_hw.tools.driver_tools_path`); the data-exporter loads `HOST_LIBRARY` first (`metax_core.metrics.sources`).
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs

DRIVER_SUBDIR = "driver"
FIRMWARE_SUBDIR = "firmware"
MODULE_FILE = "metax.ko"
"""The driver's module file in each kernel's directory (its sysfs name is ``metax``)."""
HOST_DRIVER_DIR = "/var/lib/metax/drivers"
"""Where payload drivers are staged on the host, per driver version and kernel release."""
TOOLS_SUBDIR = "bin"
"""The payload's (and each staged version's) directory of the driver's user-space tools."""
LIBRARY_SUBDIR = "lib"
"""The payload's (and each staged version's) directory of the driver's user-space libraries."""
USER_SPACE = (TOOLS_SUBDIR, LIBRARY_SUBDIR)
CURRENT = "current"
HOST_CURRENT = f"{HOST_DRIVER_DIR}/{CURRENT}"
"""A link to ``<version>``, the running driver's staged directory (absent while a version runs that brought no
user space): where the agents find the driver's tools and library."""
HOST_TOOLS_DIR = f"{HOST_CURRENT}/{TOOLS_SUBDIR}"
HOST_LIBRARY = f"{HOST_CURRENT}/{LIBRARY_SUBDIR}/libmxsml.so"
FLAT = ""
"""The `PayloadModule.location` of a module directly under ``driver/`` (the older one-kernel form)."""


def module_relpath(release: str) -> str:
    """``driver/<release>/metax.ko``: where a payload keeps its module for kernel ``release``."""
    check_release(release)
    return f"{DRIVER_SUBDIR}/{release}/{MODULE_FILE}"


def host_module_path(version: str, release: str) -> str:
    """Host-absolute path of the staged module of driver ``version`` for kernel ``release``."""
    check_release(release)
    return f"{HOST_DRIVER_DIR}/{version}/{release}/{MODULE_FILE}"


def host_version_dir(version: str) -> str:
    """Host-absolute directory of driver ``version``'s staged files (its modules and user space)."""
    if not version or version in (".", "..", CURRENT) or "/" in version or any(c.isspace() for c in version):
        raise ValueError(f"driver version {version!r}: expected one path component like 2.18.0")
    return f"{HOST_DRIVER_DIR}/{version}"


def current_link(running_version: str | None, staged: Sequence[str]) -> str | None:
    """Where `HOST_CURRENT` points: the running driver's version directory (relative to `HOST_DRIVER_DIR`, so the
    link resolves wherever the host is mounted) when that version brought user space (``staged``), else None (no
    link) — a tool or library of another version may not speak to the running driver."""
    if running_version is None or running_version not in staged:
        return None
    return running_version


def check_release(release: str) -> None:
    """A kernel release names one directory: no ``/``, not empty, not ``.``/``..``, no spaces."""
    if not release or release in (".", "..") or "/" in release or any(c.isspace() for c in release):
        raise ValueError(f"kernel release {release!r}: expected one path component like 6.1.0-57-amd64")


@attrs.frozen
class Vermagic:
    """A module's version magic: the kernel release it was built for and the build's flags.

    ``6.1.0-57-amd64 SMP preempt mod_unload modversions`` → release ``6.1.0-57-amd64``, flags
    ``("SMP", "preempt", "mod_unload", "modversions")``. The kernel compares the flags always and the release
    unless symbol versions (modversions) are on, when it checks each symbol's CRC instead; we require both,
    since a module is only ever tested on the release it was built for.
    """

    release: str
    flags: tuple[str, ...] = ()

    @classmethod
    def parse(cls, text: str) -> Vermagic:
        words = text.split()
        if not words:
            raise ValueError("empty vermagic (modinfo printed no vermagic: not a kernel module?)")
        return cls(words[0], tuple(words[1:]))

    def __str__(self) -> str:
        return " ".join((self.release, *self.flags))


@attrs.frozen
class PayloadModule:
    """One candidate module in a payload: where it is (`FLAT` or the release directory) and what it says."""

    location: str
    vermagic: Vermagic | None
    """None: modinfo could not read it (``problem`` says why)."""
    problem: str | None = None

    @property
    def relpath(self) -> str:
        if self.location == FLAT:
            return f"{DRIVER_SUBDIR}/{MODULE_FILE}"
        return module_relpath(self.location)


@attrs.frozen
class RunningKernel:
    release: str
    vermagic: Vermagic | None = None
    """The flags of the running kernel's own modules (None: unknown, the release alone decides)."""


@attrs.frozen
class ModuleChoice:
    module: PayloadModule
    release: str
    """The running kernel's release: the host directory the module is staged in."""


@attrs.frozen
class KernelNotCovered:
    """The payload has no module for the running kernel: the driver stays as it is, not ready."""

    running: str
    covered: tuple[str, ...]
    """The vermagic of each readable module, sorted (what the image was built for)."""
    detail: str = ""

    @property
    def message(self) -> str:
        kernels = ", ".join(self.covered) if self.covered else "no kernel (no readable metax.ko under driver/)"
        text = (
            f"the driver payload has no module for the running kernel {self.running}; it covers {kernels}. "
            "Use a driver image built for this kernel, or boot a kernel it covers"
        )
        return f"{text} ({self.detail})" if self.detail else text


def choose_module(modules: Sequence[PayloadModule], running: RunningKernel) -> ModuleChoice | KernelNotCovered:
    """The module whose vermagic is the running kernel's, or why there is none.

    A module matches when its release is the running release and, when the running kernel's flags are known,
    its flags are the same. A release directory wins over the flat form; the directory's name itself is not
    trusted, only the module's vermagic (a module filed under the wrong release is never loaded).
    """
    readable = [m for m in modules if m.vermagic is not None]
    matching = [m for m in readable if _matches(m.vermagic, running)]
    if matching:
        best = sorted(matching, key=lambda m: (m.location == FLAT, m.location != running.release, m.location))[0]
        return ModuleChoice(best, running.release)
    notes: list[str] = []
    same_release = [m for m in readable if m.vermagic is not None and m.vermagic.release == running.release]
    if same_release and running.vermagic is not None:
        notes.append(
            f"{same_release[0].relpath} is built for {same_release[0].vermagic}, "
            f"the running kernel's modules for {running.vermagic}"
        )
    notes += [f"{m.relpath}: {m.problem}" for m in modules if m.vermagic is None and m.problem]
    covered = tuple(sorted({str(m.vermagic) for m in readable if m.vermagic is not None}))
    return KernelNotCovered(running.release, covered, "; ".join(notes))


def _matches(magic: Vermagic | None, running: RunningKernel) -> bool:
    if magic is None or magic.release != running.release:
        return False
    return running.vermagic is None or magic.flags == running.vermagic.flags
