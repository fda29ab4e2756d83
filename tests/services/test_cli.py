"""The `metax-operator` command line: exit codes, error lines with field paths, render output, maca resolve."""

from __future__ import annotations

import json
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest
import yaml

from metax_core.cluster import configmaps, workloads
from metax_core.node import driver_config, vfio_config_map
from metax_core.rollout import fleet
from metax_core.spec import validation
from metax_core.spec.model import VfioConfigEntry
from metax_core.wire import meta
from services.cli import main as cli

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_console_script_is_declared_and_help_works() -> None:
    scripts = {e.name: e.value for e in metadata.entry_points(group="console_scripts")}
    assert scripts["metax-operator"] == "services.cli.main:main"
    done = subprocess.run(
        [sys.executable, "-m", "services.cli.main", "--help"], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0
    for command in ("validate", "render", "maca", "rollout"):
        assert command in done.stdout
    assert "fake-host" not in done.stdout and "dev" not in done.stdout.split()  # developer tools live in metax-dev


def test_validate_accepts_the_example_object(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(capsys, "validate", "-f", str(EXAMPLES / "cluster-operator.yaml")) == (0, "valid\n", "")


def test_validate_prints_every_error_with_its_path(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "validate", "-f", str(EXAMPLES / "invalid.yaml"))
    assert code == 2 and out == ""
    lines = err.splitlines()
    assert "gpuDevice.healthyInterval: must be an integer, got string '5s'" in lines
    assert any(
        line.startswith("driver.deployPolicy: must be one of PreferCloud, PreferHost, PreferNewer, Never")
        for line in lines
    )
    assert "driver.upgradePolicy.maxParalel: unknown field; did you mean 'maxParallel'?" in lines
    assert "vfio-manager: unknown field; did you mean 'vfioManager'?" in lines
    assert "exporter.service.port: is only used when type is NodePort or LoadBalancer" in lines
    assert "Traceback" not in err


def test_validate_reads_json_from_stdin(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import io

    monkeypatch.setattr(
        sys,
        "stdin",
        io.StringIO(json.dumps({"registry": "registry.example.com/metax", "driver": {"deployPolicy": "Never"}})),
    )
    assert run(capsys, "validate", "-f", "-")[0] == 0


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("a: [1", "x.yaml:1:6: expected ',' or ']'"),
        ("a: 1\n---\nb: 2\n", "exactly one document, found 2"),
        ("- 1\n- 2\n", "the document must be a mapping"),
        ("kind: Deployment\napiVersion: apps/v1\n", "kind: must be ClusterOperator"),
    ],
)
def test_bad_files_get_a_message_not_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str, message: str
) -> None:
    path = tmp_path / "x.yaml"
    path.write_text(content)
    code, _, err = run(capsys, "validate", "-f", str(path))
    assert code == 2 and message in err and "Traceback" not in err


def test_a_file_of_several_documents_is_described(capsys: pytest.CaptureFixture[str]) -> None:
    """R-VALUES: validate on a workload example names the file, says what its documents are and what it expects."""
    source = str(EXAMPLES / "dra-gpus.yaml")
    code, out, err = run(capsys, "validate", "-f", source)
    assert code == 2 and out == ""
    assert err == (
        f"{source}: must hold exactly one document, found 3 (ResourceClaimTemplate two-gpus-one-pcie-root, "
        "Pod train-two-gpus, Pod one-gpu-any-allocator); expected one ClusterOperator, or its spec alone (a values "
        "file: the chart's values)\n"
    )


@pytest.mark.parametrize(
    ("content", "found"),
    [
        ("", "found 0; expected one ClusterOperator"),
        ("a: 1\n---\n- 1\n---\nkind: Pod\n---\nplain\n", "4 (a mapping without kind, a list, Pod, the value 'plain')"),
        ("".join(f"---\nkind: Pod\nmetadata: {{name: p{i}}}\n" for i in range(7)), "Pod p4 and 2 more); expected"),
    ],
)  # fmt: skip
def test_what_the_documents_are(tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str, found: str) -> None:
    path = tmp_path / "x.yaml"
    path.write_text(content)
    code, _, err = run(capsys, "render", "-f", str(path))
    assert code == 2 and err.startswith(f"{path}: must hold exactly one document, ") and found in err


def test_missing_file_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "validate", "-f", "/nonexistent/values.yaml")
    assert code == 2 and "cannot read /nonexistent/values.yaml" in err


def test_render_prints_workloads_in_dependency_order_and_reports_what_it_leaves_out(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    values = tmp_path / "v.yaml"
    values.write_text(
        yaml.safe_dump(
            {"registry": "r.example.com", "driver": {"payload": {"version": "1.0.0"}}, "runtime": {"deploy": False}}
        )
    )
    code, out, err = run(capsys, "render", "-f", str(values), "-o", "json")
    assert code == 0
    items = json.loads(out)["items"]
    # the ConfigMaps first, as the operator applies them before the workloads that read them
    assert [(o["kind"], o["metadata"]["name"]) for o in items[:2]] == [
        ("ConfigMap", "driver-config"),
        ("ConfigMap", "metax-vfio-config"),
    ]
    names = [o["metadata"]["name"] for o in items if o["kind"] in ("DaemonSet", "Deployment")]
    expected = [
        "metax-gpu-discovery",
        "metax-gpu-label",
        "metax-vfio-manager",
        "metax-topo-master",
        "metax-topo-worker",
    ]
    assert names == expected
    accounts = [o["metadata"]["name"] for o in items if o["kind"] == "ServiceAccount"]
    assert accounts == expected
    assert "skipped: driver is enabled but not deployed: disabled prerequisite runtime" in err
    assert (
        "skipped: gpuDevice is enabled but not deployed: disabled prerequisite runtime; blocked prerequisite maca"
        in err
    )


def test_render_one_component_as_yaml(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "render", "-f", str(EXAMPLES / "cluster-operator.yaml"), "--component", "maca")
    assert code == 0
    documents = list(yaml.safe_load_all(out))
    assert [d["kind"] for d in documents] == [
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",
        "RoleBinding",
        "DaemonSet",
        "NetworkPolicy",  # it listens on no port: it admits nothing (docs/security.md "Network")
    ]
    daemonset = documents[-2]
    tolerations = daemonset["spec"]["template"]["spec"]["tolerations"]
    assert {"key": "node-type", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"} in tolerations
    assert {"key": "node-type", "operator": "Equal", "value": "general", "effect": "NoSchedule"} not in tolerations


def test_render_shows_the_configmaps_as_the_operator_applies_them_and_their_readers_parse_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    values = tmp_path / "v.yaml"
    selection = [{"nodeName": "gpu-[0-9]+", "gpus": "0,1"}]
    values.write_text(
        yaml.safe_dump(
            {
                "registry": "registry.example.com/metax",
                "driver": {"payload": {"version": "1.0.0"}},
                "vfioManager": {"vfioConfig": selection},
            }
        )
    )
    code, out, _ = run(capsys, "render", "-f", str(values), "--component", "vfioManager", "--namespace", "gpu-ops")
    assert code == 0
    documents = list(yaml.safe_load_all(out))
    assert documents[0]["kind"] == "ConfigMap" and documents[0]["metadata"]["namespace"] == "gpu-ops"
    assert documents[0] == configmaps.vfio_config_map(validation.parse(yaml.safe_load(values.read_text())), "gpu-ops")
    assert vfio_config_map.parse(documents[0]["data"]) == (VfioConfigEntry("gpu-[0-9]+", "0,1"),)
    assert "DaemonSet" in [d["kind"] for d in documents] and "driver-config" not in out
    code, out, _ = run(capsys, "render", "-f", str(values), "--component", "driver")
    (driver_cm,) = [d for d in yaml.safe_load_all(out) if d["kind"] == "ConfigMap"]
    assert driver_cm["metadata"]["name"] == "driver-config"
    assert driver_config.parse(driver_cm["data"]) == driver_config.DriverConfig()
    code, out, _ = run(capsys, "render", "-f", str(values), "--component", "metax-vfio-config")
    assert [d["metadata"]["name"] for d in yaml.safe_load_all(out)] == ["metax-vfio-config"]


def test_render_unknown_component_names_the_rendered_ones(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "render", "-f", str(EXAMPLES / "values-minimal.yaml"), "--component", "nope")
    assert code == 2 and "no rendered component 'nope'" in err and "maca" in err


@pytest.mark.parametrize(
    ("request_", "available", "expected"),
    [
        ("maca-2", "2.18.0.3,2.9.1,3.0.0", "2.18.0.3"),
        ("maca-2.18", "2.18.0.3,2.18.0.10,2.1.9", "2.18.0.10"),
        ("maca-2.18.0.3", "2.18.0.3,2.18.0.4", "2.18.0.3"),
    ],
)
def test_maca_resolve_picks_the_newest_prefix_match(
    capsys: pytest.CaptureFixture[str], request_: str, available: str, expected: str
) -> None:
    assert run(capsys, "maca", "resolve", request_, "--available", available) == (0, expected + "\n", "")


@pytest.mark.parametrize(
    ("request_", "message"),
    [("maca", "must look like"), ("maca-", "must look like"), ("maca-4", "no installed MXMACA version matches")],
)
def test_maca_resolve_refuses_with_a_message(capsys: pytest.CaptureFixture[str], request_: str, message: str) -> None:
    code, out, err = run(capsys, "maca", "resolve", request_, "--available", "2.18.0.3")
    assert code == 2 and out == "" and message in err


def test_render_shows_the_driver_daemonset_stamped_as_the_operator_applies_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The revision the rollout compares driver pods by, and the spec.driver rollback reads back, are in the
    rendered driver DaemonSet (R-ROLLOUT), the same as the operator's own stamping gives."""
    source = EXAMPLES / "cluster-operator.yaml"
    code, out, _ = run(capsys, "render", "-f", str(source), "--component", "driver")
    assert code == 0
    (ds,) = [d for d in yaml.safe_load_all(out) if d["kind"] == "DaemonSet"]
    revision = fleet.template_revision(ds)
    assert revision and revision == fleet.revision_of(ds["spec"]["template"])
    parsed = validation.parse(yaml.safe_load(source.read_text()))
    (unstamped,) = [
        o
        for o in workloads.render(parsed).objects
        if o["kind"] == "DaemonSet" and o["metadata"]["name"] == "metax-driver"
    ]
    assert ds == json.loads(json.dumps(fleet.stamped(unstamped, parsed.driver)))
    code, out, _ = run(capsys, "render", "-f", str(source), "--component", "gpuDevice")
    assert meta.DRIVER_REVISION not in out  # only the driver's DaemonSet is stamped
