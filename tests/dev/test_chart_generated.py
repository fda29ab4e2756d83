"""The chart's generated files match the spec model and the RBAC module (R-VALUES, R-SECURITY).

Covers: values.yaml, values.schema.json, README.md and templates/operator-rbac.yaml are exactly what
`metax_dev.chart` generates now (fails on drift: run ``python -m metax_dev.chart --write``); Chart.yaml's
appVersion is the package version; values.yaml minus ``operator`` is the spec with every default; every spec
option is in the README table with its default; the README has the corrected §3.2.8 commands of
docs/rollout.md and the install commands the integration tests run.
"""

from __future__ import annotations

import importlib.metadata
import json
from pathlib import Path

import pytest
import yaml

from metax_core.spec import converter
from metax_core.spec import model as spec
from metax_dev import chart

CHART = Path(__file__).resolve().parents[2] / "charts" / "metax-operator"


@pytest.mark.parametrize("path", sorted(chart.generated_files(CHART)), ids=lambda p: p.name)
def test_generated_file_is_current(path: Path) -> None:
    expected = chart.generated_files(CHART)[path]
    assert path.read_text() == expected, f"{path} drifted: run `python -m metax_dev.chart --write`"


def test_app_version_is_the_package_version() -> None:
    meta = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert meta["appVersion"] == importlib.metadata.version("metax-gpu-operator") == meta["version"]


def test_values_are_the_spec_with_every_default() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    operator = values.pop("operator")
    every_default = converter.unstructure(spec.ClusterOperatorSpec())
    # a field of this release the previous release's webhook would refuse is rendered only when set (R-UPGRADE)
    assert values == {k: v for k, v in every_default.items() if k not in spec.NEW_FIELDS}
    assert set(spec.NEW_FIELDS) <= set(every_default)
    assert converter.structure(values, spec.ClusterOperatorSpec) == spec.ClusterOperatorSpec()
    assert operator == chart.operator_defaults()
    assert operator["webhook"]["failurePolicy"] in ("Ignore", "Fail")


def test_schema_is_closed_and_allows_the_deprecated_tolerations_file() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    assert schema["additionalProperties"] is False
    assert schema["properties"]["driver"]["properties"]["deployPolicy"]["enum"] == [p.value for p in spec.DeployPolicy]
    kinds = [branch.get("type") for branch in schema["properties"]["tolerations"]["anyOf"]]
    assert "string" in kinds and ["array", "null"] in kinds


def test_readme_lists_every_option_with_its_default_and_the_rollout_commands() -> None:
    readme = (CHART / "README.md").read_text()
    for option, kind, default, _ in chart.option_rows():
        assert f"| {option} | {kind} | {default} |" in readme
    assert (
        '| `driver.deployPolicy` | enum: `PreferCloud`, `PreferHost`, `PreferNewer`, `Never` | `"PreferCloud"` |'
        in readme
    )
    assert "| `gpuDevice.healthyInterval` | integer | `5` |" in readme
    assert '"path": "/spec/driver/upgradePolicy/pause", "value": true' in readme
    assert "--type=json" in readme and "type=json " not in readme.replace("--type=json", "")
    assert chart.INSTALL_COMMANDS in readme and chart.UNINSTALL_COMMANDS in readme
    assert "kubectl delete crd clusteroperators.gpu.metax-tech.com" in readme


def test_the_repository_readme_installs_with_the_commands_the_tests_run() -> None:
    readme = (CHART.parents[1] / "README.md").read_text()
    assert chart.INSTALL_COMMANDS in readme and chart.UNINSTALL_COMMANDS in readme


def test_the_readme_permissions_table_is_the_rbac_module() -> None:
    readme = (CHART / "README.md").read_text()
    assert chart.rbac_table() in readme
    assert "| `metax-gpu-label` | nodes: get list watch patch |" in readme
