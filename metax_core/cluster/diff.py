"""``metax-operator diff``: what applying a spec would change, before it is applied (R-DIFF, R-ROLLOUT, R-DEP).

Why it exists: an edit of cluster-operator can restart every node's pods (a toleration in the global pod
template reaches every DaemonSet), remove a component from every node (a disabled prerequisite, R-DEP) or start
a driver rollout. This is the pure prediction: the operator's desired objects for the live spec and for the new
one (`metax_core.cluster.workloads.render`, the operator's own render, and the ConfigMaps it renders from the
spec), compared object by object as unified diffs of what the operator manages; the workloads whose pod template
changes, with the nodes that run their pods now (those pods are replaced); the driver, which changes only through
the rollout (its DaemonSet is ``OnDelete``): with ``enableRollout`` the plan of `metax_core.rollout.sim` (the
same machine `metax-operator rollout plan` plays) on the nodes running the driver now, else every node at
once; and what the webhook would refuse (`metax_core.spec.validation` is the caller's, the rules for edits
during a rollout are `metax_core.rollout.rules.update_errors`).
"""

from __future__ import annotations

import difflib
import enum
from collections.abc import Mapping, Sequence
from typing import Any

import attrs
import yaml

from metax_core import components
from metax_core.cluster import configmaps, render_settings, workloads
from metax_core.errors import FieldError
from metax_core.rollout import fleet, rules, sim
from metax_core.rollout import plan as rollout_plan
from metax_core.rollout.status import UpgradeStatus
from metax_core.spec import model as spec

DRIVER_WORKLOAD = components.BY_COMPONENT[components.Component.DRIVER].workloads[0].name


class Action(enum.Enum):
    CREATE = "create"
    UPDATE = "update"
    DELETE = "delete"


@attrs.frozen
class ObjectChange:
    api_version: str
    kind: str
    name: str
    namespace: str | None
    action: Action
    diff: str
    """A unified diff of the object's manifest as the operator applies it (``---`` live spec, ``+++`` new)."""


@attrs.frozen
class Restart:
    """A workload whose pods are replaced (or removed, or created), on which nodes, and why."""

    workload: str
    action: Action
    nodes: tuple[str, ...]
    why: str


class DriverMode(enum.Enum):
    ROLLOUT = "rollout"
    """Batched canary steps (``enableRollout``)."""
    ALL_AT_ONCE = "all at once"
    """No rollout: every idle node at once (docs/rollout.md, "enableRollout: false")."""


@attrs.frozen
class DriverChange:
    mode: DriverMode
    nodes: tuple[str, ...]
    why: str
    plan: sim.Simulation | None = None
    on_failure: str = ""
    """What happens to a node whose new driver fails (`metax_core.rollout.plan.on_failure`)."""
    on_busy: str = ""
    """What happens to a node running GPU workloads (`metax_core.rollout.plan.on_busy`)."""


@attrs.frozen
class Prediction:
    refused: tuple[FieldError, ...] = ()
    objects: tuple[ObjectChange, ...] = ()
    restarts: tuple[Restart, ...] = ()
    driver: DriverChange | None = None

    @property
    def changes(self) -> bool:
        return bool(self.objects)


def desired(
    s: spec.ClusterOperatorSpec, settings: render_settings.RenderSettings
) -> dict[tuple[str, str], Mapping[str, Any]]:
    """(kind, name) → manifest of what the operator applies for ``s`` (``driver-config`` is created once with
    defaults and then the administrator's: not part of the spec, so not of a diff)."""
    rendered = workloads.render(s, settings)
    objects = [configmaps.vfio_config_map(s, settings.namespace), *rendered.objects]
    # the driver DaemonSet as the operator applies it outside a rollback: its template's revision stamped
    objects = [fleet.stamped(o, s.driver) if _is_driver_daemonset(o) else o for o in objects]
    return {(str(o["kind"]), str(o["metadata"]["name"])): o for o in objects}


class _BlockDumper(yaml.SafeDumper):
    """Multi-line text (a ConfigMap's values) as a ``|`` block, so a diff shows the lines that changed."""


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style="|" if "\n" in value else None)


_BlockDumper.add_representer(str, _str)


def _text(manifest: Mapping[str, Any] | None) -> list[str]:
    if manifest is None:
        return []
    return yaml.dump(dict(manifest), Dumper=_BlockDumper, sort_keys=True, width=200).splitlines(keepends=True)


def unified(kind: str, name: str, before: Mapping[str, Any] | None, after: Mapping[str, Any] | None) -> str:
    return "".join(difflib.unified_diff(_text(before), _text(after), f"live/{kind}/{name}", f"new/{kind}/{name}"))


def _template(manifest: Mapping[str, Any]) -> Any:
    return (manifest.get("spec") or {}).get("template")


def _why(before: Mapping[str, Any], after: Mapping[str, Any]) -> str:
    paths = list(rules.changed_paths(_template(before), _template(after), "spec.template"))
    shown = ", ".join(paths[:4]) + (f" and {len(paths) - 4} more" if len(paths) > 4 else "")
    return f"its pod template changes ({shown})"


def predict(
    live: spec.ClusterOperatorSpec | None,
    new: spec.ClusterOperatorSpec,
    *,
    settings: render_settings.RenderSettings,
    pods_on: Mapping[str, Sequence[str]],
    rollout: UpgradeStatus | None = None,
) -> Prediction:
    """What applying ``new`` over ``live`` (None: no cluster-operator yet) does. ``pods_on``: workload name →
    the nodes its live pods run on."""
    refused = tuple(rules.update_errors(live, new, rollout)) if live is not None else ()
    before = desired(live, settings) if live is not None else {}
    after = desired(new, settings)
    objects: list[ObjectChange] = []
    restarts: list[Restart] = []
    driver: DriverChange | None = None
    for key in [*before, *(k for k in after if k not in before)]:
        kind, name = key
        old, now = before.get(key), after.get(key)
        if old == now:
            continue
        namespace = (now or old or {}).get("metadata", {}).get("namespace")
        action = Action.CREATE if old is None else Action.DELETE if now is None else Action.UPDATE
        api_version = str((now or old or {}).get("apiVersion", ""))
        objects.append(ObjectChange(api_version, kind, name, namespace, action, unified(kind, name, old, now)))
        if kind not in workloads.WORKLOAD_KINDS:
            continue
        nodes = tuple(sorted(set(pods_on.get(name, ()))))
        if action is Action.DELETE:
            restarts.append(Restart(name, action, nodes, "its component is no longer deployed: its pods are removed"))
        elif action is Action.CREATE:
            restarts.append(Restart(name, action, (), "its component is deployed: pods start where it selects"))
        elif old is not None and now is not None and _template(old) != _template(now):
            if name == DRIVER_WORKLOAD:
                driver = _driver(new, nodes, _why(old, now))
            else:
                restarts.append(Restart(name, action, nodes, _why(old, now)))
    return Prediction(tuple(refused), tuple(objects), tuple(restarts), driver)


def _driver(new: spec.ClusterOperatorSpec, nodes: tuple[str, ...], why: str) -> DriverChange:
    policy = new.driver.upgrade_policy
    if not policy.enable_rollout:
        return DriverChange(DriverMode.ALL_AT_ONCE, nodes, why)
    plan = sim.simulate(attrs.evolve(policy, pause=False), nodes) if nodes else None
    on_failure, on_busy = rollout_plan.on_failure(policy), rollout_plan.on_busy(policy)
    return DriverChange(DriverMode.ROLLOUT, nodes, why, plan, on_failure, on_busy)


def _is_driver_daemonset(manifest: Mapping[str, Any]) -> bool:
    return bool(manifest["kind"] == "DaemonSet" and manifest["metadata"]["name"] == DRIVER_WORKLOAD)
