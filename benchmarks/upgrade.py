"""The operator's own upgrade (issue 40, R-UPGRADE): how the node agents roll when release N-1 becomes N.

Why this module exists: a ``helm upgrade`` of the operator changes its environment (``METAX_COMPONENT_VERSION``:
every agent image), and the operator then rolls every DaemonSet; how long that takes, and how many nodes are
without an agent meanwhile, is what a maintenance window is planned by. Nothing is asserted.

``python -m benchmarks.upgrade [--nodes 100] [--ready-delay 5]``: on the loopback control plane with N kwok GPU
nodes, release N-1's operator (`operator_fleet.operator_process`) installs and every pod becomes Ready; it is
stopped, release N's started, and a watch on the namespace's pods follows the roll until every DaemonSet's pods
run the new images and are Ready. Per DaemonSet: the most nodes it targets (those with its pod before) without a
Ready, not deleted pod at one moment, next to its ``maxUnavailable``, and the median pod deletion → replacement
Ready; the reference: (nodes / maxUnavailable) × that median. The driver (``OnDelete``) is rolled by the operator:
its replaced pods are counted; should none change, the watch stops `QUIET` seconds after the other agents.
"""

from __future__ import annotations

import argparse
import math
import pathlib
import statistics
import sys
import time
from collections.abc import Mapping, Sequence
from typing import Any

import attrs
import yaml

ROOT = pathlib.Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import figures as fig
from benchmarks import operator_fleet as fleet
from benchmarks import operator_scale
from metax_core import components, release
from metax_core.cluster import render_settings, workloads
from metax_core.spec import validation
from metax_dev.controlplane import cluster
from metax_dev.release import previous
from metax_k8s import client, retry

ID = "R-UPGRADE"
"""The figures' id: the requirement they measure (issue 40 gives them no P-number)."""
OLD, NEW = previous.load().version, release.running()
"""Release N-1 (metax_dev/release/previous.toml) and N (this tree): the operator's ``METAX_COMPONENT_VERSION``, the
tag of every component image. One operator build runs both: on kwok nodes only the rendered image references matter."""
READY_DELAY = 5.0
"""Seconds kwok takes to make a bound pod Ready (kwok's default: at once). On a real node the agents' pods, their
images pulled, were Ready 4–10 s after creation (docs/images.md, benchmarks/release.py)."""
QUIET = 30.0
"""Seconds without a driver pod change, once every other agent is new and Ready, after which the watch stops."""
DRIVER = components.DRIVER_DAEMONSET


def rendered(version: str) -> dict[str, Mapping[str, Any]]:
    """DaemonSet name → the DaemonSet the operator of ``version`` renders for `operator_fleet.SPEC`."""
    objects = workloads.render(validation.parse(fleet.SPEC), render_settings.RenderSettings(version=version)).objects
    return {o["metadata"]["name"]: o for o in objects if o["kind"] == "DaemonSet"}


def images(spec: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((c["name"], c["image"]) for c in [*spec.get("initContainers", ()), *spec["containers"]]))


def max_unavailable(ds: Mapping[str, Any], nodes: int) -> int | None:
    """What the DaemonSet controller allows (a percentage rounds up, as for DaemonSets); None for OnDelete."""
    strategy = ds["spec"].get("updateStrategy") or {}
    if strategy.get("type", "RollingUpdate") != "RollingUpdate":
        return None
    value = (strategy.get("rollingUpdate") or {}).get("maxUnavailable", 1)
    return math.ceil(nodes * int(value[:-1]) / 100) if isinstance(value, str) else int(value)


def kwok_timing(plane: cluster.ControlPlane) -> str:
    """What the kwok config the control plane wrote delays pod readiness and deletion by."""
    stages = {s["metadata"]["name"]: s["spec"] for s in yaml.safe_load_all((plane.workdir / "kwok.yaml").read_text())}
    ready, gone = (
        (stages[n].get("delay") or {}).get("durationMilliseconds", 0) / 1000 for n in ("pod-ready", "pod-delete")
    )
    return f"kwok: a pod Ready {ready:g} s after it is bound, deleted {gone:g} s after its deletion"


@attrs.frozen
class Pod:
    ds: str
    node: str
    new: bool
    ready: bool  # and not deleted


class Roll:
    """The pods of every DaemonSet, from the baseline list and then the watch's events; the peaks and times."""

    def __init__(self, pods: Sequence[Mapping[str, Any]], old: Mapping[str, Any], new: Mapping[str, Any]) -> None:
        self.old = {name: images(ds["spec"]["template"]["spec"]) for name, ds in old.items()}
        self.new = {name: images(ds["spec"]["template"]["spec"]) for name, ds in new.items()}
        self.relist(pods, None)
        wrong = [n for n, p in self.pods.items() if p.new or not p.ready]
        if wrong:
            raise SystemExit(f"before the upgrade, pods not Ready on release {OLD}'s template: {wrong[:5]}")
        self.targets = {ds: {p.node for p in self.pods.values() if p.ds == ds} for ds in self.old}
        self.peak = dict.fromkeys(self.old, 0)
        self.deleted_at: dict[tuple[str, str], float] = {}
        self.replaced: dict[tuple[str, str], float] = {}
        """(DaemonSet, node) → seconds from its old pod's deletion to its new pod's Ready."""
        self.last_ready = dict.fromkeys(self.old, 0.0)
        self.last_driver_change = 0.0

    def relist(self, pods: Sequence[Mapping[str, Any]], now: float | None) -> None:
        self.pods: dict[str, Pod] = {}
        self.ready_on: dict[tuple[str, str], int] = {}
        """(DaemonSet, node) → its Ready, not deleted pods there."""
        for p in pods:
            self.update(p, deleted=False, now=now)

    def update(self, obj: Mapping[str, Any], deleted: bool, now: float | None) -> None:
        """One pod event, ``now`` seconds after the new operator started (None: the baseline list)."""
        meta, spec = obj["metadata"], obj["spec"]
        owner = next((o["name"] for o in meta.get("ownerReferences", ()) if o["kind"] == "DaemonSet"), "")
        if owner not in self.old:
            return
        if images(spec) not in (self.old[owner], self.new[owner]):
            raise SystemExit(f"pod {meta['name']} runs neither release's images: {images(spec)}")
        gone = deleted or "deletionTimestamp" in meta
        conditions = (obj.get("status") or {}).get("conditions") or ()
        ready = not gone and any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)
        pod = Pod(owner, spec.get("nodeName", ""), images(spec) == self.new[owner], ready)
        where = (owner, pod.node)
        before = self.pods.pop(meta["name"], None)
        if not deleted:
            self.pods[meta["name"]] = pod
        if before is not None and before.ready:
            self.ready_on[before.ds, before.node] -= 1
        if ready:
            self.ready_on[where] = self.ready_on.get(where, 0) + 1
        if now is None:
            return
        self.last_driver_change = now if owner == DRIVER else self.last_driver_change
        if gone and not pod.new:
            self.deleted_at.setdefault(where, now)
        if pod.new and ready:
            self.last_ready[owner] = max(self.last_ready[owner], now)
            if where in self.deleted_at:
                self.replaced.setdefault(where, now - self.deleted_at[where])
        down = sum(1 for n in self.targets[owner] if not self.ready_on.get((owner, n)))
        self.peak[owner] = max(self.peak[owner], down)

    def rolled(self, ds: str) -> bool:
        pods = [p for p in self.pods.values() if p.ds == ds]
        return all(p.new and p.ready for p in pods) and {p.node for p in pods} >= self.targets[ds]

    def done(self, now: float) -> bool:
        """Every agent new and Ready; the driver's too, or none of its pods changed for `QUIET` seconds."""
        if not all(self.rolled(ds) for ds in self.old if ds != DRIVER):
            return False
        return self.rolled(DRIVER) or now - max(self.last_driver_change, *self.last_ready.values()) > QUIET

    def count(self, ds: str) -> int:
        """The nodes whose pod of ``ds`` was replaced (deleted, then Ready on the new template)."""
        return sum(1 for d, _ in self.replaced if d == ds)

    def per_pod(self, ds: str | None = None) -> float:
        """The median seconds from an old pod's deletion to its replacement's Ready (of ``ds``, else of all)."""
        found = [s for (d, _), s in self.replaced.items() if ds is None or d == ds]
        return statistics.median(found) if found else math.nan


def follow(api: client.HttpApi, roll: Roll, rv: str, started: float, timeout: float) -> float:
    """Feed the pod watch's events to ``roll`` until it is done; the seconds from ``started`` to the last Ready.
    Whether it is done is checked at most every 0.2 s (the times come from the events, not from that check)."""
    checked = 0.0
    while not roll.done(time.monotonic() - started):
        if time.monotonic() - started > timeout:
            raise SystemExit(f"timed out waiting for the roll: {fleet.fleet_says(api)}")
        try:
            for event in api.watch("v1", "Pod", namespace=fleet.NS, resource_version=rv, timeout_seconds=5):
                rv, now = event.object["metadata"]["resourceVersion"], time.monotonic() - started
                if event.type.value != "BOOKMARK":
                    roll.update(event.object, event.type.value == "DELETED", now)
                if now - checked > 0.2:
                    checked = now
                    if roll.done(now):
                        break
        except retry.Gone:  # compacted away: list again (the peaks and times so far are kept)
            listed = api.list("v1", "Pod", namespace=fleet.NS)
            roll.relist(listed.items, time.monotonic() - started)
            rv = listed.resource_version
    return max(roll.last_ready.values())


@attrs.frozen
class Measured:
    nodes: int
    seconds: float
    """The new operator's start → the last agent pod Ready on the new template."""
    roll: Roll
    unavailable: Mapping[str, int | None]
    kwok: str


def measure(nodes: int, ready_delay: float = READY_DELAY) -> Measured:
    old, new = rendered(OLD), rendered(NEW)
    plane_options = {"startup_timeout": 1800, "node_lease_seconds": operator_scale.KWOK_LEASE_SECONDS}
    with fleet.gpu_fleet(nodes, pod_ready_seconds=ready_delay, **plane_options) as (plane, api):
        release = {**fleet.CHART_ENV, "METAX_COMPONENT_VERSION": OLD}
        took = fleet.install(api, plane.kubeconfig_path, nodes, release)
        print(f"release {OLD}: every pod Ready {took:.0f} s after the CR", flush=True)
        listed = api.list("v1", "Pod", namespace=fleet.NS)
        roll, started = Roll(listed.items, old, new), time.monotonic()
        with fleet.operator_process(plane.kubeconfig_path, {**release, "METAX_COMPONENT_VERSION": NEW}):
            seconds = follow(api, roll, listed.resource_version, started, 600 + 4 * nodes * (ready_delay + 1))
        unavailable = {name: max_unavailable(ds, len(roll.targets[name])) for name, ds in new.items()}
        return Measured(nodes, seconds, roll, unavailable, kwok_timing(plane))


def ideal(m: Measured, ds: str) -> float:
    """(nodes / maxUnavailable) × the median per-pod replacement; for the driver (OnDelete): one node at a time."""
    return len(m.roll.targets[ds]) / (m.unavailable[ds] or 1) * m.roll.per_pod(ds)


HEADER = (
    "DaemonSet|strategy, maxUnavailable|pods replaced|peak nodes without a Ready pod|per-pod s|last Ready s|ideal s"
)


def rows(m: Measured) -> list[list[str]]:
    return [
        [
            *(ds, "OnDelete" if m.unavailable[ds] is None else f"RollingUpdate, {m.unavailable[ds]}"),
            *(f"{m.roll.count(ds)}/{len(m.roll.targets[ds])}", str(m.roll.peak[ds]), f"{m.roll.per_pod(ds):.2f}"),
            *(f"{m.roll.last_ready[ds]:.1f}", f"{ideal(m, ds):.1f}"),
        ]
        for ds in sorted(m.roll.old)
    ]


def to_figures(m: Measured) -> list[fig.Figure]:
    what = f"operator upgraded {OLD} → {NEW}, {m.nodes:,} nodes: "
    others = sorted(ds for ds in m.roll.old if ds != DRIVER)
    best = max(ideal(m, ds) for ds in m.roll.old)
    first = min(m.roll.deleted_at.values())
    total = (
        f"ideal: (nodes / maxUnavailable) × the median pod deletion → replacement Ready ({m.roll.per_pod():.2f} s; "
        f"{m.kwok}) = {best:.1f} s; first pod deleted at {first:.1f} s, the RollingUpdate DaemonSets' last pod "
        f"Ready at {max(m.roll.last_ready[ds] for ds in others):.1f} s"
    )
    limits = ", ".join(sorted({str(m.unavailable[ds]) for ds in others}))
    peaks = f"maxUnavailable {limits}; " + ", ".join(f"{ds} {m.roll.peak[ds]}" for ds in others)
    driven = f"{m.roll.count(DRIVER)} of {len(m.roll.targets[DRIVER])} driver pods replaced"
    if m.roll.count(DRIVER):
        driven += f", the last Ready at {m.roll.last_ready[DRIVER]:.1f} s (ideal, one node at a time: "
        driven += f"{ideal(m, DRIVER):.1f} s; median {m.roll.per_pod(DRIVER):.2f} s per pod)"
    peak, driver = max(m.roll.peak[ds] for ds in others), (m.roll.peak[DRIVER], driven)
    return [
        figure(what + "new operator started → the last agent pod Ready on the new images", m, m.seconds, total, best),
        figure(what + "most nodes without a Ready agent pod at one moment, a RollingUpdate DaemonSet", m, peak, peaks),
        figure(what + f"most nodes without a Ready {DRIVER} pod at once (OnDelete: the operator's)", m, *driver),
    ]


def figure(what: str, m: Measured, value: float, reference: str, ideal_s: float | None = None) -> fig.Figure:
    """One row, without a goal (issue 40 sets none): reported next to its reference from the same run."""
    return fig.Figure(ID, what, fig.reported(), value, "s" if ideal_s is not None else "", reference, ideal_s, m.nodes)


def figures(quick: bool = False, nodes: Sequence[int] = (100,)) -> list[fig.Figure]:
    """At the smallest of ``nodes``; ``quick``: at 20 nodes at most."""
    return to_figures(measure(min(*nodes, 20) if quick else min(nodes)))


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--nodes", type=int, default=100)
    parser.add_argument("--ready-delay", type=float, default=READY_DELAY, help="seconds kwok takes to Ready a pod")
    args = parser.parse_args()
    m = measure(args.nodes, args.ready_delay)
    from rich.console import Console

    title = f"Agents' roll after the operator's upgrade {OLD} → {NEW}, {m.nodes} kwok nodes ({m.kwok})"
    Console(width=160).print(fig.rich_table(title, HEADER.split("|"), rows(m)))
    fig.print_figures(to_figures(m), ID)


if __name__ == "__main__":
    main()
