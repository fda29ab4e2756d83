"""What ``metax-operator doctor`` answers: the cluster summary, the exit code, and the ``-o json`` document.

Why a module of its own: the exit code and the JSON shape are an interface (scripts and alerts read them), so
they are defined once, beside the chain (`metax_core.cluster.doctor.chain`) and tested with it. Exit codes:

- 0: every link of every node asked about holds (without NODE: every GPU node's chain, and cluster-operator
  Ready; nodes without a MetaX GPU are counted, not failed);
- 1: a link is broken (the output names the first one per node);
- 2: bad usage (an unknown node);
- 3: the cluster could not be read (unreachable, or forbidden: the doctor's read-only ClusterRole is missing).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs

from metax_core.cluster.doctor import links
from metax_core.cluster.doctor.facts import CrFacts
from metax_core.rollout import status as rollout_status

EXIT_HEALTHY = 0
EXIT_BROKEN = 1
EXIT_USAGE = 2
EXIT_UNREADABLE = 3

READY = "ready"
NO_GPU = "no MetaX GPU"


def state(diagnosis: links.Diagnosis) -> str:
    """A node's state in the summary: ``ready``, ``no MetaX GPU``, or ``broken: <first broken link id>``."""
    first = diagnosis.first_broken
    if first is None:
        return READY
    if first.id == links.GPU_FOUND:
        return NO_GPU
    return f"broken: {first.id}"


@attrs.frozen
class Summary:
    states: tuple[tuple[str, tuple[str, ...]], ...]
    """(state, node names) in a stable order: ready first, then broken states by count, no GPU last."""
    cr_ready: bool
    rollout: rollout_status.UpgradeStatus | None


def summarize(
    diagnoses: Sequence[links.Diagnosis], cr: CrFacts, rollout: rollout_status.UpgradeStatus | None
) -> Summary:
    by_state: dict[str, list[str]] = {}
    for d in diagnoses:
        by_state.setdefault(state(d), []).append(d.node)

    def order(item: tuple[str, list[str]]) -> tuple[int, int, str]:
        name, nodes = item
        return (0 if name == READY else 2 if name == NO_GPU else 1, -len(nodes), name)

    states = tuple((name, tuple(sorted(nodes))) for name, nodes in sorted(by_state.items(), key=order))
    cr_ready = any(t == "Ready" and s == "True" for t, s, _, _ in cr.conditions)
    return Summary(states, cr_ready, rollout)


def exit_code(diagnoses: Sequence[links.Diagnosis], *, summary: Summary | None = None) -> int:
    """0 only when every link holds: with ``summary`` (no NODE asked) nodes without a GPU do not count."""
    if summary is None:
        return EXIT_HEALTHY if all(d.healthy for d in diagnoses) else EXIT_BROKEN
    broken = any(state(d) not in (READY, NO_GPU) for d in diagnoses)
    return EXIT_BROKEN if broken or not summary.cr_ready else EXIT_HEALTHY


def link_document(link: links.Link) -> dict[str, Any]:
    return {
        "id": link.id,
        "title": link.title,
        "state": link.state.value,
        "evidence": link.evidence,
        "next": link.next,
        "component": link.component,
    }


def diagnosis_document(d: links.Diagnosis) -> dict[str, Any]:
    """``{"node", "healthy", "firstBroken": link | null, "links": [link]}``; a link is
    ``{"id", "title", "state": "holds"|"broken", "evidence", "next", "component"}``."""
    first = d.first_broken
    return {
        "node": d.node,
        "healthy": d.healthy,
        "firstBroken": None if first is None else link_document(first),
        "links": [link_document(link) for link in d.links],
    }


def releases_line(cr: CrFacts, cli: str) -> str:
    """Which releases run (R-UPGRADE): the operator's and its CRD's as the operator reports them, and this CLI's."""
    operator, crd = cr.versions.get("operator") or "not reported", cr.versions.get("crd") or "not reported"
    return f"releases: operator {operator}, CRD {crd}, this CLI {cli}"


def summary_document(summary: Summary, cr: CrFacts) -> dict[str, Any]:
    rollout = summary.rollout
    return {
        "nodes": {name: list(nodes) for name, nodes in summary.states},
        "clusterOperator": {
            "problem": cr.problem,
            "versions": dict(cr.versions),
            "conditions": [{"type": t, "status": s, "reason": r, "message": m} for t, s, r, m in cr.conditions],
        },
        "rollout": None
        if rollout is None
        else {
            "phase": rollout.phase.value,
            "message": rollout.message,
            "conditions": [
                {"type": c.type.value, "status": c.status.value, "reason": c.reason.value, "message": c.message}
                for c in rollout.conditions
            ],
        },
    }
