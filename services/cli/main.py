"""`metax-operator`: the administrator's command line.

Every subcommand reads its input, asks the core, and prints the answer. Errors are messages on stderr with
exit code 2 (bad input) or 1 (a failure while doing the work), never tracebacks; a command that needs a cluster
and cannot use it exits `connection.EXIT_NO_CLUSTER` (3), whichever command it is (with ``-o json``: a JSON error
document on stdout, `documents.print_failure`).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Mapping, Sequence
from typing import Any

import yaml

from metax_core import components, versions
from metax_core.cluster import configmaps, render_settings, workloads
from metax_core.errors import ClusterError, InvalidSpec, MetaxError
from metax_core.rollout import fleet
from metax_core.spec import names as k8s_names
from metax_core.spec import validation
from services.cli import completion, connection, crd, diff, diff_driver_config, doctor, documents, rollout, uninstall


def cmd_validate(args: argparse.Namespace) -> int:
    validation.parse(documents.load_document(args.file))
    print("valid")
    return documents.EXIT_OK


def cmd_render(args: argparse.Namespace) -> int:
    if problem := k8s_names.tag_problem(args.version):
        raise documents.UsageError(f"--version {problem}")
    if problem := k8s_names.dns_subdomain_problem(args.namespace):
        raise documents.UsageError(f"--namespace {problem}")
    parsed = validation.parse(documents.load_document(args.file))
    rendered = workloads.render(parsed, render_settings.RenderSettings(namespace=args.namespace, version=args.version))
    for blocked in rendered.plan.blocked:
        print(f"skipped: {blocked.reason}", file=sys.stderr)
    for component in rendered.plan.disabled:
        print(f"skipped: {component.value} is disabled", file=sys.stderr)
    stamped = list(rendered.objects)
    if (index := workloads.driver_daemonset_index(stamped)) is not None:  # as the operator applies it
        stamped[index] = fleet.stamped(stamped[index], parsed.driver)
    everything = [*configmaps.manifests(parsed, args.namespace), *stamped]  # the operator's apply order
    objects = everything
    if args.component:
        wanted = {args.component, f"metax-{args.component}"}
        objects = [o for o in everything if o["metadata"]["name"] in wanted or _component_of(o) == args.component]
        if not objects:
            names = sorted({c for o in rendered.objects if (c := _component_of(o))})
            raise documents.UsageError(
                f"no rendered component {args.component!r}; rendered: {', '.join(names) or 'none'}"
            )
    if args.output == "json":
        print(json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}, indent=2))
    else:
        print(yaml.dump_all(objects, Dumper=documents.PlainDumper, sort_keys=False), end="")
    return documents.EXIT_OK


def _component_of(manifest: Mapping[str, Any]) -> str | None:
    """The component an object belongs to: its label, or for a ConfigMap the component that reads it."""
    metadata = manifest["metadata"]
    label: str | None = (metadata.get("labels") or {}).get(workloads.COMPONENT_LABEL)
    if label is None and manifest["kind"] == "ConfigMap" and metadata["name"] in configmaps.READERS:
        return configmaps.READERS[metadata["name"]].value
    return label


def cmd_maca_resolve(args: argparse.Namespace) -> int:
    available = [v.strip() for v in args.available.split(",") if v.strip()]
    try:
        print(versions.resolve(args.request, available))
    except versions.NoMatchingVersion as exc:
        print(f"error: {exc}", file=sys.stderr)
        return documents.EXIT_INVALID
    return documents.EXIT_OK


def cmd_run(args: argparse.Namespace) -> int:
    """The operator itself (C1), as `metax-operator-controller` runs it; settings come from the environment."""
    from services.operator import main as operator_main

    return operator_main.main([])


PROG = "metax-operator"
PLUGIN = "kubectl-metax"
"""The same command installed as a kubectl plugin: ``kubectl metax doctor``, ``kubectl metax rollout confirm``."""


def program_name(argv0: str) -> str:
    """How the command was invoked: the kubectl plugin or ``metax-operator``."""
    return PLUGIN if os.path.basename(argv0) == PLUGIN else PROG


def build_parser(prog: str = PROG) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog, description="MetaX GPU Operator: validate, render and plan cluster configuration."
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {documents.package_version()}")
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug messages")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("validate", help="check a ClusterOperator (or its spec / chart values)")
    p.add_argument("-f", "--file", required=True, help="YAML or JSON file, - for stdin")
    p.set_defaults(func=cmd_validate)

    p = sub.add_parser(
        "render",
        help="print what the operator would apply, in its order: the ConfigMaps, then each component's objects",
    )
    p.add_argument("-f", "--file", required=True, help="YAML or JSON file, - for stdin")
    component = p.add_argument(
        "--component",
        help="only this component (chart key like maca, or an object name); a ConfigMap goes with the component "
        "that reads it (driver-config: driver, metax-vfio-config: vfioManager)",
    )
    completion.offer(component, [c.value for c in components.Component])
    p.add_argument("-o", "--output", choices=("yaml", "json"), default="yaml")
    p.add_argument("--namespace", default=render_settings.RenderSettings().namespace)
    p.add_argument("--version", default=documents.package_version(), help="component image tag")
    p.set_defaults(func=cmd_render)

    maca = sub.add_parser("maca", help="MXMACA SDK version selection").add_subparsers(
        dest="maca_command", required=True, metavar="COMMAND"
    )
    p = maca.add_parser("resolve", help="which installed version a METAX_MACA_VERSION request selects")
    p.add_argument("request", help='e.g. "maca-2.18"')
    p.add_argument("--available", required=True, help="comma-separated installed versions")
    p.set_defaults(func=cmd_maca_resolve)

    rollout.add_parser(sub)
    doctor.add_parser(sub)
    diff.add_parser(sub, diff_driver_config.compare)
    uninstall.add_parser(sub)
    crd.add_parser(sub)

    completion.add_parser(sub)

    p = sub.add_parser("run", help="run the operator (reconciles cluster-operator; env: see docs/operator.md)")
    p.set_defaults(func=cmd_run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser(program_name(sys.argv[0]))
    args = parser.parse_args(argv)
    if getattr(args, "completion", False):
        try:
            print(completion.script(parser, args.shell), end="")
        except completion.MissingExtra as exc:
            print(f"error: {exc}", file=sys.stderr)
            return documents.EXIT_FAILED
        return documents.EXIT_OK
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s"
    )
    try:
        code: int = args.func(args)
        return code
    except InvalidSpec as exc:
        documents.print_errors(exc)
        return documents.EXIT_INVALID
    except documents.UsageError as exc:
        print(documents.error_line(exc), file=sys.stderr)
        return documents.EXIT_INVALID
    except ClusterError as exc:  # only the commands that need a cluster talk to one
        return connection.unreachable(exc, json_output=getattr(args, "output", None) == "json")
    except MetaxError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return documents.EXIT_FAILED
    except KeyboardInterrupt:
        return 130


def kubectl_complete(argv: Sequence[str] | None = None) -> int:
    """``kubectl_complete-metax``: kubectl ≥ 1.26 runs it for ``kubectl metax <TAB>`` with the words typed."""
    words = list(sys.argv[1:] if argv is None else argv)
    print(completion.kubectl_complete(build_parser(PLUGIN), words), end="")
    return documents.EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
