"""Pod template precedence and merge (R-MERGE, §3.2.4–§3.2.5).

Precedence: a component's ``podTemplateSpec`` replaces the global one entirely (the global one is ignored
for that component); otherwise the global one applies. The deprecated global ``tolerations`` apply to every
component unless the chosen ``podTemplateSpec.spec.tolerations`` is set, which wins. The result is merged
onto the component's default pod spec: scalars replace, maps merge (same key overwritten), lists append
(an entry equal to one already present is not added twice, so re-rendering is idempotent). Only
``nodeSelector``, ``affinity`` and ``tolerations`` are managed.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from metax_core.spec import converter
from metax_core.spec import model as spec

MANAGED_FIELDS = ("nodeSelector", "affinity", "tolerations")


def effective_overrides(
    global_template: spec.PodTemplateSpec | None,
    component_template: spec.PodTemplateSpec | None,
    deprecated_tolerations: tuple[spec.Toleration, ...] | None,
) -> spec.PodSpecOverrides:
    """The overrides that apply to one component, before merging onto its defaults."""
    chosen = component_template if component_template is not None else global_template
    overrides = chosen.spec if chosen is not None else spec.PodSpecOverrides()
    if overrides.tolerations is None and deprecated_tolerations is not None:
        overrides = spec.PodSpecOverrides(
            node_selector=overrides.node_selector,
            affinity=overrides.affinity,
            tolerations=deprecated_tolerations,
        )
    return overrides


def overrides_document(overrides: spec.PodSpecOverrides) -> dict[str, Any]:
    """The overrides as a pod spec fragment (camelCase, unset fields left out)."""
    document: dict[str, Any] = converter.unstructure(overrides)
    return document


def merge_values(base: Any, extra: Any) -> Any:
    """Merge ``extra`` onto ``base``: maps merge recursively, lists append (no exact duplicates), else replace."""
    if isinstance(base, Mapping) and isinstance(extra, Mapping):
        merged = {k: copy.deepcopy(v) for k, v in base.items()}
        for key, value in extra.items():
            merged[key] = merge_values(merged[key], value) if key in merged else copy.deepcopy(value)
        return merged
    if isinstance(base, list) and isinstance(extra, list):
        merged_list = [copy.deepcopy(v) for v in base]
        for item in extra:
            if item not in merged_list:
                merged_list.append(copy.deepcopy(item))
        return merged_list
    return copy.deepcopy(extra)


def merge_pod_spec(default_pod_spec: Mapping[str, Any], overrides: spec.PodSpecOverrides) -> dict[str, Any]:
    """``default_pod_spec`` with the managed fields of ``overrides`` merged in; other fields untouched."""
    fragment = overrides_document(overrides)
    result: dict[str, Any] = merge_values(
        dict(default_pod_spec), {k: v for k, v in fragment.items() if k in MANAGED_FIELDS}
    )
    return result


def pod_spec_for(
    s: spec.ClusterOperatorSpec,
    component_template: spec.PodTemplateSpec | None,
    default_pod_spec: Mapping[str, Any],
) -> dict[str, Any]:
    """The merged pod spec of one component of ``s``."""
    overrides = effective_overrides(s.pod_template_spec, component_template, s.tolerations)
    return merge_pod_spec(default_pod_spec, overrides)
