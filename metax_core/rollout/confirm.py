"""How an administrator confirms a rollout step that waits for them (R-ROLLOUT, issue 16, issue 20 item 7).

Why a module of its own: the seed (§3.2.8) tells administrators to resume a manual pause with ``pause: false``;
this operator confirms a waiting step only with the step's token in the annotation
``metax-tech.com/rollout-confirm`` on cluster-operator (docs/rollout.md, "Confirming a step"). An administrator
following the seed would wait forever, so the waiting step's condition message, and the Event that carries
it, name the exact commands. Three writers must agree: the message (built here), ``metax-operator rollout
confirm`` (which sends `annotation_patch`), and the ``kubectl annotate`` line the message prints; all three
come from the definitions below, and a test checks that the CLI writes exactly what the message says.
"""

from __future__ import annotations

from typing import Any

from metax_core.spec import model as spec
from metax_core.wire import meta

ANNOTATION = meta.ROLLOUT_CONFIRM
RESOURCE = f"{spec.PLURAL}.{spec.API_GROUP}"
"""The fully qualified resource: ``kubectl annotate clusteroperator`` alone may name OpenShift's own kind."""


def cli_command(step: int) -> str:
    """The CLI line that confirms step ``step`` (1-based, as ``--step`` and the status message count)."""
    return f"metax-operator rollout confirm --step {step}"


def kubectl_command(token: str) -> str:
    """The same confirmation for a cluster without the CLI: one ``kubectl annotate`` line."""
    return f"kubectl annotate {RESOURCE} {spec.OBJECT_NAME} {ANNOTATION}={token} --overwrite"


def annotation_patch(token: str) -> dict[str, Any]:
    """The merge patch on cluster-operator that both commands amount to (a metadata write, never ``spec``)."""
    return {"metadata": {"annotations": {ANNOTATION: token}}}


def hint(step: int, token: str) -> str:
    """What the waiting step's message tells the administrator to do (the commands, and what does not work)."""
    return (
        f"to confirm step {step}, run: {cli_command(step)} (without the CLI: {kubectl_command(token)}); "
        "setting pause: false does not confirm a step"
    )
