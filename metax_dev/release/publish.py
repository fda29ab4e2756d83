"""Putting a release in a registry: the images' indexes (skopeo), the chart pinned to them (helm), and its files.

Why a module of its own: what makes a release installable is a fixed order with a check at each step: build
every platform, lay the images out as indexes (`layout`), package the chart with the indexes' digests in its
``operator.imageDigests`` (the values generator's own output, `metax_dev.chart.values.render_values`), push each
image with its digest preserved and read back what the registry now serves under the tag, push the chart, and
write the files an administrator verifies a release with: ``images.txt`` (every reference with its digest), an
SBOM per image and platform, ``SHA256SUMS``.
"""

from __future__ import annotations

import hashlib
import logging
import shutil
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from metax_dev.chart import options as chart_options
from metax_dev.chart.values import render_values
from metax_dev.controlplane import build as controlplane_build
from metax_dev.images import build as images_build
from metax_dev.release import layout as oci_layout
from metax_dev.release.target import ReleaseError, Target, run

logger = logging.getLogger(__name__)

PLATFORMS: Final = ("linux/amd64", "linux/arm64")
"""What a release carries (R-RELEASE); ``--platforms`` narrows it (a quick local release)."""
SUMS: Final = "SHA256SUMS"
IMAGES_LIST: Final = "images.txt"


@dataclass
class Release:
    """A release's files on disk (`out`), and where it was pushed."""

    version: str
    out: Path
    layout: oci_layout.Layout
    chart: Path
    sboms: list[Path]
    platforms: tuple[str, ...]
    timings: dict[str, float] = field(default_factory=dict)
    pushed: dict[str, str] = field(default_factory=dict)
    """Image name -> the digest the registry serves under the release's tag (after `push`)."""
    chart_digest: str = ""


def helm_binary() -> str:
    return str(controlplane_build.build(quiet=True).binary("helm"))


def build_platforms(platforms: Sequence[str]) -> dict[str, images_build.Built]:
    """Every image for each platform (cached per platform: a warm run rebuilds nothing)."""
    return {p: images_build.build(platform=p) for p in platforms}


def package_chart(digests: Mapping[str, str], out: Path) -> Path:
    """The chart as ``helm package`` makes it, its values.yaml carrying the images' digests."""
    with tempfile.TemporaryDirectory(prefix="metax-chart.") as tmp:
        chart = Path(tmp) / chart_options.CHART_DIR.name
        shutil.copytree(chart_options.CHART_DIR, chart)
        (chart / "values.yaml").write_text(render_values(digests))
        out.mkdir(parents=True, exist_ok=True)
        said = run([helm_binary(), "package", str(chart), "--destination", str(out)], "helm package")
    # "Successfully packaged chart and saved it to: <path>"
    return Path(said.strip().rpartition(": ")[2])


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def write_sums(root: Path, files: Sequence[Path]) -> Path:
    """``SHA256SUMS`` in sha256sum's format (``sha256sum -c`` verifies it), paths relative to `root`."""
    lines = [f"{sha256_file(f)}  {f.relative_to(root)}" for f in sorted(files)]
    sums = root / SUMS
    sums.write_text("\n".join(lines) + "\n")
    return sums


def make(out: Path, platforms: Sequence[str] = PLATFORMS) -> Release:
    """Build every platform and write the release's files under `out` (the OCI layout, the chart, the SBOMs,
    images.txt, SHA256SUMS); nothing is pushed."""
    timings: dict[str, float] = {}
    started = time.monotonic()
    built = build_platforms(platforms)
    timings["build images"] = time.monotonic() - started
    version = images_build.version()
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    started = time.monotonic()
    layout = oci_layout.write(
        {p: b.archives for p, b in built.items()}, version, out / "oci", images_build.cache_root() / "storage"
    )
    timings["OCI layout"] = time.monotonic() - started
    chart = package_chart(layout.digests, out)
    sboms = []
    for platform, b in sorted(built.items()):
        for name, archive in sorted(b.archives.items()):
            sbom = archive.with_suffix(".cdx.json")
            copied = out / "sbom" / f"{name}.{platform.replace('/', '-')}.cdx.json"
            copied.parent.mkdir(exist_ok=True)
            shutil.copy(sbom, copied)
            sboms.append(copied)
    (out / IMAGES_LIST).write_text(
        "".join(f"{name}:{version}@{digest}\n" for name, digest in sorted(layout.digests.items()))
    )
    write_sums(out, [chart, *sboms, out / IMAGES_LIST])
    return Release(version, out, layout, chart, sboms, tuple(sorted(platforms)), timings)


def copy_argv(layout: oci_layout.Layout, name: str, target: Target) -> list[str]:
    """skopeo's push of image `name`'s index with every platform, its digest kept (``--preserve-digests``)."""
    source = layout.reference(name)
    destination = f"docker://{target.image(name, layout.version)}"
    return [
        "skopeo",
        "copy",
        "--quiet",
        "--all",
        "--preserve-digests",
        *target.skopeo_flags("dest"),
        source,
        destination,
    ]


def chart_push_argv(chart: Path, target: Target) -> list[str]:
    return ["helm", "push", str(chart), target.chart_repository, *target.helm_flags()]


@dataclass(frozen=True)
class Pushed:
    served: dict[str, str]
    """Image name -> the digest the registry serves under the release's tag."""
    chart_digest: str
    timings: dict[str, float]


def push_layout(layout: oci_layout.Layout, chart: Path, target: Target) -> Pushed:
    """Push every image of `layout` and `chart` to `target`, then read back what the registry serves; an image
    served under another digest than the layout's is an error (the chart pins the layout's)."""
    started = time.monotonic()
    for name in sorted(layout.digests):
        run(copy_argv(layout, name, target), f"{name}: skopeo copy --all (push)")
    served = {name: served_digest(target, name, layout.version) for name in sorted(layout.digests)}
    if wrong := sorted(n for n in served if served[n] != layout.digests[n]):
        raise ReleaseError(f"push: the registry serves other digests than the release's for {wrong}")
    pushed_images = time.monotonic() - started
    started = time.monotonic()
    said = run([helm_binary(), *chart_push_argv(chart, target)[1:]], "helm push (the chart)")
    chart_digest = next((w for w in said.split() if w.startswith("sha256:")), "")
    return Pushed(served, chart_digest, {"push images": pushed_images, "push chart": time.monotonic() - started})


def push(release: Release, target: Target) -> Release:
    """Push `release` (`make`) to `target`."""
    pushed = push_layout(release.layout, release.chart, target)
    release.pushed, release.chart_digest = pushed.served, pushed.chart_digest
    release.timings.update(pushed.timings)
    return release


def served_digest(target: Target, name: str, version: str) -> str:
    """The digest of what the registry serves under ``<name>:<version>``: sha256 of the raw index it returns."""
    raw = run(
        ["skopeo", "inspect", "--raw", *target.skopeo_flags(), f"docker://{target.image(name, version)}"],
        f"{name}: skopeo inspect --raw",
    )
    return "sha256:" + hashlib.sha256(raw.encode()).hexdigest()
