"""Uninstall (R-INSTALL, "files it wrote included"): how the operator asks a node's agents to undo, how each
answers, and what each undo restores.

Why one module: the request and the answers cross process boundaries (operator → agents → operator) through
node annotations, and the first-touch record crosses restarts of driver-manager through a host file. Each
format has its render and its parse here, used by both sides. The undo decisions are pure functions:

* The protocol. The finalizer writes ``metax-tech.com/uninstall: <uid of cluster-operator>`` on every node
  that runs one of our agents (`render_request` / `requested`). Agents already watch their own Node, so the
  request wakes them at once and needs no new permission. Each agent undoes what it did on its node, then
  answers with ``metax-tech.com/uninstalled.<agent>: {"request": <uid>, "kept": [...]}`` (`render_done` /
  `answers`), ``kept`` naming what it could not undo and why. driver-manager goes after vfio-manager on a
  node where vfio-manager ran (`driver_waits`). While the request is on its Node an agent does
  nothing else (it never reloads a driver the finalizer is about to take away). `finalize` says whether the
  finalizer may delete what the agents read: every expected answer is in, or the bounded wait is over (the
  nodes that did not answer are named). The finalizer removes the request and the answers with every other
  product key at the end.
* The first-touch record (`Baseline`): what the host had before driver-manager's first change — the
  ``metax`` module loaded or not, its version and parameters, each PF's VF count — written before that change
  and never rewritten, so an undo interrupted midway completes on restart from the same record.
* `undo_driver`: the steps back to the baseline. The module the payload brought onto a host that had none
  loaded before install is unloaded (the host is left as found; its GPUs are then without a driver, as they
  were); when it cannot be unloaded (processes use the GPUs) it stays and the answer says so.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import attrs

from metax_core import components, wording
from metax_core.errors import FieldError, InvalidSpec
from metax_core.inventory import FunctionKind, ModuleState, PciAddress, PciFunction
from metax_core.node import vfio
from metax_core.wire import event_reasons, meta

PREFIX = meta.PREFIX
REQUEST_ANNOTATION = PREFIX + "uninstall"
DONE_PREFIX = PREFIX + "uninstalled."
AGENTS = components.UNDOING_AGENTS
"""The node agents that undo something on their node (readiness names): those whose declaration says so
(`metax_core.components.ComponentInfo.undoes`)."""

INCOMPLETE_REASON = event_reasons.UNINSTALL_INCOMPLETE
"""Event reason and condition reason when the bounded wait ended with nodes that did not answer."""
DONE_REASON = "NodesUndone"


# --- the request and the answers (node annotations) ---------------------------------------------------------


def is_protocol_key(key: str) -> bool:
    """The request or an answer: the annotations whose (small) values the operator keeps in its node cache."""
    return key == REQUEST_ANNOTATION or key.startswith(DONE_PREFIX)


def render_request(uid: str) -> dict[str, str]:
    """The annotation the finalizer puts on a node: undo, for the deletion of cluster-operator ``uid``."""
    if not uid:
        raise ValueError("an uninstall request names the uid of cluster-operator")
    return {REQUEST_ANNOTATION: uid}


def requested(annotations: Mapping[str, str] | None) -> str | None:
    """The uid an uninstall is requested for on this node, or None."""
    value = (annotations or {}).get(REQUEST_ANNOTATION)
    return value.strip() or None if value else None


def done_key(agent: str) -> str:
    if agent not in AGENTS:
        raise ValueError(f"unknown agent {agent!r}; one of {', '.join(AGENTS)}")
    return DONE_PREFIX + agent


@attrs.frozen
class Done:
    """One agent's answer: it undid what it did for request ``request``; ``kept`` says what stays and why."""

    request: str
    kept: tuple[str, ...] = ()


def render_done(agent: str, done: Done) -> dict[str, str]:
    return {done_key(agent): json.dumps({"request": done.request, "kept": list(done.kept)}, sort_keys=True)}


def answers(annotations: Mapping[str, str] | None) -> dict[str, Done]:
    """Every agent's answer on a node (an unreadable one counts as no answer: the agent writes it again)."""
    found: dict[str, Done] = {}
    for key, value in (annotations or {}).items():
        if not key.startswith(DONE_PREFIX) or key.removeprefix(DONE_PREFIX) not in AGENTS:
            continue
        try:
            doc = json.loads(value)
        except ValueError:
            continue
        if not isinstance(doc, dict) or not isinstance(doc.get("request"), str):
            continue
        kept = doc.get("kept") or []
        found[key.removeprefix(DONE_PREFIX)] = Done(
            doc["request"], tuple(str(k) for k in kept) if isinstance(kept, list) else ()
        )
    return found


def driver_waits(annotations: Mapping[str, str] | None, uid: str) -> str | None:
    """Why driver-manager's undo must wait for now (None: it may go on).

    vfio-manager gives its GPUs back to the ``metax`` driver first: the module driver-manager loads back probes
    every GPU bound to it, and the GPUs returned after that would come up under other device nodes
    (``/dev/dri/cardN`` is numbered in probe order) than before install. vfio-manager has run on the node while
    its result annotation is there; it removes it with its answer (`render_done`)."""
    found = annotations or {}
    if vfio.ANNOTATION not in found:
        return None
    done = answers(found).get("vfio-manager")
    if done is not None and done.request == uid:
        return None
    return "waiting for vfio-manager to give its GPUs back to the metax driver first"


# --- the finalizer's wait ------------------------------------------------------------------------------------


@attrs.frozen
class NodeUndo:
    """What the finalizer knows of one node: the agents running there and the node's annotations."""

    node: str
    agents: frozenset[str]
    annotations: Mapping[str, str] = attrs.field(factory=dict)


@attrs.frozen
class FinalizeDecision:
    proceed: bool
    """True: delete what the agents read (every answer is in, or the wait is over)."""
    to_request: tuple[str, ...]
    """Nodes that do not carry the request yet (annotate them)."""
    waiting: Mapping[str, tuple[str, ...]]
    """Node → agents that have not answered (yet)."""
    timed_out: bool
    kept: Mapping[str, tuple[str, ...]] = attrs.field(factory=dict)
    """Node → what its agents said stays, as ``<agent>: <what>``."""

    @property
    def message(self) -> str:
        """For the status condition, the Event and the log, bounded however many nodes there are: nodes with the
        same answer missing (or the same things kept) are one group, a few named, the largest groups first."""
        if not self.waiting:
            stays = _grouped(self.kept, lambda who, what: f"{who}: {', '.join(what)}")
            return "every node undid what the agents did" + (f" (kept: {stays})" if stays else "")
        pending = _grouped(self.waiting, lambda who, what: f"{who} ({', '.join(what)})")
        if self.timed_out:
            return f"nodes did not answer the uninstall in time, their hosts are left as they are: {pending}"
        return f"waiting for the agents to undo their changes: {pending}"


GROUPS_SHOWN = 5
"""Groups of nodes a message lists before it counts the rest."""


def _grouped(by_node: Mapping[str, tuple[str, ...]], say: Callable[[str, tuple[str, ...]], str]) -> str:
    """``say(who, what)`` per group of nodes with the same ``what``: ``n1, n2 and 998 more (driver, gpu-device)``."""
    groups: dict[tuple[str, ...], list[str]] = {}
    for node, what in sorted(by_node.items()):
        groups.setdefault(what, []).append(node)
    ordered = sorted(groups.items(), key=lambda group: (-len(group[1]), group[0]))
    said = [say(wording.names(nodes), what) for what, nodes in ordered[:GROUPS_SHOWN]]
    left = ordered[GROUPS_SHOWN:]
    if left:
        nodes_left = sum(len(nodes) for _, nodes in left)
        said.append(f"and {wording.count(nodes_left, 'more node')} in {wording.count(len(left), 'more group')}")
    return "; ".join(said)


def finalize(nodes: Iterable[NodeUndo], uid: str, *, waited: float, timeout: float) -> FinalizeDecision:
    """Whether the finalizer may go on, after ``waited`` seconds of an at most ``timeout`` seconds' wait."""
    to_request: list[str] = []
    waiting: dict[str, tuple[str, ...]] = {}
    kept: dict[str, tuple[str, ...]] = {}
    for n in sorted(nodes, key=lambda n: n.node):
        if not n.agents:
            continue
        if requested(n.annotations) != uid:
            to_request.append(n.node)
        got = {a: d for a, d in answers(n.annotations).items() if d.request == uid}
        missing = tuple(sorted(n.agents - set(got)))
        if missing:
            waiting[n.node] = missing
        stays = tuple(f"{a}: {k}" for a, d in sorted(got.items()) for k in d.kept)
        if stays:
            kept[n.node] = stays
    timed_out = bool(waiting) and waited >= timeout
    return FinalizeDecision(not waiting or timed_out, tuple(to_request), waiting, timed_out, kept)


# --- driver-manager's first-touch record ---------------------------------------------------------------------


@attrs.frozen
class Baseline:
    """The host before driver-manager's first change."""

    module_loaded: bool
    module_version: str | None = None
    params: Mapping[str, str] = attrs.field(factory=dict)
    vf_counts: Mapping[PciAddress, int] = attrs.field(factory=dict)
    """Each PF's ``sriov_numvfs`` (PFs without SR-IOV are left out)."""
    files: tuple[str, ...] = ()
    """What already existed under the directories driver-manager writes (`OWNED_DIRS`): never removed."""


OWNED_DIRS = ("var/lib/metax/drivers", "lib/firmware/metax", "var/lib/metax/driver-manager")
"""Where driver-manager writes on the host (staged drivers, firmware copies, its state), from the host root."""


def leftovers(before: Iterable[str], now: Iterable[str]) -> list[str]:
    """The paths (files and directories, host-root relative) that exist now and did not before install,
    deepest first, so removing them in order empties each directory before it goes."""
    kept = set(before)
    return sorted((p for p in set(now) if p not in kept), key=lambda p: (-p.count("/"), p))


def baseline_of(module: ModuleState | None, functions: Sequence[PciFunction], files: Iterable[str] = ()) -> Baseline:
    vfs = {
        f.address: int(f.sriov_numvfs)
        for f in functions
        if f.kind is FunctionKind.PF and f.sriov_totalvfs and f.sriov_numvfs is not None
    }
    found = tuple(sorted(set(files)))
    if module is None:
        return Baseline(False, vf_counts=vfs, files=found)
    return Baseline(True, module.version, dict(module.params), vfs, found)


def render_baseline(b: Baseline) -> str:
    doc = {
        "moduleLoaded": b.module_loaded,
        "moduleVersion": b.module_version,
        "params": dict(sorted(b.params.items())),
        "vfCounts": dict(sorted(b.vf_counts.items())),
        "files": list(b.files),
    }
    return json.dumps(doc, indent=2, sort_keys=True) + "\n"


def parse_baseline(text: str) -> Baseline:
    """The record `render_baseline` wrote; InvalidSpec (naming the field) for anything else."""
    try:
        doc: Any = json.loads(text)
    except ValueError as exc:
        raise InvalidSpec([FieldError("baseline", f"not JSON: {exc}")]) from exc
    if not isinstance(doc, dict):
        raise InvalidSpec([FieldError("baseline", "must be an object")])
    errors: list[FieldError] = []
    loaded, version = doc.get("moduleLoaded"), doc.get("moduleVersion")
    params, vfs, files = doc.get("params") or {}, doc.get("vfCounts") or {}, doc.get("files") or []
    if not isinstance(loaded, bool):
        errors.append(FieldError("baseline.moduleLoaded", "must be true or false"))
    if version is not None and not isinstance(version, str):
        errors.append(FieldError("baseline.moduleVersion", "must be a string or null"))
    if not isinstance(params, dict) or not all(isinstance(v, str) for v in params.values()):
        errors.append(FieldError("baseline.params", "must map names to strings"))
    if not isinstance(vfs, dict) or not all(isinstance(v, int) and v >= 0 for v in vfs.values()):
        errors.append(FieldError("baseline.vfCounts", "must map PCI addresses to counts >= 0"))
    if not isinstance(files, list) or not all(isinstance(f, str) for f in files):
        errors.append(FieldError("baseline.files", "must be a list of paths"))
    if errors:
        raise InvalidSpec(errors)
    vf_counts = {PciAddress(k): int(v) for k, v in vfs.items()}
    return Baseline(bool(loaded), version, dict(params), vf_counts, tuple(files))


# --- driver-manager's undo -----------------------------------------------------------------------------------


class ModuleStep(enum.Enum):
    LEAVE = "leave"
    """The module is as the baseline had it."""
    UNLOAD = "unload"
    """The host had no ``metax`` loaded before install."""
    RELOAD_HOST = "reload-host"
    """The host had one: load the host's installed module again, with the parameters it had."""
    LOAD_HOST = "load-host"
    """The host had one and none is loaded now (an undo interrupted after its unload)."""


@attrs.frozen
class VfWrite:
    pf: PciAddress
    count: int


@attrs.frozen
class DriverUndo:
    """In order: VF counts that must go to 0 first, the module step, then VF counts restored above 0."""

    before_module: tuple[VfWrite, ...]
    module: ModuleStep
    params: Mapping[str, str]
    after_module: tuple[VfWrite, ...]

    @property
    def nothing(self) -> bool:
        return self.module is ModuleStep.LEAVE and not self.before_module and not self.after_module


def undo_driver(baseline: Baseline, loaded: ModuleState | None, functions: Sequence[PciFunction]) -> DriverUndo:
    """The steps that bring the kernel module and the VF counts back to ``baseline``."""
    current = {f.address: int(f.sriov_numvfs or 0) for f in functions if f.kind is FunctionKind.PF and f.sriov_totalvfs}
    if not baseline.module_loaded:
        module = ModuleStep.LEAVE if loaded is None else ModuleStep.UNLOAD
    elif loaded is None:
        module = ModuleStep.LOAD_HOST
    elif loaded.version != baseline.module_version or dict(loaded.params) != dict(baseline.params):
        module = ModuleStep.RELOAD_HOST
    else:
        module = ModuleStep.LEAVE
    # VFs go with an unload or a reload; set them to 0 first so the module step does not fail on them, then
    # give each PF the count it had (only on a host that had the module: VFs need the PF's driver).
    before = tuple(VfWrite(pf, 0) for pf, n in sorted(current.items()) if n and (module is not ModuleStep.LEAVE))
    before += tuple(
        VfWrite(pf, 0)
        for pf, n in sorted(current.items())
        if n and module is ModuleStep.LEAVE and baseline.vf_counts.get(pf, 0) != n
    )
    after: tuple[VfWrite, ...] = ()
    if baseline.module_loaded:
        reset = {w.pf for w in before}
        after = tuple(
            VfWrite(pf, want)
            for pf, want in sorted(baseline.vf_counts.items())
            if want and pf in current and (pf in reset or current[pf] != want)
        )
    return DriverUndo(before, module, dict(baseline.params), after)
