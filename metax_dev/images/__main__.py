"""``python -m metax_dev.images`` (what ``./run images`` runs): build the product's images (docs/images.md)."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from metax_dev.images import build, buildah, lock, platforms


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="./run images", description="Build the product's images as OCI archives.")
    parser.add_argument("--out", type=Path, default=build.DEFAULT_OUT, help="where the archives go (build/images)")
    parser.add_argument("--registry", default="", help="the chart's `registry` the images are named for ('')")
    parser.add_argument(
        "--platform",
        default=platforms.DEFAULT.name,
        help=f"{', '.join(platforms.PLATFORMS)}, a comma list or all ({platforms.DEFAULT.name}); "
        "other than linux/amd64 the archives go to OUT/linux-<arch>/",
    )
    parser.add_argument("--rebuild", action="store_true", help="rebuild the project layer even if nothing changed")
    parser.add_argument("--lock", action="store_true", help="rewrite images/requirements.lock from this venv")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if args.lock:
        lock.write()
        return 0
    try:
        for p in platforms.parse(args.platform):
            built = build.build(args.out, args.registry, force_app=args.rebuild, platform=p.name)
            for name, archive in built.archives.items():
                size = archive.stat().st_size / 1e6
                print(f"{built.references[name]:<45} {built.digests[name][:19]}  {size:6.1f} MB  {archive}")
            steps = ", ".join(f"{step} {s:.1f} s" for step, s in built.layer_seconds.items())
            verb = "reused" if built.cached else "built"
            print(f"{p.name}: {verb} in {built.seconds:.1f} s{f' ({steps})' if steps else ''}")
    except buildah.ImageBuildError as exc:
        print(f"./run images: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
