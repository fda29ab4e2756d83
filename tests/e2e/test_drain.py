"""A driver rollout drains a real GPU node (issue 41 item 3; R-ROLLOUT; docs/rollout.md "Draining").

The release is installed from the administrator's registry onto an air-gapped real node on its fake MetaX host,
as in tests/e2e/test_upgrade.py, with a rollout that drains (``drain.enable``, a 30 s timeout, no ``force``).
On the node run a Deployment's GPU pod (``trainer``) and a bare GPU pod (``notebook``). Then a rollout to a
rebuilt payload of the same driver (another repository holding the same payload: a new driver revision
driver-manager keeps, docs/realnode.md) wants the node:

1. it is cordoned and the trainer evicted (its replacement stays Pending: the only GPU node is cordoned); the
   notebook is never evicted (no controller, no ``force``), so the node is released after the timeout: uncordoned,
   ``status.releasedNodes`` naming it and the notebook, and the trainer's replacement runs on it again;
2. the notebook's user is done (it is deleted); the node is drained again, the trainer evicted, the driver pod
   replaced by one on the rebuilt payload, the node uncordoned, and the trainer's pod runs there again holding
   one GPU (the kubelet's PodResources).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import attrs
import pytest
from kubernetes import client

from metax_core.wire import meta
from metax_dev import registry as test_registry
from metax_dev.controlplane import cluster as controlplane
from metax_dev.productnode import helm_release, workloads
from metax_dev.productnode.helm_release import NAMESPACE, RELEASE, Release
from metax_dev.release import bundle, publish
from metax_dev.release.target import Target
from metax_k8s.podresources import client as podresources
from tests.realnode import gpus

pytestmark = pytest.mark.realnode

WAIT = 240.0
PROJECT = "metax"
REBUILT_PAYLOAD = "driver-image-drained"
TIMEOUT_SECONDS = 30
DRAIN_VALUES = [
    "--set",
    "driver.upgradePolicy.enableRollout=true",
    "--set-json",
    'driver.upgradePolicy.upgradeSteps=[{"replicas":"100%","pause":false}]',
    "--set-json",
    "driver.upgradePolicy.drain=" + json.dumps({"enable": True, "timeoutSeconds": TIMEOUT_SECONDS}),
]
TRAINER, NOTEBOOK = "trainer", "notebook"


@attrs.frozen
class Drained:
    release: Release
    released: dict[str, Any]
    """The node's entry in ``status.releasedNodes``, as first seen."""
    notebook_kept: bool
    trainer_back_after_release: str
    """The node the trainer's replacement ran on after the release."""
    driver_images: list[str]
    trainer_uids: list[str]
    """The trainer's pod uid before the rollout, after the release and at the end."""
    devices: list[str]
    schedulable: bool
    marked: bool
    step: dict[str, Any]


def _step(r: Release) -> dict[str, Any]:
    return dict((((r.cluster_operator().get("status") or {}).get("upgradeStatus") or {}).get("status")) or {})


def _describe(r: Release) -> str:
    pods = r.kubectl("get", "pods", "-A", "-o", "wide").stdout
    status = json.dumps(r.cluster_operator().get("status") or {}, indent=1)[-3000:]
    events = r.kubectl("get", "events", "-A", "--sort-by=.lastTimestamp").stdout[-3000:]
    return f"{pods}\n--- cluster-operator status\n{status}\n--- events\n{events}"


def _trainer(kube: client.CoreV1Api) -> client.V1Pod | None:
    listed = kube.list_namespaced_pod("default", label_selector=f"app={TRAINER}").items
    running = [p for p in listed if p.status.phase == "Running" and p.metadata.deletion_timestamp is None]
    return running[0] if running else None


def _deployment(node: str) -> dict[str, Any]:
    pod = workloads.scheduled_pod(TRAINER, node, "echo up; sleep 36000", {gpus.GPU: "1"})
    pod["spec"]["restartPolicy"] = "Always"
    labels = {"app": TRAINER}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": TRAINER, "namespace": "default"},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": pod["spec"]},
        },
    }


def _node(r: Release) -> dict[str, Any]:
    done = r.kubectl("get", "node", r.node, "-o", "json")
    assert done.returncode == 0, done.stderr
    node: dict[str, Any] = json.loads(done.stdout)
    return node


@pytest.fixture(scope="module")
def drained(
    made_release: publish.Release,
    registry: test_registry.Registry,
    realnode_plane: controlplane.ControlPlane,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Drained]:
    work = tmp_path_factory.mktemp("drain")
    target = Target(
        f"{registry.host}/{PROJECT}", authfile=registry.auth_file(work / "auth.json"), cert_dir=registry.cert_dir
    )
    loaded = bundle.mirror(bundle.write(made_release, work / bundle.name(made_release.version)), target)
    source = helm_release.pulled_from(target, loaded.version, registry.docker_config_json())
    api = realnode_plane.api_client()
    kube = client.CoreV1Api(api)
    apps = client.AppsV1Api(api)
    with helm_release.real_node(
        realnode_plane,
        None,
        "drain-node",
        registry_hosts=registry.write_containerd_hosts,
        airgap_allowed=[registry.host],
    ) as r:
        try:
            r.retag_payload(REBUILT_PAYLOAD)
            r.create_pull_secret(source)
            r.helm(*r.install_args(source), *DRAIN_VALUES)
            apps.create_namespaced_deployment("default", _deployment(r.node))
            kube.create_namespaced_pod(
                "default", workloads.busybox_pod(NOTEBOOK, r.node, "sleep 36000", resources={gpus.GPU: "1"})
            )
            first = helm_release.poll(
                lambda: _trainer(kube), "the trainer running", timeout=WAIT, explain=lambda: _describe(r)
            )
            helm_release.poll(
                lambda: kube.read_namespaced_pod(NOTEBOOK, "default").status.phase == "Running",
                "the notebook running",
                timeout=WAIT,
                explain=lambda: _describe(r),
            )
            r.helm(*r.upgrade_args(source), *DRAIN_VALUES, "--set", f"driver.payload.name={REBUILT_PAYLOAD}")

            released = helm_release.poll(
                lambda: next((n for n in _step(r).get("releasedNodes") or [] if n["name"] == r.node), None),
                "the node released after the drain timeout",
                timeout=WAIT,
                explain=lambda: _describe(r),
            )
            back = helm_release.poll(
                lambda: (p := _trainer(kube)) is not None and p.metadata.uid != first.metadata.uid and p,
                "the trainer's replacement running again on the released node",
                timeout=WAIT,
                explain=lambda: _describe(r),
            )
            notebook = kube.read_namespaced_pod(NOTEBOOK, "default")
            kept = notebook.metadata.deletion_timestamp is None and notebook.status.phase == "Running"
            kube.delete_namespaced_pod(NOTEBOOK, "default", grace_period_seconds=0)

            def done() -> bool:
                cr = r.cluster_operator()
                upgrading = ((cr.get("status") or {}).get("upgradeStatus") or {}).get("upgrading")
                return not upgrading and (p := _trainer(kube)) is not None and p.metadata.uid != back.metadata.uid

            helm_release.poll(
                done, "the rollout complete and the trainer back", timeout=WAIT, explain=lambda: _describe(r)
            )
            last = _trainer(kube)
            assert last is not None
            with podresources.PodResourcesClient(r.member.pod_resources_socket) as resources:
                listed = {(p.namespace, p.name): p for p in resources.list()}
            driver = [p for p in helm_release.pods(r) if p["metadata"]["name"].startswith("metax-driver-")]
            node = _node(r)
            yield Drained(
                r,
                released,
                kept,
                back.spec.node_name,
                [c["image"] for p in driver for c in p["spec"].get("initContainers", [])],
                [first.metadata.uid, back.metadata.uid, last.metadata.uid],
                sorted(listed[("default", last.metadata.name)].device_ids(gpus.GPU)),
                not (node.get("spec") or {}).get("unschedulable"),
                meta.ROLLOUT_CORDON in (node["metadata"].get("annotations") or {}),
                _step(r),
            )
        except helm_release.ReleaseError as exc:
            raise helm_release.ReleaseError(f"{exc}\n{_describe(r)}") from exc
        finally:
            apps.delete_namespaced_deployment(TRAINER, "default")
            kube.delete_collection_namespaced_pod("default", label_selector=f"app={TRAINER}", grace_period_seconds=0)
            if RELEASE in r.helm("list", "-n", NAMESPACE, "-q").stdout:
                r.helm("uninstall", RELEASE, "-n", NAMESPACE, "--wait", check=False)
            api.close()  # type: ignore[no-untyped-call]  # untyped in the kubernetes client


def test_a_bare_gpu_pod_is_not_evicted_and_its_node_is_released_naming_it(drained: Drained) -> None:
    assert drained.notebook_kept
    assert f"default/{NOTEBOOK}" in drained.released["message"] and "no controller" in drained.released["message"]
    assert f"not drained in {TIMEOUT_SECONDS}s" in drained.released["message"]
    assert drained.trainer_back_after_release == drained.release.node  # uncordoned: the trainer came back


def test_the_deployments_gpu_pod_was_evicted_the_driver_swapped_and_the_pod_runs_again_with_its_gpu(
    drained: Drained,
) -> None:
    assert len(set(drained.trainer_uids)) == 3  # evicted twice: each drain replaced it
    assert drained.driver_images and all(REBUILT_PAYLOAD in image for image in drained.driver_images)
    assert len(drained.devices) == 1


def test_the_node_is_given_back_and_nothing_is_held(drained: Drained) -> None:
    assert drained.schedulable and not drained.marked
    assert not drained.step.get("drainingNodes") and not drained.step.get("releasedNodes")
