"""Compute resources per component (issue 38 item 5): Kubernetes quantities read as the API server reads them,
``resources`` in every component's spec section validated by field, and every workload's container rendered with
its measured memory request and limit, the administrator's values over them."""

from __future__ import annotations

from typing import Any

import pytest

from metax_core import components
from metax_core.cluster import workloads
from metax_core.errors import InvalidSpec
from metax_core.spec import model as spec
from metax_core.spec import quantity, validation
from metax_core.spec.names import REGISTRY_EXAMPLE

BASE = {"registry": REGISTRY_EXAMPLE, "driver": {"payload": {"version": "2.14.6"}}}


@pytest.mark.parametrize(
    ("written", "value"),
    [
        ("128Mi", 128 * 2**20),
        ("1Gi", 2**30),
        ("500m", 0.5),
        ("2", 2),
        (2, 2),
        (0.5, 0.5),
        ("1e3", 1000),
        ("1.5k", 1500),
    ],
)
def test_quantities_are_read_as_the_api_server_reads_them(written: str | int | float, value: float) -> None:
    parsed = quantity.Quantity.parse(written)
    assert parsed is not None and float(parsed.value) == value
    assert str(parsed) == str(written)


@pytest.mark.parametrize("written", ["", "12 Mi", "-1", "1.2.3", "Mi", "12MiB", "1e"])
def test_not_a_quantity(written: str) -> None:
    assert quantity.Quantity.parse(written) is None


def test_quantities_compare_by_value() -> None:
    q = quantity.Quantity.parse
    assert q("1Gi") == q("1024Mi") and q("1000Mi") < q("1Gi")  # type: ignore[operator]


def _container(objects: dict[str, Any], name: str) -> dict[str, Any]:
    container: dict[str, Any] = objects[name]["spec"]["template"]["spec"]["containers"][0]
    return container


def _objects(document: dict[str, Any]) -> dict[str, Any]:
    rendered = workloads.render(validation.parse(document))
    return {f"{o['kind']}/{o['metadata']['name']}": o for o in rendered.objects}


def test_every_workload_gets_its_measured_memory_request_and_limit_and_no_cpu_limit() -> None:
    every = {**BASE, "exporter": {"deploy": True}, "gpuScheduler": {"deploy": True}, "draDriver": {"deploy": True}}
    objects = _objects(every)
    for info in components.CATALOGUE:
        for workload in info.workloads:
            found = _container(objects, f"{workload.kind.value}/{workload.name}")["resources"]
            request, limit = workload.memory_mib
            assert found == {"requests": {"cpu": "10m", "memory": f"{request}Mi"}, "limits": {"memory": f"{limit}Mi"}}
            assert request < limit


def test_an_administrators_values_win_and_a_higher_request_raises_the_default_limit() -> None:
    document = {
        **BASE,
        "gpuDevice": {"resources": {"requests": {"memory": "512Mi", "cpu": 1}}},
        "maca": {"resources": {"limits": {"memory": "1Gi", "cpu": "2"}}},
    }
    objects = _objects(document)
    assert _container(objects, "DaemonSet/metax-gpu-device")["resources"] == {
        "requests": {"cpu": "1", "memory": "512Mi"},
        "limits": {"memory": "512Mi"},  # the default 128Mi would make the pod invalid
    }
    assert _container(objects, "DaemonSet/metax-maca")["resources"] == {
        "requests": {"cpu": "10m", "memory": "48Mi"},
        "limits": {"cpu": "2", "memory": "1Gi"},
    }
    sidecar = objects["DaemonSet/metax-maca"]["spec"]["template"]["spec"]["containers"][1]
    assert sidecar["name"] == "container-edit" and sidecar["resources"]["limits"] == {"memory": "64Mi"}


@pytest.mark.parametrize(
    ("resources", "message"),
    [
        (
            {"requests": {"memory": "1Gi"}, "limits": {"memory": "512Mi"}},
            "driver.resources.requests.memory: 1Gi is above limits.memory 512Mi",
        ),
        (
            {"requests": {"memory": "lots"}},
            'driver.resources.requests.memory: must be a Kubernetes quantity such as "128Mi"',
        ),
        ({"limits": {"gpu": 1}}, "driver.resources.limits.gpu: unknown field"),
        ({"requests": {"cpu": True}}, "driver.resources.requests.cpu: must be a Kubernetes quantity"),
    ],
)
def test_bad_resources_are_refused_naming_the_field(resources: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidSpec) as refused:
        validation.parse({**BASE, "driver": {**BASE["driver"], "resources": resources}})
    assert any(str(e).startswith(message) for e in refused.value.errors), refused.value.errors


def test_the_spec_writes_back_what_it_read() -> None:
    from metax_core.spec import converter

    s = validation.parse({**BASE, "topo": {"resources": {"requests": {"cpu": "250m", "memory": 100}}}})
    assert isinstance(s.topo.resources, spec.Resources)
    assert converter.unstructure(s)["topo"]["resources"] == {"requests": {"cpu": "250m", "memory": "100"}}
