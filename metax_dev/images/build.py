"""Building the product's images from nothing with Debian's tools, cached layer by layer and reproducibly.

Why this module exists: the chart and the operator reference ``<registry>/metax-*:<version>`` images; this is
what makes them on a machine with no container registry (docs/images.md). Three layers, each cached on
exactly its inputs:

1. **base** — Debian's Essential set plus ``images.toml``'s packages, made by ``mmdebstrap`` (Debian's
   package-set bootstrapper) from this machine's own apt mirror, with ``SOURCE_DATE_EPOCH`` (bit-for-bit
   reproducible output), Python's standard library compiled to unchecked-hash bytecode. Key: the definition,
   the mirror lines, the mmdebstrap version.
2. **deps** — a virtual environment at ``/opt/metax`` with every dependency of ``requirements.lock`` installed
   from wheels downloaded on the host (pip runs from its own wheel, mounted for the run: no pip in the image).
   Key: the base key, the lock file, pip's version.
3. **app** — the project's own wheel (built from the working tree), bytecode compiled. Rebuilt when a source
   file changes; the images (one per component, the same layers, their own entrypoint and user) are then
   committed from it as OCI archives.

Every layer is committed by ``buildah`` (vfs storage in the cache, no daemon, ``--timestamp``), so building
twice from the same commit gives the same digests (tests/images/test_build.py checks it).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import platform
import shutil
import sys
import tarfile
import tempfile
import time
import tomllib
import zipfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from metax_core.runtime import handler
from metax_core.wire import meta
from metax_dev import cachedir, wrapper
from metax_dev.images import buildah, definitions

logger = logging.getLogger(__name__)

PIP_VERSION: Final = "25.3"
"""The pip that installs the wheels inside the image (run from its wheel, never installed there)."""
RECIPE: Final = "5"
"""Bumped when this module changes what a layer holds (it is part of every cache key)."""
DEFAULT_OUT: Final = definitions.REPO / "build" / "images"
PYTHON: Final = "/usr/bin/python3"
PATH_ENV: Final = "/opt/metax/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


@dataclass(frozen=True)
class Built:
    archives: dict[str, Path]
    """Image name -> its OCI archive."""
    digests: dict[str, str]
    """Image name -> its manifest digest (what ``ctr images ls`` shows)."""
    references: dict[str, str]
    seconds: float
    cached: bool
    """True when nothing had to be rebuilt (the archives of a previous build were reused)."""


def cache_root() -> Path:
    return cachedir.cache_dir("images", "METAX_IMAGES_CACHE")


def _digest(*parts: object) -> str:
    return hashlib.sha256(json.dumps([str(p) for p in parts]).encode()).hexdigest()[:20]


@contextlib.contextmanager
def _locked(root: Path) -> Iterator[None]:
    root.mkdir(parents=True, exist_ok=True)
    with open(root / ".lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def _mmdebstrap_version() -> str:
    return buildah.run(["mmdebstrap", "--version"], "mmdebstrap --version").strip()


def _base(b: buildah.Buildah, defs: definitions.Definitions, cache: Path) -> tuple[str, str]:
    base = defs.base
    sources = definitions.apt_sources(base.suite)
    if not sources:
        raise buildah.ImageBuildError(
            f"no Debian apt source for {base.suite} (main) in /etc/apt: cannot bootstrap the base"
        )
    key = _digest(RECIPE, base, sources, _mmdebstrap_version())
    name = f"localhost/metax-build/base:{key}"
    if b.has_image(name):
        return name, key
    tar = cache / f"base-{key}.tar"
    if not tar.exists():
        logger.info(
            "base: mmdebstrap %s %s (+%s) from this machine's apt sources", base.suite, base.variant, base.packages
        )
        tmp = tar.with_suffix(".tmp.tar")
        compile_stdlib = (
            'chroot "$1" env PYTHONHASHSEED=0 python3 -m compileall -q -f --invalidation-mode unchecked-hash '
            "/usr/lib/python3.11 /usr/lib/python3/dist-packages >/dev/null"
        )
        argv = [
            "mmdebstrap",
            "--mode=root",
            f"--variant={base.variant}",
            "--hook-dir=/usr/share/mmdebstrap/hooks/merged-usr",
            f"--include={','.join(base.packages)}",
            *(f"--dpkgopt=path-exclude={p}" for p in base.exclude),
            *(f"--dpkgopt=path-include={p}" for p in base.include),
            f"--customize-hook={compile_stdlib}",
            # /lib/modules is the host's, mounted at /host/lib/modules (docs/hardware.md, "Tools").
            '--customize-hook=rm -rf "$1/usr/lib/modules" && ln -s /host/lib/modules "$1/usr/lib/modules"',
            '--customize-hook=rm -f "$1/etc/machine-id" "$1/var/lib/dbus/machine-id"; : > "$1/etc/machine-id"',
            "--skip=output/dev",
            base.suite,
            str(tmp),
            *sources,
        ]
        buildah.run(argv, "base (mmdebstrap)", env=dict(os.environ, SOURCE_DATE_EPOCH=str(base.epoch)))
        tmp.rename(tar)
    container = b("from", "--quiet", "scratch", step="base: buildah from scratch")
    mount = b("mount", container, step="base: buildah mount")
    buildah.run(["tar", "-xpf", str(tar), "--numeric-owner", "-C", mount], "base: unpack the root filesystem")
    # apt is not in the image (variant essential); mmdebstrap leaves its state directories (and lock files) behind.
    for leftover in ("var/cache/apt", "var/lib/apt", "var/log/apt"):
        shutil.rmtree(Path(mount) / leftover, ignore_errors=True)
    b("umount", container, step="base: buildah umount")
    b("config", "--os", "linux", "--arch", "amd64", container, step="base: buildah config")
    b.commit(container, name, base.epoch, step="base: buildah commit")
    return name, key


def _prune(b: buildah.Buildah, cache: Path, keep: Sequence[str], keep_keys: Sequence[str]) -> None:
    """Drop the base and dependency images (and base tarballs) of older inputs: each is a full copy on vfs."""
    names = b("images", "--format", "{{.Name}}:{{.Tag}}", step="buildah images").split()
    for name in names:
        if name.startswith("localhost/metax-build/") and name not in keep:
            b("rmi", name, step=f"buildah rmi {name}")
    for tar in cache.glob("base-*.tar"):
        if tar.stem.removeprefix("base-") not in keep_keys:
            tar.unlink()


def _wheelhouse(defs: definitions.Definitions, cache: Path) -> Path:
    lock = defs.app.lock.read_bytes()
    house = cache / f"wheels-{hashlib.sha256(lock).hexdigest()[:16]}-pip{PIP_VERSION}"
    if house.is_dir():
        return house
    if sys.version_info[:2] != (3, 11) or platform.machine() != "x86_64":
        raise buildah.ImageBuildError(
            "the wheels are downloaded for the image's Python (3.11, amd64): run on such a host"
        )
    tmp = Path(tempfile.mkdtemp(dir=cache, prefix="wheels."))
    pip = [sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check", "--no-deps"]
    buildah.run([*pip, "--only-binary=:all:", "-r", str(defs.app.lock), "-d", str(tmp)], "deps: pip download (lock)")
    buildah.run([*pip, f"pip=={PIP_VERSION}", "-d", str(tmp / "pip")], "deps: pip download (pip)")
    shutil.copy(defs.app.lock, tmp / "requirements.lock")
    tmp.rename(house)
    return house


def _deps(b: buildah.Buildah, defs: definitions.Definitions, cache: Path, base: str, base_key: str) -> tuple[str, str]:
    key = _digest(RECIPE, base_key, defs.app.lock.read_text(), PIP_VERSION, defs.app.venv)
    name = f"localhost/metax-build/deps:{key}"
    if b.has_image(name):
        return name, key
    house = _wheelhouse(defs, cache)
    venv = defs.app.venv
    container = b("from", "--quiet", base, step="deps: buildah from")
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
    return name, key


def source_files(repo: Path = definitions.REPO) -> list[str]:
    """The files a wheel is built from: tracked and untracked-but-not-ignored, sorted."""
    out = buildah.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], "git ls-files", cwd=repo)
    return sorted(f for f in out.split("\0") if f and (repo / f).is_file())


def _tree_hash(repo: Path, files: Sequence[str]) -> str:
    h = hashlib.sha256()
    for f in files:
        h.update(f.encode() + b"\0" + hashlib.sha256((repo / f).read_bytes()).digest())
    return h.hexdigest()[:20]


def _git(repo: Path, *args: str) -> str:
    try:
        return buildah.run(["git", *args], f"git {args[0]}", cwd=repo).strip()
    except buildah.ImageBuildError:
        return ""


def version(repo: Path = definitions.REPO) -> str:
    return str(tomllib.loads((repo / "pyproject.toml").read_text())["project"]["version"])


def _wheel(repo: Path, files: Sequence[str], work: Path, epoch: int) -> Path:
    src = work / "src"
    for f in files:
        (src / f).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(repo / f, src / f)
    dist = work / "dist"
    env = dict(os.environ, SOURCE_DATE_EPOCH=str(epoch), PIP_DISABLE_PIP_VERSION_CHECK="1")
    buildah.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(dist), str(src)],
        "app: pip wheel (the project)",
        env=env,
    )
    wheels = sorted(dist.glob("*.whl"))
    if len(wheels) != 1:
        raise buildah.ImageBuildError(f"app: expected one wheel of the project, got {[w.name for w in wheels]}")
    return wheels[0]


def qualified(reference: str) -> str:
    """The full name containerd and podman give `reference` (``metax-x:1`` → ``docker.io/library/metax-x:1``):
    what each archive's ``org.opencontainers.image.ref.name`` says, so an import names the image exactly as the
    kubelet asks for it."""
    first, _, rest = reference.partition("/")
    if not rest:
        return f"docker.io/library/{reference}"
    if "." in first or ":" in first or first == "localhost":
        return reference
    return f"docker.io/{reference}"


def _manifest_digest(archive: Path) -> str:
    with tarfile.open(archive) as tar:
        member = tar.extractfile("index.json")
        if member is None:
            raise buildah.ImageBuildError(f"{archive}: no index.json")
        index = json.load(member)
    digests = [m["digest"] for m in index["manifests"]]
    if len(digests) != 1:
        raise buildah.ImageBuildError(f"{archive}: {len(digests)} manifests, expected one")
    return str(digests[0])


def build(
    out: Path = DEFAULT_OUT,
    registry: str = "",
    *,
    repo: Path = definitions.REPO,
    cache: Path | None = None,
    force_app: bool = False,
) -> Built:
    """Build (or reuse) every image of ``images/images.toml`` into `out` as ``<name>.tar`` OCI archives.

    `force_app` rebuilds the project's layer and the archives even when nothing changed (the reproducibility
    test builds twice); the base and dependency layers always come from the cache when their inputs match.
    """
    started = time.monotonic()
    defs = definitions.load(repo / "images" / "images.toml")
    cache = cache or cache_root()
    with _locked(cache):
        b = buildah.Buildah(cache / "storage")
        b("rm", "--all", step="buildah rm --all (containers a failed build left)")
        base, base_key = _base(b, defs, cache)
        deps, deps_key = _deps(b, defs, cache, base, base_key)
        _prune(b, cache, keep=(base, deps), keep_keys=(base_key,))
        files = source_files(repo)
        ver = version(repo)
        revision = _git(repo, "rev-parse", "HEAD") or "unknown"
        epoch = int(_git(repo, "log", "-1", "--format=%ct") or defs.base.epoch)
        source = _git(repo, "config", "--get", "remote.origin.url") or defs.app.source
        refs = {i.name: i.reference(registry, ver) for i in defs.images}
        key = _digest(RECIPE, deps_key, _tree_hash(repo, files), ver, revision, epoch, source, defs.images, registry)
        out.mkdir(parents=True, exist_ok=True)
        stamp = out / "build.json"
        archives = {i.name: out / f"{i.name}.tar" for i in defs.images}
        if not force_app and stamp.exists() and all(a.exists() for a in archives.values()):
            previous = json.loads(stamp.read_text())
            if previous.get("key") == key:
                return Built(archives, previous["digests"], refs, time.monotonic() - started, cached=True)
        stamp.unlink(missing_ok=True)
        labels = {
            "org.opencontainers.image.version": ver,
            "org.opencontainers.image.revision": revision,
            "org.opencontainers.image.source": source,
            "org.opencontainers.image.licenses": "Apache-2.0",
            "org.opencontainers.image.title": meta.PRODUCT,
        }
        with tempfile.TemporaryDirectory(dir=cache, prefix="app.") as tmp:
            wheel = _wheel(repo, files, Path(tmp), epoch)
            container = b("from", "--quiet", deps, step="app: buildah from")
            try:
                _app_layer(b, container, defs, _wheelhouse(defs, cache), wheel)
                digests = {}
                for image in defs.images:
                    config = [
                        "config",
                        "--entrypoint",
                        json.dumps([image.entrypoint]),
                        "--cmd",
                        "",
                        "--user",
                        image.user,
                    ]
                    config += ["--env", f"PATH={PATH_ENV}", "--env", "PYTHONDONTWRITEBYTECODE=1", "--workingdir", "/"]
                    for k, v in labels.items():
                        config += ["--label", f"{k}={v}"]
                    b(*config, container, step=f"{image.name}: buildah config")
                    archive = archives[image.name]
                    archive.unlink(missing_ok=True)
                    b.commit(
                        container,
                        f"oci-archive:{archive}:{qualified(refs[image.name])}",
                        epoch,
                        step=f"{image.name}: buildah commit",
                        rm=False,
                    )
                    digests[image.name] = _manifest_digest(archive)
            finally:
                b("rm", container, step="app: buildah rm")
        stamp.write_text(json.dumps({"key": key, "digests": digests, "references": refs}, indent=2, sort_keys=True))
        return Built(archives, digests, refs, time.monotonic() - started, cached=False)


def _app_layer(b: buildah.Buildah, container: str, defs: definitions.Definitions, house: Path, wheel: Path) -> None:
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
    # host so the image carries no compiler; the container-runtime agent installs it from this path.
    target = handler.WRAPPER_IMAGE_PATH
    b("copy", "--chmod", "0755", container, str(wrapper.build()), target, step="app: copy the runtime wrapper")


def wheel_packages(wheel: Path) -> list[str]:
    """The top-level packages of a wheel (its directories other than ``*.dist-info``), sorted."""
    with zipfile.ZipFile(wheel) as z:
        tops = sorted({n.split("/", 1)[0] for n in z.namelist() if "/" in n})
    return [t for t in tops if not t.endswith(".dist-info")]
