"""The roll-up stored in ``cluster-operator``'s status, written only when it differs from the stored one.

Why a module of its own: the status is the operator's report to administrators (``kubectl get clusteroperator``)
and to ``metax-operator status``; what it keeps besides the roll-up (the rollout's ``upgradeStatus``, R-VF's
``vfNums``, the versions) and the rule that an unchanged report is not written again (zero writes when idle,
issue 11 P2) are one idea, whatever part of the reconcile produced the report.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any

from metax_core.cluster import status as cluster_status
from metax_core.ports.cluster import ObjectRef, Objects, RawObject
from metax_core.rollout import status as rollout_status
from metax_core.spec import model as spec

log = logging.getLogger(__name__)

CR_API = f"{spec.API_GROUP}/{spec.API_VERSION}"


def cr_ref(cr: RawObject) -> ObjectRef:
    """``cluster-operator`` as the subject of an Event."""
    return ObjectRef(CR_API, spec.KIND, spec.OBJECT_NAME, None, (cr.get("metadata") or {}).get("uid"))


def write(
    objects: Objects,
    cr: RawObject,
    rolled: cluster_status.ClusterStatus,
    *,
    upgrade: rollout_status.UpgradeStatus | None,
    vf_nums: dict[str, int] | None,
    versions: Mapping[str, str],
    field_manager: str,
) -> bool:
    """Store ``rolled`` (with the rollout's and R-VF's parts, kept from the stored status when not given) unless
    the stored status already says it; True when written."""
    document: dict[str, Any] = cluster_status.to_document(rolled)
    document["versions"] = dict(versions)
    stored: Mapping[str, Any] = cr.get("status") or {}
    if upgrade is not None:
        document["upgradeStatus"] = rollout_status.to_document(upgrade)
    elif "upgradeStatus" in stored:
        document["upgradeStatus"] = stored["upgradeStatus"]
    if vf_nums is not None:
        document["vfNums"] = vf_nums
    elif "vfNums" in stored:
        document["vfNums"] = stored["vfNums"]
    if _canonical(document) == _canonical({k: v for k, v in stored.items() if k in document}) and set(stored) <= set(
        document
    ):
        return False
    body = {"apiVersion": CR_API, "kind": spec.KIND, "metadata": {"name": spec.OBJECT_NAME}, "status": document}
    objects.apply_status(body, field_manager=field_manager, force=True)
    log.info("cluster-operator status: %s", rolled.phase, extra={"object": "ClusterOperator/cluster-operator"})
    return True


def _canonical(doc: Mapping[str, Any]) -> str:
    return json.dumps(doc, sort_keys=True)
