"""The fields every component section of the spec shares: ``deploy``, ``log``, ``podTemplateSpec``, ``resources``.

Why a module of its own: each of the ten sections of `metax_core.spec.model` (Tables 3.2–3.9, 3.13 and the
extensions) starts with the same four options, with the same defaults and descriptions (what ``kubectl explain``
and the chart's README print); declaring them once keeps the sections from drifting apart. A section declares
them first, in this order, and its own options after them.
"""

from __future__ import annotations

from typing import Any

import attrs

from metax_core.spec.fieldtypes import DESCRIPTION, Log


def deploy(*, default: bool = True) -> Any:
    """Every component's ``deploy``: the switch the component table reads (R-DEP)."""
    return attrs.field(default=default, metadata={DESCRIPTION: "Whether the operator deploys this component."})


def log() -> Any:
    """Every component's ``log``: its agent's verbosity."""
    return attrs.field(default=Log(), metadata={DESCRIPTION: "Log settings of this component."})


def pod_template_spec() -> Any:
    """Every component's own pod settings, which replace the global ones for it (R-MERGE)."""
    return attrs.field(
        default=None,
        metadata={
            DESCRIPTION: (
                "Node selector, affinity and tolerations of this component's pods; when set, the global "
                "podTemplateSpec is ignored for this component (R-MERGE)."
            )
        },
    )


def resources() -> Any:
    """Every component's ``resources`` (issue 38 item 5): its containers' requests and limits over the measured
    defaults (docs/configuration.md, "Resources")."""
    return attrs.field(
        default=None,
        metadata={
            DESCRIPTION: (
                "Extension: CPU and memory requests and limits of this component's containers, over its measured "
                "defaults (a value set here wins; a request above the default limit raises that limit)."
            )
        },
    )
