"""What the operator renders for R-DRA: the dra-driver DaemonSet and its RBAC, the DeviceClasses, and the node
affinity that gives every GPU node exactly one of gpu-device and dra-driver (docs/dra.md)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import pytest

from metax_core import components
from metax_core.cluster import dra_objects, host_paths, pod_security, rbac, render_settings, supporting, workloads
from metax_core.components import Component
from metax_core.dra import DRIVER, VFIO_DRIVER, classes
from metax_core.node import allocation
from metax_core.spec import validation
from metax_core.wire import agent_env
from tests.support.placement import lands_on

BASE: dict[str, Any] = {"registry": "reg.example/metax", "driver": {"payload": {"version": "2.14.6"}}}
GPU_NODE = {workloads.GPU_NODE_LABEL: "true"}
LABEL_VALUES = (None, "device-plugin", "dra", "Dra", "", "none")
DAEMONSETS = ("metax-gpu-device", "metax-dra-driver")


def _objects(values: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    rendered = workloads.render(validation.parse(dict(values)), render_settings.RenderSettings(version="9.9.9"))
    return {f"{o['kind']}/{o['metadata']['name']}": dict(o) for o in rendered.objects}


def _pod(obj: Mapping[str, Any]) -> dict[str, Any]:
    pod: dict[str, Any] = obj["spec"]["template"]["spec"]
    return pod


def _dra(**section: Any) -> dict[str, Any]:
    return {**BASE, "draDriver": {"deploy": True, **section}}


def test_with_dra_off_nothing_of_dra_is_rendered_and_gpu_device_is_as_before() -> None:
    off = _objects(BASE)
    assert not [k for k in off if "dra" in k or k.startswith("DeviceClass/")]
    assert off == _objects({**BASE, "draDriver": {"deploy": False, "defaultAllocation": "dra"}})
    assert "affinity" not in _pod(off["DaemonSet/metax-gpu-device"])


@pytest.mark.parametrize("default", ["devicePlugin", "dra"])
@pytest.mark.parametrize("value", LABEL_VALUES)
def test_every_gpu_node_gets_exactly_the_allocator_the_setting_decides(default: str, value: str | None) -> None:
    objs = _objects(_dra(defaultAllocation=default))
    labels = {**GPU_NODE, **({} if value is None else {allocation.LABEL: value})}
    landing = {name for name in DAEMONSETS if lands_on(_pod(objs[f"DaemonSet/{name}"]), labels)}
    decided = allocation.decide(validation.parse(_dra(defaultAllocation=default)).dra_driver.default_allocation, labels)
    expected = "metax-dra-driver" if decided.allocator is allocation.Allocator.DRA else "metax-gpu-device"
    assert landing == {expected}, (default, value)
    # ... and neither lands on a node without a MetaX GPU
    assert not {n for n in DAEMONSETS if lands_on(_pod(objs[f"DaemonSet/{n}"]), {allocation.LABEL: "dra"})}


@pytest.mark.parametrize("value", LABEL_VALUES)
def test_an_administrators_affinity_narrows_both_and_never_lets_both_onto_a_node(value: str | None) -> None:
    term = {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}
    other = {"matchExpressions": [{"key": "pool", "operator": "Exists"}]}
    template = {"spec": {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [term, other]}}}}}  # fmt: skip
    objs = _objects({**_dra(), "podTemplateSpec": template})
    for zone in ({"zone": "a"}, {"pool": "x"}, {"zone": "b"}):
        labels = {**GPU_NODE, **zone, **({} if value is None else {allocation.LABEL: value})}
        landing = {n for n in DAEMONSETS if lands_on(_pod(objs[f"DaemonSet/{n}"]), labels)}
        assert len(landing) == (0 if zone == {"zone": "b"} else 1), (zone, value, landing)


def test_the_dra_driver_mirrors_gpu_device_s_host_facts_and_settings() -> None:
    objs = _objects({**_dra(), "gpuDevice": {"healthyInterval": 9, "sgpuShares": 8}})
    ds = objs["DaemonSet/metax-dra-driver"]
    pod = _pod(ds)
    container = pod["containers"][0]
    assert container["image"] == "reg.example/metax/metax-dra-driver:9.9.9"
    assert pod["serviceAccountName"] == "metax-dra-driver" and "hostPID" not in pod
    assert container["securityContext"] == {"privileged": True, "readOnlyRootFilesystem": True}
    assert pod["nodeSelector"] == GPU_NODE and pod["priorityClassName"] == "system-node-critical"
    assert {t["key"] for t in pod["tolerations"]} >= {"node-role.kubernetes.io/control-plane"}
    paths = {v["hostPath"]["path"] for v in pod["volumes"] if "hostPath" in v}
    assert paths == {
        "/var/lib/kubelet/plugins_registry",
        "/var/lib/kubelet/plugins",
        "/var/lib/kubelet/pod-resources",
        "/var/run/cdi",
        "/dev",
        "/sys",
        "/var/lib/metax",  # the running driver's mx-smi, read only (payload_layout.HOST_TOOLS_DIR)
        "/run/metax",
        "/var/log/metax",
    }
    assert paths <= host_paths.ALLOWED_HOST_PATHS
    # volume names are DNS labels (the API server refused host-var-lib-kubelet-plugins_registry)
    assert all(re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", v["name"]) for v in pod["volumes"])
    read_only = {m["mountPath"].removeprefix("/host") for m in container["volumeMounts"] if m["readOnly"]}
    assert read_only == {"/sys", "/var/lib/kubelet/pod-resources", "/var/lib/metax", pod_security.TOKEN_PATH}
    env = {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}
    assert env[agent_env.NODE_NAME] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    assert env[agent_env.HEALTHY_INTERVAL.name] == "9"
    assert agent_env.SGPU_SHARES.name not in env  # a claim's sharing comes with its configuration
    gpu_device_env = {
        e["name"]: e.get("value") for e in _pod(objs["DaemonSet/metax-gpu-device"])["containers"][0]["env"]
    }
    assert (
        env[agent_env.REQUIRED_COMPONENTS]
        == gpu_device_env[agent_env.REQUIRED_COMPONENTS]
        == ("gpu-label,container-runtime,driver,maca")
    )
    assert container["readinessProbe"]["exec"]["command"] == ["test", "-f", workloads.PROBE_FILE]
    assert ds["spec"]["updateStrategy"] == {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1}}


def test_the_dra_driver_waits_for_what_gpu_device_waits_for() -> None:
    for deployed in (list(Component), [c for c in Component if c is not Component.DRIVER]):
        assert components.requirements(Component.DRA_DRIVER, deployed) == components.requirements(
            Component.GPU_DEVICE, deployed
        )
    assert components.signal(Component.DRA_DRIVER) == "dra-driver"


def test_dra_is_blocked_with_gpu_device_when_their_prerequisite_is_off() -> None:
    rendered = workloads.render(validation.parse({**_dra(), "maca": {"deploy": False}}))
    blocked = {b.component for b in rendered.plan.blocked}
    assert {Component.DRA_DRIVER, Component.GPU_DEVICE} <= blocked
    assert not [o for o in rendered.objects if o["kind"] == "DeviceClass"]


def test_the_device_classes_select_disjoint_devices_of_the_driver() -> None:
    objs = _objects(_dra())
    gpu, vfio = objs[f"DeviceClass/{DRIVER}"], objs[f"DeviceClass/{VFIO_DRIVER}"]
    assert gpu["apiVersion"] == vfio["apiVersion"] == "resource.k8s.io/v1"
    assert gpu["spec"] == {
        "selectors": [
            {
                "cel": {
                    "expression": 'device.driver == "gpu.metax-tech.com" && '
                    'device.attributes["gpu.metax-tech.com"].type != "vfio"'
                }
            }
        ],
        "extendedResourceName": "metax-tech.com/gpu",
    }
    assert vfio["spec"] == {
        "selectors": [
            {
                "cel": {
                    "expression": 'device.driver == "gpu.metax-tech.com" && '
                    'device.attributes["gpu.metax-tech.com"].type == "vfio"'
                }
            }
        ]
    }
    for obj in (gpu, vfio):
        assert obj["metadata"]["labels"][workloads.COMPONENT_LABEL] == "draDriver"
        assert obj["metadata"]["labels"][workloads.MANAGED_BY_LABEL] == workloads.MANAGED_BY
    assert supporting.cluster_objects(Component.DRA_DRIVER) == dra_objects.device_classes() == [gpu, vfio]
    assert (classes.ATTRIBUTE_DOMAIN, classes.TYPE_ATTRIBUTE, classes.TYPES) == (
        "gpu.metax-tech.com",
        "type",
        ("gpu", "vf", "vfio"),
    )


def test_the_dra_driver_account_is_least_privilege_and_the_operator_holds_all_of_it() -> None:
    rules = rbac.component_rules("metax-dra-driver")
    granted = {(r.group, res): set(r.verbs) for r in rules.cluster for res in r.resources if not r.names}
    assert granted == {
        ("resource.k8s.io", "resourceslices"): {"get", "list", "watch", "create", "update", "patch", "delete"},
        ("resource.k8s.io", "resourceclaims"): {"get", "list", "watch"},
        ("resource.k8s.io", "deviceclasses"): {"get", "list", "watch"},
        ("", "nodes"): {"get", "list", "watch", "patch"},
        ("", "events"): {"create", "patch"},
        ("events.k8s.io", "events"): {"create", "patch"},
    }
    operator = rbac.operator_rules()
    held = {(r.group, res, r.names): set(r.verbs) for r in operator.cluster for res in r.resources}
    for (group, resource), verbs in granted.items():
        assert verbs <= held[(group, resource, ())], (group, resource)
    # the operator writes the two DeviceClasses by name, and may list/watch/create them
    names = tuple(sorted((DRIVER, VFIO_DRIVER)))
    assert held[("resource.k8s.io", "deviceclasses", names)] >= {"get", "create", "update", "patch", "delete"}
    assert held[("resource.k8s.io", "deviceclasses", ())] >= {"list", "watch", "create"}
