"""The ClusterOperator spec model, its converter and validation (R-VALUES, Tables 3.1–3.18, R-WEBHOOK).

Covered: every documented default of Tables 3.1–3.18; every error of a document at once, with field paths
in the document's own camelCase keys; unknown keys with a did-you-mean (including the seed's
``vfio-manager`` mistake); strict bool / int / str in objects (no "false" strings, no numbers for strings; how
chart values' strings are read is tests/dev/test_chart_values.py); lists are
lists (a string is not a list of characters); int-or-percent; pauseDuration in milliseconds or "10s"; the
§3.2.8 upgradePolicy example; a ClusterOperator object versus bare values; cross-field rules; and, with
hypothesis over generated specs, unstructure → structure round trips.
"""

from __future__ import annotations

import enum
import types
import typing
from collections.abc import Mapping
from typing import Any

import attrs
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from metax_core.errors import InvalidSpec
from metax_core.spec import converter, limits, validation
from metax_core.spec import model as spec
from metax_core.spec.model import IntOrPercent
from metax_core.spec.names import REGISTRY_EXAMPLE

REGISTRY = {"registry": REGISTRY_EXAMPLE}
"""The one global field every spec needs (R-RELEASE: no silent default registry)."""
VERSION = {**REGISTRY, "driver": {"payload": {"version": "2.32.0"}}}
"""The least a valid spec holds: the registry and the driver's version."""
REGISTRY_REQUIRED = (
    f'registry: is required: the registry every image is pulled from, like "{REGISTRY_EXAMPLE}" (there is no default)'
)


def errors_of(document: object) -> list[str]:
    with pytest.raises(InvalidSpec) as info:
        validation.parse(document)
    return [str(e) for e in info.value.errors]


def structure_errors(document: object) -> list[str]:
    with pytest.raises(InvalidSpec) as info:
        converter.structure(document, spec.ClusterOperatorSpec)
    return [str(e) for e in info.value.errors]


# --- defaults -------------------------------------------------------------------------------------------


def test_table_defaults() -> None:
    s = converter.structure({}, spec.ClusterOperatorSpec)
    # Table 3.1 (global)
    assert (s.registry, s.pod_template_spec, s.tolerations) == ("", None, None)
    # Table 3.2 gpuDevice
    assert (s.gpu_device.deploy, s.gpu_device.healthy_interval, s.gpu_device.pod_template_spec) == (True, 5, None)
    # Table 3.3 gpuLabel
    assert s.gpu_label.deploy is True
    # Table 3.4 driver
    d = s.driver
    assert d.deploy is True
    assert d.deploy_policy is spec.DeployPolicy.PREFER_CLOUD
    assert d.fw_upgrade_policy is spec.FirmwarePolicy.NEVER
    assert d.fw_enable_virt is False
    # Table 3.6 vfioManager
    assert (s.vfio_manager.deploy, s.vfio_manager.vfio_config) == (True, ())
    # Table 3.8 maca, Table 3.9 runtime
    assert s.maca.deploy is True and s.runtime.deploy is True
    # Table 3.10 driver payload
    assert (d.payload.name, d.payload.version, d.payload.registry) == ("driver-image", None, None)
    # Table 3.11 upgradePolicy
    u = d.upgrade_policy
    assert (u.enable_rollout, u.upgrade_steps, u.pause) == (False, (), False)
    assert u.max_parallel == IntOrPercent(100, percent=True)
    assert u.max_unavailable == IntOrPercent(0, percent=True)
    assert (u.max_failure_threshold, u.fallback) == (0, spec.Fallback.PAUSE)
    # Table 3.12 maca payload
    assert (s.maca.payload.images, s.maca.payload.registry) == ((), None)
    # Table 3.13 / 3.14 exporter
    assert s.exporter.deploy is False
    assert (s.exporter.service.type, s.exporter.service.port) == (spec.ServiceType.CLUSTER_IP, None)
    # Every component has log and podTemplateSpec (Tables 3.2–3.13, 3.15).
    for component in (s.gpu_device, s.gpu_label, d, s.vfio_manager, s.maca, s.runtime, s.exporter):
        assert component.log == spec.Log()
        assert component.pod_template_spec is None


def test_upgrade_step_defaults() -> None:
    step = converter.structure({"replicas": 2}, spec.UpgradeStep)
    assert step == spec.UpgradeStep(
        replicas=IntOrPercent(2), pause=None, pause_duration=None, toleration=IntOrPercent(0, True)
    )


@pytest.mark.parametrize(
    ("enum_type", "values"),
    [
        (spec.DeployPolicy, ["PreferCloud", "PreferHost", "PreferNewer", "Never"]),  # Table 3.5
        (spec.FirmwarePolicy, ["Never", "PreferCloud"]),  # Table 3.17
        (spec.Fallback, ["pause", "rollback"]),  # Table 3.11
        (spec.ServiceType, ["ClusterIP", "NodePort", "LoadBalancer", "ExternalName"]),  # Table 3.14
    ],
)
def test_enum_values_match_the_tables(enum_type: type[enum.Enum], values: list[str]) -> None:
    assert sorted(m.value for m in enum_type) == sorted(values)


def test_pod_template_spec_manages_exactly_table_3_15() -> None:
    document = {
        "spec": {
            "nodeSelector": {"a": "b"},
            "affinity": {"nodeAffinity": {}},
            "tolerations": [{"key": "k", "operator": "Exists"}],
        }
    }
    template = converter.structure(document, spec.PodTemplateSpec)
    assert template.spec.node_selector == {"a": "b"}
    assert template.spec.tolerations == (spec.Toleration(key="k", operator=spec.TolerationOperator.EXISTS),)
    assert structure_errors({"podTemplateSpec": {"spec": {"containers": []}}}) == [
        "podTemplateSpec.spec.containers: unknown field; allowed fields here: nodeSelector, affinity, tolerations"
    ]


def test_payload_version_is_required_unless_never() -> None:
    assert errors_of(REGISTRY) == [
        "driver.payload.version: is required unless driver.deployPolicy is Never (and driver.fwUpgradePolicy is Never)"
    ]
    assert validation.parse({**REGISTRY, "driver": {"deployPolicy": "Never"}}).driver.payload.version is None
    assert errors_of({**REGISTRY, "driver": {"deployPolicy": "Never", "fwUpgradePolicy": "PreferCloud"}})[0].startswith(
        "driver.payload.version: is required"
    )


def test_an_empty_document_is_refused_for_its_registry_and_its_driver_version() -> None:
    """R-RELEASE: no field has a default that would pull images from Docker Hub; both required fields are named."""
    assert errors_of({}) == [
        REGISTRY_REQUIRED,
        "driver.payload.version: is required unless driver.deployPolicy is Never (and driver.fwUpgradePolicy is Never)",
    ]


# --- errors ---------------------------------------------------------------------------------------------


def test_every_error_at_once_with_field_paths() -> None:
    document = {
        "gpuDevic": {},
        "gpuDevice": {"healthyInterval": "5s", "deploy": "False"},
        "driver": {
            "deployPolicy": "Cloud",
            "fwEnableVirt": 1,
            "payload": {"version": 2.18},
            "upgradePolicy": {"maxParalel": "50%", "upgradeSteps": [{"replicas": "half"}, {"pause": "yes"}]},
        },
        "exporter": {"service": {"type": "clusterip", "port": "09400"}},
        "maca": {"payload": {"images": ["maca-c500:2.18.0.3", 7]}},
    }
    assert sorted(errors_of(document)) == sorted(
        [
            "gpuDevic: unknown field; did you mean 'gpuDevice'?",
            "gpuDevice.healthyInterval: must be an integer, got string '5s'",
            "gpuDevice.deploy: must be true or false, got string 'False'",
            "driver.deployPolicy: must be one of PreferCloud, PreferHost, PreferNewer, Never; got string 'Cloud'",
            "driver.fwEnableVirt: must be true or false, got number 1",
            "driver.payload.version: must be a string, got number 2.18 (quote it in YAML)",
            "driver.upgradePolicy.maxParalel: unknown field; did you mean 'maxParallel'?",
            "driver.upgradePolicy.upgradeSteps[0].replicas: must be an integer from 0 to 100000 or a percentage from "
            '"0%" to "100%", got string \'half\'',
            "driver.upgradePolicy.upgradeSteps[1].replicas: required field is missing",
            "driver.upgradePolicy.upgradeSteps[1].pause: must be true or false, got string 'yes'",
            "exporter.service.type: must be one of ClusterIP, NodePort, LoadBalancer, ExternalName; "
            "got string 'clusterip'",
            "exporter.service.port: must be an integer, got string '09400'",
            "maca.payload.images[1]: must be a string, got number 7 (quote it in YAML)",
            # The cross-field and global rules still run beside the type errors (R-RELEASE: no registry given).
            REGISTRY_REQUIRED,
        ]
    )


def test_the_seeds_vfio_manager_key_suggests_vfio_manager() -> None:
    assert errors_of({**VERSION, "vfio-manager": {"vfioConfig": []}}) == [
        "vfio-manager: unknown field; did you mean 'vfioManager'?"
    ]


def test_unknown_key_without_a_close_match_lists_the_allowed_fields() -> None:
    (error,) = structure_errors({"exporter": {"service": {"zzz": 1}}})
    assert error == "exporter.service.zzz: unknown field; allowed fields here: type, port, externalName"


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ({"gpuDevice": {"healthyInterval": True}}, "gpuDevice.healthyInterval: must be an integer, got boolean true"),
        ({"gpuDevice": {"healthyInterval": 5.0}}, "gpuDevice.healthyInterval: must be an integer, got number 5.0"),
        ({"runtime": {"deploy": None}}, "runtime.deploy: must be true or false, got null"),
        ({"registry": 5}, "registry: must be a string, got number 5 (quote it in YAML)"),
        ({"registry": True}, "registry: must be a string, got boolean true"),
        ({"driver": None}, "driver: must be a mapping, got null"),
        ({"imagePullSecrets": "secret"}, "imagePullSecrets: must be a list, got string 'secret'"),
        (
            {"maca": {"payload": {"images": "maca-c500:2.18.0.3"}}},
            "maca.payload.images: must be a list, got string 'maca-c500:2.18.0.3'",
        ),
        (
            {"vfioManager": {"vfioConfig": {"nodeName": "a", "gpus": "0"}}},
            "vfioManager.vfioConfig: must be a list, got a mapping",
        ),
        (
            {"podTemplateSpec": {"spec": {"nodeSelector": {"gpu": True}}}},
            "podTemplateSpec.spec.nodeSelector: keys and values must be strings (quote them in YAML); "
            "not so at string 'gpu'",
        ),
        (
            {"tolerations": [{"operator": "Exist"}]},
            "tolerations[0].operator: must be one of Exists, Equal; got string 'Exist'",
        ),
    ],
)
def test_strict_types(document: dict[str, Any], message: str) -> None:
    assert structure_errors(document) == [message]


def test_a_document_that_is_not_a_mapping() -> None:
    assert structure_errors([1, 2]) == ["must be a mapping, got a list"]
    with pytest.raises(InvalidSpec, match="the document must be a mapping"):
        validation.parse("registry: x")


# --- int-or-percent and durations -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (3, IntOrPercent(3)),
        (0, IntOrPercent(0)),
        ("50%", IntOrPercent(50, True)),
        ("0%", IntOrPercent(0, True)),
    ],
)
def test_int_or_percent(value: object, expected: IntOrPercent) -> None:
    assert converter.structure({"maxParallel": value}, spec.UpgradePolicy).max_parallel == expected


@pytest.mark.parametrize("value", ["50", "-1%", "50 %", "5.5%", -1, 1.5, True, None, "%"])
def test_bad_int_or_percent(value: object) -> None:
    with pytest.raises(InvalidSpec, match=r"^maxParallel: must (not )?be"):
        converter.structure({"maxParallel": value}, spec.UpgradePolicy)


@pytest.mark.parametrize(
    ("total", "percent", "up", "down"),
    [(10, 50, 5, 5), (3, 50, 2, 1), (2, 50, 1, 1), (0, 50, 0, 0), (7, 100, 7, 7), (7, 1, 1, 0)],
)
def test_percent_resolution_rounds_as_asked(total: int, percent: int, up: int, down: int) -> None:
    value = IntOrPercent.of_percent(percent)
    assert value.resolve(total, round_up=True) == up
    assert value.resolve(total, round_up=False) == down
    assert IntOrPercent(4).resolve(total, round_up=True) == 4


def test_percentages_above_100_are_refused() -> None:
    document = {**VERSION, "driver": {**VERSION["driver"], "upgradePolicy": {"maxParallel": "150%"}}}
    assert errors_of(document) == [
        'driver.upgradePolicy.maxParallel: must be an integer from 0 to 100000 or a percentage from "0%" to "100%", '
        "got string '150%'"
    ]


@pytest.mark.parametrize(
    ("value", "ms"),
    [
        (10000, 10000),
        (0, 0),
        ("10000", 10000),
        ("10s", 10_000),
        ("500ms", 500),
        ("2m", 120_000),
        ("1h", 3_600_000),
    ],
)
def test_pause_duration_is_milliseconds_or_a_duration(value: object, ms: int) -> None:
    step = converter.structure({"replicas": 1, "pauseDuration": value}, spec.UpgradeStep)
    assert step.pause_duration == ms


@pytest.mark.parametrize("value", ["1.5s", "10d", "-5", -5, True, "s", "²"])
def test_bad_pause_duration(value: object) -> None:
    with pytest.raises(InvalidSpec, match=r"^pauseDuration: must (not )?be"):
        converter.structure({"replicas": 1, "pauseDuration": value}, spec.UpgradeStep)


def test_the_3_2_8_upgrade_policy_example() -> None:
    text = """
driver:
   payload: {version: "2.32.0"}
   upgradePolicy:
      enableRollout: true
      upgradeSteps:
      - replicas: 2
        pause:
      - replicas: 5
        pauseDuration: 10000
      - replicas: 8
        pauseDuration: 10000
      - replicas: 100%
        pause:
      pause: false
      maxParallel: 50%
      maxUnavailable: 0
      maxFailureThreshold: 3
      fallback: pause
"""
    policy = validation.parse({**REGISTRY, **yaml.safe_load(text)}).driver.upgrade_policy
    assert [(s.replicas, s.pause, s.pause_duration) for s in policy.upgrade_steps] == [
        (IntOrPercent(2), None, None),
        (IntOrPercent(5), None, 10_000),
        (IntOrPercent(8), None, 10_000),
        (IntOrPercent(100, True), None, None),
    ]
    assert (policy.max_parallel, policy.max_unavailable, policy.max_failure_threshold) == (
        IntOrPercent(50, True),
        IntOrPercent(0),
        3,
    )


def test_upgrade_policy_cross_field_rules() -> None:
    steps = [{"replicas": 5}, {"replicas": 2, "pause": True, "pauseDuration": "1s"}, {"replicas": "50%"}]
    document = {
        **REGISTRY,
        "driver": {"payload": {"version": "1"}, "upgradePolicy": {"enableRollout": True, "upgradeSteps": steps}},
    }
    assert errors_of(document) == [
        "driver.upgradePolicy.upgradeSteps[1].replicas: must not be lower than an earlier step's (2 < 5)",
        "driver.upgradePolicy.upgradeSteps[1].pauseDuration: set either pause: true (wait for an administrator) "
        "or pauseDuration (resume by itself), not both",
        'driver.upgradePolicy.upgradeSteps[2].replicas: the last step must be "100%" so that every node is upgraded',
    ]


# --- ClusterOperator object vs bare values --------------------------------------------------------------


def test_a_cluster_operator_object_and_bare_values_mean_the_same() -> None:
    obj = {
        "apiVersion": "gpu.metax-tech.com/v1alpha1",
        "kind": "ClusterOperator",
        "metadata": {"name": "cluster-operator"},
        "spec": VERSION,
    }
    assert validation.parse(obj) == validation.parse(VERSION)


def test_a_cluster_operator_object_is_checked() -> None:
    obj = {"apiVersion": "v1", "kind": "ClusterOperatr", "metadata": {"name": "other"}, "spec": []}
    assert errors_of(obj) == [
        "kind: must be ClusterOperator, got string 'ClusterOperatr'",
        "apiVersion: must be gpu.metax-tech.com/v1alpha1, got string 'v1'",
        "metadata.name: must be 'cluster-operator': the operator reconciles only that object",
        "spec: must be a mapping, got a list",
    ]


def test_an_object_without_spec_gets_the_defaults() -> None:
    """The defaults leave the two required fields unset, so such an object is refused naming both: the registry
    first (R-RELEASE: there is no default registry, an image name without one would be pulled from Docker Hub),
    then the driver's version."""
    obj = {
        "apiVersion": "gpu.metax-tech.com/v1alpha1",
        "kind": "ClusterOperator",
        "metadata": {"name": "cluster-operator"},
    }
    registry, version = errors_of({**obj, "spec": None})
    assert registry == REGISTRY_REQUIRED
    assert version.startswith("driver.payload.version: is required")


@pytest.mark.parametrize("metadata", [None, {}, {"generateName": "cluster-operator-"}, {"name": ""}, {"labels": {}}])
def test_an_object_must_be_named_cluster_operator(metadata: object) -> None:
    """The API server refuses an object without a name, and a generateName makes one that is not ours."""
    obj: dict[str, object] = {"apiVersion": "gpu.metax-tech.com/v1alpha1", "kind": "ClusterOperator", "spec": VERSION}
    if metadata is not None:
        obj["metadata"] = metadata
    assert errors_of(obj) == [
        "metadata.name: is required and must be 'cluster-operator': the operator reconciles only that object"
    ]


# --- round trip -----------------------------------------------------------------------------------------

_text = st.text(max_size=8)
_json = st.recursive(
    st.none() | st.booleans() | st.integers() | _text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_text, inner, max_size=3),
    max_leaves=6,
).filter(lambda v: v is not None)
_SPECIAL: dict[tuple[type, str], st.SearchStrategy[Any]] = {
    (spec.UpgradeStep, "pause_duration"): st.none() | st.integers(0, 10**9),
    (spec.VfioConfigEntry, "gpus"): st.from_regex(rf"\A({limits.GPUS_PATTERN})\Z"),
    (spec.PodSpecOverrides, "affinity"): st.none()
    | st.dictionaries(_text, _json.filter(lambda v: not _has_none(v)), max_size=3),
    (spec.NetworkPolicy, "allowed_from"): st.none()
    | st.lists(
        st.sampled_from(
            [
                {"ipBlock": {"cidr": "10.0.0.0/24"}},
                {"podSelector": {}},
                {"namespaceSelector": {"matchLabels": {"a": "b"}}},
            ]
        ),
        max_size=3,
    ).map(tuple),
}


def _has_none(value: object) -> bool:
    if value is None:
        return True
    if isinstance(value, dict):
        return any(_has_none(v) for v in value.values())
    if isinstance(value, list):
        return any(_has_none(v) for v in value)
    return False


def strategy_for(t: Any) -> st.SearchStrategy[Any]:
    """A strategy for any type the spec uses, built from the type itself, so new fields are covered too."""
    origin, args = typing.get_origin(t), typing.get_args(t)
    if t is bool:
        return st.booleans()
    if t is int:
        return st.integers(-(10**6), 10**6)
    if t is str:
        return _text
    if t is spec.IntOrPercent:
        return st.builds(spec.IntOrPercent, st.integers(0, 100), st.booleans())
    if t is spec.Quantity:
        units = st.sampled_from(["", "m", "Ki", "Mi", "Gi", "k", "M", "G"])
        return st.builds(lambda n, u: spec.Quantity.parse(f"{n}{u}"), st.integers(0, 4096), units)
    if isinstance(t, type) and issubclass(t, enum.Enum):
        return st.sampled_from(t)
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        return st.lists(strategy_for(args[0]), max_size=3).map(tuple)
    if origin in (typing.Union, types.UnionType):
        return st.one_of([st.none() if a is type(None) else strategy_for(a) for a in args])
    if t == Mapping[str, str]:
        return st.dictionaries(_text, _text, max_size=3)
    if attrs.has(t):
        hints = typing.get_type_hints(t)
        fields = {f.name: _field_strategy(t, f.name, hints[f.name]) for f in attrs.fields(t)}
        return st.builds(t, **fields)
    raise NotImplementedError(f"no strategy for {t!r}")


def _field_strategy(cl: type, name: str, t: Any) -> st.SearchStrategy[Any]:
    """The field's own strategy, within its bounds from metax_core.spec.limits (what the converter enforces)."""
    if (cl, name) in _SPECIAL:
        return _SPECIAL[(cl, name)]
    inner = [a for a in typing.get_args(t) if a is not type(None)] or [t]
    if inner[0] is int:
        bounds = limits.range_of(cl, name)
        numbers = st.integers(max(bounds.minimum, -(10**6)), min(bounds.maximum, 10**6))
        return numbers if inner == [t] else st.none() | numbers
    if (cl, name) in limits.MAX_LENGTH and inner[0] is str:
        text = st.text(max_size=min(8, limits.MAX_LENGTH[(cl, name)]))
        return text if inner == [t] else st.none() | text
    return strategy_for(t)


@settings(max_examples=60, deadline=None)
@given(strategy_for(spec.ClusterOperatorSpec))
def test_unstructure_then_structure_round_trips(s: spec.ClusterOperatorSpec) -> None:
    assert converter.structure(converter.unstructure(s), spec.ClusterOperatorSpec) == s


@settings(max_examples=40, deadline=None)
@given(strategy_for(spec.ClusterOperatorSpec))
def test_validation_is_stable_under_a_round_trip(s: spec.ClusterOperatorSpec) -> None:
    # The cross-field rules see the same spec whether it arrives as a record or as its document.
    assert validation.semantic_errors(
        converter.structure(converter.unstructure(s), spec.ClusterOperatorSpec)
    ) == validation.semantic_errors(s)


def test_unstructure_uses_camel_case_and_leaves_out_unset_fields() -> None:
    document = converter.unstructure(validation.parse(VERSION))
    assert document["driver"]["payload"] == {"name": "driver-image", "version": "2.32.0"}
    assert document["driver"]["upgradePolicy"]["maxParallel"] == "100%"
    assert "podTemplateSpec" not in document and "tolerations" not in document


@pytest.mark.parametrize(
    ("runtime", "message"),
    [
        ({"restartMode": "reboot"}, "runtime.restartMode: must be one of systemd, signal, none; got string 'reboot'"),
        ({"socket": "run/k3s/containerd.sock"}, "runtime.socket: must be an absolute path"),
        ({"socket": "/run/../etc/shadow"}, "runtime.socket: must be an absolute path without '..'"),
        ({"socket": "/" + "x" * 95}, "runtime.socket: must be at most 95 bytes long"),
    ],
)
def test_runtime_restart_mode_and_socket_are_checked(runtime: dict[str, Any], message: str) -> None:
    """The extension fields of container-runtime (docs/container-runtime.md, restart modes; issue 37 item 4)."""
    assert any(e.startswith(message) for e in errors_of({"runtime": runtime})), errors_of({"runtime": runtime})


def test_runtime_restart_mode_and_socket_defaults() -> None:
    s = validation.parse(VERSION)
    assert (s.runtime.restart_mode, s.runtime.socket) == (spec.RestartMode.SYSTEMD, None)
    runtime = {"restartMode": "signal", "socket": "/run/k3s/containerd/containerd.sock"}
    k3s = validation.parse({**VERSION, "runtime": runtime})
    assert (k3s.runtime.restart_mode, k3s.runtime.socket) == (
        spec.RestartMode.SIGNAL,
        "/run/k3s/containerd/containerd.sock",
    )
