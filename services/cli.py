"""`metax-operator`: the administrator's command line.

Every subcommand reads its input, asks the core, and prints the answer. Errors are messages on stderr with
exit code 2 (bad input) or 1 (a failure while doing the work), never tracebacks.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Callable, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

import yaml

from metax_core import validation, versions, workloads
from metax_core.errors import InvalidSpec, MetaxError

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_INVALID = 2


class UsageError(MetaxError):
    """A command-line input problem that is not a spec field (missing file, unreadable YAML)."""


def package_version() -> str:
    try:
        return metadata.version("metax-gpu-operator")
    except metadata.PackageNotFoundError:
        return "0.0.0+unknown"


def load_document(path: str) -> Any:
    """One YAML or JSON document from ``path`` (``-`` reads stdin)."""
    try:
        text = sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror or exc}") from exc
    try:
        documents = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as exc:
        raise UsageError(f"{path} is not valid YAML or JSON: {exc}") from exc
    if len(documents) != 1:
        raise UsageError(f"{path} must hold exactly one document, found {len(documents)}")
    return documents[0]


class _PlainDumper(yaml.SafeDumper):
    """Prints repeated mappings in full instead of as YAML anchors and aliases."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def print_errors(errors: InvalidSpec) -> None:
    for error in errors.errors:
        print(str(error), file=sys.stderr)


def cmd_validate(args: argparse.Namespace) -> int:
    validation.parse(load_document(args.file))
    print("valid")
    return EXIT_OK


def cmd_render(args: argparse.Namespace) -> int:
    parsed = validation.parse(load_document(args.file))
    rendered = workloads.render(parsed, workloads.RenderSettings(namespace=args.namespace, version=args.version))
    for blocked in rendered.plan.blocked:
        print(f"skipped: {blocked.reason}", file=sys.stderr)
    for component in rendered.plan.disabled:
        print(f"skipped: {component.value} is disabled", file=sys.stderr)
    objects = list(rendered.objects)
    if args.component:
        wanted = {args.component, f"metax-{args.component}"}
        objects = [o for o in objects if o["metadata"]["name"] in wanted
                   or o["metadata"]["labels"].get(workloads.COMPONENT_LABEL) == args.component]
        if not objects:
            names = sorted({o["metadata"]["labels"][workloads.COMPONENT_LABEL] for o in rendered.objects})
            raise UsageError(f"no rendered component {args.component!r}; rendered: {', '.join(names) or 'none'}")
    if args.output == "json":
        print(json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}, indent=2))
    else:
        print(yaml.dump_all(objects, Dumper=_PlainDumper, sort_keys=False), end="")
    return EXIT_OK


def cmd_maca_resolve(args: argparse.Namespace) -> int:
    available = [v.strip() for v in args.available.split(",") if v.strip()]
    try:
        print(versions.resolve(args.request, available))
    except versions.NoMatchingVersion as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_INVALID
    return EXIT_OK


def cmd_dev_cluster_up(args: argparse.Namespace) -> int:
    from metax_dev.controlplane import cli as controlplane_cli

    controlplane_cli.up(args.nodes)
    return EXIT_OK


def cmd_dev_fake_host(args: argparse.Namespace) -> int:
    from metax_dev import fakehost

    return fakehost.run(args)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="metax-operator", description="MetaX GPU Operator: validate, render and plan cluster configuration."
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {package_version()}")
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug messages")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("validate", help="check a ClusterOperator (or its spec / chart values)")
    p.add_argument("-f", "--file", required=True, help="YAML or JSON file, - for stdin")
    p.set_defaults(func=cmd_validate)

    p = sub.add_parser("render", help="print the workloads the operator would apply, in dependency order")
    p.add_argument("-f", "--file", required=True, help="YAML or JSON file, - for stdin")
    p.add_argument("--component", help="only this component (chart key like maca, or workload name)")
    p.add_argument("-o", "--output", choices=("yaml", "json"), default="yaml")
    p.add_argument("--namespace", default=workloads.RenderSettings().namespace)
    p.add_argument("--version", default=package_version(), help="component image tag")
    p.set_defaults(func=cmd_render)

    maca = sub.add_parser("maca", help="MXMACA SDK version selection").add_subparsers(
        dest="maca_command", required=True, metavar="COMMAND"
    )
    p = maca.add_parser("resolve", help="which installed version a METAX_MACA_VERSION request selects")
    p.add_argument("request", help='e.g. "maca-2.18"')
    p.add_argument("--available", required=True, help="comma-separated installed versions")
    p.set_defaults(func=cmd_maca_resolve)

    _add_optional_commands(sub)

    dev = sub.add_parser("dev", help="developer tools").add_subparsers(dest="dev_command", required=True, metavar="COMMAND")
    cluster = dev.add_parser("cluster", help="a real local control plane").add_subparsers(
        dest="cluster_command", required=True, metavar="COMMAND"
    )
    p = cluster.add_parser("up", help="start etcd, kube-apiserver, controller-manager, scheduler, kwok")
    p.add_argument("--nodes", type=int, default=3)
    p.set_defaults(func=cmd_dev_cluster_up)
    from metax_dev import fakehost

    p = dev.add_parser("fake-host", help="create a fake GPU host root for the node agents")
    fakehost.add_arguments(p)
    p.set_defaults(func=cmd_dev_fake_host)
    return parser


def _add_optional_commands(sub: Any) -> None:
    """Subcommands that live in their own modules (each exposes add_parser(subparsers))."""
    from services import cli_rollout

    adders: list[Callable[[Any], None]] = [cli_rollout.add_parser]
    for add in adders:
        add(sub)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        code: int = args.func(args)
        return code
    except InvalidSpec as exc:
        print_errors(exc)
        return EXIT_INVALID
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_INVALID
    except MetaxError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
