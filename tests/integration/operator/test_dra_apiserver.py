"""R-DRA's operator side on the real control plane (Kubernetes 1.36, ``resource.k8s.io/v1``; docs/dra.md).

The operator (a local process) applies what it renders for ``draDriver.deploy: true``: the real API server
stores the DeviceClasses, compiling their CEL selectors on create (a broken selector is refused by the same
server, so the check is real), and the dra-driver DaemonSet with its ServiceAccount and RBAC. The real
DaemonSet controller then splits three GPU kwok nodes — labelled ``dra``, ``device-plugin`` and unlabelled —
between gpu-device and dra-driver as the setting says (``desiredNumberScheduled`` and the nodes the pods are
bound to), for either default; switching DRA off prunes the DaemonSet and the classes and gives gpu-device
every GPU node again; deleting ``cluster-operator`` removes the classes (R-INSTALL). The permissions
themselves, granted as the operator's own account, are checked in tests/integration/chart/test_least_privilege.py.
Also: the examples (examples/dra-gpus.yaml) are accepted by the server (dry run), and a bad
``defaultAllocation`` is refused by the CRD schema naming the field.
"""

from __future__ import annotations

import contextlib
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from operator_helpers import NS, Env, cluster_operator, wait_for

from metax_core.cluster import rbac
from metax_core.dra import DRIVER, classes, slices
from metax_core.errors import ClusterError, InvalidSpec, NotFound
from metax_core.inventory import METAX_VENDOR_ID, PciAddress, PciFunction
from metax_core.node import allocation
from metax_core.spec import validation
from metax_dev.controlplane import cluster as controlplane

pytestmark = pytest.mark.integration

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
GPU_DEVICE, DRA = "metax-gpu-device", "metax-dra-driver"


def _spec(**dra: Any) -> dict[str, Any]:
    return {**cluster_operator()["spec"], "draDriver": dra}


def _label(env: Env, node: str, value: str | None) -> None:
    env.api.merge_patch("v1", "Node", node, {"metadata": {"labels": {allocation.LABEL: value}}})


def _device_class(env: Env, name: str) -> dict[str, Any] | None:
    try:
        return env.api.get(classes.API_VERSION, classes.KIND, name)
    except NotFound:
        return None


def _split(env: Env) -> dict[str, tuple[int, set[str]]]:
    """Per DaemonSet: desiredNumberScheduled, and the nodes its live pods are bound to."""
    found = {}
    for name, component in ((GPU_DEVICE, "gpuDevice"), (DRA, "draDriver")):
        ds = env.ds(name)
        desired = ((ds or {}).get("status") or {}).get("desiredNumberScheduled", 0)
        nodes = {
            p["spec"].get("nodeName")
            for p in env.pods(component)
            if not p["metadata"].get("deletionTimestamp") and p["spec"].get("nodeName")
        }
        found[name] = (desired, nodes)
    return found


def _publish(env: Env, node: str) -> None:
    """A slice as the driver publishes it (`slices.plan_slices`, the writer's own function) for ``node``."""
    uid = env.api.get("v1", "Node", node)["metadata"]["uid"]
    function = PciFunction(
        address=PciAddress("0000:09:00.0"), vendor_id=METAX_VENDOR_ID, device_id=0x4000, driver="metax"
    )
    devices = slices.published_devices(slices.NodeFacts(node, (function,)))
    for body in slices.plan_slices(slices.NodeRef(node, uid), devices, []).apply:
        env.api.apply(body, field_manager="metax-dra-driver")
    assert _slices(env)


def _slices(env: Env) -> list[dict[str, Any]]:
    return list(env.api.list(slices.API_VERSION, slices.KIND, field_selector=f"spec.driver={DRIVER}").items)


@pytest.fixture
def three_gpu_nodes(operator_env: Env, control_plane: controlplane.ControlPlane) -> dict[str, str | None]:
    """Every node of the session a GPU node, labelled dra / device-plugin / not at all."""
    names = sorted(control_plane.node_names)[:3]
    assert len(names) == 3
    operator_env.label_gpu_nodes(names)
    operator_env.gpu_nodes, operator_env.other_nodes = names, []
    wanted: dict[str, str | None] = dict(zip(names, ("dra", "device-plugin", None), strict=True))
    for node, value in wanted.items():
        _label(operator_env, node, value)
    yield wanted  # type: ignore[misc]
    for node in names:
        with contextlib.suppress(ClusterError):
            _label(operator_env, node, None)


def test_the_operator_splits_the_gpu_nodes_between_the_device_plugin_and_dra(
    operator_env: Env, three_gpu_nodes: dict[str, str | None]
) -> None:
    env = operator_env
    by_value = {value: node for node, value in three_gpu_nodes.items()}
    env.api.apply(cluster_operator(_spec(deploy=True)), field_manager="helm")
    env.start_operator()

    # The classes are stored as rendered: the API server compiled their CEL (and keeps extendedResourceName).
    for name in (classes.GPU_CLASS, classes.VFIO_CLASS):
        stored = wait_for(f"DeviceClass {name}", lambda n=name: _device_class(env, n))
        assert stored["spec"]["selectors"] == [{"cel": {"expression": classes.SELECTORS[name]}}]
    assert _device_class(env, classes.GPU_CLASS)["spec"]["extendedResourceName"] == "metax-tech.com/gpu"  # type: ignore[index]
    assert "extendedResourceName" not in _device_class(env, classes.VFIO_CLASS)["spec"]  # type: ignore[index]
    assert env.api.get("v1", "ServiceAccount", DRA, NS)
    role = env.api.get("rbac.authorization.k8s.io/v1", "ClusterRole", rbac.role_name(DRA, rbac.Scope.CLUSTER))
    assert {"resourceslices", "resourceclaims", "deviceclasses"} <= {
        r for rule in role["rules"] for r in rule["resources"]
    }

    # default devicePlugin: only the node labelled dra goes to the DRA driver
    expected = {GPU_DEVICE: (2, {by_value["device-plugin"], by_value[None]}), DRA: (1, {by_value["dra"]})}
    wait_for("split with default devicePlugin", lambda: _split(env) == expected, timeout=120)

    # default dra: only the node labelled device-plugin stays with the device plugin
    env.api.apply(cluster_operator(_spec(deploy=True, defaultAllocation="dra")), field_manager="helm")
    expected = {GPU_DEVICE: (1, {by_value["device-plugin"]}), DRA: (2, {by_value["dra"], by_value[None]})}
    wait_for("split with default dra", lambda: _split(env) == expected, timeout=120)

    # an invalid label value means the default (dra here)
    _label(env, by_value["device-plugin"], "Device-Plugin")
    expected = {GPU_DEVICE: (0, set()), DRA: (3, set(three_gpu_nodes))}
    wait_for("an invalid label means the default", lambda: _split(env) == expected, timeout=120)

    # DRA off: the DaemonSet, the classes and the driver's slices go (nobody would prepare those devices),
    # gpu-device serves every GPU node as before DRA existed
    _publish(env, by_value["dra"])
    env.api.apply(cluster_operator(_spec(deploy=False, defaultAllocation="dra")), field_manager="helm")
    wait_for("the driver's slices withdrawn", lambda: not _slices(env))
    wait_for("dra-driver pruned", lambda: DRA not in env.daemonsets())
    wait_for("classes pruned", lambda: not any(_device_class(env, n) for n in classes.SELECTORS))
    wait_for("gpu-device everywhere", lambda: _split(env)[GPU_DEVICE] == (3, set(three_gpu_nodes)), timeout=120)
    assert "affinity" not in env.ds(GPU_DEVICE)["spec"]["template"]["spec"]  # type: ignore[index]

    # on again, then uninstall: the finalizer removes the classes with everything else
    env.api.apply(cluster_operator(_spec(deploy=True)), field_manager="helm")
    wait_for("classes back", lambda: all(_device_class(env, n) for n in classes.SELECTORS))
    _publish(env, by_value[None])
    env.api.delete(cluster_operator()["apiVersion"], "ClusterOperator", "cluster-operator")
    wait_for("classes removed on uninstall", lambda: not any(_device_class(env, n) for n in classes.SELECTORS))
    assert _slices(env) == []
    labels = env.api.get("v1", "Node", by_value["dra"])["metadata"]["labels"]
    assert labels.get(allocation.LABEL) == "dra"  # the administrator's label stays


def test_the_api_server_compiles_the_selectors_and_refuses_a_broken_one(operator_api: Any) -> None:
    api = operator_api
    for name, expression in classes.SELECTORS.items():
        body = {"apiVersion": classes.API_VERSION, "kind": classes.KIND, "metadata": {"name": name}}
        body["spec"] = {"selectors": [{"cel": {"expression": expression}}]}
        assert api.apply(body, field_manager="dra-tests", dry_run=True)["metadata"]["name"] == name
    broken = classes.SELECTORS[classes.GPU_CLASS].replace("==", "===", 1)
    body = {"apiVersion": classes.API_VERSION, "kind": classes.KIND, "metadata": {"name": "broken.example.com"}}
    body["spec"] = {"selectors": [{"cel": {"expression": broken}}]}
    with pytest.raises(ClusterError, match="compilation failed|Syntax error"):
        api.apply(body, field_manager="dra-tests", dry_run=True)


def test_the_examples_are_accepted_by_the_api_server(operator_api: Any) -> None:
    documents = [d for d in yaml.safe_load_all((EXAMPLES / "dra-gpus.yaml").read_text()) if d]
    assert [d["kind"] for d in documents] == ["ResourceClaimTemplate", "Pod", "Pod"]
    for document in documents:
        document["metadata"]["namespace"] = "default"
        stored = operator_api.apply(document, field_manager="dra-tests", dry_run=True)
        assert stored["metadata"]["name"] == document["metadata"]["name"]
    template = documents[0]["spec"]["spec"]["devices"]
    assert template["constraints"] == [{"requests": ["gpus"], "matchAttribute": "resource.kubernetes.io/pcieRoot"}]
    operator = yaml.safe_load((EXAMPLES / "cluster-operator-dra.yaml").read_text())
    assert operator_api.apply(operator, field_manager="dra-tests", dry_run=True)["spec"]["draDriver"]["deploy"] is True


def test_a_bad_default_allocation_is_refused_naming_the_field(operator_api: Any) -> None:
    body = cluster_operator(_spec(deploy=True, defaultAllocation="DRA"))
    with pytest.raises(ClusterError, match=re.escape("spec.draDriver.defaultAllocation")) as caught:
        operator_api.apply(body, field_manager="dra-tests", dry_run=True)
    assert '"devicePlugin", "dra"' in caught.value.detail
    with pytest.raises(InvalidSpec, match=re.escape("draDriver.defaultAllocation: must be one of devicePlugin, dra")):
        validation.parse(body)
