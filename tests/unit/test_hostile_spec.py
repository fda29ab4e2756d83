"""The validator against the classes of input the real API server refused while we said "valid" (issue 10),
and the in-process crashes found by mutating specs: each is now refused with a field path, or accepted
and storable.

Aspects: integers beyond int64 and beyond each field's bound, lenient int-or-percent strings, ``$`` letting
a trailing newline through, gpus forms, list lengths, the object envelope (the one name required), non-string
keys and deep values in-process, what rendered objects carry (label syntax, affinity shape and each
requirement's values against its operator, externalName, image references), any NodePort (the cluster decides
its range), RE2 patterns, and version ordering.
"""

from __future__ import annotations

from typing import Any

import pytest

from metax_core import versions
from metax_core.errors import InvalidSpec
from metax_core.spec import converter, validation, vfio_config
from metax_core.spec import model as spec
from metax_core.spec.names import REGISTRY_EXAMPLE

BASE: dict[str, Any] = {"registry": REGISTRY_EXAMPLE, "driver": {"payload": {"version": "2.32.0"}}}


def errors_of(document: object) -> list[str]:
    with pytest.raises(InvalidSpec) as caught:
        validation.parse(document)
    return [str(e) for e in caught.value.errors]


def with_(**sections: Any) -> dict[str, Any]:
    return {**BASE, **sections}


@pytest.mark.parametrize(
    ("document", "path", "message"),
    [
        (with_(gpuDevice={"healthyInterval": 99999999999999999999999}), "gpuDevice.healthyInterval", "fit in 64"),
        (with_(gpuDevice={"healthyInterval": 2**63}), "gpuDevice.healthyInterval", "fit in 64 bits"),
        (with_(gpuDevice={"healthyInterval": 86401}), "gpuDevice.healthyInterval", "between 0 and 86400"),
        (with_(gpuDevice={"sgpuShares": 0}), "gpuDevice.sgpuShares", "between 1 and 1024"),
        (with_(exporter={"service": {"type": "NodePort", "port": 65536}}), "exporter.service.port", "1 and 65535"),
        (with_(driver={**BASE["driver"], "upgradePolicy": {"maxParallel": 10**12}}), "maxParallel", "0 to 100000"),
    ],
)
def test_every_integer_has_a_bound(document: dict[str, Any], path: str, message: str) -> None:
    (error,) = errors_of(document)
    assert path in error and message in error


@pytest.mark.parametrize("value", [" 50%", "050%", "50%\n", "５0%", "101%", "50 %", "-1", -1, True, "1e2"])
def test_int_or_percent_strings_are_exactly_the_crd_pattern(value: object) -> None:
    (error,) = errors_of(with_(driver={**BASE["driver"], "upgradePolicy": {"maxUnavailable": value}}))
    assert error.startswith("driver.upgradePolicy.maxUnavailable: must be an integer from 0 to 100000")


@pytest.mark.parametrize(
    ("document", "path"),
    [
        (with_(driver={"payload": {"version": "2.14.6\n"}}), "driver.payload.version"),
        (with_(maca={"payload": {"images": ["maca:2.18.0.3\n"]}}), "maca.payload.images[0]"),
        (with_(maca={"payload": {"images": ["MACA:2.18.0.3"]}}), "maca.payload.images[0]"),
        (with_(registry="https://reg.example.com"), "registry"),
        (with_(registry="reg.example.com/\n"), "registry"),
        (with_(imagePullSecrets=["Not_A_Name"]), "imagePullSecrets[0]"),
        (with_(driver={**BASE["driver"], "payload": {"name": "Driver Image", "version": "1"}}), "driver.payload.name"),
    ],
)
def test_image_references_and_tags_are_valid_references(document: dict[str, Any], path: str) -> None:
    assert any(e.startswith(f"{path}: ") for e in errors_of(document))


@pytest.mark.parametrize(
    ("gpus", "expected"),
    [
        ("0,1,2", "0,1,2"),
        (" 0 , 1 ", " 0 , 1 "),
        ("all", "all"),
        ([0, 1], "0,1"),
        (["2", "3"], "2,3"),
        (["all"], "all"),
    ],
)
def test_gpus_is_the_comma_string_or_a_yaml_list(gpus: object, expected: str) -> None:
    parsed = validation.parse(with_(vfioManager={"vfioConfig": [{"nodeName": "n.*", "gpus": gpus}]}))
    assert parsed.vfio_manager.vfio_config[0].gpus == expected


@pytest.mark.parametrize("gpus", ["ALL", "0,\u30001", "0,1\n", [], [True], ["all", 0], "1" * 4400, [-1], "0,,1"])
def test_other_gpus_forms_are_refused(gpus: object) -> None:
    (error,) = errors_of(with_(vfioManager={"vfioConfig": [{"nodeName": "n", "gpus": gpus}]}))
    assert error.startswith("vfioManager.vfioConfig[0].gpus: must be")


def test_lists_are_no_longer_than_the_crd_allows() -> None:
    steps = [{"replicas": "100%"}] * 101
    (error,) = errors_of(with_(driver={**BASE["driver"], "upgradePolicy": {"upgradeSteps": steps}}))
    assert error == "driver.upgradePolicy.upgradeSteps: must list at most 100 items, got 101"


def test_the_object_envelope_is_checked() -> None:
    obj = {
        "apiVersion": f"{spec.API_GROUP}/{spec.API_VERSION}",
        "kind": spec.KIND,
        "metadata": {"name": spec.OBJECT_NAME, "labels": {"bad key!": "x"}, "colour": "red"},
        "spec": BASE,
        "extra": 1,
    }
    assert sorted(errors_of(obj)) == [
        "extra: unknown field; allowed at the top: apiVersion, kind, metadata, spec, status",
        "metadata.colour: unknown field of ObjectMeta",
        "metadata.labels.bad key!: must be a label key: a name of at most 63 letters, digits, '-', '_' and '.', "
        "starting and ending with a letter or digit (with an optional 'prefix/')",
    ]
    assert errors_of({**obj, "metadata": ["x"], "extra": None}) == [
        "extra: unknown field; allowed at the top: apiVersion, kind, metadata, spec, status",
        "metadata: must be a mapping, got a list",
    ]


def test_non_string_keys_in_process_are_field_errors_not_crashes() -> None:
    assert errors_of({1: "x"}) == ["keys must be strings; got number 1"]
    assert errors_of(with_(gpuLabel={1: "x"})) == ["gpuLabel: keys must be strings (quote them in YAML); got number 1"]
    (error,) = errors_of(with_(podTemplateSpec={"spec": {"affinity": {"nodeAffinity": {2: {}}}}}))
    assert error == "podTemplateSpec.spec.affinity.nodeAffinity[int key]: keys must be strings"


def test_a_deep_kind_does_not_crash_the_message() -> None:
    deep: object = "x"
    for _ in range(5000):
        deep = [deep]
    (kind, api, name) = errors_of({"kind": deep, "apiVersion": deep})
    assert kind == "kind: must be ClusterOperator, got a list" and api.startswith("apiVersion: must be")
    assert name.startswith("metadata.name: is required")


def test_a_deep_affinity_is_refused_at_the_first_unknown_level() -> None:
    deep: dict[str, Any] = {}
    for _ in range(2000):
        deep = {"nodeAffinity": deep}
    errors = errors_of(with_(podTemplateSpec={"spec": {"affinity": deep}}))
    assert errors == [
        "podTemplateSpec.spec.affinity.nodeAffinity.nodeAffinity: unknown field; allowed here: "
        "requiredDuringSchedulingIgnoredDuringExecution, preferredDuringSchedulingIgnoredDuringExecution"
    ]


@pytest.mark.parametrize(
    ("template", "path"),
    [
        ({"tolerations": [{"key": "bad key", "operator": "Exists"}]}, "podTemplateSpec.spec.tolerations[0].key"),
        ({"tolerations": [{"key": "k", "value": "v" * 64}]}, "podTemplateSpec.spec.tolerations[0].value"),
        ({"nodeSelector": {"gpu/": "x"}}, "podTemplateSpec.spec.nodeSelector.gpu/"),
        ({"nodeSelector": {"gpu": "a b"}}, "podTemplateSpec.spec.nodeSelector.gpu"),
        ({"affinity": {"nodeAfinity": {}}}, "podTemplateSpec.spec.affinity.nodeAfinity"),
        (
            {"affinity": {"podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 0}]}}},
            "podTemplateSpec.spec.affinity.podAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].weight",
        ),
    ],
)
def test_what_the_workloads_carry_is_valid_for_the_api_server(template: dict[str, Any], path: str) -> None:
    errors = errors_of(with_(podTemplateSpec={"spec": template}))
    assert any(e.startswith(f"{path}: ") for e in errors), errors


def _node_affinity(*requirements: dict[str, Any], fields: bool = False) -> dict[str, Any]:
    term = {"matchFields" if fields else "matchExpressions": list(requirements)}
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}}


def _pod_affinity(*requirements: dict[str, Any]) -> dict[str, Any]:
    term = {"labelSelector": {"matchExpressions": list(requirements)}, "topologyKey": "kubernetes.io/hostname"}
    return {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}


NODE_TERM = "podTemplateSpec.spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
POD_TERM = "podTemplateSpec.spec.affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution[0]"


def _pod_term(**fields: Any) -> dict[str, Any]:
    term = {"topologyKey": "kubernetes.io/hostname", **fields}
    return {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}


POD_AFFINITY_TERM = "podTemplateSpec.spec.affinity.podAffinity.requiredDuringSchedulingIgnoredDuringExecution[0]"
APP_SELECTOR = {"matchLabels": {"app": "x"}}


@pytest.mark.parametrize(
    ("affinity", "error"),
    [
        (
            _pod_term(namespaces=["a.b"]),
            f"{POD_AFFINITY_TERM}.namespaces[0]: must be a DNS label: lowercase letters, digits and '-', at most 63 "
            "characters (a namespace name)",
        ),
        (
            _pod_term(matchLabelKeys=["app"]),
            f"{POD_AFFINITY_TERM}.matchLabelKeys: must not be set without a labelSelector",
        ),
        (
            _pod_term(mismatchLabelKeys=["app"]),
            f"{POD_AFFINITY_TERM}.mismatchLabelKeys: must not be set without a labelSelector",
        ),
        (
            _pod_term(labelSelector=APP_SELECTOR, matchLabelKeys=["v"], mismatchLabelKeys=["v"]),
            f"{POD_AFFINITY_TERM}.matchLabelKeys[0]: is also in mismatchLabelKeys",
        ),
        (
            _pod_term(
                labelSelector={**APP_SELECTOR, "matchExpressions": [{"key": "app", "operator": "Exists"}]},
                matchLabelKeys=["app"],
            ),
            f"{POD_AFFINITY_TERM}.matchLabelKeys[0]: is also in the labelSelector",
        ),
    ],
)
def test_a_pod_affinity_term_is_checked_as_the_api_server_checks_it(affinity: dict[str, Any], error: str) -> None:
    assert errors_of(with_(podTemplateSpec={"spec": {"affinity": affinity}})) == [error]


@pytest.mark.parametrize(
    ("affinity", "error"),
    [
        (
            _node_affinity({"key": "zone", "operator": "In"}),
            f"{NODE_TERM}.nodeSelectorTerms[0].matchExpressions[0].values: must list at least one value when "
            "operator is In (use Exists to match any value)",
        ),
        (
            _node_affinity({"key": "zone", "operator": "NotIn", "values": []}),
            f"{NODE_TERM}.nodeSelectorTerms[0].matchExpressions[0].values: must list at least one value when "
            "operator is NotIn (use Exists to match any value)",
        ),
        (
            _node_affinity({"key": "zone", "operator": "Exists", "values": ["a"]}),
            f"{NODE_TERM}.nodeSelectorTerms[0].matchExpressions[0].values: must be empty or left out when "
            "operator is Exists, got 1 values (use In to match values)",
        ),
        (
            _node_affinity({"key": "gpus", "operator": "Gt"}),
            f"{NODE_TERM}.nodeSelectorTerms[0].matchExpressions[0].values: must be exactly one integer value "
            'like ["5"] when operator is Gt',
        ),
        (
            _node_affinity({"key": "gpus", "operator": "Lt", "values": ["1", "2"]}),
            f"{NODE_TERM}.nodeSelectorTerms[0].matchExpressions[0].values: must be exactly one integer value "
            'like ["5"] when operator is Lt',
        ),
        (
            _node_affinity({"key": "gpus", "operator": "Gt", "values": ["many"]}),
            f"{NODE_TERM}.nodeSelectorTerms[0].matchExpressions[0].values: must be exactly one integer value "
            'like ["5"] when operator is Gt',
        ),
        (
            _node_affinity({"key": "zone", "operator": "In", "values": ["a b"]}),
            f"{NODE_TERM}.nodeSelectorTerms[0].matchExpressions[0].values[0]: must be a label value: empty, or at "
            "most 63 letters, digits, '-', '_' and '.', starting and ending with a letter or digit",
        ),
        (
            _node_affinity({"key": "zone", "operator": "In", "values": ["a"]}, fields=True),
            f"{NODE_TERM}.nodeSelectorTerms[0].matchFields[0].key: must be one of metadata.name",
        ),
        (
            _node_affinity({"key": "metadata.name", "operator": "In", "values": ["a", "b"]}, fields=True),
            f"{NODE_TERM}.nodeSelectorTerms[0].matchFields[0].values: must list exactly one node name when "
            "operator is In (matchFields), got 2 values",
        ),
        (
            _node_affinity({"key": "metadata.name", "operator": "Exists"}, fields=True),
            f"{NODE_TERM}.nodeSelectorTerms[0].matchFields[0].operator: must be one of In, NotIn",
        ),
        (
            _pod_affinity({"key": "app", "operator": "In"}),
            f"{POD_TERM}.labelSelector.matchExpressions[0].values: must list at least one value when operator is In "
            "(use Exists to match any value)",
        ),
        (
            _pod_affinity({"key": "app", "operator": "DoesNotExist", "values": ["x"]}),
            f"{POD_TERM}.labelSelector.matchExpressions[0].values: must be empty or left out when operator is "
            "DoesNotExist, got 1 values (use In to match values)",
        ),
        (
            _pod_affinity({"key": "app", "operator": "Gt", "values": ["1"]}),
            f"{POD_TERM}.labelSelector.matchExpressions[0].operator: must be one of In, NotIn, Exists, DoesNotExist",
        ),
    ],
)
def test_a_requirement_s_values_must_fit_its_operator(affinity: dict[str, Any], error: str) -> None:
    """Issue 20: `In` without values (and the like) was accepted and rendered DaemonSets the API server refused."""
    assert errors_of(with_(podTemplateSpec={"spec": {"affinity": affinity}})) == [error]


@pytest.mark.parametrize(
    "affinity",
    [
        _node_affinity({"key": "zone", "operator": "In", "values": ["a"]}, {"key": "gpu", "operator": "Exists"}),
        _node_affinity({"key": "gpus", "operator": "Gt", "values": ["3"]}, {"key": "x", "operator": "DoesNotExist"}),
        _node_affinity({"key": "gpu", "operator": "Exists", "values": []}),
        _node_affinity({"key": "metadata.name", "operator": "NotIn", "values": ["node-1"]}, fields=True),
        _pod_affinity({"key": "app", "operator": "NotIn", "values": ["x", "y"]}, {"key": "b", "operator": "Exists"}),
        _pod_term(namespaces=["gpu-jobs"], labelSelector=APP_SELECTOR, matchLabelKeys=["v"], mismatchLabelKeys=["w"]),
    ],
)
def test_requirements_the_api_server_accepts_are_accepted(affinity: dict[str, Any]) -> None:
    assert validation.parse(with_(podTemplateSpec={"spec": {"affinity": affinity}})).pod_template_spec is not None


@pytest.mark.parametrize("port", [1, 80, 9400, 30000, 32767, 40000, 65535])
def test_a_node_port_is_any_port_the_cluster_s_range_decides(port: int) -> None:
    """Issue 20: clusters set --service-node-port-range, so 30000–32767 is not ours to enforce."""
    parsed = validation.parse(with_(exporter={"deploy": True, "service": {"type": "NodePort", "port": port}}))
    assert parsed.exporter.service.port == port


def test_external_name_must_be_a_dns_name() -> None:
    service = {"type": "ExternalName", "externalName": "not a name"}
    (error,) = errors_of(with_(exporter={"service": service}))
    assert error.startswith("exporter.service.externalName: must be a DNS name")
    service["externalName"] = "metrics.example.com."
    assert validation.parse(with_(exporter={"service": service}))


@pytest.mark.parametrize("pattern", ["a{4294967296}", "(" * 494 + ")" * 494, "(a+)+$", "node-[0-9]+"])
def test_node_name_patterns_compile_with_re2_or_are_refused_without_crashing(pattern: str) -> None:
    entries = (spec.VfioConfigEntry(node_name=pattern, gpus="all"),)
    errors = vfio_config.check_entries(entries)
    assert all(e.path == "vfioManager.vfioConfig[0].nodeName" for e in errors)
    if not errors:
        vfio_config.selection_for_node(entries, "a" * 41 + "!")  # linear time: returns at once


def test_node_name_patterns_keep_full_match_semantics() -> None:
    entries = (spec.VfioConfigEntry(node_name="gpu-[0-9]+", gpus="1"),)
    assert vfio_config.selection_for_node(entries, "gpu-12").selects(1)
    assert vfio_config.selection_for_node(entries, "gpu-12x") == vfio_config.NOTHING
    assert vfio_config.selection_for_node(entries, "xgpu-12") == vfio_config.NOTHING


def test_a_type_error_does_not_hide_a_cross_field_error_elsewhere_in_the_section() -> None:
    document = with_(driver={"payload": {"version": 2.18}, "upgradePolicy": {"enableRollout": True}})
    assert errors_of(document) == [
        "driver.payload.version: must be a string, got number 2.18 (quote it in YAML)",
        "driver.upgradePolicy.upgradeSteps: must list at least one step when enableRollout is true",
    ]


@pytest.mark.parametrize(
    ("older", "newer"),
    [
        ("2.18.0.3-rc1", "2.18.0.3"),
        ("2.18.0.3-rc2", "2.18.0.3-rc10"),
        ("2.18.0.3-alpha", "2.18.0.3-beta"),
        ("2.18.0.3~dev", "2.18.0.3"),
        ("2.18.0.3", "2.18.0.3-ubuntu18.04"),
        ("2.18.0.3-ubuntu18.04", "2.18.0.4-rc1"),
    ],
)
def test_a_release_outranks_its_pre_releases(older: str, newer: str) -> None:
    assert versions.parse(older) < versions.parse(newer)


def test_describe_shortens_what_it_shows() -> None:
    assert converter.describe("x" * 1000).endswith("...'")
    assert converter.describe(10**5000) == "a 41+ digit number"
