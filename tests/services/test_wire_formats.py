"""One owner per cross-process format, and what its writer writes its reader reads (issue 20, `metax_core.wire`).

Aspects:
- every ``metax-tech.com/...`` name, the product's name (``part-of``), the ``app.kubernetes.io/`` label keys it
  writes, the two ConfigMaps' names and data keys
  are spelled once, in `metax_core` (an AST scan of the product's packages: a second spelling anywhere fails);
- no service emits an Event with a reason written in place (a literal or an f-string);
- every Event reason is documented;
- per format, the writer's real code feeds the reader's real code: gpu-label's labels select the GPU
  components' DaemonSets; vfio-manager's ``gpu-vfio`` annotation reads back; driver-manager's labels are the
  keys it owns and removes; the agents publish readiness under the names gpu-device waits for; a stamped
  driver DaemonSet's revision is the one its pods are compared with; driver-config as the operator creates it
  and as rendered from a config reads back the same.
(metax-vfio-config, the rollout-confirm annotation and render's ConfigMaps: test_vfio_config_map.py,
test_cli_rollout_confirm.py, test_cli.py.)
"""

from __future__ import annotations

import ast
import functools
import pathlib
import re
from collections.abc import Callable, Iterator

from metax_core import components
from metax_core.cluster import configmaps, host_paths, workloads
from metax_core.components import Component
from metax_core.inventory import DriverVersion, ModuleState, PciAddress, PciFunction
from metax_core.node import driver_config, labels, vfio, vfio_config_map
from metax_core.rollout import fleet as rollout_fleet
from metax_core.spec import names, validation, vfio_config
from metax_core.wire import event_reasons, meta
from services.driver_manager import agent as driver_agent
from services.gpu_device import config as device_config
from services.gpu_label import agent as label_agent
from services.vfio_manager import agent as vfio_agent

ROOT = pathlib.Path(__file__).resolve().parents[2]
PRODUCT = ("metax_core", "services", "metax_k8s", "metax_hw", "metax_hw_fake", "metax_dev")
SPEC = validation.parse({"registry": names.REGISTRY_EXAMPLE, "driver": {"payload": {"version": "2.14.6"}}})


def _is_prefix(node: ast.expr) -> bool:
    return (isinstance(node, ast.Name) and node.id == "PREFIX") or (
        isinstance(node, ast.Attribute) and node.attr == "PREFIX"
    )


@functools.cache
def _strings(path: pathlib.Path) -> tuple[tuple[str, int], ...]:
    return tuple(_each_string(path))


def _each_string(path: pathlib.Path) -> Iterator[tuple[str, int]]:
    """Every string a module spells that is not a docstring, with its line: its constants, ``PREFIX + "x"`` folded
    to ``metax-tech.com/x``, and an f-string's text up to its first placeholder other than ``{PREFIX}`` (so
    ``f"/dev/vfio/{group}"`` spells ``/dev/vfio/``)."""
    tree = ast.parse(path.read_text(), str(path))
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    attribute_docs = {  # the string right after an assignment documents it
        id(b.value)
        for node in ast.walk(tree)
        if isinstance(getattr(node, "body", None), list)
        for a, b in zip(node.body[:-1], node.body[1:], strict=False)  # type: ignore[attr-defined]
        if isinstance(a, (ast.Assign, ast.AnnAssign)) and isinstance(b, ast.Expr) and isinstance(b.value, ast.Constant)
    }
    folded: set[int] = set()
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.BinOp)
            and isinstance(node.op, ast.Add)
            and _is_prefix(node.left)
            and isinstance(node.right, ast.Constant)
            and isinstance(node.right.value, str)
        ):
            folded.add(id(node.right))
            yield meta.PREFIX + node.right.value, node.lineno
        elif isinstance(node, ast.JoinedStr):
            text = []
            for part in node.values:
                if isinstance(part, ast.Constant):
                    text.append(str(part.value))
                elif isinstance(part, ast.FormattedValue) and _is_prefix(part.value):
                    text.append(meta.PREFIX)
                else:
                    break
            folded |= {id(part) for part in node.values}
            if text:
                yield "".join(text), node.lineno
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and id(node) not in docstrings | attribute_docs | folded
        ):
            yield node.value, node.lineno


def _product_modules() -> Iterator[pathlib.Path]:
    for package in PRODUCT:
        for path in sorted((ROOT / package).rglob("*.py")):
            if "_pb2" not in path.name:  # generated from the kubelet's protos
                yield path


def _spelled_where(matches: Callable[[str], object]) -> dict[str, list[str]]:
    """Every string the product spells that ``matches``, with where."""
    found: dict[str, list[str]] = {}
    for path in _product_modules():
        for value, line in _strings(path):
            if matches(value):
                found.setdefault(value, []).append(f"{path.relative_to(ROOT)}:{line}")
    return found


def _spellings(wanted: set[str]) -> dict[str, list[str]]:
    return {w: _spelled_where(wanted.__contains__).get(w, []) for w in wanted}


def test_every_product_name_is_spelled_once_in_the_core() -> None:
    names = set(_spelled_where(lambda v: v.startswith(meta.PREFIX)))  # the prefix itself included
    names.add(meta.PRODUCT)  # Event reasons: see test_no_service_writes_an_event_reason_in_place
    names |= {meta.APP_LABEL, meta.MANAGED_BY_LABEL, meta.PART_OF_LABEL}  # the CRD's part-of was spelled apart
    names |= {driver_config.CONFIGMAP_NAME, *driver_config.DATA_KEYS, vfio_config_map.NAME, vfio_config_map.KEY}
    selectors = [  # a label selector written in place repeats a label's name and its value
        f"{path.relative_to(ROOT)}:{line}"
        for package in PRODUCT
        for path in sorted((ROOT / package).rglob("*.py"))
        for value, line in _strings(path)
        if any(value.startswith(label + "=") for label in (meta.MANAGED_BY_LABEL, meta.PART_OF_LABEL))
    ]
    assert selectors == []
    twice = {name: where for name, where in _spellings(names).items() if len(where) > 1}
    assert twice == {}
    outside = {name: where for name, where in _spellings(names).items() if not where[0].startswith("metax_core/")}
    assert outside == {}


ENV_NAME = re.compile(r"METAX_[A-Z0-9_]+")
EVERY_COMPONENT = validation.parse(
    {"registry": names.REGISTRY_EXAMPLE, **{c.value: {"deploy": True} for c in Component}}
    | {"driver": {"deploy": True, "payload": {"version": "2.14.6"}}}
)


def test_every_environment_variable_is_spelled_once() -> None:
    """Issue 43 item 1: a variable one process sets and another reads (the operator's render, the chart, the dev
    tooling's stand-ins and an agent's settings) is named in one place, which both import; those the operator
    renders into the agents' pods are the wire's (`metax_core.wire.agent_env`)."""
    found = _spelled_where(ENV_NAME.fullmatch)
    assert {name: where for name, where in found.items() if len(where) > 1} == {}
    rendered = {
        e["name"]
        for o in workloads.render(EVERY_COMPONENT).objects
        if o["kind"] in workloads.WORKLOAD_KINDS
        for c in (
            *o["spec"]["template"]["spec"]["containers"],
            *o["spec"]["template"]["spec"].get("initContainers", ()),
        )
        for e in c.get("env", ())
        if ENV_NAME.fullmatch(e["name"])
    }
    assert len(rendered) >= 15  # the scan sees the render
    assert {n: found[n][0] for n in rendered if not found[n][0].startswith("metax_core/wire/")} == {}


UNIVERSAL_PATHS = {"/dev/null"}
"""Paths no process of ours names for another: every Linux has them."""


def _host_path(value: str) -> bool:
    return value not in UNIVERSAL_PATHS and any(
        value == root or value.startswith(root + "/") for root in host_paths.ALLOWED_HOST_PATHS
    )


def test_every_host_path_is_spelled_once() -> None:
    """Issue 43 item 1: a host path is a name two processes agree on (the operator mounts it, an agent looks there,
    the kubelet or a runtime reads it); the mounted directories are the wire's (`metax_core.wire.host`), a file
    under one is spelled by its owner, once."""
    found = _spelled_where(_host_path)
    assert "/var/run/cdi" in found  # the scan sees them
    assert {path: where for path, where in found.items() if len(where) > 1} == {}
    assert {
        p: found[p][0] for p in host_paths.ALLOWED_HOST_PATHS if not found[p][0].startswith("metax_core/wire/host.py")
    } == {}


def _event_calls() -> Iterator[tuple[str, ast.Call]]:
    for path in sorted((ROOT / "services").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("emit", "event")
            ):
                yield f"{path.relative_to(ROOT)}:{node.lineno}", node


def test_no_service_writes_an_event_reason_in_place() -> None:
    in_place = []
    calls = 0
    for where, call in _event_calls():
        reasons = [k.value for k in call.keywords if k.arg == "reason"]
        if call.func.attr == "event" and call.args:  # type: ignore[attr-defined]
            reasons.append(call.args[0])
        calls += bool(reasons)
        in_place += [where for r in reasons if isinstance(r, (ast.Constant, ast.JoinedStr))]
    assert calls >= 15  # the scan sees the emitters (operator, applier, agents)
    assert in_place == []


def test_every_event_reason_is_documented() -> None:
    docs = "".join(p.read_text() for p in (ROOT / "docs").glob("*.md"))
    assert [r for r in event_reasons.ALL if f"`{r}`" not in docs] == []
    assert "DriverRollout<StepState>" in docs


def test_gpu_labels_select_the_gpu_components_daemonsets() -> None:
    gpu = PciFunction(address=PciAddress("0000:01:00.0"), vendor_id=0x9999, device_id=0x4000, driver="metax")
    node = labels.NodeInventory(
        node_name="n1", functions=(gpu,), module=ModuleState(name="metax", version=DriverVersion("2.18.0"))
    )
    written = {k: v for k, v in labels.node_labels(node).items() if v is not None}
    for manifest in workloads.render(SPEC).objects:
        if manifest["kind"] == "DaemonSet":
            selector = manifest["spec"]["template"]["spec"].get("nodeSelector") or {}
            assert selector.items() <= written.items(), manifest["metadata"]["name"]
    without = labels.node_labels(labels.NodeInventory(node_name="n2", functions=()))
    assert without[workloads.GPU_NODE_LABEL] is None  # a node without GPUs loses the label the selectors need


def test_the_gpu_vfio_annotation_reads_back() -> None:
    functions = [
        PciFunction(address=PciAddress(f"0000:0{n}:00.0"), vendor_id=0x9999, device_id=0x4000, driver=d)
        for n, d in ((1, "vfio-pci"), (2, "metax"), (3, "vfio-pci"))
    ]
    result = vfio.results(functions, vfio_config.parse_gpus("0,1,2"))
    assert vfio.parse_annotation(vfio.annotation_value(result)) == result == {0: True, 1: False, 2: True}
    assert vfio.parse_annotation(None) == {}


def test_driver_managers_labels_are_the_ones_it_owns() -> None:
    owned = (labels.DRIVER_READY, labels.DRIVER_VERSION, labels.FIRMWARE_FLASHING)
    assert driver_agent.OWNED_LABELS == labels.DRIVER_LABELS == owned
    assert not set(labels.DRIVER_LABELS) & set(labels.OWNED_LABELS)  # gpu-label never removes them


def test_agents_publish_readiness_under_the_names_gpu_device_waits_for() -> None:
    published = {
        driver_agent.COMPONENT: Component.DRIVER,
        label_agent.COMPONENT: Component.GPU_LABEL,
        vfio_agent.COMPONENT: Component.VFIO_MANAGER,
    }
    assert {name: components.signal(c) for name, c in published.items()} == {name: name for name in published}
    waited = set(device_config.default_required())
    assert {driver_agent.COMPONENT, label_agent.COMPONENT} <= waited
    assert waited <= {info.signal for info in components.CATALOGUE}


def test_a_stamped_driver_daemonset_and_its_pods_agree_on_the_revision() -> None:
    ds = next(
        o for o in workloads.render(SPEC).objects if o["kind"] == "DaemonSet" and "driver" in o["metadata"]["name"]
    )
    stamped = rollout_fleet.stamped(ds, SPEC.driver)
    template = stamped["spec"]["template"]
    pod = {"metadata": {"annotations": dict(template["metadata"]["annotations"])}}
    assert not rollout_fleet.behind(stamped, [pod])
    assert rollout_fleet.behind(stamped, [{"metadata": {"annotations": {meta.DRIVER_REVISION: "other"}}}])
    assert stamped["metadata"]["annotations"][meta.DRIVER_SPEC]


def test_driver_config_reads_back_what_the_operator_and_an_edit_write() -> None:
    created = configmaps.driver_config_map("ns")
    assert driver_config.parse(created["data"]) == driver_config.DriverConfig()
    edited = driver_config.parse(
        {driver_config.NODE_VFNUMS: "nodes:\n  n1:\n    vfnum: 4\n", driver_config.MODULE_PARAMS: "gpu_model: 2\n"}
    )
    assert driver_config.parse(driver_config.render(edited)) == edited
    assert dict(edited.node_vfnums) == {"n1": 4}
