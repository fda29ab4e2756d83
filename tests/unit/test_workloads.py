"""Rendered workloads (C2–C10, R-SECURITY, R-MERGE): privileges, host paths, gating, order, strategies."""

from __future__ import annotations

from typing import Any

import pytest

from metax_core import components
from metax_core.cluster import container_env, host_paths, payloads, pod_security, render_settings, supporting, workloads
from metax_core.errors import InvalidSpec
from metax_core.spec import validation

BASE = {"registry": "reg.example/metax", "driver": {"payload": {"version": "2.14.6"}}}


def _render(values: dict[str, Any]) -> dict[str, dict[str, Any]]:
    rendered = workloads.render(validation.parse(values), render_settings.RenderSettings(version="9.9.9"))
    workload_kinds = ("DaemonSet", "Deployment", "Service")  # RBAC objects: tests/unit/test_rbac.py
    return {f"{o['kind']}/{o['metadata']['name']}": dict(o) for o in rendered.objects if o["kind"] in workload_kinds}


def _pod(obj: dict[str, Any]) -> dict[str, Any]:
    pod: dict[str, Any] = obj["spec"]["template"]["spec"]
    return pod


def test_default_spec_renders_every_default_component_in_dependency_order() -> None:
    rendered = workloads.render(validation.parse(BASE))
    names = [o["metadata"]["name"] for o in rendered.objects if o["kind"] in ("DaemonSet", "Deployment")]
    assert names == [
        "metax-gpu-discovery",
        "metax-gpu-label",
        "metax-container-runtime",
        "metax-driver",
        "metax-maca",
        "metax-gpu-device",
        "metax-vfio-manager",
        "metax-topo-master",
        "metax-topo-worker",
    ]
    assert {c.value for c in rendered.plan.disabled} == {"exporter", "gpuScheduler", "draDriver"}


def test_privileges_and_host_pid_match_table_1_3_1() -> None:
    objs = _render({**BASE, "exporter": {"deploy": True}, "gpuScheduler": {"deploy": True}})
    for key, obj in objs.items():
        if obj["kind"] == "Service":
            continue
        pod = _pod(obj)
        container = pod["containers"][0]
        workload = next(w for i in components.CATALOGUE for w in i.workloads if w.name == obj["metadata"]["name"])
        assert container["securityContext"].get("privileged", False) is workload.privileged, key
        assert pod.get("hostPID", False) is workload.host_pid, key
        assert "hostNetwork" not in pod and "hostIPC" not in pod, key


def test_only_the_host_paths_of_section_1_3_2_are_mounted() -> None:
    objs = _render({**BASE, "exporter": {"deploy": True}})
    mounted = {
        v["hostPath"]["path"]
        for o in objs.values()
        if o["kind"] != "Service"
        for v in _pod(o).get("volumes", [])
        if "hostPath" in v  # the payload volume is an emptyDir
    }
    assert mounted <= host_paths.ALLOWED_HOST_PATHS
    assert "/lib/modules" in mounted
    driver_mounts = {
        m["mountPath"]: m["readOnly"] for m in _pod(objs["DaemonSet/metax-driver"])["containers"][0]["volumeMounts"]
    }
    assert driver_mounts["/host/lib/modules"] is True


def test_the_apply_order_puts_every_workload_last_and_keeps_deploy_order_within_each_group() -> None:
    """Issue 26, P1: accounts, roles, services and config go through the API server before the first DaemonSet
    makes it busy; each workload still comes after its own ServiceAccount."""
    values = {**BASE, "exporter": {"deploy": True}, "gpuScheduler": {"deploy": True}}
    rendered = list(
        workloads.render(validation.parse(values), render_settings.RenderSettings(service_monitor=True)).objects
    )
    ordered = workloads.in_apply_order(rendered)
    kinds = [o["kind"] in workloads.WORKLOAD_KINDS for o in ordered]
    assert sorted(map(id, ordered)) == sorted(map(id, rendered))  # the same objects, none lost or repeated
    first = kinds.index(True)
    assert first > 0 and all(kinds[first:]), [o["kind"] for o in ordered]
    assert [o for o in ordered if o["kind"] not in workloads.WORKLOAD_KINDS] == [
        o for o in rendered if o["kind"] not in workloads.WORKLOAD_KINDS
    ]
    assert ordered[first:] == [o for o in rendered if o["kind"] in workloads.WORKLOAD_KINDS]
    assert {"Service", "ServiceMonitor", "RuntimeClass"} <= {o["kind"] for o in ordered[:first]}
    position = {(o["kind"], o["metadata"]["name"]): i for i, o in enumerate(ordered)}
    for workload in ordered[first:]:
        account = workload["spec"]["template"]["spec"].get("serviceAccountName")
        if account:
            assert position[("ServiceAccount", account)] < position[(workload["kind"], workload["metadata"]["name"])]


def test_the_test_only_host_path_prefix_moves_the_host_side_only() -> None:
    """`RenderSettings.host_path_prefix` (test only, docs/realnode.md) prefixes each hostPath; the mount paths in
    the container, and the default render, stay the real ones. The one addition under a prefix: the privileged
    agents mount the fake host's own directory too (`TEST_FAKE_HOST_DIR`), so its tools work in their pods."""
    spec = validation.parse(BASE)
    plain = workloads.render(spec, render_settings.RenderSettings(version="9.9.9"))
    moved = workloads.render(spec, render_settings.RenderSettings(version="9.9.9", host_path_prefix="/tmp/fake-host/"))
    fake = {"name": "host--metax-fake", "mountPath": "/host/.metax-fake", "readOnly": False}
    for before, after in zip(plain.objects, moved.objects, strict=True):
        if before["kind"] != "DaemonSet":
            assert before == after
            continue
        pod_before, pod_after = _pod(dict(before)), _pod(dict(after))
        mounts_before = pod_before["containers"][0].get("volumeMounts") or []
        mounts_after = pod_after["containers"][0].get("volumeMounts") or []
        privileged = pod_after["containers"][0]["securityContext"].get("privileged", False)
        assert fake not in mounts_before and (fake in mounts_after) is privileged  # gpu-discovery: not privileged
        assert [m for m in mounts_after if m != fake] == mounts_before
        fake_volume = {
            "name": fake["name"],
            "hostPath": {"path": "/tmp/fake-host/.metax-fake", "type": "DirectoryOrCreate"},
        }
        volumes_after = pod_after.get("volumes", [])
        assert (fake_volume in volumes_after) is privileged
        volumes_after = [v for v in volumes_after if v != fake_volume]
        for v_before, v_after in zip(pod_before.get("volumes", []), volumes_after, strict=True):
            if "hostPath" in v_before:
                assert v_before["hostPath"]["path"] in host_paths.ALLOWED_HOST_PATHS
                assert v_after["hostPath"]["path"] == "/tmp/fake-host" + v_before["hostPath"]["path"]
            else:
                assert v_before == v_after


@pytest.mark.parametrize("name", ["Deployment/metax-topo-master", "DaemonSet/metax-gpu-discovery"])
def test_unprivileged_workloads_are_locked_down(name: str) -> None:
    """Issue 38: the images' non-root user on the pod and the container, no capability, no escalation, the
    runtime's seccomp profile, a read-only root."""
    pod = _pod(_render(BASE)[name])
    context = pod["containers"][0]["securityContext"]
    assert context["runAsNonRoot"] is True and context["allowPrivilegeEscalation"] is False
    assert context["runAsUser"] == context["runAsGroup"] == pod_security.UNPRIVILEGED_USER
    assert context["capabilities"] == {"drop": ["ALL"]} and context["readOnlyRootFilesystem"] is True
    assert "privileged" not in context and "hostPID" not in pod
    assert pod["securityContext"] == {
        "runAsNonRoot": True,
        "runAsUser": pod_security.UNPRIVILEGED_USER,
        "runAsGroup": pod_security.UNPRIVILEGED_USER,
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def test_gpu_discovery_sees_only_the_host_s_sys_read_only_and_runs_everywhere() -> None:
    """Issue 38 item 3: the one workload on every node (control plane included) holds no privilege and reads
    only /sys; gpu-label, privileged, runs only where it found GPUs."""
    objs = _render(BASE)
    pod = _pod(objs["DaemonSet/metax-gpu-discovery"])
    assert "nodeSelector" not in pod and pod["serviceAccountName"] == "metax-gpu-discovery"
    assert [v["hostPath"] for v in pod["volumes"] if "hostPath" in v] == [{"path": "/sys", "type": "DirectoryOrCreate"}]
    [host_mount] = [m for m in pod["containers"][0]["volumeMounts"] if m["mountPath"].startswith("/host")]
    assert host_mount["readOnly"] is True
    assert pod["containers"][0]["image"] == "reg.example/metax/metax-gpu-discovery:9.9.9"  # its own image
    assert _pod(objs["DaemonSet/metax-gpu-label"])["nodeSelector"] == {workloads.GPU_NODE_LABEL: "true"}


def test_every_container_has_a_read_only_root_and_its_own_tmp() -> None:
    """Every container the operator renders: a read-only root, and an emptyDir of its own at /tmp (its probe
    file; maca's two containers each keep theirs)."""
    every = {**BASE, "exporter": {"deploy": True}, "gpuScheduler": {"deploy": True}, "draDriver": {"deploy": True}}
    for name, obj in _render(every).items():
        if obj["kind"] not in ("DaemonSet", "Deployment"):
            continue
        pod = _pod(obj)
        empty = {v["name"] for v in pod["volumes"] if "emptyDir" in v}
        scratch = []
        for c in pod["containers"]:
            assert c["securityContext"]["readOnlyRootFilesystem"] is True, (name, c["name"])
            [tmp] = [m["name"] for m in c["volumeMounts"] if m["mountPath"] == pod_security.SCRATCH_PATH]
            assert tmp in empty
            scratch.append(tmp)
        assert len(set(scratch)) == len(scratch), name


def _mounts_token(container: dict[str, Any]) -> bool:
    return any(m["name"] == pod_security.TOKEN_VOLUME for m in container.get("volumeMounts") or [])


def test_every_pod_carries_its_token_only_into_the_container_that_calls_the_api() -> None:
    """Issue 38 item 2 (R-NODEBOUND): automount off everywhere; the ServiceAccount's bound, expiring token, the CA
    and the namespace in a projected volume, mounted into the agent container only — not maca's container-edit
    sidecar, not a payload init container; the exporter (no ServiceAccount, Table 1.3.1) has none at all."""
    every = {**BASE, "exporter": {"deploy": True}, "gpuScheduler": {"deploy": True}, "draDriver": {"deploy": True}}
    objs = _render(every)
    pods = {name: _pod(o) for name, o in objs.items() if o["kind"] in ("DaemonSet", "Deployment")}
    assert len(pods) >= 11
    for name, pod in pods.items():
        assert pod["automountServiceAccountToken"] is False, name
        agent, *others = pod["containers"]
        if "serviceAccountName" not in pod:
            assert name == "DaemonSet/metax-data-exporter" and not _mounts_token(agent)
            continue
        (volume,) = [v for v in pod["volumes"] if v["name"] == pod_security.TOKEN_VOLUME]
        sources = volume["projected"]["sources"]
        assert sources[0]["serviceAccountToken"]["expirationSeconds"] <= 3607
        assert _mounts_token(agent), name
        assert not [c["name"] for c in (*others, *pod.get("initContainers", ())) if _mounts_token(c)], name
    assert [c["name"] for c in pods["DaemonSet/metax-maca"]["containers"]] == ["maca", "container-edit"]


def test_payload_init_containers_run_confined_with_limits() -> None:
    """Issue 38 item 2: the vendor's payload image runs with no token (above), no capability, no privilege
    escalation, the runtime's seccomp profile, a read-only root and limits."""
    spec = {**BASE, "maca": {"payload": {"images": ["maca:2.18.0.3"]}}}
    objs = _render(spec)
    for name in ("DaemonSet/metax-driver", "DaemonSet/metax-maca"):
        (init,) = _pod(objs[name])["initContainers"]
        context = init["securityContext"]
        assert context["capabilities"] == {"drop": ["ALL"]} and context["allowPrivilegeEscalation"] is False
        assert context["privileged"] is False and context["readOnlyRootFilesystem"] is True
        assert context["seccompProfile"] == {"type": "RuntimeDefault"}
        assert init["resources"]["limits"]["memory"] and init["resources"]["limits"]["cpu"]


def test_node_agents_run_on_gpu_nodes_except_discovery_and_tolerate_control_plane_taints() -> None:
    objs = _render(BASE)
    assert "nodeSelector" not in _pod(objs["DaemonSet/metax-gpu-discovery"])
    for name in ("metax-gpu-label", "metax-driver", "metax-maca", "metax-gpu-device"):
        pod = _pod(objs[f"DaemonSet/{name}"])
        assert pod["nodeSelector"] == {workloads.GPU_NODE_LABEL: "true"}
        assert {"key": "node-role.kubernetes.io/control-plane", "operator": "Exists", "effect": "NoSchedule"} in pod[
            "tolerations"
        ]


def test_driver_daemonset_is_replaced_only_by_the_rollout_engine() -> None:
    objs = _render(BASE)
    assert objs["DaemonSet/metax-driver"]["spec"]["updateStrategy"] == {"type": "OnDelete"}
    assert objs["DaemonSet/metax-gpu-device"]["spec"]["updateStrategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxUnavailable": 1},
    }


def test_every_agent_but_the_driver_rolls_at_agent_update_max_unavailable() -> None:
    """R-UPGRADE: an operator upgrade replaces the agents node by node, as many at once as agentUpdate says."""
    for given, rendered in ((3, 3), ("25%", "25%")):
        objs = _render({**BASE, "agentUpdate": {"maxUnavailable": given}})
        daemonsets = {k: v for k, v in objs.items() if k.startswith("DaemonSet/") and k != "DaemonSet/metax-driver"}
        assert daemonsets
        for name, ds in daemonsets.items():
            assert ds["spec"]["updateStrategy"] == {
                "type": "RollingUpdate",
                "rollingUpdate": {"maxUnavailable": rendered},
            }, name
        assert objs["DaemonSet/metax-driver"]["spec"]["updateStrategy"] == {"type": "OnDelete"}


@pytest.mark.parametrize("bad", [0, "0%", "101%"])
def test_agent_update_refuses_a_roll_that_could_not_move(bad: object) -> None:
    with pytest.raises(InvalidSpec) as refused:
        validation.parse({**BASE, "agentUpdate": {"maxUnavailable": bad}})
    assert [e.path for e in refused.value.errors] == ["agentUpdate.maxUnavailable"]


def test_gpu_device_learns_what_it_waits_for_and_its_health_interval() -> None:
    env = {
        e["name"]: e.get("value")
        for e in _pod(_render({**BASE, "gpuDevice": {"healthyInterval": 0}})["DaemonSet/metax-gpu-device"])[
            "containers"
        ][0]["env"]
    }
    assert env["METAX_REQUIRED_COMPONENTS"] == "gpu-label,container-runtime,driver,maca"
    assert env["METAX_HEALTHY_INTERVAL"] == "0"


def test_images_come_from_the_registry_with_the_operator_version() -> None:
    assert _pod(_render(BASE)["DaemonSet/metax-maca"])["containers"][0]["image"] == "reg.example/metax/metax-maca:9.9.9"


def test_exporter_uses_the_default_service_account_without_a_token_and_gets_a_service() -> None:
    objs = _render({**BASE, "exporter": {"deploy": True, "service": {"type": "NodePort", "port": 30940}}})
    pod = _pod(objs["DaemonSet/metax-data-exporter"])
    assert "serviceAccountName" not in pod and pod["automountServiceAccountToken"] is False
    service = objs["Service/metax-data-exporter"]["spec"]
    assert service["type"] == "NodePort" and service["ports"][0]["nodePort"] == 30940


@pytest.mark.parametrize("disabled", ["runtime", "gpuLabel"])
def test_a_disabled_prerequisite_leaves_its_dependents_out(disabled: str) -> None:
    objs = _render({**BASE, disabled: {"deploy": False}})
    assert "DaemonSet/metax-driver" not in objs
    assert "DaemonSet/metax-gpu-device" not in objs


# --- Payloads (R-DRIVER, R-MACA): the images the agents install from ------------------------------------


def test_the_driver_daemonset_carries_its_payload_image_from_the_global_registry() -> None:
    pod = _pod(_render({**BASE, "registry": "reg.example.com/metax"})["DaemonSet/metax-driver"])
    (init,) = pod["initContainers"]
    assert init["image"] == f"reg.example.com/metax/driver-image:{BASE['driver']['payload']['version']}"
    assert {"name": "payload", "emptyDir": {}} in pod["volumes"]
    env = {e["name"]: e.get("value") for e in pod["containers"][0]["env"]}
    # one image: it lands in the agent's METAX_PAYLOAD_DIR itself, where driver-manager looks for driver/*.ko
    assert env["METAX_PAYLOAD_DIR"] == payloads.PAYLOAD_DIR and "METAX_PAYLOAD_IMAGES" not in env
    assert init["command"][-1].endswith(f'"{payloads.PAYLOAD_DIR}/"')


def test_the_payload_registry_wins_over_the_global_one_and_a_named_registry_is_kept() -> None:
    document = {
        **BASE,
        "registry": "reg.example.com/metax",
        "driver": {**BASE["driver"], "payload": {**BASE["driver"]["payload"], "registry": "drivers.example.com"}},
        "maca": {"payload": {"registry": "sdk.example.com:5000/p", "images": ["maca:2.18.0.3", "x.io/m/maca:2.19.0"]}},
    }
    objs = _render(document)
    driver = _pod(objs["DaemonSet/metax-driver"])["initContainers"][0]["image"]
    maca = [c["image"] for c in _pod(objs["DaemonSet/metax-maca"])["initContainers"]]
    assert driver.startswith("drivers.example.com/driver-image:")
    assert maca == ["sdk.example.com:5000/p/maca:2.18.0.3", "x.io/m/maca:2.19.0"]


def test_no_payload_when_the_driver_manages_neither_driver_nor_firmware() -> None:
    objs = _render({**BASE, "driver": {"deployPolicy": "Never"}})
    assert "initContainers" not in _pod(objs["DaemonSet/metax-driver"])
    assert "initContainers" not in _pod(objs["DaemonSet/metax-maca"])


def test_every_node_agent_with_code_has_a_readiness_probe_declared_once_in_its_component() -> None:
    objs = _render(
        {**BASE, "exporter": {"deploy": True}, "gpuScheduler": {"deploy": True}, "draDriver": {"deploy": True}}
    )
    probed = set()
    for info in components.CATALOGUE:
        for workload in info.workloads:
            obj = objs.get(f"{workload.kind.value}/{workload.name}")
            assert obj is not None, workload.name
            container = _pod(obj)["containers"][0]
            env = {e["name"]: e.get("value") for e in container["env"]}
            if workload.name == "metax-gpu-scheduler":  # an HTTP server: kubelet asks its /healthz
                assert container["readinessProbe"]["httpGet"] == {"path": "/healthz", "port": "extender"}
                assert container["ports"] == [{"name": "extender", "containerPort": 8088}]
                continue
            if info.probe is None or workload.kind is components.WorkloadKind.DEPLOYMENT:
                assert "readinessProbe" not in container and "METAX_PROBE_FILE" not in env, workload.name
                continue
            probed.add(info.component)
            assert container["readinessProbe"] == {
                "exec": {"command": ["test", "-f", info.probe.file]},
                "periodSeconds": info.probe.period_seconds,
                "failureThreshold": info.probe.failure_threshold,
            }
            assert env["METAX_PROBE_FILE"] == info.probe.file  # the agent keeps the file the kubelet tests
    C = components.Component
    assert probed == {
        C.GPU_LABEL,
        C.RUNTIME,
        C.DRIVER,
        C.GPU_DEVICE,
        C.VFIO_MANAGER,
        C.MACA,
        C.TOPO,
        C.EXPORTER,
        C.DRA_DRIVER,
    }


def test_gpu_scheduler_gets_the_service_kube_scheduler_calls() -> None:
    objs = _render({**BASE, "gpuScheduler": {"deploy": True}})
    service = objs["Service/metax-gpu-scheduler"]
    assert service["spec"]["selector"] == {"app.kubernetes.io/name": "metax-gpu-scheduler"}
    assert service["spec"]["ports"] == [{"name": "extender", "port": 8088, "targetPort": "extender", "protocol": "TCP"}]
    assert "Service/metax-gpu-scheduler" not in _render(BASE)


def test_a_component_gets_its_probe_by_declaring_it() -> None:
    declared = components.ReadinessProbe(file="/tmp/maca-ready", period_seconds=7)
    assert workloads.readiness_probe(declared) == {
        "exec": {"command": ["test", "-f", "/tmp/maca-ready"]},
        "periodSeconds": 7,
        "failureThreshold": 1,
    }
    s = validation.parse(BASE)
    common = {"log_level": "INFO", "host_root": "/host", "required": ""}
    probed = container_env.render(s, components.Component.EXPORTER, probe_file=declared.file, **common)
    assert {"name": "METAX_PROBE_FILE", "value": "/tmp/maca-ready"} in probed
    assert "METAX_PROBE_FILE" not in {
        e["name"] for e in container_env.render(s, components.Component.EXPORTER, probe_file=None, **common)
    }


def test_the_exporter_service_monitor_is_rendered_only_where_the_cluster_serves_it() -> None:
    """C8: the ServiceMonitor selects the exporter Service's pods on its named port with honorLabels (the
    holders' namespace/pod stay as the exporter writes them); not rendered without the CRD nor for an
    ExternalName Service (nothing to scrape through it)."""
    values = {**BASE, "exporter": {"deploy": True, "sampleInterval": 7}}
    s = validation.parse(values)
    without = workloads.render(s).objects
    assert not [o for o in without if o["kind"] == "ServiceMonitor"]
    rendered = workloads.render(s, render_settings.RenderSettings(service_monitor=True)).objects
    [monitor] = [o for o in rendered if o["kind"] == "ServiceMonitor"]
    [service] = [o for o in rendered if o["kind"] == "Service"]
    assert monitor["apiVersion"] == supporting.SERVICE_MONITOR_API
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["spec"]["selector"].items()
    assert monitor["spec"]["endpoints"] == [
        {"port": service["spec"]["ports"][0]["name"], "path": "/metrics", "honorLabels": True, "interval": "7s"}
    ]
    assert monitor["metadata"]["labels"][workloads.COMPONENT_LABEL] == "exporter"
    external = validation.parse(
        {**BASE, "exporter": {"deploy": True, "service": {"type": "ExternalName", "externalName": "m.example.com"}}}
    )
    assert not [
        o
        for o in workloads.render(external, render_settings.RenderSettings(service_monitor=True)).objects
        if o["kind"] == "ServiceMonitor"
    ]
