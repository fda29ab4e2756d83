"""The three layers of the product's images, each built by ``buildah`` and cached on exactly its inputs.

Why a module of its own: `metax_dev.images.build` decides what to build (keys, the archives, their SBOMs); this
is how each layer is made, for any platform of `metax_dev.images.platforms`:

1. **base** — Debian's Essential set plus ``images.toml``'s packages, made by ``mmdebstrap --arch`` (Debian's
   package-set bootstrapper) from this machine's own apt mirror, with ``SOURCE_DATE_EPOCH`` (bit-for-bit
   reproducible output), Python's standard library compiled to unchecked-hash bytecode. Key: the platform,
   the definition, the mirror lines, the mmdebstrap version.
2. **deps** — a virtual environment at ``/opt/metax`` with every dependency of ``requirements.lock`` installed
   from wheels downloaded on the host for the image's platform (pip runs from its own wheel, mounted for the
   run: no pip in the image). Key: the base key, the lock file, pip's version.
3. **app** — the project's own wheel and the runtime wrapper (static C, compiled for the platform).

Another architecture's programs (maintainer scripts, ``buildah run`` steps) run under qemu-user through
binfmt_misc (`platforms.ensure_emulation`). Both platforms' layers live in the same buildah storage, named
``localhost/metax-build/<platform>/<layer>:<key>``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import sys
import tempfile
import zipfile
from collections.abc import Sequence
from pathlib import Path
from typing import Final

from metax_core.runtime import handler
from metax_dev import wrapper
from metax_dev.images import buildah, definitions, platforms

logger = logging.getLogger(__name__)

PIP_VERSION: Final = "25.3"
"""The pip that installs the wheels inside the image (run from its wheel, never installed there)."""
RECIPE: Final = "6"
"""Bumped when this module changes what a layer holds (it is part of every cache key)."""
PYTHON: Final = "/usr/bin/python3"


def digest(*parts: object) -> str:
    return hashlib.sha256(json.dumps([str(p) for p in parts]).encode()).hexdigest()[:20]


def _mmdebstrap_version() -> str:
    return buildah.run(["mmdebstrap", "--version"], "mmdebstrap --version").strip()


def _layer_name(p: platforms.Platform, layer: str, key: str) -> str:
    return f"localhost/metax-build/{p.slug}/{layer}:{key}"


def base_key(defs: definitions.Definitions, p: platforms.Platform) -> tuple[str, list[str]]:
    sources = definitions.apt_sources(defs.base.suite)
    if not sources:
        raise buildah.ImageBuildError(
            f"no Debian apt source for {defs.base.suite} (main) in /etc/apt: cannot bootstrap the base"
        )
    return digest(RECIPE, p.name, defs.base, sources, _mmdebstrap_version()), sources


def base_tarball(cache: Path, p: platforms.Platform, key: str) -> Path:
    """mmdebstrap's output, kept in the cache: the base image is made again from it without the mirror."""
    return cache / f"base-{p.slug}-{key}.tar"


def base(
    b: buildah.Buildah, defs: definitions.Definitions, cache: Path, p: platforms.Platform, key: str, sources: list[str]
) -> str:
    """The base image of `key` (`base_key`), bootstrapped unless the storage has it."""
    base = defs.base
    name = _layer_name(p, "base", key)
    if b.has_image(name):
        return name
    platforms.ensure_emulation(p)
    tar = base_tarball(cache, p, key)
    if not tar.exists():
        logger.info(
            "base (%s): mmdebstrap %s %s (+%s) from this machine's apt sources",
            p.name,
            base.suite,
            base.variant,
            base.packages,
        )
        tmp = tar.with_suffix(".tmp.tar")
        compile_stdlib = (
            'chroot "$1" env PYTHONHASHSEED=0 python3 -m compileall -q -f --invalidation-mode unchecked-hash '
            "/usr/lib/python3.11 /usr/lib/python3/dist-packages >/dev/null"
        )
        argv = [
            "mmdebstrap",
            "--mode=root",
            f"--arch={p.arch}",
            f"--variant={base.variant}",
            "--hook-dir=/usr/share/mmdebstrap/hooks/merged-usr",
            f"--include={','.join(base.packages)}",
            *(f"--dpkgopt=path-exclude={x}" for x in base.exclude),
            *(f"--dpkgopt=path-include={x}" for x in base.include),
            f"--customize-hook={compile_stdlib}",
            # /lib/modules is the host's, mounted at /host/lib/modules (docs/hardware.md, "Tools").
            '--customize-hook=rm -rf "$1/usr/lib/modules" && ln -s /host/lib/modules "$1/usr/lib/modules"',
            '--customize-hook=rm -f "$1/etc/machine-id" "$1/var/lib/dbus/machine-id"; : > "$1/etc/machine-id"',
            "--skip=output/dev",
            base.suite,
            str(tmp),
            *sources,
        ]
        buildah.run(argv, f"base (mmdebstrap, {p.name})", env=dict(os.environ, SOURCE_DATE_EPOCH=str(base.epoch)))
        tmp.rename(tar)
    container = b("from", "--quiet", "--platform", p.name, "scratch", step="base: buildah from scratch")
    mount = b("mount", container, step="base: buildah mount")
    buildah.run(["tar", "-xpf", str(tar), "--numeric-owner", "-C", mount], "base: unpack the root filesystem")
    # apt is not in the image (variant essential); mmdebstrap leaves its state directories (and lock files) behind.
    for leftover in ("var/cache/apt", "var/lib/apt", "var/log/apt"):
        shutil.rmtree(Path(mount) / leftover, ignore_errors=True)
    b("umount", container, step="base: buildah umount")
    b("config", "--os", "linux", "--arch", p.arch, container, step="base: buildah config")
    b.commit(container, name, base.epoch, step="base: buildah commit")
    return name


def prune(b: buildah.Buildah, cache: Path, p: platforms.Platform, keep: Sequence[str]) -> None:
    """Drop `p`'s base and dependency images, base tarballs and wheelhouses of older inputs (each is a full copy;
    another platform's stay), and those of the layout before platforms were part of the names."""
    others = [o.slug for o in platforms.PLATFORMS.values() if o != p]

    def stale(name: str) -> bool:
        return name not in keep and not any(f"{o}/" in name or f"-{o}-" in name for o in others)

    names = b("images", "--format", "{{.Name}}:{{.Tag}}", step="buildah images").split()
    for name in names:
        if name.startswith("localhost/metax-build/") and stale(name):
            b("rmi", name, step=f"buildah rmi {name}")
    for path in [*cache.glob("base-*.tar"), *cache.glob("wheels-*")]:
        if stale(path.name) and path.is_dir():
            shutil.rmtree(path)
        elif stale(path.name):
            path.unlink()


def wheelhouse_path(defs: definitions.Definitions, cache: Path, p: platforms.Platform) -> Path:
    tags = platforms.wheel_platforms(p)
    lock = hashlib.sha256(defs.app.lock.read_bytes() + " ".join(tags).encode()).hexdigest()[:16]
    return cache / f"wheels-{p.slug}-{lock}-pip{PIP_VERSION}"


def wheelhouse(defs: definitions.Definitions, cache: Path, p: platforms.Platform) -> Path:
    """The locked wheels for the image's Python (CPython 3.11) on `p`, and pip's own, downloaded once: the pure
    ones are the same files on every platform, the others are `p`'s (`platforms.wheel_platforms`)."""
    house = wheelhouse_path(defs, cache, p)
    if house.is_dir():
        return house
    tags = platforms.wheel_platforms(p)
    tmp = Path(tempfile.mkdtemp(dir=cache, prefix=".wheels."))
    pip = [sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check", "--no-deps"]
    target = ["--python-version", "3.11", "--implementation", "cp", "--abi", "cp311", "--only-binary=:all:"]
    target += [f"--platform={t}" for t in tags]
    buildah.run([*pip, *target, "-r", str(defs.app.lock), "-d", str(tmp)], f"deps: pip download (lock, {p.name})")
    buildah.run([*pip, f"pip=={PIP_VERSION}", "-d", str(tmp / "pip")], "deps: pip download (pip)")
    shutil.copy(defs.app.lock, tmp / "requirements.lock")
    tmp.rename(house)
    return house


def deps_key(defs: definitions.Definitions, base_key: str) -> str:
    return digest(RECIPE, base_key, defs.app.lock.read_text(), PIP_VERSION, defs.app.venv)


def deps(
    b: buildah.Buildah, defs: definitions.Definitions, cache: Path, p: platforms.Platform, base: str, key: str
) -> str:
    """The dependency image of `key` (`deps_key`) on `base`, unless the storage has it."""
    name = _layer_name(p, "deps", key)
    if b.has_image(name):
        return name
    house = wheelhouse(defs, cache, p)
    platforms.ensure_emulation(p)
    venv = defs.app.venv
    container = b("from", "--quiet", "--platform", p.name, base, step="deps: buildah from")
    b.run(container, [PYTHON, "-m", "venv", "--without-pip", venv], step="deps: venv")
    pip = [f"{venv}/bin/python", f"/wheels/pip/pip-{PIP_VERSION}-py3-none-any.whl/pip", "install", "--no-index"]
    pip += ["--no-compile", "--no-cache-dir", "--disable-pip-version-check", "--only-binary=:all:"]
    b.run(
        container,
        [*pip, "--find-links", "/wheels", "-r", "/wheels/requirements.lock"],
        step="deps: pip install",
        volumes=[f"{house}:/wheels:ro"],
    )
    site = f"{venv}/lib/python3.11/site-packages"
    b.run(
        container,
        [f"{venv}/bin/python", "-m", "compileall", "-q", "--invalidation-mode", "unchecked-hash", site],
        step="deps: compile bytecode",
    )
    b.commit(container, name, defs.base.epoch, step="deps: buildah commit")
    return name


def app(
    b: buildah.Buildah, container: str, defs: definitions.Definitions, p: platforms.Platform, house: Path, wheel: Path
) -> None:
    """Install the project's `wheel` into `container` (the deps image's), its bytecode and the runtime wrapper."""
    platforms.ensure_emulation(p)
    venv = defs.app.venv
    pip = [f"{venv}/bin/python", f"/wheels/pip/pip-{PIP_VERSION}-py3-none-any.whl/pip", "install", "--no-index"]
    pip += ["--no-compile", "--no-cache-dir", "--disable-pip-version-check", "--no-deps"]
    b.run(
        container,
        [*pip, f"/dist/{wheel.name}"],
        step="app: pip install (the project)",
        volumes=[f"{house}:/wheels:ro", f"{wheel.parent}:/dist:ro"],
    )
    site = f"{venv}/lib/python3.11/site-packages"
    packages = [f"{site}/{p}" for p in wheel_packages(wheel)]
    compile_argv = [f"{venv}/bin/python", "-m", "compileall", "-q", "--invalidation-mode", "unchecked-hash"]
    b.run(container, [*compile_argv, *packages], step="app: compile bytecode")
    # The runtime wrapper runs on the host (the node's runtime executes it): static C, compiled here on the build
    # host (Debian's cross compiler for another architecture) so the image carries no compiler; the
    # container-runtime agent installs it from this path.
    try:
        binary = str(wrapper.build(cc=p.cc))
    except wrapper.WrapperBuildError as exc:
        raise buildah.ImageBuildError(f"app: the runtime wrapper for {p.name}: {exc}") from exc
    b("copy", "--chmod", "0755", container, binary, handler.WRAPPER_IMAGE_PATH, step="app: copy the runtime wrapper")


def wheel_packages(wheel: Path) -> list[str]:
    """The top-level packages of a wheel (its directories other than ``*.dist-info``), sorted."""
    with zipfile.ZipFile(wheel) as z:
        tops = sorted({n.split("/", 1)[0] for n in z.namelist() if "/" in n})
    return [t for t in tops if not t.endswith(".dist-info")]
