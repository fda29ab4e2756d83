"""`metax-operator rollout plan`: what a driver upgrade policy will do, before it touches a node (R-ROLLOUT).

Why it exists: an administrator writing ``driver.upgradePolicy`` wants to see, for their fleet, which nodes
each step upgrades, in which loops, how each step pauses, and what the fallback does when nodes fail. This
command reads the ClusterOperator (or bare spec) file, validates it as the webhook would with the rollout
enabled, and plays the whole rollout through the real machine (`metax_core.rollout.sim`): every upgrade
succeeds except on the ``--fail`` nodes, every manual pause is confirmed, every pauseDuration waits out.

`metax-operator rollout confirm` confirms the step that waits for an administrator on the live cluster: it
reads the waiting step's token from ``status.upgradeStatus.status.confirmToken`` and writes it into the
annotation ``metax-tech.com/rollout-confirm`` on cluster-operator (never the spec: issue 16).

``-o json`` prints exactly ``{"steps": [{"replicas", "batches", "pause"}], "outcome"}`` for scripts.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any

import attrs
from rich.console import Console
from rich.table import Table

from metax_core.errors import InvalidSpec, NotFound
from metax_core.rollout import confirm as rollout_confirm
from metax_core.rollout import plan as rollout_plan
from metax_core.rollout import sim as rollout_sim
from metax_core.rollout.status import ConditionType, Reason
from metax_core.spec import model as spec
from metax_core.spec import validation
from metax_k8s.api import Api
from services.cli import connection, documents

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_INVALID = 2
CONFIRM_ANNOTATION = rollout_confirm.ANNOTATION
FIELD_MANAGER = "metax-operator-cli"
CR_API = f"{spec.API_GROUP}/{spec.API_VERSION}"
NAMES_PER_LOOP = 6
LOOPS_PER_STEP = 12
MAX_NODES = 10_000
"""Fleet size the simulation accepts: larger fleets are fine in a cluster, but the plan is for reading."""


def add_parser(subparsers: Any) -> None:
    rollout = subparsers.add_parser("rollout", help="driver rollout tools").add_subparsers(
        dest="rollout_command", required=True, metavar="COMMAND"
    )
    p = rollout.add_parser(
        "plan",
        help="simulate a driver rollout and print each step's loops, pauses and fallback",
        description="Simulate driver.upgradePolicy from FILE on a fleet of nodes (all upgrades succeed except "
        "on --fail nodes; manual pauses are resumed, pauseDurations wait) and print the plan.",
    )
    p.add_argument("-f", "--file", required=True, help="ClusterOperator or spec YAML/JSON file, - for stdin")
    fleet = p.add_mutually_exclusive_group(required=True)
    fleet.add_argument("--nodes", type=int, metavar="N", help="N nodes named node-01 … node-N")
    fleet.add_argument("--node-names", metavar="a,b,c", help="comma-separated node names")
    p.add_argument(
        "--fail",
        nargs="+",
        action="extend",
        default=[],
        metavar="NODE",
        help="nodes whose upgrade fails (every time, retries included)",
    )
    p.add_argument("-o", "--output", choices=("table", "json"), default="table")
    p.set_defaults(func=run)

    p = rollout.add_parser(
        "confirm",
        help="confirm the driver rollout step that waits for an administrator",
        description="Write the waiting step's token (status.upgradeStatus.status.confirmToken) into the "
        f"annotation {CONFIRM_ANNOTATION} on cluster-operator. A step is confirmed by nothing else. Exit codes: "
        "0 confirmed, 2 nothing confirmed (no step waits, another step waits than --step, no cluster-operator), "
        f"{connection.EXIT_NO_CLUSTER} the cluster cannot be used.",
    )
    connection.add_options(p)
    p.add_argument("--step", type=int, help="refuse unless this step (1-based) is the one waiting")
    p.set_defaults(func=confirm)


def _fail(message: str) -> int:
    print(f"error: {message}", file=sys.stderr)
    return EXIT_INVALID


def _names(args: argparse.Namespace) -> tuple[str, ...] | str:
    """The fleet's node names, or the reason they are unusable."""
    if args.node_names is not None:
        names = [n.strip() for n in args.node_names.split(",") if n.strip()]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            return f"--node-names lists {', '.join(twice)} more than once"
        if len(names) > MAX_NODES:
            return f"--node-names may name at most {MAX_NODES} nodes"
        return tuple(names) if names else "--node-names must name at least one node"
    if args.nodes is None or not 1 <= args.nodes <= MAX_NODES:
        return f"--nodes must be between 1 and {MAX_NODES}"
    return rollout_sim.node_names(args.nodes)


def run(args: argparse.Namespace) -> int:
    try:
        parsed = validation.parse(documents.load_document(args.file))
        policy = attrs.evolve(parsed.driver.upgrade_policy, enable_rollout=True, pause=False)
        errors = validation.upgrade_policy_errors(policy)
        if errors:
            raise InvalidSpec(errors)
    except documents.UsageError as exc:
        print(documents.error_line(exc), file=sys.stderr)
        return EXIT_INVALID
    except InvalidSpec as exc:
        for error in exc.errors:
            print(str(error), file=sys.stderr)
        return EXIT_INVALID
    names = _names(args)
    if isinstance(names, str):
        return _fail(names)
    unknown = sorted(set(args.fail) - set(names))
    if unknown:
        return _fail(f"--fail names nodes that are not in the fleet: {', '.join(unknown)}")
    original = parsed.driver.upgrade_policy
    if not original.enable_rollout:
        print("note: enableRollout is false in the file; this is the plan it will follow once true", file=sys.stderr)
    if original.pause:
        print("note: pause is true in the file; the plan shows the rollout as if it were false", file=sys.stderr)
    result = rollout_sim.simulate(policy, names, frozenset(args.fail))
    if args.output == "json":
        print(json.dumps(as_json(result), indent=2))
    else:
        print_table(result, policy, len(names))
    return EXIT_OK


def as_json(result: rollout_sim.Simulation) -> dict[str, Any]:
    steps = [{"replicas": s.replicas, "batches": [list(b) for b in s.batches], "pause": s.pause} for s in result.steps]
    return {"steps": steps, "outcome": result.outcome.value}


def _loop_text(nodes: Sequence[str]) -> str:
    if len(nodes) <= NAMES_PER_LOOP:
        return ", ".join(nodes)
    return f"{nodes[0]} … {nodes[-1]} ({len(nodes)} nodes)"


def _loops(title: str, loops: Sequence[Sequence[str]]) -> list[str]:
    lines = [f"{title}{i}: {_loop_text(loop)}" for i, loop in enumerate(loops[:LOOPS_PER_STEP], start=1)]
    if len(loops) > LOOPS_PER_STEP:
        lines.append(f"… {len(loops) - LOOPS_PER_STEP} more loops")
    return lines


def _describe_policy(policy: spec.UpgradePolicy, total: int) -> str:
    return (
        f"{total} nodes, {len(rollout_plan.plan(policy, total))} steps, maxParallel {policy.max_parallel}, "
        f"maxUnavailable {policy.max_unavailable}, maxFailureThreshold {policy.max_failure_threshold}, "
        f"fallback {policy.fallback.value}"
    )


def print_table(result: rollout_sim.Simulation, policy: spec.UpgradePolicy, total: int) -> None:
    console = Console(file=sys.stdout, highlight=False)
    plans = {p.index: p for p in rollout_plan.plan(policy, total)}
    console.print(f"Driver rollout plan: {_describe_policy(policy, total)}")
    console.print(f"If a node fails: {rollout_plan.on_failure(policy)}")
    console.print(f"If a node runs GPU workloads: {rollout_plan.on_busy(policy)}")
    table = Table()
    for column in ("Step", "Replicas", "Loops", "Tolerates", "Pause"):
        table.add_column(column)
    for step in result.steps:
        lines = _loops("loop ", step.batches) + _loops("retry ", step.retries)
        table.add_row(
            str(step.index + 1),
            str(step.replicas),
            "\n".join(lines) or "(no node to upgrade)",
            str(plans[step.index].toleration),
            "manual: confirm" if step.pause == "manual" else step.pause or "none",
        )
    console.print(table)
    failed = result.final.condition(ConditionType.FAILED)
    cause = failed.message if failed is not None else ""
    outcome = result.outcome
    if outcome is rollout_sim.Outcome.PAUSED:
        console.print(
            f"Fallback: pause. {cause}. Nothing new starts until an administrator confirms "
            "(metax-operator rollout confirm: one more retry of the failed nodes) or sets enableRollout: false "
            "(roll back)."
        )
    elif outcome is rollout_sim.Outcome.ROLLED_BACK:
        canary = failed is not None and failed.reason is Reason.CANARY_FAILED
        by = "onCanaryFailure: rollback, at once" if canary else "Fallback: rollback"
        console.print(f"{by}. {cause}. Every upgraded node goes back to the old driver:")
        console.print("  " + "\n  ".join(_loops("loop ", result.rollback)))
    if any(step.pause == "manual" for step in result.steps):
        console.print(
            "Manual pauses wait for `metax-operator rollout confirm` (the annotation "
            f"{CONFIRM_ANNOTATION}=<token from the status>); pause: true/false only holds and releases the rollout."
        )
    console.print(f"Outcome: {outcome.value}: {result.final.message}")
    console.print(f"Simulated: {result.decisions} decisions, {result.duration} including pauses")


def confirm(args: argparse.Namespace) -> int:
    """Annotate cluster-operator with the waiting step's token (a metadata write; the spec is untouched). A
    cluster that cannot be used is `services.cli.main`'s to report (`connection.EXIT_NO_CLUSTER`)."""
    return confirm_waiting_step(connection.api(args.kubeconfig, FIELD_MANAGER), args.step)


def confirm_waiting_step(api: Api, step: int | None) -> int:
    """What ``rollout confirm [--step N]`` does with ``api``: exactly the patch the waiting step's message names
    (`metax_core.rollout.confirm`)."""
    try:
        cr = api.get(CR_API, spec.KIND, spec.OBJECT_NAME)
    except NotFound:
        return _fail(f"no {spec.KIND} {spec.OBJECT_NAME}: is the chart installed? Nothing confirmed")
    status = ((cr.get("status") or {}).get("upgradeStatus") or {}).get("status") or {}
    token = status.get("confirmToken")
    if not token:
        return _fail(
            "no driver rollout step waits for a confirmation (status.upgradeStatus.status has no confirmToken)"
        )
    waiting = int(status.get("currentStepIndex") or 0) + 1
    if step is not None and step != waiting:
        return _fail(f"step {waiting} waits, not step {step}; nothing confirmed")
    api.merge_patch(
        CR_API, spec.KIND, spec.OBJECT_NAME, rollout_confirm.annotation_patch(token), field_manager=FIELD_MANAGER
    )
    print(f"confirmed step {waiting}: {CONFIRM_ANNOTATION}={token}")
    return EXIT_OK
