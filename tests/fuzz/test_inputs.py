"""Fuzzing every parser and the CLI (issue 10): arbitrary bytes, arbitrary YAML trees, mutated valid specs.

For each case: no exception escapes but the project's own (`MetaxError` subclasses the parser documents),
the case ends before the watchdog fires (a hang fails), and every refusal names a field path (the root's
own problems, "not a mapping" and "keys must be strings", are the only path-less ones). Valid specs render,
and what they render is JSON. Budget: ``METAX_FUZZ_EXAMPLES`` per test (README "Tests").
"""

from __future__ import annotations

import contextlib
import io
import json
import os
from pathlib import Path
from typing import Any

import pytest
from fuzzing import EXAMPLES, watchdog
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from metax_core import versions
from metax_core.cluster import workloads
from metax_core.errors import InvalidSpec
from metax_core.node import driver_config
from metax_core.spec import converter, text, validation, vfio_config
from metax_core.spec import model as spec
from services.cli import main as cli

FUZZ = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
ROOT_MESSAGES = ("the document must be a mapping", "keys must be strings")

# Keys a spec uses, so random trees reach deep into the converter instead of stopping at "unknown field".


def _spec_keys() -> list[str]:
    records = [c for c in vars(spec).values() if isinstance(c, type) and hasattr(c, "__attrs_attrs__")]
    return sorted({converter.camel_case(a.name) for c in records for a in c.__attrs_attrs__})


KEYS = _spec_keys()
scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=2**62, max_value=2**70)
    | st.floats(allow_nan=True)
    | st.text(max_size=12)
    | st.sampled_from(["100%", "50%", " 5%", "all", "0,1", "Never", "PreferCloud", "NodePort", "2.18.0.3", "a" * 300])
)
keys = st.sampled_from(KEYS) | st.text(max_size=6) | st.integers(-3, 3) | st.booleans() | st.none()
trees = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(keys, inner, max_size=5),
    max_leaves=30,
)


def _valid_document() -> dict[str, Any]:
    return {
        "registry": "reg.example.com/metax",
        "imagePullSecrets": ["pull"],
        "tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}],
        "podTemplateSpec": {
            "spec": {
                "nodeSelector": {"zone": "a"},
                "affinity": {
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": [
                                {"matchExpressions": [{"key": "k", "operator": "In", "values": ["v"]}]}
                            ]
                        }
                    }
                },
            }
        },
        "gpuDevice": {"healthyInterval": 5, "sgpuShares": 16},
        "driver": {
            "payload": {"version": "2.32.0"},
            "upgradePolicy": {
                "enableRollout": True,
                "maxParallel": "50%",
                "upgradeSteps": [{"replicas": 1, "pauseDuration": "10s"}, {"replicas": "100%"}],
            },
        },
        "vfioManager": {"vfioConfig": [{"nodeName": "gpu-[0-9]+", "gpus": "0,1"}]},
        "maca": {"payload": {"images": ["maca-c500:2.18.0.3-ubuntu18.04-amd64"]}},
        "exporter": {"deploy": True, "service": {"type": "NodePort", "port": 30400}},
    }


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [prefix]
    if isinstance(value, dict):
        for k, v in value.items():
            found += _paths(v, (*prefix, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            found += _paths(v, (*prefix, i))
    return found


@st.composite
def mutated_specs(draw: st.DrawFn) -> Any:
    document: Any = _valid_document()
    for _ in range(draw(st.integers(1, 4))):
        paths = _paths(document)
        path = draw(st.sampled_from(paths))
        kind = draw(st.sampled_from(["replace", "delete", "add", "nest", "wrap"]))
        if not path:
            if kind == "replace":
                document = draw(trees)
            continue
        parent = document
        for step in path[:-1]:
            parent = parent[step]
        last = path[-1]
        if kind == "replace":
            parent[last] = draw(trees)
        elif kind == "delete":
            del parent[last]
        elif kind == "add" and isinstance(parent[last], dict):
            parent[last][draw(keys)] = draw(trees)
        elif kind == "nest":
            deep: Any = draw(scalars)
            for _ in range(draw(st.integers(1, 600))):
                deep = [deep] if draw(st.booleans()) else {"nodeAffinity": deep}
            parent[last] = deep
        else:
            parent[last] = [parent[last]]
    return document


def _check_refusal(exc: InvalidSpec) -> None:
    assert exc.errors, "a refusal with no reason"
    for error in exc.errors:
        assert error.path or error.message.startswith(ROOT_MESSAGES), f"no field path: {error}"
        assert "\n" not in error.message and len(error.message) < 2000, error.message


def _parse_and_render(document: object) -> None:
    try:
        parsed = validation.parse(document)
    except InvalidSpec as exc:
        _check_refusal(exc)
        return
    rendered = workloads.render(parsed)
    json.dumps(list(rendered.objects))


@FUZZ
@given(st.binary(max_size=4096))
@example(b"\xff\xfe" + bytes(range(256)))
@example(b"a: " + b"[" * 3000)
@example(b"a: &x [1]\nb: *x\n")
def test_arbitrary_bytes_to_the_loader(data: bytes) -> None:
    with watchdog("loader: arbitrary bytes"):
        try:
            text.load_document(data, "fuzz")
        except text.TextError as exc:
            message = str(exc)
        else:
            return
        assert message.startswith("fuzz") and "\n" not in message


@FUZZ
@given(st.text(alphabet=st.sampled_from(list("ab:-[]{},&*!?|>'\"#\n 01%.")), max_size=200))
def test_yaml_like_text_to_the_loader_and_the_validator(data: str) -> None:
    with watchdog("loader + validator: YAML-like text"):
        try:
            document = text.load_document(data, "fuzz")
        except text.TextError:
            return
        _parse_and_render(document)


@FUZZ
@given(trees)
@example({1: "x"})
@example({"gpuLabel": {1: "x"}})
@example({"": None, "driver": None})  # found by the long run: an empty key had no path
@example({"kind": [[[["x"]]]], "apiVersion": 1})
def test_arbitrary_trees_to_the_validator(document: Any) -> None:
    with watchdog("validator: arbitrary trees"):
        _parse_and_render(document)


@FUZZ
@given(mutated_specs())
def test_mutated_valid_specs_to_the_validator_and_render(document: Any) -> None:
    with watchdog("validator + render: mutated valid specs"):
        _parse_and_render(document)


@FUZZ
@given(st.dictionaries(st.sampled_from([*driver_config.DATA_KEYS, "x"]), st.text(max_size=200) | trees, max_size=3))
@example({"node-vfnums": "nodes: {08: {vfnum: 1}}"})
@example({"module-params": "a: " + "[" * 5000})
def test_driver_config_data(data: dict[str, Any]) -> None:
    with watchdog("driver-config: data"):
        try:
            driver_config.parse(data)
        except InvalidSpec as exc:
            _check_refusal(exc)


@FUZZ
@given(st.text(max_size=60), st.lists(st.text(max_size=30), max_size=5))
@example("(a+)+$", ["a" * 41 + "!"])
@example("a{4294967296}", ["a"])
@example("(" * 494 + ")" * 494, [""])
def test_node_name_patterns(pattern: str, node_names: list[str]) -> None:
    with watchdog("vfio nodeName: patterns"):
        entries = (spec.VfioConfigEntry(node_name=pattern, gpus="all"),)
        for error in vfio_config.check_entries(entries):
            assert error.path.startswith("vfioManager.vfioConfig[0]")
        for name in node_names:
            vfio_config.selection_for_node(entries, name)


@FUZZ
@given(st.text(max_size=40), st.lists(st.text(max_size=30), max_size=5))
@example("maca-2.18", ["2.18.0.3", "2.18.0.3-rc1"])
@example("maca-" + "9" * 5000, ["1"])
def test_maca_version_requests(request: str, available: list[str]) -> None:
    with watchdog("maca: version requests"):
        with contextlib.suppress(InvalidSpec, versions.NoMatchingVersion):
            versions.resolve(request, available)
        for item in available:
            with contextlib.suppress(ValueError):
                versions.parse(item)


@settings(max_examples=max(EXAMPLES // 5, 10), deadline=None, suppress_health_check=list(HealthCheck))
@given(st.binary(max_size=2048) | mutated_specs().map(lambda d: json.dumps(d).encode()))
def test_the_cli_answers_every_file_with_exit_0_or_2(tmp_path_factory: pytest.TempPathFactory, data: bytes) -> None:
    path: Path = tmp_path_factory.mktemp("fuzz") / "input.yaml"
    path.write_bytes(data)
    for argv in (["validate"], ["render"], ["rollout", "plan", "--nodes", "4"]):
        with watchdog("cli: files"):
            out, err = io.StringIO(), io.StringIO()
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                command = (
                    [*argv[:2], "-f", os.fspath(path), *argv[2:]] if argv[0] == "rollout" else [*argv, "-f", str(path)]
                )
                code = cli.main(command)
            assert code in (0, 2), err.getvalue()
            assert "Traceback" not in err.getvalue()
            if code == 2:
                assert err.getvalue().strip(), "a refusal without a message"
