"""The test driver payload: a real out-of-tree module built against Debian's kernel headers, for several kernels.

Why: driver-manager chooses the payload's module by its vermagic (`metax_core.node.payload_layout`) and insmods
it on the host's kernel; that must be shown on a real kernel with a real module, and MetaX's own driver is not
redistributable here. So the module in ``metax_dev/kmodule/`` (the driver's sysfs name ``metax``, a version,
its parameters) is compiled with Debian's ``gcc-12`` (the compiler Debian builds its kernels with) against

- the headers of the kernel the QEMU tests boot (``linux-headers-<release>``, ``linux-headers-<abi>-common``
  and ``linux-kbuild-<major.minor>`` at the image's version), and
- a second kernel, the previous ABI still on the mirror (``6.1.0-56-amd64`` next to ``6.1.0-57-amd64``): the
  kernel a node ran before its update, which is what a payload built for it is missing after one; when the
  mirror carries one ABI only (after a point release), the booted kernel's headers re-stamped as the previous
  ABI (`other_kernel`, `restamped`).

Packages are fetched with ``apt-get download`` and unpacked with ``dpkg-deb -x`` (nothing is installed), the
build is ``make -C <headers> M=<copy of the source>``, and each module is cached under
``~/.cache/metax-operator/kpayload/modules/<key>/metax.ko``, keyed on the source, the header packages'
versions, the compiler and the module's version: a warm call builds nothing and asks apt nothing (cached
headers are found by release); entries of kernels no longer built are removed.

The payload is written in the layout driver-manager reads (`assemble`) and as the image form the driver
DaemonSet consumes (`write_image`: an OCI archive whose ``/payload`` its init container copies, with busybox
for that ``sh -c 'cp -a'``). ``python -m metax_dev.kpayload --out DIR [--release R ...]`` builds it by hand.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import attrs

from metax_core.cluster import payloads
from metax_core.node import payload_layout
from metax_dev import cachedir

SOURCE = Path(__file__).resolve().parent / "kmodule"
COMPILER = "gcc-12"
_RELEASE = re.compile(r"^(\d+\.\d+)\.(\d+)-(\d+)-(.+)$")


def cache_root() -> Path:
    return cachedir.cache_dir("kpayload")


def _run(argv: Sequence[str], cwd: Path | None = None) -> str:
    done = subprocess.run(
        list(argv), cwd=cwd, capture_output=True, text=True, timeout=900, check=False, env=dict(os.environ, LC_ALL="C")
    )
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} exited with {done.returncode}: {(done.stderr or done.stdout)[-3000:]}")
    return done.stdout


@attrs.frozen
class Headers:
    """Debian's build tree for one kernel release, unpacked: ``make -C`` this ``tree``."""

    release: str
    packages: tuple[str, ...]
    """``name=version`` of every package unpacked (the cache key)."""
    root: Path

    @property
    def tree(self) -> Path:
        return self.root / "usr" / "src" / f"linux-headers-{self.release}"


def candidate(package: str) -> str | None:
    """apt's candidate version of ``package`` (None: apt does not know it)."""
    try:
        policy = _run(["apt-cache", "policy", package])
    except RuntimeError:
        return None
    found = re.search(r"Candidate:\s*(\S+)", policy)
    return None if found is None or found.group(1) == "(none)" else found.group(1)


def header_packages(release: str, version: str | None = None) -> list[str]:
    """``name=version`` of the headers for ``release`` (at ``version``, else apt's candidate) and what they
    need to build a module: the ``-common`` tree and ``linux-kbuild``, from the package's Depends."""
    name = f"linux-headers-{release}"
    version = version or candidate(name)
    if version is None:
        raise RuntimeError(f"apt knows no {name} (run apt-get update, or the mirror dropped that kernel)")
    show = _run(["apt-cache", "show", f"{name}={version}"])
    depends = re.search(r"^Depends:\s*(.+)$", show, re.MULTILINE)
    wanted = [f"{name}={version}"]
    for dep in (depends.group(1) if depends else "").split(","):
        dep_name = dep.strip().split(" ", 1)[0]
        if dep_name.startswith("linux-headers-") and dep_name.endswith("-common"):
            wanted.append(f"{dep_name}={version}")
        elif dep_name.startswith("linux-kbuild-"):
            kbuild = candidate(dep_name)
            if kbuild is None:
                raise RuntimeError(f"apt has no candidate for {dep_name}, which {name} needs")
            wanted.append(f"{dep_name}={kbuild}")
    if len(wanted) != 3:
        raise RuntimeError(f"{name}={version} depends on no -common/kbuild package pair: {depends}")
    return wanted


def previous_release(release: str, tries: int = 6, cache: Path | None = None) -> str:
    """The newest older ABI of ``release``'s flavour whose headers are cached or apt still has
    (``6.1.0-57-amd64`` → ``6.1.0-56-amd64``): the kernel a node ran before its update."""
    match = _RELEASE.match(release)
    if match is None:
        raise RuntimeError(f"kernel release {release!r} is not Debian's <major.minor.0>-<abi>-<flavour>")
    base, patch, abi, flavour = match.group(1), match.group(2), int(match.group(3)), match.group(4)
    older = [f"{base}.{patch}-{n}-{flavour}" for n in range(abi - 1, max(0, abi - 1 - tries), -1)]
    for other in older:
        if _cached_headers(other, None, cache) is not None:
            return other
    for other in older:
        if candidate(f"linux-headers-{other}") is not None:
            return other
    raise RuntimeError(f"apt has no linux-headers of an older ABI than {release} (tried {tries})")


def other_kernel(release: str, cache: Path | None = None) -> Headers:
    """Headers of a kernel other than ``release``: the previous ABI's (`previous_release`) while the mirror
    still has them, else ``release``'s own headers re-stamped as the previous ABI (`restamped`).

    Why the fallback: Debian's mirror drops an ABI's packages when the next point release replaces it, and
    then, for a while, carries one ABI only; the refusal test must not depend on that moment. A re-stamped
    build is a module whose vermagic names another release, which is all driver-manager's choice reads
    (`metax_core.node.payload_layout.choose_module`); the kernel's own check is not what keeps it out either way
    (docs/hardware.md, "a module for another kernel")."""
    try:
        return fetch_headers(previous_release(release, cache=cache), cache=cache)
    except RuntimeError:
        match = _RELEASE.match(release)
        if match is None:
            raise
        base, patch, abi, flavour = match.group(1), match.group(2), int(match.group(3)), match.group(4)
        return restamped(fetch_headers(release, cache=cache), f"{base}.{patch}-{abi - 1}-{flavour}", cache)


def restamped(headers: Headers, release: str, cache: Path | None = None) -> Headers:
    """A copy of ``headers``' arch tree (3 MB; the -common tree it includes stays shared) whose kernel release
    is ``release``: ``include/generated/utsrelease.h`` and ``include/config/kernel.release``, which is where
    Kbuild takes a module's vermagic release from."""
    key = hashlib.sha256("\n".join([*headers.packages, release]).encode()).hexdigest()[:16]
    directory = (cache or cache_root()) / "headers" / f"{release}_restamped-{key}"
    if (directory / "complete").is_file():
        return Headers(release, (*headers.packages, f"restamped={release}"), directory)
    arch = headers.tree
    directory.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=directory.parent, prefix=".restamp-") as scratch:
        root = Path(scratch) / "root"
        tree = root / "usr" / "src" / f"linux-headers-{release}"
        shutil.copytree(arch, tree, symlinks=True)
        for link in [p for p in tree.iterdir() if p.is_symlink()]:  # scripts, tools: into the original's kbuild
            target = (arch / os.readlink(link)).resolve()
            link.unlink()
            link.symlink_to(target)
        (tree / "include/generated/utsrelease.h").write_text(f'#define UTS_RELEASE "{release}"\n')
        kernel_release = tree / "include/config/kernel.release"
        if kernel_release.exists():
            kernel_release.write_text(release + "\n")
        (root / "complete").write_text(f"restamped {headers.release} as {release}\n")
        if directory.exists():
            shutil.rmtree(directory)
        os.replace(root, directory)
    return Headers(release, (*headers.packages, f"restamped={release}"), directory)


def _cached_headers(release: str, version: str | None, cache: Path | None) -> Headers | None:
    """A finished cache entry for ``release`` (at ``version`` when given): no apt lookup on a warm run."""
    base = (cache or cache_root()) / "headers"
    for entry in sorted(base.glob(f"{release}_*")) if base.is_dir() else []:
        stamp = entry / "complete"
        if not stamp.is_file():
            continue
        packages = tuple(stamp.read_text().split())
        if version is None or f"linux-headers-{release}={version}" in packages:
            return Headers(release, packages, entry)
    return None


def fetch_headers(release: str, version: str | None = None, cache: Path | None = None) -> Headers:
    """The unpacked headers of ``release``, from the cache or fetched into it (a ``complete`` stamp)."""
    cached = _cached_headers(release, version, cache)
    if cached is not None:
        return cached
    packages = header_packages(release, version)
    key = hashlib.sha256("\n".join(packages).encode()).hexdigest()[:16]
    base = (cache or cache_root()) / "headers"
    directory = base / f"{release}_{key}"
    if (directory / "complete").exists():
        return Headers(release, tuple(packages), directory)
    base.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=base, prefix=".fetch-") as scratch:
        work = Path(scratch)
        (work / "debs").mkdir()
        _run(["apt-get", "download", *packages], cwd=work / "debs")
        root = work / "root"
        for deb in sorted((work / "debs").glob("*.deb")):
            _run(["dpkg-deb", "-x", str(deb), str(root)])
        arch_makefile = root / "usr" / "src" / f"linux-headers-{release}" / "Makefile"
        # Debian's arch tree includes the -common tree by its absolute /usr/src path: point it at our copy.
        text = arch_makefile.read_text()
        arch_makefile.write_text(text.replace("/usr/src/", f"{directory}/usr/src/"))
        (root / "complete").write_text("\n".join(packages) + "\n")
        if directory.exists():
            shutil.rmtree(directory)
        os.replace(root, directory)
    return Headers(release, tuple(packages), directory)


def compiler_version() -> str:
    return _run([COMPILER, "--version"]).splitlines()[0]


def build_module(headers: Headers, version: str, cache: Path | None = None) -> Path:
    """``metax.ko`` of driver ``version`` for ``headers.release``: cached, else ``make -C`` in a copy."""
    digest = hashlib.sha256()
    for source in sorted(SOURCE.iterdir()):
        digest.update(source.name.encode() + b"\0" + source.read_bytes())
    digest.update("\n".join([*headers.packages, compiler_version(), version]).encode())
    directory = (cache or cache_root()) / "modules" / f"{headers.release}_{digest.hexdigest()[:16]}"
    module = directory / payload_layout.MODULE_FILE
    if module.is_file():
        return module
    directory.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=directory.parent, prefix=".build-") as scratch:
        work = Path(scratch) / "src"
        shutil.copytree(SOURCE, work)
        _run(["make", "-C", str(headers.tree), f"M={work}", f"METAX_TEST_VERSION={version}", "modules"])
        out = Path(scratch) / "out"
        out.mkdir()
        shutil.copy2(work / payload_layout.MODULE_FILE, out / payload_layout.MODULE_FILE)
        if not module.is_file():
            os.replace(out, directory)
    return module


def build_modules(
    releases: Sequence[str], version: str, *, image_version: str | None = None, others: Sequence[Headers] = ()
) -> dict[str, Path]:
    """One module per kernel release; the first release's headers at ``image_version`` (the booted image's
    package version), the others at apt's candidate; plus one per headers of ``others`` (`other_kernel`)."""
    built = {
        r: build_module(fetch_headers(r, image_version if i == 0 else None), version) for i, r in enumerate(releases)
    }
    built |= {h.release: build_module(h, version) for h in others}
    prune(built.values())
    return built


def prune(keep: Iterable[Path], cache: Path | None = None) -> None:
    """Remove cached headers and modules of kernels not in use any more (the cache follows kernel updates)."""
    modules = {p.parent for p in keep}
    releases = {d.name.rsplit("_", 1)[0] for d in modules}
    root = cache or cache_root()
    for entry in sorted((root / "modules").glob("*_*")) if (root / "modules").is_dir() else []:
        if entry not in modules and entry.name.rsplit("_", 1)[0] not in releases:
            shutil.rmtree(entry, ignore_errors=True)
    for entry in sorted((root / "headers").glob("*_*")) if (root / "headers").is_dir() else []:
        if entry.name.rsplit("_", 1)[0] not in releases:
            shutil.rmtree(entry, ignore_errors=True)


def assemble(target: Path, modules: Mapping[str, Path]) -> Path:
    """A payload directory in driver-manager's layout: ``driver/<release>/metax.ko`` per kernel."""
    for release, module in sorted(modules.items()):
        dest = target / payload_layout.module_relpath(release)
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(module, dest)
    return target


def write_image(archive: Path, name: str, payload: Path) -> Path:
    """The payload as the driver DaemonSet consumes it: an OCI archive with the tree at ``/payload`` and
    busybox for the init container's ``sh -c 'mkdir -p … && cp -a /payload/. …'``."""
    from metax_dev.realnode import images  # the small OCI writer for test images

    busybox = images.BUSYBOX
    entries = [images.Entry("bin/busybox", busybox)]
    entries += [images.Entry(f"bin/{a}", link="busybox") for a in ("sh", "cp", "mkdir")]
    root = payloads.PAYLOAD_SOURCE.strip("/")
    files = sorted(p for p in payload.rglob("*") if p.is_file())
    entries += [images.Entry(f"{root}/{p.relative_to(payload)}", p, mode=0o644) for p in files]
    dirs = sorted({f"{root}/{d.relative_to(payload)}" for d in payload.rglob("*") if d.is_dir()})
    archive.parent.mkdir(parents=True, exist_ok=True)
    return images.write_image(archive, name, entries, directories=["bin", root, *dirs], cmd=["sh"])


def unpack_image(archive: Path, target: Path) -> Path:
    """The image's ``/payload`` tree copied out of its archive into ``target``, as the init container's
    ``cp -a /payload/.`` leaves it in the agent's ``METAX_PAYLOAD_DIR``."""
    root = payloads.PAYLOAD_SOURCE.strip("/") + "/"
    with tarfile.open(archive) as tar:
        index = json.loads(_member(tar, "index.json"))
        manifest = json.loads(_member(tar, _blob_name(index["manifests"][0]["digest"])))
        for layer in manifest["layers"]:
            with tarfile.open(fileobj=io.BytesIO(_member(tar, _blob_name(layer["digest"])))) as files:
                for entry in files.getmembers():
                    if entry.isfile() and entry.name.startswith(root):
                        dest = target / entry.name[len(root) :]
                        dest.parent.mkdir(parents=True, exist_ok=True)
                        dest.write_bytes(_member(files, entry.name))
    return target


def _blob_name(digest: str) -> str:
    algorithm, _, hexdigest = digest.partition(":")
    return f"blobs/{algorithm}/{hexdigest}"


def _member(tar: tarfile.TarFile, name: str) -> bytes:
    extracted = tar.extractfile(name)
    if extracted is None:
        raise RuntimeError(f"{name} is not a file in the image archive")
    return extracted.read()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m metax_dev.kpayload", description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="directory for payload/ and payload.tar")
    parser.add_argument("--release", action="append", help="kernel release (repeat); default: the booted image's")
    parser.add_argument("--version", default="2.20.0", help="the driver version the module reports")
    args = parser.parse_args(argv)
    releases = args.release or []
    others: list[Headers] = []
    if not releases:
        depends = _run(["apt-cache", "depends", "linux-image-amd64"])
        found = re.search(r"Depends:\s*linux-image-(\S+)", depends)
        if found is None:
            parser.error("cannot resolve linux-image-amd64's kernel: give --release")
        releases = [found.group(1)]
        others = [other_kernel(found.group(1))]
    modules = build_modules(releases, args.version, others=others)
    payload = assemble(args.out / "payload", modules)
    tar = write_image(args.out / "payload.tar", f"metax.test/driver-payload:{args.version}", payload)
    print(tar)
    return 0


if __name__ == "__main__":
    sys.exit(main())
