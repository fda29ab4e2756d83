"""``python -m metax_dev.release`` (what ``./run release``, ``./run bundle`` and ``./run mirror`` run): a release
in a registry, the air-gapped bundle, and loading a bundle into a registry (docs/images.md, "Releases")."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from metax_dev.images import build as images_build
from metax_dev.images import buildah
from metax_dev.release import bundle, publish
from metax_dev.release.target import ReleaseError, Target

DEFAULT_OUT = images_build.DEFAULT_OUT.parent / "release"


def _target(args: argparse.Namespace) -> Target:
    return Target(args.registry, authfile=args.authfile, cert_dir=args.cert_dir)


def _registry_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--registry", required=True, help="HOST[:PORT][/PROJECT], as the chart's `registry` will say")
    p.add_argument("--authfile", type=Path, help="containers-auth.json with the registry's credentials")
    p.add_argument("--cert-dir", type=Path, help="a directory with the registry's CA as ca.crt")


def _platforms(text: str) -> list[str]:
    chosen = [p.strip() for p in text.split(",") if p.strip()]
    unknown = sorted(set(chosen) - set(publish.PLATFORMS))
    if unknown or not chosen:
        raise argparse.ArgumentTypeError(f"{unknown or text!r}: choose from {', '.join(publish.PLATFORMS)}")
    return chosen


def _table(release: publish.Release) -> None:
    for name, digest in sorted(release.layout.digests.items()):
        served = release.pushed.get(name, "")
        mark = "" if not served else ("  (served)" if served == digest else f"  SERVED {served}")
        print(f"{name}:{release.version:<10} {digest}{mark}")
    for step, seconds in release.timings.items():
        print(f"{step:<14} {seconds:7.1f} s")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="./run", description=__doc__.split("\n")[0] if __doc__ else None)
    verbs = parser.add_subparsers(dest="verb", required=True)
    rel = verbs.add_parser("release", help="build every platform, push the images and the chart to a registry")
    _registry_flags(rel)
    rel.add_argument("--platforms", type=_platforms, default=list(publish.PLATFORMS), help="comma-separated")
    rel.add_argument("--out", type=Path, default=DEFAULT_OUT, help="the release's files (build/release)")
    bun = verbs.add_parser("bundle", help="the air-gapped bundle: chart, images of every platform, SBOMs, sums")
    bun.add_argument("--platforms", type=_platforms, default=list(publish.PLATFORMS), help="comma-separated")
    bun.add_argument("--out", type=Path, default=DEFAULT_OUT, help="where the release's files are staged")
    bun.add_argument("--bundle", type=Path, help="the archive (build/metax-operator-<version>-bundle.tar)")
    mir = verbs.add_parser("mirror", help="load a bundle into a (private) registry and print the helm install line")
    mir.add_argument("bundle", type=Path)
    _registry_flags(mir)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        if args.verb == "release":
            target = _target(args)
            release = publish.push(publish.make(args.out, args.platforms), target)
            _table(release)
            print(f"chart {target.chart_reference()}:{release.version} {release.chart_digest}")
            print(target.install_line(release.version))
        elif args.verb == "bundle":
            release = publish.make(args.out, args.platforms)
            destination = args.bundle or images_build.DEFAULT_OUT.parent / bundle.name(release.version)
            written = bundle.write(release, destination)
            _table(release)
            print(f"{written}  {written.stat().st_size / 1e6:.1f} MB")
        else:
            mirrored = bundle.mirror(args.bundle, _target(args))
            for name, digest in mirrored.served.items():
                print(f"{name}:{mirrored.version:<10} {digest}")
            print(f"loaded in {mirrored.seconds:.1f} s")
            print(mirrored.install)
    except (ReleaseError, buildah.ImageBuildError) as exc:
        print(f"./run {args.verb}: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
