"""Building the product's images from nothing with Debian's tools, cached layer by layer and reproducibly.

Why this module exists: the chart and the operator reference ``<registry>/metax-*:<version>`` images; this is
what makes them on a machine with no container registry (docs/images.md), for linux/amd64 and linux/arm64
(`metax_dev.images.platforms`). Three layers (`metax_dev.images.layers`: a Debian base, the locked
dependencies, the project), each cached on exactly its inputs; the images (one per component, the same layers,
their own entrypoint and user) are committed from the top one as OCI archives, each with its CycloneDX SBOM
(`metax_dev.images.sbom`) next to it.

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
import shutil
import sys
import tarfile
import tempfile
import time
import tomllib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from metax_core.wire import meta
from metax_dev import cachedir
from metax_dev.images import buildah, definitions, layers, platforms, sbom

logger = logging.getLogger(__name__)

DEFAULT_OUT: Final = definitions.REPO / "build" / "images"
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
    platform: str = platforms.DEFAULT.name
    sboms: dict[str, Path] = field(default_factory=dict)
    """Image name -> its CycloneDX SBOM (``<name>.cdx.json`` next to the archive)."""
    layer_seconds: dict[str, float] = field(default_factory=dict)
    """``base``, ``deps``, ``app`` -> the seconds each took in this build (about zero when it came from the cache)."""


def cache_root() -> Path:
    return cachedir.cache_dir("images", "METAX_IMAGES_CACHE")


@contextlib.contextmanager
def _locked(root: Path) -> Iterator[None]:
    root.mkdir(parents=True, exist_ok=True)
    with open(root / ".lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


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
    platform: str = platforms.DEFAULT.name,
) -> Built:
    """Build (or reuse) every image of ``images/images.toml`` for `platform` (``linux/amd64``, ``linux/arm64``)
    as ``<name>.tar`` OCI archives with their ``<name>.cdx.json`` SBOMs: in `out` for linux/amd64, in
    ``out/linux-arm64`` for linux/arm64 (`platforms.archive_dir`).

    `force_app` rebuilds the project's layer and the archives even when nothing changed (the reproducibility
    test builds twice); the base and dependency layers always come from the cache when their inputs match.
    """
    started = time.monotonic()
    p = platforms.get(platform)
    defs = definitions.load(repo / "images" / "images.toml")
    cache = cache or cache_root()
    with _locked(cache):
        base_key, sources = layers.base_key(defs, p)
        deps_key = layers.deps_key(defs, base_key)
        files = source_files(repo)
        ver = version(repo)
        revision = _git(repo, "rev-parse", "HEAD") or "unknown"
        epoch = int(_git(repo, "log", "-1", "--format=%ct") or defs.base.epoch)
        source = _git(repo, "config", "--get", "remote.origin.url") or defs.app.source
        refs = {i.name: i.reference(registry, ver) for i in defs.images}
        tree = _tree_hash(repo, files)
        key = layers.digest(layers.RECIPE, p.name, deps_key, tree, ver, revision, epoch, source, defs.images, registry)
        out = platforms.archive_dir(out, p)
        out.mkdir(parents=True, exist_ok=True)
        stamp = out / "build.json"
        archives = {i.name: out / f"{i.name}.tar" for i in defs.images}
        sboms = {name: sbom.path_for(a) for name, a in archives.items()}
        if not force_app and stamp.exists() and all(f.exists() for f in (*archives.values(), *sboms.values())):
            previous = json.loads(stamp.read_text())
            if previous.get("key") == key:
                seconds = time.monotonic() - started
                return Built(archives, previous["digests"], refs, seconds, cached=True, platform=p.name, sboms=sboms)
        stamp.unlink(missing_ok=True)
        timer = _Timer()
        b = buildah.Buildah(cache / "storage")
        b("rm", "--all", step="buildah rm --all (containers a failed build left)")
        with timer("base"):
            base = layers.base(b, defs, cache, p, base_key, sources)
        with timer("deps"):
            deps = layers.deps(b, defs, cache, p, base, deps_key)
            house = layers.wheelhouse(defs, cache, p)
        keep = (base, deps, layers.base_tarball(cache, p, base_key).name, house.name)
        layers.prune(b, cache, p, keep=keep)
        labels = {
            "org.opencontainers.image.version": ver,
            "org.opencontainers.image.revision": revision,
            "org.opencontainers.image.source": source,
            "org.opencontainers.image.licenses": "Apache-2.0",
            "org.opencontainers.image.title": meta.PRODUCT,
        }
        with tempfile.TemporaryDirectory(dir=cache, prefix="app.") as tmp, timer("app"):
            wheel = _wheel(repo, files, Path(tmp), epoch)
            container = b("from", "--quiet", "--platform", p.name, deps, step="app: buildah from")
            try:
                layers.app(b, container, defs, p, house, wheel)
                root = Path(b("mount", container, step="app: buildah mount (for the SBOMs)"))
                digests = {}
                for image in defs.images:
                    digests[image.name] = _commit(b, container, image, archives[image.name], refs, labels, epoch)
                    document = sbom.sbom(
                        root,
                        p,
                        name=image.name,
                        reference=qualified(refs[image.name]),
                        digest=digests[image.name],
                        created=epoch,
                        repo=repo,
                        lock=defs.app.lock,
                    )
                    sbom.write(document, sboms[image.name])
            finally:
                b("rm", container, step="app: buildah rm")
        stamp.write_text(json.dumps({"key": key, "digests": digests, "references": refs}, indent=2, sort_keys=True))
        seconds = time.monotonic() - started
        return Built(archives, digests, refs, seconds, False, p.name, sboms, timer.seconds)


def _commit(
    b: buildah.Buildah,
    container: str,
    image: definitions.Image,
    archive: Path,
    refs: dict[str, str],
    labels: dict[str, str],
    epoch: int,
) -> str:
    """Configure `container` as `image` and commit it to `archive`; its manifest digest."""
    config = ["config", "--entrypoint", json.dumps([image.entrypoint]), "--cmd", "", "--user", image.user]
    config += ["--env", f"PATH={PATH_ENV}", "--env", "PYTHONDONTWRITEBYTECODE=1", "--workingdir", "/"]
    for k, v in labels.items():
        config += ["--label", f"{k}={v}"]
    b(*config, container, step=f"{image.name}: buildah config")
    archive.unlink(missing_ok=True)
    target = f"oci-archive:{archive}:{qualified(refs[image.name])}"
    b.commit(container, target, epoch, step=f"{image.name}: buildah commit", rm=False)
    return _manifest_digest(archive)


class _Timer:
    """Seconds per step of a build, for `Built.layer_seconds` (what docs/images.md reports)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    @contextlib.contextmanager
    def __call__(self, step: str) -> Iterator[None]:
        started = time.monotonic()
        try:
            yield
        finally:
            self.seconds[step] = round(time.monotonic() - started, 1)
