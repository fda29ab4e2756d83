"""Upgrading the operator from release N-1 to N and rolling it back, on a real node, with a GPU workload running and
a driver rollout paused at a step (issue 40; R-UPGRADE, R-ROLLOUT, R-INSTALL, R-RELEASE; docs/upgrade.md).

Release N-1 is the previous release built from its own commit (`metax_dev.release.previous`, the commit and version
in ``metax_dev/release/previous.toml``), not a copy of HEAD with another number; release N is this tree
(`tests.support.release.made_release`). Both bundles are loaded with ``./run mirror`` into the administrator's
registry (`metax_dev.registry`), and everything is installed from ``oci://`` with a pull secret onto air-gapped real
nodes (a GPU node on its fake MetaX host, a CPU node), as in tests/e2e/test_product.py.

The journey (one module fixture, each moment recorded as a `Moment`):

1. ``helm install`` N-1 onto a cluster without our CRD (earlier modules leave N's behind), every agent Ready;
2. a driver rollout to a rebuilt payload of the same driver version (``driver.payload.name`` another repository
   holding the same payload: a new driver revision that driver-manager keeps, since this machine's kernel is not
   the fake host's, docs/realnode.md), with a manual pause after step 1: the GPU node is upgraded and the rollout
   waits at step 1 with a confirm token;
3. a GPU workload (``metax-tech.com/gpu: 1``) starts on the GPU node: moment ``before``;
4. ``helm upgrade`` to N with the same values: moment ``upgraded``, once every agent runs N's image and is Ready;
5. ``helm rollback`` to the revision of step 2: moment ``rolled back``, every agent on N-1's image again.

Asserted at ``upgraded`` and ``rolled back`` against ``before``: the driver module on the fake host untouched (the
files of ``sys/module/metax`` byte for byte and their modification times); the workload's container not restarted
and holding the same devices (the kubelet's PodResources); the rollout at the same step and state with the same
token; cluster-operator's spec unchanged and Ready within 60 s of the last agent's Ready; every agent pod replaced
once by one of the new release's image, with no container restart; the CRD at N's schema (never downgraded by
the rollback); ``status.versions`` naming both releases. After the rollback, N-1's webhook refuses a spec that sets
N's new field, naming it.
"""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import attrs
import pytest
from kubernetes import client

from metax_core import release as this_release
from metax_core.node import driver_plan, driver_state
from metax_core.wire import event_reasons, meta
from metax_dev import registry as test_registry
from metax_dev.controlplane import cluster as controlplane
from metax_dev.productnode import helm_release, workloads
from metax_dev.productnode.helm_release import NAMESPACE, RELEASE, Release
from metax_dev.release import bundle, previous, publish
from metax_dev.release.target import Target
from metax_k8s import crd
from metax_k8s.podresources import client as podresources
from tests.realnode import gpus

pytestmark = pytest.mark.realnode

WAIT = 180.0
PROJECT = "metax"
REBUILT_PAYLOAD = "driver-image-rebuilt"
"""The rollout's new payload: the same driver version under another repository (a rebuilt payload image)."""
ROLLOUT_VALUES = [
    "--set",
    f"driver.payload.name={REBUILT_PAYLOAD}",
    "--set",
    "driver.upgradePolicy.enableRollout=true",
    "--set-json",
    'driver.upgradePolicy.upgradeSteps=[{"replicas":1},{"replicas":"100%"}]',
]
WORKLOAD = "gpu-job"
CONVERGED_WITHIN = 60.0
"""Seconds from the last agent's Ready to cluster-operator's Ready (issue 40 item 3)."""


@attrs.frozen
class Moment:
    """What the cluster and the GPU node's host say at one moment of the journey."""

    agents: dict[str, dict[str, Any]]
    """By pod name: uid, node, DaemonSet, images, restart counts, Ready and when."""
    module: dict[str, tuple[bytes, int]]
    """The fake host's ``sys/module/metax`` files and driver-manager's state file: content and mtime (ns)."""
    driver_events: dict[str, int]
    """driver-manager's Events on the GPU node about loading a driver, by reason: how many times each happened."""
    workload: tuple[str, int]
    devices: list[str]
    rollout: dict[str, Any]
    spec: dict[str, Any]
    versions: dict[str, str]
    ready_seen: float
    """When (epoch seconds) this test saw cluster-operator Ready at this moment."""
    crd_release: str | None
    crd_has_agent_update: bool


@attrs.frozen
class Journey:
    release: Release
    target: Target
    old: str
    new: str
    pushed: dict[str, dict[str, str]]
    before: Moment
    upgraded: Moment
    rolled_back: Moment
    refused_new_field: subprocess.CompletedProcess[str]


def _upgrade_args(r: Release, source: helm_release.Source) -> list[str]:
    return [*r.upgrade_args(source), *ROLLOUT_VALUES]


def _condition(cr: dict[str, Any], kind: str) -> dict[str, Any]:
    return next((c for c in (cr.get("status") or {}).get("conditions") or [] if c["type"] == kind), {})


def _describe(r: Release) -> str:
    described = r.kubectl("get", "pods", "-n", NAMESPACE, "-o", "wide").stdout
    status = json.dumps((r.cluster_operator().get("status") or {}), indent=1)[-3000:]
    events = r.kubectl("get", "events", "-n", NAMESPACE, "--sort-by=.lastTimestamp").stdout[-3000:]
    return f"{described}\n--- cluster-operator status\n{status}\n--- events\n{events}"


def _time(text: str) -> float:
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def _agent_pods(r: Release) -> dict[str, dict[str, Any]]:
    """Every pod of our DaemonSets on the release's nodes, as `Moment.agents` records them."""
    found = {}
    for p in helm_release.pods(r):
        owner = next((o for o in p["metadata"].get("ownerReferences") or [] if o.get("controller")), {})
        if owner.get("kind") != "DaemonSet" or p["metadata"].get("deletionTimestamp"):
            continue
        statuses = p["status"].get("containerStatuses") or []
        ready = _condition({"status": p["status"]}, "Ready")
        found[p["metadata"]["name"]] = {
            "uid": p["metadata"]["uid"],
            "node": p["spec"].get("nodeName"),
            "daemonset": owner["name"],
            "images": {c["name"]: c["image"] for c in [*p["spec"].get("initContainers", []), *p["spec"]["containers"]]},
            "restarts": sum(s.get("restartCount", 0) for s in statuses),
            "ready": ready.get("status") == "True",
            "ready_at": _time(ready["lastTransitionTime"]) if ready.get("status") == "True" else None,
        }
    return found


def _on_release(pods: dict[str, dict[str, Any]], registry: str, version: str, daemonsets: set[str]) -> bool:
    """Every DaemonSet has its pods, all Ready, all running ``<registry>/<its image>:<version>@…`` (payloads aside)."""
    if {p["daemonset"] for p in pods.values()} != daemonsets or not all(p["ready"] for p in pods.values()):
        return False
    ours = [i for p in pods.values() for i in p["images"].values() if i.startswith(f"{registry}/metax-")]
    return bool(ours) and all(f":{version}@" in i for i in ours)


def _rollout(cr: dict[str, Any]) -> dict[str, Any]:
    """The rollout's phase, step, step state and confirm token (``status.upgradeStatus``, Table 3.16)."""
    upgrade = (cr.get("status") or {}).get("upgradeStatus") or {}
    inner = upgrade.get("status") or {}
    keys = ("currentStepIndex", "currentStepState", "confirmToken", "upgradingPodSpecRevision")
    return {"phase": upgrade.get("phase"), "upgrading": upgrade.get("upgrading"), **{k: inner.get(k) for k in keys}}


def _module(r: Release) -> dict[str, tuple[bytes, int]]:
    files = [f for f in sorted((r.fake.root / "sys/module/metax").rglob("*")) if f.is_file() and not f.is_symlink()]
    files += [f for f in [r.fake.root / driver_state.STATE_FILE.lstrip("/")] if f.exists()]
    return {str(f.relative_to(r.fake.root)): (f.read_bytes(), f.stat().st_mtime_ns) for f in files}


LOAD_REASONS = (
    driver_plan.DRIVER_READY,  # "loaded metax V with …": every load
    event_reasons.DRIVER_LOAD_FAILED,
    event_reasons.PREVIOUS_DRIVER_RESTORED,
    event_reasons.DRIVER_RESTORE_FAILED,
)


def _driver_events(r: Release) -> dict[str, int]:
    """How many times driver-manager said it loaded (or failed to load) a driver on the GPU node, by reason."""
    done = r.kubectl("get", "events", "-A", "-o", "json")
    assert done.returncode == 0, done.stderr
    counts = dict.fromkeys(LOAD_REASONS, 0)
    for e in json.loads(done.stdout)["items"]:
        if e.get("reason") in counts and (e.get("involvedObject") or {}).get("name") == r.node:
            counts[e["reason"]] += int(e.get("count") or (e.get("series") or {}).get("count") or 1)
    return counts


def _devices(r: Release) -> list[str]:
    with podresources.PodResourcesClient(r.member.pod_resources_socket) as api:
        listed = {(p.namespace, p.name): p for p in api.list()}
    return sorted(listed[("default", WORKLOAD)].device_ids(gpus.GPU))


def _moment(r: Release, kube: client.CoreV1Api) -> Moment:
    def ready() -> dict[str, Any] | None:
        current = r.cluster_operator()
        return current if _condition(current, "Ready").get("status") == "True" else None

    cr = helm_release.poll(
        ready,
        "cluster-operator Ready",
        timeout=WAIT,
        explain=lambda: _describe(r),
    )
    seen = time.time()
    status = kube.read_namespaced_pod(WORKLOAD, "default").status.container_statuses[0]
    crd_done = r.kubectl("get", "crd", crd.NAME, "-o", "json")
    assert crd_done.returncode == 0, crd_done.stderr
    live_crd = json.loads(crd_done.stdout)
    spec_schema = live_crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    return Moment(
        agents=_agent_pods(r),
        module=_module(r),
        driver_events=_driver_events(r),
        workload=(status.container_id, status.restart_count),
        devices=_devices(r),
        rollout=_rollout(cr),
        spec=cr["spec"],
        versions=cr["status"].get("versions") or {},
        ready_seen=seen,
        crd_release=(live_crd["metadata"].get("annotations") or {}).get(meta.CRD_RELEASE),
        crd_has_agent_update="agentUpdate" in spec_schema,
    )


def _fresh_cluster(r: Release) -> None:
    """Start from a cluster that never ran this operator: Helm keeps a chart's CRDs on uninstall (its ``crds/``
    rule), so the session control plane holds the CRD that earlier modules' release N installed; a fresh install
    of N-1 onto it would keep N's CRD and the journey would not begin at N-1's schema."""
    done = r.kubectl("delete", "crd", crd.NAME, "--ignore-not-found", "--wait=true", timeout=WAIT)
    assert done.returncode == 0, done.stderr
    assert r.kubectl("get", "crd", crd.NAME).returncode != 0  # gone, not only terminating


def _wait_release(r: Release, registry: str, version: str, daemonsets: set[str]) -> None:
    helm_release.poll(
        lambda: _on_release(_agent_pods(r), registry, version, daemonsets),
        f"every agent on release {version}'s image and Ready",
        timeout=WAIT,
        explain=lambda: _describe(r),
    )


@pytest.fixture(scope="module")
def journey(
    made_release: publish.Release,
    registry: test_registry.Registry,
    realnode_plane: controlplane.ControlPlane,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Journey]:
    work = tmp_path_factory.mktemp("upgrade")
    target = Target(
        f"{registry.host}/{PROJECT}", authfile=registry.auth_file(work / "auth.json"), cert_dir=registry.cert_dir
    )
    old_bundle = previous.bundle()
    new_bundle = bundle.write(made_release, work / bundle.name(made_release.version))
    loaded_old, loaded_new = bundle.mirror(old_bundle, target), bundle.mirror(new_bundle, target)
    assert loaded_old.version != loaded_new.version
    secret = registry.docker_config_json()
    old_source = helm_release.pulled_from(target, loaded_old.version, secret)
    new_source = helm_release.pulled_from(target, loaded_new.version, secret)
    api = realnode_plane.api_client()
    kube = client.CoreV1Api(api)
    with helm_release.real_node(
        realnode_plane,
        None,
        "upgrade-node",
        cpu_node=True,
        registry_hosts=registry.write_containerd_hosts,
        airgap_allowed=[registry.host],
    ) as r:
        try:
            r.retag_payload(REBUILT_PAYLOAD)  # the rollout's payload: the same payload under another repository
            _fresh_cluster(r)
            r.create_pull_secret(old_source)
            r.helm(*r.install_args(old_source))
            daemonsets = {p["daemonset"] for p in _agent_pods(r).values()} | set(helm_release.AGENTS)
            _wait_release(r, target.registry, loaded_old.version, daemonsets)
            r.helm(*_upgrade_args(r, old_source))  # N-1 again, with the rollout
            helm_release.poll(
                lambda: (u := _rollout(r.cluster_operator()))["currentStepState"] == "StepPaused" and u["confirmToken"],
                "the rollout paused at step 1 with a confirm token",
                timeout=WAIT,
                explain=lambda: _describe(r),
            )
            pod = workloads.busybox_pod(WORKLOAD, r.node, "echo DONE; sleep 36000", resources={gpus.GPU: "1"})
            kube.create_namespaced_pod("default", pod)
            helm_release.poll(
                lambda: kube.read_namespaced_pod(WORKLOAD, "default").status.phase == "Running",
                "the GPU workload running",
                timeout=WAIT,
                explain=lambda: _describe(r),
            )
            before = _moment(r, kube)

            r.helm(*_upgrade_args(r, new_source))
            _wait_release(r, target.registry, loaded_new.version, daemonsets)
            upgraded = _moment(r, kube)

            revision = "2"  # 1: the install, 2: the rollout (N-1), 3: the upgrade to N
            r.helm("rollback", RELEASE, revision, "-n", NAMESPACE, "--wait", "--timeout=3m")
            _wait_release(r, target.registry, loaded_old.version, daemonsets)
            rolled_back = _moment(r, kube)

            patch = {"spec": {"agentUpdate": {"maxUnavailable": 2}}}
            refused = r.kubectl("patch", "clusteroperator", "cluster-operator", "--type=merge", "-p", json.dumps(patch))
            yield Journey(
                r,
                target,
                loaded_old.version,
                loaded_new.version,
                {"old": loaded_old.served, "new": loaded_new.served},
                before,
                upgraded,
                rolled_back,
                refused,
            )
        except helm_release.ReleaseError as exc:
            raise helm_release.ReleaseError(f"{exc}\n{_describe(r)}") from exc
        finally:
            kube.delete_namespaced_pod(WORKLOAD, "default", grace_period_seconds=0)
            if RELEASE in r.helm("list", "-n", NAMESPACE, "-q").stdout:
                r.helm("uninstall", RELEASE, "-n", NAMESPACE, "--wait", check=False)
            api.close()  # type: ignore[no-untyped-call]  # untyped in the kubernetes client


AFTER = ("upgraded", "rolled_back")


def test_the_releases_are_two_real_builds(journey: Journey) -> None:
    assert journey.old == previous.load().version and journey.new == this_release.running()
    old, new = journey.pushed["old"], journey.pushed["new"]
    assert set(old) == set(new) and not set(old.values()) & set(new.values())  # every image rebuilt, none shared


@pytest.mark.parametrize("moment", AFTER)
def test_the_driver_was_not_reloaded(journey: Journey, moment: str) -> None:
    after: Moment = getattr(journey, moment)
    assert journey.before.module and after.module == journey.before.module
    assert after.driver_events == journey.before.driver_events  # no load, no failed load, no restore since


@pytest.mark.parametrize("moment", AFTER)
def test_the_gpu_workload_kept_running_with_its_devices(journey: Journey, moment: str) -> None:
    after: Moment = getattr(journey, moment)
    assert after.workload == journey.before.workload
    assert after.devices == journey.before.devices and len(after.devices) == 1


@pytest.mark.parametrize("moment", AFTER)
def test_the_paused_rollout_kept_its_step_and_token(journey: Journey, moment: str) -> None:
    before, after = journey.before.rollout, getattr(journey, moment).rollout
    assert before["currentStepState"] == "StepPaused" and before["confirmToken"] and before["upgrading"]
    assert after == before


@pytest.mark.parametrize("moment", AFTER)
def test_the_spec_stayed_and_status_converged_within_a_minute_of_the_last_agent(journey: Journey, moment: str) -> None:
    after: Moment = getattr(journey, moment)
    assert after.spec == journey.before.spec
    last_agent = max(a["ready_at"] for a in after.agents.values())
    assert after.ready_seen - last_agent <= CONVERGED_WITHIN


@pytest.mark.parametrize(("moment", "earlier"), [("upgraded", "before"), ("rolled_back", "upgraded")])
def test_every_agent_was_replaced_once_by_the_new_image_without_a_restart(
    journey: Journey, moment: str, earlier: str
) -> None:
    then, now = getattr(journey, earlier), getattr(journey, moment)
    version = journey.new if moment == "upgraded" else journey.old
    assert not {a["uid"] for a in then.agents.values()} & {a["uid"] for a in now.agents.values()}
    by_set = lambda m: sorted((a["daemonset"], a["node"]) for a in m.agents.values())  # noqa: E731
    assert by_set(now) == by_set(then)  # one pod per DaemonSet and node, as before
    for name, agent in now.agents.items():
        assert agent["ready"] and agent["restarts"] == 0, (name, agent)
        ours = {c: i for c, i in agent["images"].items() if i.startswith(f"{journey.target.registry}/metax-")}
        assert ours and all(f":{version}@" in i for i in ours.values()), (name, agent["images"])
    driver = [a for a in now.agents.values() if a["daemonset"] == "metax-driver"]
    assert len(driver) == 1 and any(REBUILT_PAYLOAD in i for i in driver[0]["images"].values())  # same driver


def test_the_crd_is_at_the_new_schema_and_never_downgraded(journey: Journey) -> None:
    assert (journey.before.crd_release, journey.before.crd_has_agent_update) == (journey.old, False)
    assert (journey.upgraded.crd_release, journey.upgraded.crd_has_agent_update) == (journey.new, True)
    assert (journey.rolled_back.crd_release, journey.rolled_back.crd_has_agent_update) == (journey.new, True)
    assert journey.upgraded.versions == {"operator": journey.new, "crd": journey.new}
    assert journey.rolled_back.versions == {"operator": journey.old, "crd": journey.new}


def test_the_previous_release_refuses_the_new_releases_field_by_name(journey: Journey) -> None:
    refused = journey.refused_new_field
    assert refused.returncode != 0 and "agentUpdate" in refused.stderr, refused.stderr
