"""`metax-dev`: the developer's command line (a local control plane, a fake GPU host, the demo).

Why a command of its own: the product's `metax-operator` must not reach developer tooling or fakes (the
layers contract in pyproject.toml), so what only developers and tests use lives behind this entry point.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from metax_dev import demo, fakehost
from metax_dev.controlplane import cli as controlplane_cli
from metax_dev.controlplane import errors


def _cluster_up(args: argparse.Namespace) -> int:
    controlplane_cli.up(args.nodes, workloads=not args.no_workloads)
    return 0


def _fake_host(args: argparse.Namespace) -> int:
    return fakehost.run(args)


RELEASE_VERBS = ("release", "bundle", "mirror")


def _release(argv: Sequence[str]) -> int:
    """``metax-dev release|bundle|mirror ...``: `metax_dev.release`'s own parser takes every argument (--help too)."""
    from metax_dev.release import __main__ as release  # the image build's imports only when asked for

    return release.main(list(argv))


def _demo(args: argparse.Namespace) -> int:
    flags = [*(["--no-live"] if args.no_live else []), *(["--keep"] if args.keep else [])]
    return demo.main(["--nodes", str(args.nodes), "--cluster", args.cluster, *flags])


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="metax-dev", description="MetaX GPU Operator developer tools.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    cluster = sub.add_parser("cluster", help="a real local control plane").add_subparsers(
        dest="cluster_command", required=True, metavar="COMMAND"
    )
    p = cluster.add_parser("up", help="start etcd, kube-apiserver, controller-manager, scheduler, kwok")
    p.add_argument("--nodes", type=int, default=3, help="kwok nodes to create (default 3)")
    p.add_argument("--no-workloads", action="store_true", help="no controller-manager and scheduler")
    p.set_defaults(func=_cluster_up)

    p = sub.add_parser("fake-host", help="create a fake GPU host root for the node agents")
    fakehost.add_arguments(p)
    p.set_defaults(func=_fake_host)

    p = sub.add_parser("demo", help="the operator and its node agents on fake GPU nodes (in one process by default)")
    p.add_argument("--nodes", type=int, default=4, help="fake GPU nodes (default 4, mixed GPU counts)")
    p.add_argument("--no-live", action="store_true", help="plain logs instead of the live view")
    p.add_argument(
        "--cluster",
        choices=("memory", "real"),
        default="memory",
        help="memory: the in-memory API server, one process (default); real: the Go-built control plane",
    )
    p.add_argument("--keep", action="store_true", help="with --cluster real: keep it running after the scenario")
    p.set_defaults(func=_demo)

    for verb, what in (
        ("release", "build every platform, push the images and the chart to a registry (= ./run release)"),
        ("bundle", "the air-gapped bundle: chart, images of every platform, SBOMs, sums (= ./run bundle)"),
        ("mirror", "load a bundle into a private registry, print the helm install line (= ./run mirror)"),
    ):
        sub.add_parser(verb, help=what)  # listed here; `main` hands its arguments to `_release`
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    given = list(sys.argv[1:] if argv is None else argv)
    if given[:1] and given[0] in RELEASE_VERBS:
        return _release(given)
    args = build_parser().parse_args(given)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        code: int = args.func(args)
    except errors.ControlPlaneError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    return code


if __name__ == "__main__":
    sys.exit(main())
