"""`metax-operator diff`'s input side (R-DIFF): ``--set`` edits the live spec like Helm's ``--set`` for maps,
and refuses what it cannot express with a message naming the argument; ``--set`` without a live
cluster-operator is a usage error; ``--driver-config FILE`` takes a ConfigMap or only its data, and refuses
another object, name or namespace naming the field (R-VF). (The prediction: tests/unit/test_diff.py and
test_diff_driver_config.py; against a live install, applied and compared:
tests/integration/operator/test_diff_live.py.)
"""

from __future__ import annotations

from typing import Any

import pytest

from metax_core.errors import InvalidSpec
from metax_core.spec import validation
from services.cli import diff, diff_driver_config, documents


def test_set_edits_nested_maps_and_reads_helm_scalars() -> None:
    document: dict[str, Any] = {"registry": "registry.example.com/metax", "driver": {"payload": {"version": "2.20.0"}}}
    diff.set_path(document, "driver.payload.version=2.21.0")
    diff.set_path(document, "driver.upgradePolicy.pause=true")
    diff.set_path(document, "gpuDevice.healthyInterval=7")
    assert document["driver"] == {"payload": {"version": "2.21.0"}, "upgradePolicy": {"pause": True}}
    parsed = validation.parse(document)  # "7" is read as Helm's --set writes an integer (chart_values)
    assert parsed.gpu_device.healthy_interval == 7 and parsed.driver.upgrade_policy.pause is True


@pytest.mark.parametrize("bad", ["novalue", "=x", "a..b=1", "tolerations[0].key=x"])
def test_set_refuses_what_it_cannot_express(bad: str) -> None:
    with pytest.raises(documents.UsageError, match="expected PATH=VALUE"):
        diff.set_path({}, bad)


def test_set_needs_a_live_cluster_operator() -> None:
    with pytest.raises(documents.UsageError, match="there is none: use -f"):
        diff._new_document(None, None, ["driver.payload.version=1"])


def test_driver_config_file_is_the_config_map_or_its_data() -> None:
    data = {"node-vfnums": "nodes:\n  gpu-a:\n    vfnum: 4\n"}
    wrapped = diff_driver_config.manifest(data, "ns")
    assert wrapped == {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "driver-config", "namespace": "ns"},
        "data": data,
    }
    whole = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "driver-config", "labels": {"a": "b"}}}
    assert diff_driver_config.manifest({**whole, "data": data}, "ns") == {
        **wrapped,
        "metadata": {"name": "driver-config", "namespace": "ns", "labels": {"a": "b"}},
    }


@pytest.mark.parametrize(
    ("document", "paths"),
    [
        ({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "driver-config"}}, ["kind"]),
        ({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "other"}}, ["metadata.name"]),
        (
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "driver-config", "namespace": "x"}},
            ["metadata.namespace"],
        ),
        ({"kind": "ConfigMap", "metadata": {"name": "driver-config"}}, ["apiVersion"]),
        (["a"], [""]),
    ],
)
def test_driver_config_file_of_another_object_is_refused_naming_the_field(document: Any, paths: list[str]) -> None:
    with pytest.raises(InvalidSpec) as caught:
        diff_driver_config.manifest(document, "ns")
    assert [e.path for e in caught.value.errors] == paths
