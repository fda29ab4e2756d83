"""``python -m metax_dev.golden [--write]``: the golden renders, what the operator applies per scenario and component.

Why goldens: the render is the operator's whole effect on a cluster, and its inputs (the component catalogue,
host paths, RBAC, environment, probes) are spread over many core modules. A refactor that moves one of them
must leave every manifest byte-equal; a change that means to alter a manifest shows it, object by object, in
the pull request's diff of ``tests/golden/`` (docs/contributing.md "Golden renders").

Each scenario of ``tests/golden/scenarios.yaml`` (a spec and the render settings) gives one file per rendered
component, ``tests/golden/<scenario>/<component>.yaml``: the objects the operator applies for it, in its apply
order, exactly as ``metax-operator render --component <component>`` selects them (the ConfigMaps go with the
component whose agent reads them; the driver DaemonSet is stamped with its revision as the operator applies
it). Keys are sorted so that a file changes only where a manifest does.

Without ``--write`` it prints a unified diff of every stale, missing or extra file and exits 1 when there is
one; with ``--write`` it rewrites them (and deletes the files of components no longer rendered).
"""

from __future__ import annotations

import argparse
import difflib
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from metax_core.cluster import configmaps, render_settings, workloads
from metax_core.rollout import fleet
from metax_core.spec import model as spec
from metax_core.spec import validation

REPO = Path(__file__).resolve().parent.parent
GOLDEN_DIR = REPO / "tests" / "golden"
SCENARIOS_FILE = GOLDEN_DIR / "scenarios.yaml"
REGENERATE = "python -m metax_dev.golden --write"
"""The command that rewrites the goldens (named in every failure, docs/contributing.md)."""
VERSION = "0.0.0-golden"
"""Every scenario's component image tag: fixed, so that a release does not rewrite the goldens."""

_SETTINGS = {
    "namespace": "namespace",
    "imagePullPolicy": "image_pull_policy",
    "hostPathPrefix": "host_path_prefix",
    "serviceMonitor": "service_monitor",
    "imageDigests": "image_digests",
}
"""A scenario's ``settings`` keys (the chart's spelling) -> `render_settings.RenderSettings` fields."""


def scenarios(path: Path = SCENARIOS_FILE) -> dict[str, Mapping[str, Any]]:
    loaded = yaml.safe_load(path.read_text())
    if not isinstance(loaded, dict):
        raise ValueError(f"{path}: expected a mapping of scenario name -> scenario")
    return loaded


def scenario_spec(name: str, scenario: Mapping[str, Any]) -> spec.ClusterOperatorSpec:
    """The scenario's spec: its example file (a ClusterOperator or chart values) or its inline ``spec``."""
    if ("file" in scenario) == ("spec" in scenario):
        raise ValueError(f"scenario {name!r}: give exactly one of file and spec")
    document = yaml.safe_load((REPO / scenario["file"]).read_text()) if "file" in scenario else scenario["spec"]
    return validation.parse(document)


def scenario_settings(name: str, scenario: Mapping[str, Any]) -> render_settings.RenderSettings:
    given = scenario.get("settings") or {}
    if unknown := sorted(set(given) - set(_SETTINGS)):
        raise ValueError(f"scenario {name!r}: unknown settings {unknown}; known: {sorted(_SETTINGS)}")
    return render_settings.RenderSettings(version=VERSION, **{_SETTINGS[k]: v for k, v in given.items()})


def component_of(manifest: Mapping[str, Any]) -> str:
    """The component an object goes with: its component label, or for a ConfigMap the component that reads it."""
    metadata = manifest["metadata"]
    label: str | None = (metadata.get("labels") or {}).get(workloads.COMPONENT_LABEL)
    if label is None and manifest["kind"] == "ConfigMap" and metadata["name"] in configmaps.READERS:
        return configmaps.READERS[metadata["name"]].value
    if label is None:
        raise ValueError(f"{manifest['kind']} {metadata['name']}: rendered without a component")
    return label


def applied(s: spec.ClusterOperatorSpec, settings: render_settings.RenderSettings) -> list[Mapping[str, Any]]:
    """Every object the operator applies for ``s``, in its order (as ``metax-operator render`` prints them)."""
    rendered = list(workloads.render(s, settings).objects)
    if (index := workloads.driver_daemonset_index(rendered)) is not None:
        rendered[index] = fleet.stamped(rendered[index], s.driver)
    return [*configmaps.manifests(s, settings.namespace), *rendered]


def by_component(objects: Sequence[Mapping[str, Any]]) -> dict[str, list[Mapping[str, Any]]]:
    grouped: dict[str, list[Mapping[str, Any]]] = {}
    for manifest in objects:
        grouped.setdefault(component_of(manifest), []).append(manifest)
    return grouped


def text(objects: Sequence[Mapping[str, Any]]) -> str:
    """The objects as one YAML stream, keys sorted and no line folded (a stable file for diffs)."""
    return yaml.safe_dump_all(
        [dict(o) for o in objects], sort_keys=True, default_flow_style=False, width=10_000, allow_unicode=True
    )


def expected_files(golden_dir: Path = GOLDEN_DIR) -> dict[Path, str]:
    """Every golden file with the text the renderer gives it now."""
    files: dict[Path, str] = {}
    for name, scenario in scenarios(golden_dir / SCENARIOS_FILE.name).items():
        s = scenario_spec(name, scenario)
        for component, objects in by_component(applied(s, scenario_settings(name, scenario))).items():
            files[golden_dir / name / f"{component}.yaml"] = text(objects)
    return files


def present_files(golden_dir: Path = GOLDEN_DIR) -> dict[Path, str]:
    """Every golden file on disk (the scenario folders' YAML files) with its text."""
    return {p: p.read_text() for p in sorted(golden_dir.glob("*/*.yaml"))}


def differences(golden_dir: Path = GOLDEN_DIR) -> str:
    """A unified diff from the files on disk to the renderer's output ("" when they are equal)."""
    expected, present = expected_files(golden_dir), present_files(golden_dir)
    chunks: list[str] = []
    for path in sorted(expected.keys() | present.keys()):
        old, new = present.get(path, ""), expected.get(path, "")
        if old == new:
            continue
        shown = path.relative_to(golden_dir.parent.parent)  # tests/golden/<scenario>/<component>.yaml
        chunks.extend(
            difflib.unified_diff(
                old.splitlines(keepends=True),
                new.splitlines(keepends=True),
                fromfile=f"a/{shown}" if path in present else "/dev/null",
                tofile=f"b/{shown}" if path in expected else "/dev/null",
            )
        )
    return "".join(chunks)


def write(golden_dir: Path = GOLDEN_DIR) -> list[str]:
    """Rewrite the stale golden files and delete those no component renders any more; what changed, one line each."""
    expected, present = expected_files(golden_dir), present_files(golden_dir)
    changes = []
    for path, body in sorted(expected.items()):
        if present.get(path) != body:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(body)
            changes.append(f"wrote {path}")
    for path in sorted(present.keys() - expected.keys()):
        path.unlink()
        changes.append(f"deleted {path}")
    return changes


def main(argv: list[str] | None = None, golden_dir: Path = GOLDEN_DIR) -> int:
    parser = argparse.ArgumentParser(prog="python -m metax_dev.golden", description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--write", action="store_true", help="rewrite the golden files (default: print the diff)")
    args = parser.parse_args(argv)
    if args.write:
        for line in write(golden_dir):
            print(line)
        return 0
    if diff := differences(golden_dir):
        print(diff, end="")
        print(f"\nthe golden renders differ from the renderer; if the change is meant, run: {REGENERATE}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
