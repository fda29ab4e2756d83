"""The product's images: what each weighs and what a build costs, cold, warm and after a source change.

Why this module exists: issue 21 asks for the size of each image and for cold and warm build times
(docs/images.md reports them). Nothing is asserted: the times depend on the machine, its load and the
mirror; the size goal (200 MB) is held by tests/images/test_contents.py.

Run from the repository root (as root, like ``./run images``)::

    python -m benchmarks.images [--keep-cache]

It builds three times into a throwaway cache and output directory (``METAX_IMAGES_CACHE``), so the
machine's own cache is neither used nor disturbed:

1. cold: an empty cache (mmdebstrap, pip download, every layer, every archive);
2. nothing changed: the same inputs again (the build's own up-to-date check);
3. top layer only: ``--rebuild`` (the project's wheel, the app layer, the archives).

Reference, measured in the same run with the same buildah storage: ``buildah from scratch`` + ``commit``
of an empty container, the floor of any buildah step. Sizes: per image and per layer, uncompressed, with
the Debian base alone as the reference (what any Python image from Debian's packages starts from).
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import shutil
import sys
import tarfile
import tempfile
import time
from collections.abc import Sequence

import attrs

ROOT = pathlib.Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import figures as fig
from metax_dev.images import build, buildah

LAYERS = ("base (Debian)", "deps (requirements.lock)", "app (the project)")


def _layer_sizes(archive: pathlib.Path) -> list[tuple[str, int]]:
    """(digest, size) of each layer of the archive's one image, in order."""
    with tarfile.open(archive) as tar:

        def read(name: str) -> bytes:
            handle = tar.extractfile(name)
            assert handle is not None
            return handle.read()

        index = json.loads(read("index.json"))
        manifest = json.loads(read("blobs/sha256/" + index["manifests"][0]["digest"].split(":", 1)[1]))
        return [(layer["digest"], int(layer["size"])) for layer in manifest["layers"]]


def _scratch_commit(storage: buildah.Buildah) -> float:
    started = time.monotonic()
    container = storage("from", "scratch", step="benchmark: scratch container").strip()
    storage("commit", "--quiet", "--rm", container, "metax-bench-scratch", step="benchmark: scratch commit")
    seconds = time.monotonic() - started
    storage("rmi", "metax-bench-scratch", step="benchmark: remove the scratch image")
    return seconds


@attrs.frozen
class Measured:
    builds: list[tuple[str, float, str]]
    """(label, seconds, what ran) per build, and the reference."""
    layers: dict[str, list[tuple[str, int]]]
    """Per image: (digest, size) of each layer."""


def measure(keep_cache: bool = False) -> Measured:
    work = pathlib.Path(tempfile.mkdtemp(prefix="metax-bench-images-"))
    os.environ["METAX_IMAGES_CACHE"] = str(work / "cache")
    out = work / "out"
    rows: list[tuple[str, float, str]] = []
    try:
        cold = build.build(out, "")
        rows.append(("cold (empty cache)", cold.seconds, "mmdebstrap, pip download, three layers, every archive"))
        warm = build.build(out, "")
        rows.append(("nothing changed", warm.seconds, "reused" if warm.cached else "REBUILT (unexpected)"))
        top = build.build(out, "", force_app=True)
        rows.append(("top layer only (--rebuild)", top.seconds, "the project's wheel, the app layer, the archives"))
        storage = buildah.Buildah(build.cache_root() / "storage")  # the build's own storage layout
        rows.append(("reference: buildah scratch commit", _scratch_commit(storage), "the floor of one buildah step"))
        return Measured(rows, {name: _layer_sizes(archive) for name, archive in top.archives.items()})
    finally:
        if not keep_cache:
            shutil.rmtree(work, ignore_errors=True)


def to_figures(m: Measured) -> list[fig.Figure]:
    totals = {name: sum(size for _, size in layers) / 1e6 for name, layers in m.layers.items()}
    largest = max(totals, key=lambda name: totals[name])
    base_mb = m.layers[largest][0][1] / 1e6
    found = [
        fig.Figure(
            id="P9",
            what=f"largest image, uncompressed ({largest}; {len(totals)} images share the base and deps layers)",
            goal=fig.at_most(200.0, "MB"),
            value=totals[largest],
            unit="MB",
            reference=f"the Debian base layer alone: {base_mb:.1f} MB",
        )
    ]
    scratch = m.builds[-1][1]
    for label, seconds, _ in m.builds[:-1]:
        found.append(
            fig.Figure(
                id="P9",
                what=f"image build, {label}",
                goal=fig.reported(),
                value=seconds,
                unit="s",
                reference=f"buildah scratch commit: {scratch:.1f} s",
            )
        )
    return found


def figures(quick: bool = False, nodes: Sequence[int] = ()) -> list[fig.Figure]:
    """The same three builds with or without ``quick``: a cold build has no smaller version."""
    return to_figures(measure())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--keep-cache", action="store_true", help="leave the throwaway cache for inspection")
    args = parser.parse_args(argv)
    m = measure(args.keep_cache)
    print(f"\n{'build':<36} {'seconds':>8}  what ran")
    for label, seconds, what in m.builds:
        print(f"{label:<36} {seconds:8.1f}  {what}")

    print(f"\n{'image':<24} {'total MB':>9}  " + "  ".join(f"{name:>26}" for name in LAYERS))
    shared: set[str] = set()
    for name, layers in m.layers.items():
        shared.update(digest for digest, _ in layers)
        sizes = "  ".join(f"{size / 1e6:23.1f} MB" for _, size in layers)
        print(f"{name:<24} {sum(s for _, s in layers) / 1e6:9.1f}  {sizes}")
    base_mb = next(iter(m.layers.values()))[0][1] / 1e6
    print(f"{'reference: Debian base':<24} {base_mb:9.1f}  (python3, libstdc++6, kmod on Essential)")
    print(f"\ndistinct layers across {len(m.layers)} images: {len(shared)}")
    fig.print_figures(to_figures(m), "P9")
    return 0


if __name__ == "__main__":
    sys.exit(main())
