"""``metax-operator diff --driver-config FILE``: what an edit of ``driver-config`` would do (R-DIFF, R-VF).

Why it exists: VF counts and module parameters live in the administrator's ConfigMap, not in the spec, and an
edit of it recreates gpu-device pods and makes driver-manager rewrite VFs or reload the kernel module. This
reads the live cluster (the ConfigMap, the nodes, cluster-operator's spec and ``status.vfNums``, the product's
pods) and asks the core (`metax_core.cluster.diff_driver_config`). FILE is a ConfigMap (YAML or JSON) or only
its ``data`` mapping; ``-`` reads stdin. The edit predicted is ``kubectl apply --server-side --force-conflicts
-f FILE``: a server-side apply dry run (``dryRun=All``) as kubectl's field manager says what the API server
would store (data keys FILE leaves out keep their stored value unless kubectl applied them before), and the
prediction is made from that. Reads only (the dry run is a ``patch`` that stores nothing).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from typing import Any

from rich.console import Console

from metax_core.cluster import diff as core_diff
from metax_core.cluster import diff_driver_config as core
from metax_core.cluster import vf_restarts, workloads
from metax_core.errors import ClusterError, FieldError, InvalidSpec, NotFound
from metax_core.spec import validation
from metax_core.wire import meta
from metax_k8s.api import Api
from services.cli import diff, documents

FIELD_MANAGER = "kubectl"
"""``kubectl apply --server-side``'s default field manager: the dry run applies as an administrator does."""
MANIFEST_KEYS = ("apiVersion", "kind", "metadata")
EXPECTED = f"the {workloads.DRIVER_CONFIG_MAP} ConfigMap, or only its data"
"""What FILE is, for the message when it does not hold one document."""


def manifest(document: object, namespace: str) -> dict[str, Any]:
    """FILE's document as the ConfigMap to apply, or InvalidSpec naming the field (a document with none of
    apiVersion, kind, metadata is the ConfigMap's ``data``)."""
    if not isinstance(document, Mapping):
        raise InvalidSpec([FieldError("", "expected a ConfigMap or its data (a mapping)")])
    if not any(key in document for key in MANIFEST_KEYS):
        document = {"data": dict(document)}
    else:
        errors = []
        if document.get("apiVersion") != "v1":
            errors.append(FieldError("apiVersion", f"must be v1, got {document.get('apiVersion')!r}"))
        if document.get("kind") != "ConfigMap":
            errors.append(FieldError("kind", f"must be ConfigMap, got {document.get('kind')!r}"))
        metadata = document.get("metadata") or {}
        if not isinstance(metadata, Mapping):
            errors.append(FieldError("metadata", "must be a mapping"))
        elif metadata.get("name") != workloads.DRIVER_CONFIG_MAP:
            errors.append(FieldError("metadata.name", f"must be {workloads.DRIVER_CONFIG_MAP}"))
        elif metadata.get("namespace", namespace) != namespace:
            errors.append(FieldError("metadata.namespace", f"must be the operator's namespace {namespace} (-n)"))
        if errors:
            raise InvalidSpec(errors)
    body: dict[str, Any] = json.loads(json.dumps(document))
    body.update(apiVersion="v1", kind="ConfigMap")
    body["metadata"] = {**(body.get("metadata") or {}), "name": workloads.DRIVER_CONFIG_MAP, "namespace": namespace}
    return body


def _get(api: Api, api_version: str, kind: str, name: str, namespace: str | None = None) -> dict[str, Any] | None:
    try:
        return api.get(api_version, kind, name, namespace)
    except NotFound:
        return None


def cluster_facts(api: Api, namespace: str) -> core.Cluster:
    """The nodes, cluster-operator's spec and recorded VF counts, and where the gpu-device and driver pods run."""
    cr = diff._live(api)
    live_spec = None
    if cr is not None:
        try:
            live_spec = validation.parse(cr.get("spec") or {})
        except InvalidSpec:
            live_spec = None  # the operator deploys nothing for it
    recorded = {str(k): int(v) for k, v in (((cr or {}).get("status") or {}).get("vfNums") or {}).items()}
    pods = api.list("v1", "Pod", namespace=namespace, label_selector=meta.PART_OF_SELECTOR).items
    return core.Cluster(
        nodes=tuple(str(n["metadata"]["name"]) for n in api.list("v1", "Node").items),
        recorded=recorded,
        gpu_device_pods=tuple(vf_restarts.gpu_device_pods(pods)),
        driver_nodes=tuple(diff._pods_on(api, namespace).get(core_diff.DRIVER_WORKLOAD, ())),
        spec=live_spec,
    )


def compare(api: Api, *, file: str, namespace: str, output: str = "table") -> int:
    try:
        body = manifest(documents.load_document(file, EXPECTED), namespace)
        core.parse(body.get("data"))  # refused before anything is sent, as the webhook would
    except InvalidSpec as exc:
        return diff._refused(list(exc.errors), "", output)
    live = _get(api, "v1", "ConfigMap", workloads.DRIVER_CONFIG_MAP, namespace)
    try:
        stored = api.apply(body, field_manager=FIELD_MANAGER, force=True, dry_run=True)
    except ClusterError as exc:
        if exc.status in (400, 422) or (exc.status == 403 and "denied the request" in exc.detail):
            return diff._refused([], exc.detail, output)  # the API server or the driver-config webhook refused it
        raise
    prediction = core.predict(diff.cleaned(live), diff.cleaned(stored) or {}, cluster_facts(api, namespace))
    if prediction.refused:  # what FILE left out, kept from the stored object, does not parse
        return diff._refused(list(prediction.refused), "", output)
    if output == "json":
        print(json.dumps(as_json(prediction), indent=2))
    else:
        print_prediction(prediction)
    return diff.EXIT_CHANGES if prediction.changes else diff.EXIT_SAME


def as_json(p: core.Prediction) -> dict[str, Any]:
    """`diff.as_json`'s shape (``driver`` is null: the driver DaemonSet does not change), plus ``nodes``:
    ``[{"node", "vfs": {"old", "new"} | null, "params": {"old", "new"} | null, "driverManager"}]`` and
    ``unknownNodes``."""
    document = diff.as_json(core_diff.Prediction(p.refused, p.objects, p.restarts, None))
    document["nodes"] = [
        {
            "node": n.node,
            "vfs": None if n.vfs is None else {"old": n.vfs[0], "new": n.vfs[1]},
            "params": None if n.params is None else {"old": dict(n.params[0]), "new": dict(n.params[1])},
            "driverManager": n.driver_manager,
        }
        for n in p.nodes
    ]
    document["unknownNodes"] = list(p.unknown_nodes)
    return document


def _params(params: Mapping[str, str]) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(params.items())) or "(defaults)"


def print_prediction(p: core.Prediction) -> None:
    diff.print_prediction(core_diff.Prediction(p.refused, p.objects, p.restarts, None))
    console = Console(file=sys.stdout, highlight=False, width=None if sys.stdout.isatty() else 160)
    for n in p.nodes:
        changed = []
        if n.vfs is not None:
            changed.append(f"VFs per GPU {n.vfs[0]} → {n.vfs[1]}")
        if n.params is not None:
            changed.append(f"module parameters {_params(n.params[0])} → {_params(n.params[1])}")
        console.print(f"node {n.node}: {'; '.join(changed)}: {n.driver_manager}", markup=False)
    if p.unknown_nodes:
        console.print(f"no such node (the entry changes nothing): {', '.join(p.unknown_nodes)}", markup=False)
