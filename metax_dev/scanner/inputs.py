"""What the manifest scanner reads: the chart as ``helm template`` renders it, and every object the operator renders.

Both halves come from one values file, ``scan-values.yaml`` (every option that adds an object on): the chart is
rendered with it by the session's helm (built from its Go module, :mod:`metax_dev.controlplane.build`), and the
``cluster-operator`` object in that output is what ``metax-operator render`` renders — exactly what the operator
would apply after that install, in the chart's namespace, with the chart's version as image tag. Helm hooks (the
pre-delete cleanup Job) and the CRD are part of the chart's half.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Final

import attrs
import yaml

from metax_dev.chart import CHART_DIR

VALUES: Final = Path(__file__).resolve().parent / "scan-values.yaml"
RELEASE: Final = "metax-operator"
NAMESPACE: Final = "metax-operator"
#: The Kubernetes version ``helm template`` renders for: the newest the chart knows, so every object that a
#: version gate adds (``.Capabilities``) is there.
KUBE_VERSION: Final = "1.36.0"
#: Value keys that switch objects on; every one must be true in the merged values (`switches_off`).
SWITCHES: Final = frozenset({"deploy", "enabled"})


class InputError(RuntimeError):
    """The chart or the operator could not render what the scanner reads."""


@attrs.frozen
class Manifest:
    """One object to scan and where it comes from (``chart`` or ``operator``)."""

    source: str
    body: Mapping[str, Any]

    @property
    def kind(self) -> str:
        return str(self.body["kind"])

    @property
    def name(self) -> str:
        return str(self.body["metadata"]["name"])

    @property
    def ref(self) -> str:
        """``Kind/name``: how the allowlist names the object."""
        return f"{self.kind}/{self.name}"


def helm_template(helm: Path, chart_dir: Path = CHART_DIR, values: Path = VALUES) -> list[dict[str, Any]]:
    """The chart's objects with ``values``, hooks and CRD included, as a fresh install would create them."""
    with tempfile.TemporaryDirectory(prefix="metax-scan-helm-") as home:
        env = {
            **os.environ,
            "HELM_CACHE_HOME": f"{home}/cache",
            "HELM_CONFIG_HOME": f"{home}/config",
            "HELM_DATA_HOME": f"{home}/data",
        }
        argv = [str(helm), "template", RELEASE, str(chart_dir), "--namespace", NAMESPACE]
        argv += ["--kube-version", KUBE_VERSION, "--include-crds", "--values", str(values)]
        done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120, check=False)
    if done.returncode != 0:
        raise InputError(f"helm template failed ({done.returncode}): {' '.join(argv)}\n{done.stderr}")
    return [d for d in yaml.safe_load_all(done.stdout) if d]


def operator_render(cluster_operator: Mapping[str, Any], namespace: str = NAMESPACE) -> list[dict[str, Any]]:
    """``metax-operator render -o json`` of ``cluster_operator``: every object the operator applies for it.

    Every component must be deployed: a component the render leaves out (disabled, or a prerequisite missing) would
    go unscanned, so its ``skipped:`` line is an error."""
    with tempfile.NamedTemporaryFile("w", suffix=".json", prefix="metax-scan-") as spec:
        json.dump(cluster_operator, spec)
        spec.flush()
        argv = [sys.executable, "-m", "services.cli.main", "render", "-f", spec.name]
        argv += ["--namespace", namespace, "-o", "json"]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    if done.returncode != 0:
        raise InputError(f"metax-operator render failed ({done.returncode}):\n{done.stderr}")
    if skipped := [line for line in done.stderr.splitlines() if line.startswith("skipped:")]:
        raise InputError("the scan must see every component, but the render left some out:\n" + "\n".join(skipped))
    items: list[dict[str, Any]] = json.loads(done.stdout)["items"]
    return items


def manifests(helm: Path, chart_dir: Path = CHART_DIR, values: Path = VALUES) -> list[Manifest]:
    """Everything the scanner reads: the chart's objects, then the operator's."""
    chart = helm_template(helm, chart_dir, values)
    cluster_operators = [d for d in chart if d.get("kind") == "ClusterOperator"]
    if len(cluster_operators) != 1:
        raise InputError(f"the chart rendered {len(cluster_operators)} ClusterOperator objects, expected one")
    operator = operator_render(cluster_operators[0])
    return [*(Manifest("chart", d) for d in chart), *(Manifest("operator", d) for d in operator)]


def merged_values(chart_dir: Path = CHART_DIR, values: Path = VALUES) -> dict[str, Any]:
    """The chart's defaults with ``values`` over them, as Helm merges them (maps deep, everything else replaced)."""
    defaults = yaml.safe_load((chart_dir / "values.yaml").read_text()) or {}
    return _merge(defaults, yaml.safe_load(values.read_text()) or {})


def _merge(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def switches_off(chart_dir: Path = CHART_DIR, values: Path = VALUES) -> list[str]:
    """The ``deploy``/``enabled`` switches that the scan's values leave false (each one hides objects from it)."""
    return sorted(path for path, on in _switches(merged_values(chart_dir, values), ()) if on is not True)


def _switches(values: Mapping[str, Any], path: Sequence[str]) -> Iterator[tuple[str, object]]:
    for key, value in values.items():
        if isinstance(value, Mapping):
            yield from _switches(value, (*path, key))
        elif key in SWITCHES:
            yield ".".join((*path, key)), value
