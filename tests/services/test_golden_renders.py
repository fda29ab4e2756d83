"""The golden renders (tests/golden, docs/contributing.md "Golden renders"): what the operator applies for each
scenario and component equals the files under review, byte for byte.

A refactor of the render's inputs must leave them unchanged; a change meant to alter a manifest rewrites them
with ``python -m metax_dev.golden --write`` and the pull request shows the manifests' diff.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from metax_core.components import Component
from metax_dev import golden
from services.cli import main as cli


def test_every_golden_render_equals_the_renderer() -> None:
    if diff := golden.differences():
        pytest.fail(
            "the golden renders differ from what the renderer gives now (- on disk, + rendered):\n"
            f"{diff}\nIf the change is meant, run `{golden.REGENERATE}` and review the diff of tests/golden in "
            "the pull request (docs/contributing.md).",
            pytrace=False,
        )


def test_every_component_has_a_golden_render() -> None:
    rendered = {p.stem for p in golden.GOLDEN_DIR.glob("*/*.yaml")}
    assert rendered == {c.value for c in Component}


def test_a_golden_render_is_what_the_command_line_prints_for_the_component(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The files are `metax-operator render --component` of each scenario given as an example file (the CLI takes
    no render settings but the namespace and version, so the inline scenarios are left to the test above)."""
    compared, expected = 0, 0
    for name, scenario in golden.scenarios().items():
        if "file" not in scenario or scenario.get("settings"):
            continue
        files = sorted((golden.GOLDEN_DIR / name).glob("*.yaml"))
        expected += len(files)
        for path in files:
            argv = ["render", "-f", str(golden.REPO / scenario["file"]), "--component", path.stem]
            assert cli.main([*argv, "--version", golden.VERSION]) == 0
            printed = list(yaml.safe_load_all(capsys.readouterr().out))
            assert printed == list(yaml.safe_load_all(path.read_text())), f"{name}/{path.name}"
            compared += 1
    assert compared == expected > 0


def test_the_check_names_each_changed_missing_and_extra_file_and_the_write_restores_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    copy = tmp_path / "tests" / "golden"
    shutil.copytree(golden.GOLDEN_DIR, copy)
    maca = copy / "minimal" / "maca.yaml"
    maca.write_text(maca.read_text().replace("metax-maca", "metax-sdk", 1))
    (copy / "dra" / "draDriver.yaml").unlink()
    (copy / "minimal" / "exporter.yaml").write_text("kind: Service\n")

    diff = golden.differences(copy)
    assert "--- a/tests/golden/minimal/maca.yaml\n+++ b/tests/golden/minimal/maca.yaml\n" in diff
    assert "-    app.kubernetes.io/name: metax-sdk\n+    app.kubernetes.io/name: metax-maca\n" in diff
    assert "--- /dev/null\n+++ b/tests/golden/dra/draDriver.yaml\n" in diff
    assert "--- a/tests/golden/minimal/exporter.yaml\n+++ /dev/null\n" in diff and "\n-kind: Service\n" in diff
    assert golden.main([], copy) == 1
    assert f"run: {golden.REGENERATE}" in capsys.readouterr().out

    assert golden.main(["--write"], copy) == 0
    assert len(capsys.readouterr().out.splitlines()) == 3  # wrote maca, wrote draDriver, deleted exporter
    assert golden.differences(copy) == ""
    assert golden.main([], copy) == 0
    assert not (copy / "minimal" / "exporter.yaml").exists()
