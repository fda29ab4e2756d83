"""Debian's stock kernel for the real-kernel tests: resolved, fetched, unpacked and cached, never installed.

Why: the hardware adapter's writes (``sriov_numvfs``, ``driver_override``, ``bind``, ...) must meet a real
kernel, and the one administrators run is a distribution's. The version is resolved from the
``linux-image-amd64`` meta-package at run time (security updates replace it), the package is fetched with
``apt-get download`` and unpacked with ``dpkg-deb -x`` into ``~/.cache/metax-operator/realkernel/<package>_<version>``.
The cache keeps only what a boot needs: the uncompressed ``vmlinux`` (booting it through its PVH entry skips
the slow in-guest decompression under TCG) and the few modules the tests load, with kmod's ``depmod``
indexes (so the guest's modprobe resolves dependencies and soft dependencies as on a real node).
"""

from __future__ import annotations

import lzma
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterable
from pathlib import Path

import attrs

META_PACKAGE = "linux-image-amd64"
CACHE = Path(os.environ.get("METAX_REALKERNEL_CACHE", Path.home() / ".cache/metax-operator/realkernel"))

BOOT_MODULES = ("virtio_pci", "9pnet_virtio", "9p", "nvme")
"""Loaded by the guest's init with busybox insmod, in dependency order, before anything else runs."""
TEST_MODULES = ("vfio-pci", "vfio_iommu_type1", "brd")
"""Loaded by the tests themselves, through the adapter (kmod's modprobe)."""

_XZ_MAGIC = b"\xfd7zXZ\x00"


@attrs.frozen
class Kernel:
    """A cached kernel: ``vmlinux``, the module tree root (``<dir>/lib/modules/<release>``) and its release."""

    directory: Path
    release: str
    package: str
    version: str

    @property
    def vmlinux(self) -> Path:
        return self.directory / "vmlinux"

    @property
    def modules(self) -> Path:
        return self.directory / "lib" / "modules" / self.release

    def boot_module_files(self, names: Iterable[str] = BOOT_MODULES) -> list[Path]:
        """The boot modules and their dependencies, dependencies first (from modules.dep)."""
        deps = _read_modules_dep(self.modules / "modules.dep")
        by_name = {_module_name(p): p for p in deps}
        ordered: list[str] = []

        def visit(path: str) -> None:
            for dep in deps[path]:
                visit(dep)
            if path not in ordered:
                ordered.append(path)

        for name in names:
            visit(by_name[name])
        return [self.modules / p for p in ordered]


def _module_name(path: str) -> str:
    return Path(path).name.split(".ko")[0].replace("-", "_")


def _read_modules_dep(path: Path) -> dict[str, list[str]]:
    deps: dict[str, list[str]] = {}
    for line in path.read_text().splitlines():
        module, _, rest = line.partition(":")
        deps[module.strip()] = rest.split()
    return deps


def _run(argv: list[str], cwd: Path | None = None) -> str:
    done = subprocess.run(
        argv, cwd=cwd, capture_output=True, text=True, timeout=600, check=False, env=dict(os.environ, LC_ALL="C")
    )
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} exited with {done.returncode}: {done.stderr.strip()[-2000:]}")
    return done.stdout


def resolve_package() -> tuple[str, str]:
    """``(linux-image-6.1.0-57-amd64, 6.1.192-3)``: the package the meta-package depends on, and its version.
    Runs ``apt-get update`` once when the package lists do not know the meta-package."""
    for attempt in range(2):
        try:
            depends = _run(["apt-cache", "depends", META_PACKAGE])
            match = re.search(r"Depends:\s*(linux-image-\S+)", depends)
            if match is None:
                raise RuntimeError(f"apt-cache depends {META_PACKAGE} names no linux-image package: {depends!r}")
            package = match.group(1)
            policy = _run(["apt-cache", "policy", package])
            candidate = re.search(r"Candidate:\s*(\S+)", policy)
            if candidate is None or candidate.group(1) == "(none)":
                raise RuntimeError(f"apt has no candidate for {package}")
            return package, candidate.group(1)
        except RuntimeError:
            if attempt:
                raise
            _run(["apt-get", "update", "-qq"])
    raise AssertionError("unreachable")


def extract_vmlinux(bzimage: bytes) -> bytes:
    """The ELF kernel inside an xz-compressed bzImage (Debian's CONFIG_KERNEL_XZ)."""
    start = bzimage.find(_XZ_MAGIC)
    while start >= 0:
        try:
            elf = lzma.LZMADecompressor(format=lzma.FORMAT_XZ, memlimit=None).decompress(bzimage[start:])
        except lzma.LZMAError:
            elf = b""
        if elf.startswith(b"\x7fELF"):
            return elf
        start = bzimage.find(_XZ_MAGIC, start + 1)
    raise RuntimeError("no xz-compressed ELF kernel found in the bzImage")


def _closure(tree: Path, names: Iterable[str]) -> set[Path]:
    """The module files for ``names`` plus everything they depend on (``depends=`` and soft dependencies)."""
    files = {_module_name(str(p)): p for p in tree.rglob("*.ko*")}
    wanted: set[Path] = set()
    pending = [n.replace("-", "_") for n in names]
    while pending:
        name = pending.pop()
        path = files.get(name)
        if path is None or path in wanted:
            continue
        wanted.add(path)
        info = _run(["modinfo", "-F", "depends", str(path)]) + "," + _run(["modinfo", "-F", "softdep", str(path)])
        for token in re.split(r"[,\s]+", info):
            if token and not token.endswith(":"):
                pending.append(token.replace("-", "_"))
    return wanted


def fetch(cache: Path = CACHE) -> Kernel:
    """The resolved kernel, from the cache or fetched into it (a ``complete`` stamp marks a finished entry).
    A download that fails (stale package lists) is retried once after ``apt-get update``; entries of older
    versions are removed once the new one is in place."""
    try:
        return _fetch(cache, *resolve_package())
    except RuntimeError:
        _run(["apt-get", "update", "-qq"])
        return _fetch(cache, *resolve_package())


def _fetch(cache: Path, package: str, version: str) -> Kernel:
    directory = cache / f"{package}_{version}"
    stamp = directory / "complete"
    if stamp.exists():
        return Kernel(directory, stamp.read_text().strip(), package, version)
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache, prefix=".fetch-") as scratch:
        work = Path(scratch)
        _run(["apt-get", "download", f"{package}={version}"], cwd=work)
        deb = next(work.glob("*.deb"))
        _run(["dpkg-deb", "-x", str(deb), str(work / "x")])
        releases = os.listdir(work / "x/lib/modules")
        if len(releases) != 1:
            raise RuntimeError(f"{deb.name} holds {len(releases)} module trees: {releases}")
        release = releases[0]
        tree = work / "x/lib/modules" / release
        staged = work / "entry"
        target = staged / "lib/modules" / release
        for path in _closure(tree, BOOT_MODULES + TEST_MODULES):
            dest = target / path.relative_to(tree)
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, dest)
        for name in ("modules.order", "modules.builtin", "modules.builtin.modinfo"):
            if (tree / name).exists():
                shutil.copy2(tree / name, target / name)
        _run(["depmod", "-b", str(staged), release])
        bzimage = next((work / "x/boot").glob("vmlinuz-*")).read_bytes()
        (staged / "vmlinux").write_bytes(extract_vmlinux(bzimage))
        (staged / "complete").write_text(release + "\n")
        if not stamp.exists():  # else another session finished first: keep its entry
            if directory.exists():
                shutil.rmtree(directory)
            os.replace(staged, directory)
    for old in cache.iterdir():
        if old != directory and not old.name.startswith(".") and (old / "complete").exists():
            shutil.rmtree(old, ignore_errors=True)
    return Kernel(directory, stamp.read_text().strip(), package, version)
