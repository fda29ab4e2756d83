"""Which allocator serves a GPU node: the device plugin or the DRA driver, never both (R-DRA, docs/dra.md).

Why one module: the setting is the cluster default ``draDriver.defaultAllocation`` plus the node label
`LABEL` (like the sGPU mode label), and three parties must read it the same way: the operator renders the
two DaemonSets with complementary node affinity (`requirement`), an administrator's tools and the docs
explain it, and tests check that the affinity the scheduler evaluates picks what `decide` says. An absent or
invalid label means the default; `decide` reports an invalid one as a problem instead of failing, so a typo
on one node never leaves it without an allocator.

Why the affinity only ever names the non-default value: a node affinity cannot say "the label is invalid",
but ``In``/``NotIn`` on the one value that is not the default splits every label set into exactly two
halves — ``NotIn [x]`` also matches a node without the label — so absent and invalid labels fall on the
default's side by construction.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any

import attrs

from metax_core.node.labels import PREFIX
from metax_core.spec import model as spec

LABEL = PREFIX + "gpu.allocation"
"""Set by the administrator on a node to override ``draDriver.defaultAllocation`` (left on uninstall)."""


class Allocator(enum.Enum):
    """The two allocators, by the value `LABEL` takes for each."""

    DEVICE_PLUGIN = "device-plugin"
    DRA = "dra"


VALUES = tuple(a.value for a in Allocator)

_BY_SETTING: Mapping[spec.Allocation, Allocator] = {
    spec.Allocation.DEVICE_PLUGIN: Allocator.DEVICE_PLUGIN,
    spec.Allocation.DRA: Allocator.DRA,
}


def default(setting: spec.Allocation) -> Allocator:
    """The allocator the CR's ``draDriver.defaultAllocation`` names (the spec spells it camelCase)."""
    return _BY_SETTING[setting]


@attrs.frozen
class Decision:
    allocator: Allocator
    problem: str | None = None
    """Why the label was ignored (an invalid value), for an event or a log line; None when it was not."""


def decide(setting: spec.Allocation, labels: Mapping[str, str]) -> Decision:
    """Which allocator serves the node with ``labels`` when the cluster default is ``setting``."""
    fallback = default(setting)
    value = labels.get(LABEL)
    if value is None:
        return Decision(fallback)
    try:
        return Decision(Allocator(value))
    except ValueError:
        allowed = ", ".join(VALUES)
        return Decision(
            fallback, f"label {LABEL}={value!r} is not one of {allowed}: the default {fallback.value} serves the node"
        )


def requirement(setting: spec.Allocation, allocator: Allocator) -> dict[str, Any]:
    """The node selector requirement (a ``matchExpressions`` entry) that lets ``allocator``'s DaemonSet onto
    exactly the nodes `decide` gives it: the non-default value ``In`` for the non-default allocator, ``NotIn``
    for the default one."""
    fallback = default(setting)
    other = next(a for a in Allocator if a is not fallback)
    operator = "NotIn" if allocator is fallback else "In"
    return {"key": LABEL, "operator": operator, "values": [other.value]}


def require(pod_spec: Mapping[str, Any], expression: Mapping[str, Any]) -> dict[str, Any]:
    """``pod_spec`` whose required node affinity also demands ``expression``.

    Node selector terms are ORed and a term's expressions ANDed, so the expression is added to every term the
    administrator's affinity already has (appending a term of its own would OR it away); without any term it
    becomes the one term. Preferred terms and pod (anti-)affinity are left as they are.
    """
    result = dict(pod_spec)
    affinity = dict(result.get("affinity") or {})
    node = dict(affinity.get("nodeAffinity") or {})
    required = dict(node.get("requiredDuringSchedulingIgnoredDuringExecution") or {})
    terms = [dict(t) for t in required.get("nodeSelectorTerms") or []] or [{}]
    for term in terms:
        term["matchExpressions"] = [*(term.get("matchExpressions") or []), dict(expression)]
    required["nodeSelectorTerms"] = terms
    node["requiredDuringSchedulingIgnoredDuringExecution"] = required
    affinity["nodeAffinity"] = node
    result["affinity"] = affinity
    return result
