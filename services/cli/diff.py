"""``metax-operator diff -f NEW.yaml | --set k=v``: what applying it would change, before it is applied (R-DIFF).

(``--driver-config FILE``, an edit of the driver-config ConfigMap, is `services.cli.diff_driver_config`.)

Why it exists: an edit of cluster-operator can restart every node's pods or start a driver rollout; the
administrator should see that before, not after. This command reads the live cluster (cluster-operator with its
status, the product's pods to know which node runs what) and asks the core (`metax_core.cluster.diff`); the
verdict on the edit is the webhook's validation (`metax_core.spec.validation`, the rollout's edit rules) and the
API server's own, by a server-side apply dry-run of cluster-operator (``dryRun=All``: the CRD's schema, CEL
rules and the admission webhooks run, nothing is stored). Reads only.

Exit codes: 0 nothing would change, 1 something would change, 2 the edit is refused (or bad usage),
`connection.EXIT_NO_CLUSTER` the cluster cannot be used (as every command that needs one). With ``-o json`` every
outcome is JSON on stdout: the prediction, ``{"refused": […]}``, or a failure (`documents.print_failure`).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import attrs
from rich.console import Console

from metax_core.cluster import diff, render_settings
from metax_core.errors import ClusterError, FieldError, InvalidSpec, NotFound
from metax_core.rollout import status as rollout_status
from metax_core.spec import envelope, validation
from metax_core.spec import model as spec
from metax_core.wire import meta
from metax_k8s.api import Api
from services.cli import connection, documents

CR_API = f"{spec.API_GROUP}/{spec.API_VERSION}"
FIELD_MANAGER = "helm"
"""The dry-run applies as Helm does (the chart renders cluster-operator), so its fields are compared as owned."""
EXIT_SAME, EXIT_CHANGES, EXIT_REFUSED = 0, 1, 2


class DriverConfigCompare(Protocol):
    """`services.cli.diff_driver_config.compare` (which reads this module's helpers: passed in, not imported)."""

    def __call__(self, api: Api, *, file: str, namespace: str, output: str) -> int: ...


def add_parser(subparsers: Any, compare_driver_config: DriverConfigCompare) -> None:
    p = subparsers.add_parser(
        "diff",
        help="what applying a ClusterOperator (or chart values) would change: objects, restarts, rollout (reads only)",
        description="Compare the live cluster-operator with FILE (a ClusterOperator or chart values), or with the "
        "live spec edited by --set: each object the operator would change (a unified diff), which nodes' pods "
        "would restart and why, whether a driver rollout would start and its plan, and whether the webhook or "
        "the API server would refuse it. With --driver-config: the driver-config ConfigMap's change, each "
        "node's VF count and module parameters before and after, the gpu-device pods the operator recreates "
        "(R-VF) and what driver-manager does on each node. Exit codes: 0 no change, 1 changes, 2 refused or "
        f"bad usage, {connection.EXIT_NO_CLUSTER} the cluster cannot be used.",
    )
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("-f", "--file", help="ClusterOperator or values YAML/JSON, - for stdin")
    source.add_argument(
        "--set",
        action="append",
        metavar="PATH=VALUE",
        help="edit the live spec like helm --set (dotted path, e.g. driver.payload.version=2.21.0); repeatable",
    )
    source.add_argument(
        "--driver-config",
        metavar="FILE",
        help="an edit of the driver-config ConfigMap (the ConfigMap or its data, YAML/JSON, - for stdin): VF "
        "counts and module parameters per node, the gpu-device pods recreated, what driver-manager does",
    )
    p.add_argument("-o", "--output", choices=("table", "json"), default="table")
    p.add_argument(
        "-n", "--namespace", default=render_settings.RenderSettings().namespace, help="the operator's namespace"
    )
    p.add_argument("--version", default=documents.package_version(), help="the operator's component image tag")
    connection.add_options(p, json_output=True)
    p.set_defaults(func=run, compare_driver_config=compare_driver_config)


def run(args: argparse.Namespace) -> int:
    """A cluster that cannot be used is `services.cli.main`'s to report (`connection.EXIT_NO_CLUSTER`)."""
    try:
        api = connection.api(args.kubeconfig, "metax-operator-diff")
        if args.driver_config is not None:
            compare_driver_config: DriverConfigCompare = args.compare_driver_config
            return compare_driver_config(api, file=args.driver_config, namespace=args.namespace, output=args.output)
        return compare(
            api,
            file=args.file,
            sets=args.set or (),
            settings=render_settings.RenderSettings(namespace=args.namespace, version=args.version),
            output=args.output,
        )
    except documents.UsageError as exc:
        documents.print_usage_error(exc, json_output=args.output == "json")
        return EXIT_REFUSED


def set_path(document: dict[str, Any], assignment: str) -> None:
    """Helm's ``--set a.b=c`` for maps (values become what `chart_values` reads from Helm's strings)."""
    path, sep, value = assignment.partition("=")
    if not sep or not path or any(not part for part in path.split(".")) or "[" in path:
        raise documents.UsageError(f"--set {assignment!r}: expected PATH=VALUE with a dotted map path (no lists)")
    node = document
    *parents, leaf = path.split(".")
    for part in parents:
        child = node.get(part)
        if not isinstance(child, dict):
            child = node[part] = {}
        node = child
    node[leaf] = {"true": True, "false": False, "null": None}.get(value, value)


def _live(api: Api) -> dict[str, Any] | None:
    try:
        return api.get(CR_API, spec.KIND, spec.OBJECT_NAME)
    except NotFound:
        return None


def _new_document(live: Mapping[str, Any] | None, file: str | None, sets: Sequence[str]) -> dict[str, Any]:
    if file is not None:
        return dict(envelope.spec_document(documents.load_document(file)))
    if live is None:
        raise documents.UsageError(f"--set edits the live {spec.OBJECT_NAME}, and there is none: use -f")
    document: dict[str, Any] = json.loads(json.dumps(live.get("spec") or {}))
    for assignment in sets:
        set_path(document, assignment)
    return document


def _pods_on(api: Api, namespace: str) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for pod in api.list("v1", "Pod", namespace=namespace, label_selector=meta.PART_OF_SELECTOR).items:
        node = (pod.get("spec") or {}).get("nodeName")
        if not node or (pod.get("metadata") or {}).get("deletionTimestamp"):
            continue
        for owner in (pod.get("metadata") or {}).get("ownerReferences") or []:
            if owner.get("kind") == "DaemonSet":
                found.setdefault(str(owner["name"]), []).append(str(node))
            elif owner.get("kind") == "ReplicaSet":  # <deployment>-<hash>
                found.setdefault(str(owner["name"]).rsplit("-", 1)[0], []).append(str(node))
    return found


def _dry_run(api: Api, document: Mapping[str, Any]) -> str:
    """The API server's verdict on applying the new spec ("" = accepted), nothing stored."""
    cr = {"apiVersion": CR_API, "kind": spec.KIND, "metadata": {"name": spec.OBJECT_NAME}, "spec": dict(document)}
    try:
        api.apply(cr, field_manager=FIELD_MANAGER, force=True, dry_run=True)
    except ClusterError as exc:
        if exc.status in (400, 422) or (exc.status == 403 and "denied the request" in exc.detail):
            return exc.detail  # the schema, a CEL rule, or an admission webhook refused it
        raise
    return ""


BOOKKEEPING = ("managedFields", "resourceVersion", "generation", "uid", "creationTimestamp")
CONTROLLER_ANNOTATIONS = ("deployment.kubernetes.io/revision",)
"""Written by a controller after the apply, not by it: left out of both sides."""


def cleaned(obj: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """An object as the diff shows it: without status, server bookkeeping and the operator's desired-hash."""
    if obj is None:
        return None
    out = json.loads(json.dumps(obj))
    out.pop("status", None)
    metadata = out.get("metadata") or {}
    for key in BOOKKEEPING:
        metadata.pop(key, None)
    annotations = metadata.get("annotations") or {}
    for key in (meta.DESIRED_HASH, *CONTROLLER_ANNOTATIONS):
        annotations.pop(key, None)
    if not annotations:
        metadata.pop("annotations", None)
    return dict(out)


def server_side(
    api: Api, prediction: diff.Prediction, new: spec.ClusterOperatorSpec, settings: render_settings.RenderSettings
) -> tuple[diff.Prediction, dict[tuple[str, str], dict[str, Any] | None]]:
    """Each changed object through a server-side apply dry run (``dryRun=All``) as the operator's field manager:
    the diffs become live object → what the API server would store (its defaults, and the fields the operator
    would drop, included). Returns the prediction with those diffs, and each object as it would be stored."""
    wanted = diff.desired(new, settings)
    stored: dict[tuple[str, str], dict[str, Any] | None] = {}
    changes = []
    for change in prediction.objects:
        key = (change.kind, change.name)
        manifest = wanted.get(key)
        try:
            live = api.get(change.api_version, change.kind, change.name, change.namespace)
        except NotFound:
            live = None
        if manifest is None:
            after = None
        else:
            body = json.loads(json.dumps(manifest))
            hashed = ((live or {}).get("metadata") or {}).get("annotations", {}).get(meta.DESIRED_HASH)
            if hashed:  # bookkeeping the operator rewrites: kept as it is, so it is no change here
                body["metadata"].setdefault("annotations", {})[meta.DESIRED_HASH] = hashed
            try:
                after = api.apply(body, field_manager=meta.OPERATOR_FIELD_MANAGER, force=True, dry_run=True)
            except ClusterError as exc:
                note = f"# no server-side dry run ({exc}); the operator's render:\n"
                changes.append(attrs.evolve(change, diff=note + change.diff))
                continue
        stored[key] = after
        text = diff.unified(change.kind, change.name, cleaned(live), cleaned(after))
        changes.append(attrs.evolve(change, diff=text))
    return attrs.evolve(prediction, objects=tuple(changes)), stored


def _api_version(kind: str) -> str:
    return {"DaemonSet": "apps/v1", "Deployment": "apps/v1"}.get(
        kind, "rbac.authorization.k8s.io/v1" if "Role" in kind else "v1"
    )


def compare(
    api: Api, *, file: str | None, sets: Sequence[str], settings: render_settings.RenderSettings, output: str = "table"
) -> int:
    try:
        document = _new_document(None, file, sets) if file is not None else None  # bad input before the cluster
        live_cr = _live(api)
        if document is None:
            document = _new_document(live_cr, file, sets)
    except InvalidSpec as exc:  # not a ClusterOperator or a spec (a Deployment, a list)
        return _refused(list(exc.errors), "", output)
    live_spec = None
    status = None
    if live_cr is not None:
        try:
            live_spec = validation.parse(live_cr.get("spec") or {})
        except InvalidSpec:
            live_spec = None  # the operator refuses it too: everything it renders is new
        upgrade = (live_cr.get("status") or {}).get("upgradeStatus")
        if upgrade:
            try:
                status = rollout_status.from_document(upgrade)
            except (InvalidSpec, ValueError, TypeError):
                status = None
    try:
        new = validation.parse(document)
    except InvalidSpec as exc:
        return _refused(list(exc.errors), "", output)
    prediction = diff.predict(
        live_spec, new, settings=settings, pods_on=_pods_on(api, settings.namespace), rollout=status
    )
    server = _dry_run(api, document)
    if prediction.refused or server:
        return _refused(list(prediction.refused), server, output)
    prediction, _ = server_side(api, prediction, new, settings)
    if output == "json":
        print(json.dumps(as_json(prediction), indent=2))
    else:
        print_prediction(prediction)
    return EXIT_CHANGES if prediction.changes else EXIT_SAME


def _refused(errors: list[FieldError], server: str, output: str) -> int:
    if output == "json":
        print(json.dumps({"refused": [str(e) for e in errors] + ([server] if server else [])}, indent=2))
    else:
        for error in errors:
            print(f"refused by the webhook: {error}", file=sys.stderr)
        if server:
            print(f"refused by the API server: {server}", file=sys.stderr)
    return EXIT_REFUSED


def as_json(p: diff.Prediction) -> dict[str, Any]:
    """``{"refused": [], "objects": [{"apiVersion","kind","name","namespace","action",
        "diff"}], "restarts": [{"workload",
        "action","nodes","why"}], "driver": {"mode","nodes","why","plan": [[nodes of each loop] per step],
    "onFailure","onBusy"} | null}``."""
    driver = p.driver
    return {
        "refused": [str(e) for e in p.refused],
        "objects": [
            {
                "apiVersion": o.api_version,
                "kind": o.kind,
                "name": o.name,
                "namespace": o.namespace,
                "action": o.action.value,
                "diff": o.diff,
            }
            for o in p.objects
        ],
        "restarts": [
            {"workload": r.workload, "action": r.action.value, "nodes": list(r.nodes), "why": r.why} for r in p.restarts
        ],
        "driver": None
        if driver is None
        else {
            "mode": driver.mode.value,
            "nodes": list(driver.nodes),
            "why": driver.why,
            "plan": None if driver.plan is None else [[list(b) for b in s.batches] for s in driver.plan.steps],
            "onFailure": driver.on_failure,
            "onBusy": driver.on_busy,
        },
    }


def print_prediction(p: diff.Prediction) -> None:
    console = Console(file=sys.stdout, highlight=False, width=None if sys.stdout.isatty() else 160)
    if not p.objects:
        console.print("no change: the operator would apply exactly what it applies now")
        return
    for o in p.objects:
        console.print(f"[bold]{o.action.value} {o.kind} {o.name}[/bold]")
        console.print(o.diff, markup=False, end="")
    for r in p.restarts:
        where = ", ".join(r.nodes) if r.nodes else "no node yet"
        console.print(f"restart: {r.workload} ({r.action.value}) on {where}: {r.why}", markup=False)
    if p.driver is not None:
        d = p.driver
        console.print(f"driver: {d.why}; {d.mode.value} on {', '.join(d.nodes) or 'no node'}", markup=False)
        if d.plan is not None:
            for step in d.plan.steps:
                loops = "; ".join(", ".join(b) for b in step.batches) or "(no node)"
                console.print(f"  step {step.index + 1}: {loops}", markup=False)
        if d.on_failure:
            console.print(f"  if a node fails: {d.on_failure}", markup=False)
        if d.on_busy:
            console.print(f"  if a node runs GPU workloads: {d.on_busy}", markup=False)
