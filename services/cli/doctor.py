"""``metax-operator doctor [NODE…]``: why has this node no GPU? (R-DOCTOR, R-READY, R-DEP; docs/doctor.md)

Why it exists: the answer to "the node shows 0 allocatable GPUs" is spread over the node's labels and
annotations, the component pods on it, the agents' Events and cluster-operator's status. This command only
gathers them (reads only: GETs and paged lists, filtered by selectors) and prints what the core's chain
(`metax_core.cluster.doctor.chain`) says: per node every link, the first broken one with its evidence and the next
command to look closer. Without NODE it walks every node and prints the cluster's summary (nodes per state),
the driver rollout's state and cluster-operator's conditions. Exit codes: `metax_core.cluster.doctor.report`, and
`services.cli.connection.EXIT_NO_CLUSTER` when the cluster cannot be used (as every command that needs one).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from rich.console import Console
from rich.table import Table

from metax_core import release
from metax_core.cluster import render_settings
from metax_core.cluster.doctor import chain, links
from metax_core.cluster.doctor import facts as doctor_facts
from metax_core.cluster.doctor import report as doctor_report
from metax_core.errors import InvalidSpec, NotFound
from metax_core.node import driver_config
from metax_core.rollout import status as rollout_status
from metax_core.spec import model as spec
from metax_core.spec import validation
from metax_core.wire import meta
from metax_k8s import events as k8s_events
from metax_k8s.api import Api
from services.cli import connection, documents

CR_API = f"{spec.API_GROUP}/{spec.API_VERSION}"
USER_AGENT = "metax-operator-doctor"


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "doctor",
        help="why has a node no GPU: the first broken link of its readiness chain (reads only)",
        description="Walk each node's readiness chain in dependency order (cluster-operator, the node, each "
        "enabled component's pod and readiness signal, GPU found, driver, VFs, vfio selection, allocatable) and "
        "name the first broken link with its evidence and the next command to look closer. Without NODE: every "
        "node, summed up per state, with the driver rollout's state and cluster-operator's conditions. "
        "Exit codes: 0 every link holds (without NODE: every GPU node, and cluster-operator Ready; nodes without "
        "a MetaX GPU are counted, not failed), 1 a link is broken, 2 bad usage (unknown node), "
        f"{connection.EXIT_NO_CLUSTER} the cluster cannot be used.",
    )
    p.add_argument("nodes", nargs="*", metavar="NODE", help="node names (default: every node)")
    p.add_argument("-o", "--output", choices=("table", "json"), default="table")
    p.add_argument(
        "-n", "--namespace", default=render_settings.RenderSettings().namespace, help="the operator's namespace"
    )
    connection.add_options(p, json_output=True)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """A cluster that cannot be used is `services.cli.main`'s to report (`connection.EXIT_NO_CLUSTER`)."""
    api = connection.api(args.kubeconfig, USER_AGENT)
    return examine(api, args.nodes, namespace=args.namespace, output=args.output)


# --- gathering (reads only) -----------------------------------------------------------------------------------


def cluster_facts(api: Api, namespace: str) -> tuple[doctor_facts.ClusterFacts, rollout_status.UpgradeStatus | None]:
    try:
        raw = api.get(CR_API, spec.KIND, spec.OBJECT_NAME)
    except NotFound:
        cr = doctor_facts.CrFacts(None, f"no {spec.KIND} {spec.OBJECT_NAME}: is the chart installed?")
        return doctor_facts.ClusterFacts(cr, namespace), None
    metadata, status = raw.get("metadata") or {}, raw.get("status") or {}
    conditions = doctor_facts.conditions_from_raw(status)
    try:
        parsed: spec.ClusterOperatorSpec | None = validation.parse({k: v for k, v in raw.items() if k != "status"})
        problem = ""
    except InvalidSpec as exc:
        parsed, problem = None, "the spec is refused: " + "; ".join(str(e) for e in exc.errors)
    cr = doctor_facts.CrFacts(
        parsed,
        problem,
        conditions,
        generation=int(metadata.get("generation") or 0),
        observed_generation=int(status.get("observedGeneration") or 0),
        versions={str(k): str(v) for k, v in (status.get("versions") or {}).items()},
    )
    rollout = _rollout(status)
    daemonsets = api.list("apps/v1", "DaemonSet", namespace=namespace, label_selector=meta.MANAGED_SELECTOR).items
    config, config_problem = _driver_config(api, namespace)
    facts = doctor_facts.ClusterFacts(
        cr,
        namespace,
        {d.name: d for d in map(doctor_facts.daemonset_from_raw, daemonsets)},
        config,
        config_problem,
        rollout_active=rollout is not None and rollout.phase in rollout_status.ACTIVE_PHASES,
    )
    return facts, rollout


def _rollout(status: dict[str, Any]) -> rollout_status.UpgradeStatus | None:
    document = status.get("upgradeStatus")
    if not document:
        return None
    try:
        return rollout_status.from_document(document)
    except (InvalidSpec, ValueError, TypeError):
        return None


def _driver_config(api: Api, namespace: str) -> tuple[driver_config.DriverConfig | None, str]:
    try:
        raw = api.get("v1", "ConfigMap", driver_config.CONFIGMAP_NAME, namespace)
    except NotFound:
        return None, ""
    try:
        return driver_config.parse(raw.get("data") or {}), ""
    except InvalidSpec as exc:
        return None, "; ".join(str(e) for e in exc.errors)


def node_inputs(
    api: Api, namespace: str, node: str | None
) -> tuple[list[doctor_facts.PodFacts], list[doctor_facts.EventFacts]]:
    """The product's pods (on ``node``, or everywhere) and the Events about Nodes (about ``node``)."""
    pods = api.list(
        "v1",
        "Pod",
        namespace=namespace,
        label_selector=meta.PART_OF_SELECTOR,
        field_selector=f"spec.nodeName={node}" if node else None,
    ).items
    regarding = "regarding.kind=Node" + (f",regarding.name={node}" if node else "")
    events = api.list(
        k8s_events.API_VERSION, "Event", namespace=k8s_events.CLUSTER_SCOPED_NAMESPACE, field_selector=regarding
    ).items
    return [doctor_facts.pod_from_raw(p) for p in pods], [doctor_facts.event_from_raw(e) for e in events]


def examine(api: Api, names: Sequence[str], *, namespace: str, output: str = "table") -> int:
    """Gather, diagnose and print; the exit code (`doctor_report`)."""
    facts, rollout = cluster_facts(api, namespace)
    if names:
        raw_nodes: list[Mapping[str, Any]] = []
        for name in dict.fromkeys(names):
            try:
                raw_nodes.append(api.get("v1", "Node", name))
            except NotFound:
                message = f"node {name!r} not found"
                documents.print_failure(documents.USAGE_ERROR, message, json_output=output == "json")
                return doctor_report.EXIT_USAGE
    else:
        raw_nodes = list(api.list("v1", "Node").items)
    nodes = [doctor_facts.node_from_raw(n) for n in raw_nodes]
    only = nodes[0].name if len(nodes) == 1 else None
    pods, events = node_inputs(api, namespace, only)
    diagnoses = [chain.diagnose(n, facts, pods, [e for e in events if e.node == n.name]) for n in nodes]
    summary = None if names else doctor_report.summarize(diagnoses, facts.cr, rollout)
    if output == "json":
        document: dict[str, Any] = {"nodes": [doctor_report.diagnosis_document(d) for d in diagnoses]}
        if summary is not None:
            document["summary"] = doctor_report.summary_document(summary, facts.cr)
        print(json.dumps(document, indent=2))
    else:
        console = Console(file=sys.stdout, highlight=False, width=None if sys.stdout.isatty() else 160)
        if summary is None:
            for d in diagnoses:
                print_diagnosis(console, d)
        else:
            print_summary(console, summary, facts.cr, diagnoses)
    return doctor_report.exit_code(diagnoses, summary=summary)


# --- printing -------------------------------------------------------------------------------------------------

MARK = {links.LinkState.HOLDS: "[green]ok[/green]", links.LinkState.BROKEN: "[red]BROKEN[/red]"}


def print_diagnosis(console: Console, d: links.Diagnosis) -> None:
    table = Table(title=f"node {d.node}", title_justify="left")
    for column in ("", "Link", "Evidence"):
        table.add_column(column)
    for link in d.links:
        table.add_row(MARK[link.state], link.title, link.evidence)
    console.print(table)
    first = d.first_broken
    if first is None:
        console.print(f"{d.node}: every link holds")
    else:
        console.print(f"{d.node}: first broken link: [bold]{first.title}[/bold] ({first.id}): {first.evidence}")
        if first.next:
            console.print(f"  look closer: {first.next}", markup=False)


def print_summary(
    console: Console, summary: doctor_report.Summary, cr: doctor_facts.CrFacts, diagnoses: Sequence[links.Diagnosis]
) -> None:
    table = Table(title="nodes", title_justify="left")
    for column in ("State", "Nodes", "Count"):
        table.add_column(column)
    for name, nodes in summary.states:
        shown = ", ".join(nodes[:6]) + (f" … ({len(nodes)})" if len(nodes) > 6 else "")
        table.add_row(name, shown, str(len(nodes)))
    console.print(table)
    if cr.problem:
        console.print(f"{spec.OBJECT_NAME}: {cr.problem}")
    console.print(doctor_report.releases_line(cr, release.running()), markup=False)
    conditions = Table(title=f"{spec.OBJECT_NAME} conditions", title_justify="left")
    for column in ("Type", "Status", "Reason", "Message"):
        conditions.add_column(column)
    for kind, status, reason, message in cr.conditions:
        conditions.add_row(kind, status, reason, message)
    console.print(conditions)
    rollout = summary.rollout
    console.print(
        "driver rollout: none recorded"
        if rollout is None
        else f"driver rollout: phase {rollout.phase.value}" + (f": {rollout.message}" if rollout.message else "")
    )
    broken = [d for d in diagnoses if doctor_report.state(d) not in (doctor_report.READY, doctor_report.NO_GPU)]
    for d in broken[:10]:
        first = d.first_broken
        if first is not None:
            console.print(f"{d.node}: [bold]{first.title}[/bold]: {first.evidence}")
            console.print(f"  look closer: metax-operator doctor {d.node}", markup=False)
