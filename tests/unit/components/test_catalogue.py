"""One declaration per component (issue 43 item 2): every table is derived from it, and what lives outside the core
agrees with it.

Aspects, for every component and workload:
- the spec: each component names a section of ClusterOperatorSpec, every section is claimed once, under its key;
- the derived tables: host paths (within the seed's list, 000 §1.3.2), ServiceAccounts and their Roles, the
  container's environment (its declared variables and no others), the readiness probe, the uninstall protocol's
  answering agents;
- outside the core: the console script is in pyproject's ``[project.scripts]`` and its service package in the
  import-linter list of independent services; the image of that name runs that script (images/images.toml);
  the chart's values have the component's section.
"""

from __future__ import annotations

import pathlib
import tomllib
import typing

import attrs
import pytest
import yaml

from metax_core import components
from metax_core.cluster import host_paths, rbac, workloads
from metax_core.components import Component, ComponentInfo, Workload, WorkloadKind
from metax_core.node import uninstall
from metax_core.spec import converter, names, validation
from metax_core.spec import model as spec
from metax_core.wire import agent_env

ROOT = pathlib.Path(__file__).resolve().parents[3]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
IMAGES = tomllib.loads((ROOT / "images" / "images.toml").read_text())
VALUES = yaml.safe_load((ROOT / "charts" / "metax-operator" / "values.yaml").read_text())
SPEC = validation.parse(
    {"registry": names.REGISTRY_EXAMPLE, **{c.value: {"deploy": True} for c in Component}}
    | {"driver": {"deploy": True, "payload": {"version": "2.14.6"}}}
)
RENDERED = workloads.render(SPEC).objects
INFOS = list(components.CATALOGUE)
WORKLOADS = [(info, w) for info in INFOS for w in info.workloads]


def _ids(x: object) -> str:
    if isinstance(x, ComponentInfo):
        return x.title
    return x.name if isinstance(x, Workload) else str(x)


def _rendered(name: str, kind: str) -> typing.Mapping[str, typing.Any]:
    return next(o for o in RENDERED if o["kind"] == kind and o["metadata"]["name"] == name)


def test_every_component_is_declared_once() -> None:
    assert sorted(info.component.value for info in INFOS) == sorted(c.value for c in Component)
    names_ = [w.name for _, w in WORKLOADS]
    assert len(names_) == len(set(names_)), "a workload name is declared twice"


def test_every_spec_section_is_claimed_by_one_component_under_its_key() -> None:
    sections = typing.get_args(spec.ComponentSpec)
    fields = {f.name for f in attrs.fields(spec.ClusterOperatorSpec) if isinstance(getattr(SPEC, f.name), sections)}
    assert sorted(info.spec_field for info in INFOS) == sorted(fields)
    for info in INFOS:
        assert converter.camel_case(info.spec_field) == info.component.value
        assert components.component_spec(SPEC, info.component) is getattr(SPEC, info.spec_field)
    in_spec_order = [f.name for f in attrs.fields(spec.ClusterOperatorSpec) if f.name in fields]
    assert [k for k, _ in validation._components(SPEC)] == [converter.camel_case(f) for f in in_spec_order]


@pytest.mark.parametrize(("info", "workload"), WORKLOADS, ids=_ids)
def test_host_paths_are_the_declared_ones_and_within_the_seeds_list(info: ComponentInfo, workload: Workload) -> None:
    assert {p for p, _ in workload.host_paths} <= host_paths.ALLOWED_HOST_PATHS
    assert host_paths.HOST_PATHS.get(workload.name, ()) == workload.host_paths
    manifest = _rendered(workload.name, workload.kind.value)
    mounted = {
        v["hostPath"]["path"] for v in manifest["spec"]["template"]["spec"].get("volumes", ()) if "hostPath" in v
    }
    assert mounted == {p for p, _ in workload.host_paths}
    if workload.host_paths:
        assert workload.kind is WorkloadKind.DAEMON_SET, "only node agents see the host"


@pytest.mark.parametrize(("info", "workload"), WORKLOADS, ids=_ids)
def test_service_accounts_and_roles_are_the_declared_access(info: ComponentInfo, workload: Workload) -> None:
    pod = _rendered(workload.name, workload.kind.value)["spec"]["template"]["spec"]
    accounts = {o["metadata"]["name"] for o in rbac.objects(info.component) if o["kind"] == "ServiceAccount"}
    if workload.access is None:
        assert "serviceAccountName" not in pod
        assert workload.name not in rbac.COMPONENT_RULES
        assert workload.name not in accounts
        return
    assert pod["serviceAccountName"] == workload.name
    assert workload.name in accounts
    declared = rbac.COMPONENT_RULES[workload.name]
    assert (declared.cluster, declared.namespace, declared.events) == (
        workload.access.cluster,
        workload.access.namespace,
        workload.access.events,
    )
    granted = rbac.operator_rules()  # the operator holds everything it grants (RBAC escalation prevention)
    for rule in workload.access.cluster:
        for resource in rule.resources:
            assert any(
                g.group == rule.group and resource in g.resources and set(rule.verbs) <= set(g.verbs)
                for g in granted.cluster
            ), (workload.name, rule)


COMMON = {agent_env.NODE_NAME, agent_env.LOG_LEVEL, agent_env.HOST_ROOT, agent_env.REQUIRED_COMPONENTS}


@pytest.mark.parametrize(("info", "workload"), WORKLOADS, ids=_ids)
def test_the_environment_is_the_declared_one(info: ComponentInfo, workload: Workload) -> None:
    container = _rendered(workload.name, workload.kind.value)["spec"]["template"]["spec"]["containers"][0]
    got = {e["name"] for e in container["env"]} - COMMON - {agent_env.PROBE_FILE}
    declared = {v.name for v in info.env if v.value(SPEC) is not None}
    payload = {
        agent_env.PAYLOAD_DIR,
        agent_env.PAYLOAD_IMAGES,
    } & got  # the payload images' own variables (payloads.add_payloads)
    assert (
        payload == set()
        if not any(
            "initContainers" in o["spec"]["template"]["spec"] for o in [_rendered(workload.name, workload.kind.value)]
        )
        else payload
    )
    assert got - payload == (declared | {agent_env.NAMESPACE} if info.env else set())


@pytest.mark.parametrize(("info", "workload"), WORKLOADS, ids=_ids)
def test_node_agents_get_the_declared_probe(info: ComponentInfo, workload: Workload) -> None:
    container = _rendered(workload.name, workload.kind.value)["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e.get("value") for e in container["env"]}
    if workload.kind is WorkloadKind.DAEMON_SET and info.probe is not None:
        assert container["readinessProbe"]["exec"]["command"] == ["test", "-f", info.probe.file]
        assert env[agent_env.PROBE_FILE] == info.probe.file
    else:
        assert agent_env.PROBE_FILE not in env


def test_the_uninstall_protocol_waits_for_the_agents_that_declare_an_undo() -> None:
    assert set(uninstall.AGENTS) == {info.signal for info in INFOS if info.undoes}
    assert all(any(w.kind is WorkloadKind.DAEMON_SET for w in info.workloads) for info in INFOS if info.undoes)


SCRIPTS: dict[str, str] = PYPROJECT["project"]["scripts"]
INDEPENDENT = next(
    c["modules"]
    for c in PYPROJECT["tool"]["importlinter"]["contracts"]
    if c["type"] == "independence" and any(m.startswith("services.") for m in c["modules"])
)
ALL_WORKLOADS = [*WORKLOADS, (None, components.OPERATOR_WORKLOAD)]


@pytest.mark.parametrize(("info", "workload"), ALL_WORKLOADS, ids=_ids)
def test_the_command_is_a_console_script_of_an_independent_service(
    info: ComponentInfo | None, workload: Workload
) -> None:
    assert workload.command in SCRIPTS, f"pyproject.toml [project.scripts] has no {workload.command}"
    module = SCRIPTS[workload.command].split(":")[0]
    package = ".".join(module.split(".")[:2])
    assert package in INDEPENDENT, f"{package} is not in the import-linter list of independent services"
    assert (ROOT / pathlib.Path(*module.split("."))).with_suffix(".py").exists()


@pytest.mark.parametrize(("info", "workload"), ALL_WORKLOADS, ids=_ids)
def test_the_image_of_that_name_runs_the_command(info: ComponentInfo | None, workload: Workload) -> None:
    images = {i["name"]: i for i in IMAGES["image"]}
    assert workload.name in images, f"images/images.toml has no image {workload.name}"
    assert images[workload.name]["entrypoint"] == workload.command


@pytest.mark.parametrize("info", INFOS, ids=_ids)
def test_the_chart_has_the_components_section(info: ComponentInfo) -> None:
    assert info.component.value in VALUES, f"charts/metax-operator/values.yaml has no {info.component.value}"
    assert "deploy" in VALUES[info.component.value]


def test_a_declaration_that_leaves_a_fact_out_is_refused() -> None:
    """A missing entry is an error, not a pod that silently mounts nothing or an agent nobody waits for."""
    with pytest.raises(ValueError, match="metax-new: a node agent declares the host paths it mounts"):
        Workload("metax-new", WorkloadKind.DAEMON_SET, "metax-new", True, access=None)
    with pytest.raises(ValueError, match="a Deployment mounts no host path"):
        Workload("metax-new", WorkloadKind.DEPLOYMENT, "metax-new", False, access=None, host_paths=(("/dev", True),))
    with pytest.raises(TypeError, match="access"):
        Workload("metax-new", WorkloadKind.DEPLOYMENT, "metax-new", False)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="undoes"):
        ComponentInfo(Component.TOPO, "new", "topo", (), (), env=())  # type: ignore[call-arg]
