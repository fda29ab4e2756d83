"""Render → env → settings: each node agent's DaemonSet, as `metax_core.cluster.workloads` renders it, starts
its agent with the settings the spec asked for (issue 9 item 7). Downward-API variables are filled as kubelet
would; every rendered variable must be one the agent reads (nothing rendered in vain, nothing misspelt).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import attrs
import pytest

from metax_core import components
from metax_core.cluster import host_paths, payloads, workloads
from metax_core.runtime import handler
from metax_core.spec import validation
from metax_core.wire import agent_env
from services._agent import settings as agent_settings
from services.container_edit import config as edit_config
from services.container_runtime import config as runtime_config
from services.data_exporter import config as data_exporter_config
from services.dra_driver import config as dra_driver_config
from services.driver_manager import config as driver_config
from services.gpu_device import config as gpu_device_config
from services.gpu_label import config as gpu_label_config
from services.maca import config as maca_config
from services.vfio_manager import config as vfio_config

VALUES: dict[str, Any] = {
    "registry": "reg.example/metax",
    "driver": {
        "deployPolicy": "PreferNewer",
        "payload": {"version": "2.14.6"},
        "fwUpgradePolicy": "PreferCloud",
        "fwEnableVirt": True,
    },
    "gpuDevice": {"healthyInterval": 7},
    "vfioManager": {"deploy": True},
    "maca": {"payload": {"images": ["maca-c500:2.18.0.3-ubuntu22.04-amd64", "maca-c500:2.9.1"]}},
    "exporter": {"deploy": True, "sampleInterval": 3, "exportedPodLabels": True},
    "draDriver": {"deploy": True},
}

LOADERS: Mapping[str, tuple[Callable[..., Any], type[Any]]] = {
    "metax-gpu-label": (gpu_label_config.from_env, gpu_label_config.Settings),
    "metax-driver": (driver_config.from_env, driver_config.Settings),
    "metax-vfio-manager": (vfio_config.from_env, vfio_config.Settings),
    "metax-gpu-device": (gpu_device_config.from_env, gpu_device_config.Settings),
    "metax-container-runtime": (runtime_config.from_env, runtime_config.Settings),
    "metax-maca": (maca_config.from_env, maca_config.Settings),
    "metax-data-exporter": (data_exporter_config.from_env, data_exporter_config.Settings),
    "metax-dra-driver": (dra_driver_config.from_env, dra_driver_config.Settings),
}
DOWNWARD = {"spec.nodeName": "gpu-node-7", "metadata.namespace": "metax-operator"}


def rendered_env(name: str) -> dict[str, str]:
    objects = workloads.render(validation.parse(VALUES)).objects
    workload = next(o for o in objects if o["metadata"]["name"] == name and o["kind"] in ("DaemonSet", "Deployment"))
    env: dict[str, str] = {}
    for item in workload["spec"]["template"]["spec"]["containers"][0]["env"]:
        if "value" in item:
            env[item["name"]] = item["value"]
        else:
            env[item["name"]] = DOWNWARD[item["valueFrom"]["fieldRef"]["fieldPath"]]
    return env


def variables(cls: type[Any]) -> set[str]:
    return {v for f in attrs.fields(cls) if (v := agent_settings.variable(f)) is not None}


@pytest.mark.parametrize("name", sorted(LOADERS))
def test_every_rendered_variable_is_read_by_the_agent(name: str) -> None:
    loader, cls = LOADERS[name]
    env = rendered_env(name)
    assert set(env) <= variables(cls), f"rendered but not read: {set(env) - variables(cls)}"
    settings = loader(env)
    assert settings.node_name == "gpu-node-7"
    assert str(settings.host_root) == host_paths.HOST_ROOT_IN_CONTAINER
    assert settings.namespace == "metax-operator"


def test_driver_manager_gets_the_driver_section() -> None:
    s = driver_config.from_env(rendered_env("metax-driver"))
    assert (s.deploy_policy.value, s.payload_version) == ("PreferNewer", "2.14.6")
    assert (s.fw_upgrade_policy.value, s.fw_enable_virt) == ("PreferCloud", True)
    assert s.driver_config == workloads.DRIVER_CONFIG_MAP
    assert s.required_components == ("gpu-label", "container-runtime")
    assert s.probe_file == workloads.PROBE_FILE


def test_container_runtime_runs_the_hosts_programs_and_gets_its_probe() -> None:
    s = runtime_config.from_env(rendered_env("metax-container-runtime"))
    assert s.host_namespaces and s.probe_file == workloads.PROBE_FILE
    assert s.required_components == ("gpu-label",)


def test_vfio_manager_and_gpu_label_get_their_config() -> None:
    assert vfio_config.from_env(rendered_env("metax-vfio-manager")).vfio_config == workloads.VFIO_CONFIG_MAP
    assert gpu_label_config.from_env(rendered_env("metax-gpu-label")).required_components == ()


def test_gpu_device_waits_for_what_the_dependency_graph_says() -> None:
    s = gpu_device_config.from_env(rendered_env("metax-gpu-device"))
    assert s.healthy_interval == 7.0
    deployed = workloads.render(validation.parse(VALUES)).plan.deploy
    wanted = components.requirements(components.Component.GPU_DEVICE, deployed)
    assert s.required_components == tuple(components.BY_COMPONENT[c].signal for c in wanted)


def test_maca_gets_its_payload_images_in_order_and_sees_runc_state_through_host_pid() -> None:
    s = maca_config.from_env(rendered_env("metax-maca"))
    assert s.payload_images == (
        "reg.example/metax/maca-c500:2.18.0.3-ubuntu22.04-amd64",
        "reg.example/metax/maca-c500:2.9.1",
    )
    assert str(s.payload_dir) == payloads.PAYLOAD_DIR
    assert str(s.state_root) == "/proc/1/root"
    assert s.probe_file == workloads.PROBE_FILE


def test_data_exporter_gets_its_sampling_and_label_settings() -> None:
    s = data_exporter_config.from_env(rendered_env("metax-data-exporter"))
    assert (s.sample_interval, s.exported_pod_labels, s.port) == (3.0, True, workloads.EXPORTER_PORT)
    deployed = workloads.render(validation.parse(VALUES)).plan.deploy
    wanted = components.requirements(components.Component.EXPORTER, deployed)
    assert s.required_components == tuple(components.BY_COMPONENT[c].signal for c in wanted)


def test_settings_render_back_to_the_same_environment() -> None:
    s = driver_config.from_env(rendered_env("metax-driver"))
    assert driver_config.from_env(agent_settings.render_env(s)) == s


COMPONENT_OF = {
    "metax-gpu-label": components.Component.GPU_LABEL,
    "metax-driver": components.Component.DRIVER,
    "metax-vfio-manager": components.Component.VFIO_MANAGER,
    "metax-gpu-device": components.Component.GPU_DEVICE,
    "metax-container-runtime": components.Component.RUNTIME,
    "metax-maca": components.Component.MACA,
    "metax-data-exporter": components.Component.EXPORTER,
    "metax-dra-driver": components.Component.DRA_DRIVER,
}


@pytest.mark.parametrize("name", sorted(LOADERS))
def test_every_declared_variable_is_a_setting_of_the_agent(name: str) -> None:
    """A component's declared `env` is the render's only table: each variable it declares for a component is a field of
    that agent's settings class (issue 20 item 8: no if-chain per component in workloads)."""
    _, cls = LOADERS[name]
    declared = {v.name for v in components.BY_COMPONENT[COMPONENT_OF[name]].env}
    assert declared <= variables(cls), f"declared but not read: {declared - variables(cls)}"
    assert set(agent_env.DOWNWARD) <= variables(cls)


def test_the_edit_service_runs_beside_maca_and_reads_what_it_is_given() -> None:
    objects = workloads.render(validation.parse(VALUES)).objects
    pod = next(o for o in objects if o["metadata"]["name"] == "metax-maca" and o["kind"] == "DaemonSet")
    edit = pod["spec"]["template"]["spec"]["containers"][1]
    assert (edit["name"], edit["command"]) == (workloads.EDIT_SERVICE_CONTAINER, ["metax-container-edit"])
    mounts = {m["mountPath"]: m["readOnly"] for m in edit["volumeMounts"]}
    assert mounts == {
        "/tmp": False,  # its own /tmp emptyDir (its probe file), not the agent's
        "/host/run/metax": False,
        "/host/var/lib/metax": True,
        "/host/dev": True,
        "/host/var/run/cdi": True,
    }
    env = {e["name"]: e["value"] for e in edit["env"]}
    assert set(env) <= variables(edit_config.Settings)
    s = edit_config.from_env(env)
    assert (str(s.host_root), s.socket) == (host_paths.HOST_ROOT_IN_CONTAINER, handler.EDIT_SOCKET_HOST_PATH)
    assert s.probe_file == workloads.PROBE_FILE  # its own container's /tmp: present while it listens
    assert edit["readinessProbe"] == pod["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]
