"""Checkov's findings per check, object and container.

Why not Checkov's report as it is: Checkov reports a check once per object, and for a pod's containers it stops at
the first container that fails (its ``evaluated_keys`` name that one). A second privileged container in a pod
whose first one is allowlisted would then be no new finding. So each pod-bearing object is also scanned as
variants that differ only in their containers, the pod's own fields (hostPID, volumes, account, labels,
securityContext) kept:

* the **neutral** variant: the pod with one stand-in container (`NEUTRAL`) that passes every container check. A
  check that fails here fails because of the pod itself (hostPID, no NetworkPolicy, a mounted token): a
  **pod-level** finding, named without a container;
* one variant per container (an init container stays an init container, the stand-in beside it as the pod's
  container): every check that fails here and not on the neutral variant fails because of that container —
  whether Checkov names the container in ``evaluated_keys`` (container checks) or judges the pod from its
  containers (root user, seccomp, UID).

The objects themselves are scanned too (one run), every variant with a copy of the other objects (a second run,
so graph checks such as NetworkPolicy coverage see the same cluster). A finding of the objects' run that no
variant explains is kept on the pod as a whole; a container finding of that run that no variant reproduces means
this module misreads Checkov and is an error. The stand-in must pass every container check: if it fails one
(a new Checkov version), the scan stops and says so.
"""

from __future__ import annotations

import copy
import re
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final

import attrs
import yaml

from metax_dev.scanner import checkov
from metax_dev.scanner.inputs import Manifest

#: Where a pod-bearing kind keeps its pod spec.
_POD_SPEC_PATHS: Final[Mapping[str, tuple[str, ...]]] = {
    "Pod": ("spec",),
    "CronJob": ("spec", "jobTemplate", "spec", "template", "spec"),
    **dict.fromkeys(
        ("Deployment", "DaemonSet", "StatefulSet", "ReplicaSet", "ReplicationController", "Job"),
        ("spec", "template", "spec"),
    ),
}

NEUTRAL_NAME: Final = "scanner-neutral"
#: A container that passes every container check of Checkov (pinned image digest, probes, limits, every
#: restriction): it stands in for the pod's containers in the variants (module docstring).
NEUTRAL: Final[Mapping[str, Any]] = {
    "name": NEUTRAL_NAME,
    "image": "registry.invalid/neutral@sha256:" + "0" * 64,
    "imagePullPolicy": "Always",
    "securityContext": {
        "privileged": False,
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "runAsNonRoot": True,
        "runAsUser": 10001,
        "runAsGroup": 10001,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    },
    "resources": {"requests": {"cpu": "1m", "memory": "1Mi"}, "limits": {"cpu": "1m", "memory": "1Mi"}},
    "livenessProbe": {"exec": {"command": ["true"]}},
    "readinessProbe": {"exec": {"command": ["true"]}},
}

_CONTAINER_KEY: Final = re.compile(r"(?:^|/)(?:containers|initContainers)/\[\d+\]")


@attrs.frozen
class Finding:
    """One failed check: on an object, on one of its containers, or on its pod as a whole (``container`` None)."""

    check: str
    object: str
    container: str | None
    title: str = attrs.field(eq=False)
    source: str = attrs.field(eq=False)

    @property
    def key(self) -> tuple[str, str, str | None]:
        return self.check, self.object, self.container


def sort_key(check: str, obj: str, container: str | None) -> tuple[Any, ...]:
    """Checks in Checkov's numeric order (CKV_K8S_8 before CKV_K8S_16, CKV2 after CKV), then object, container."""
    parts = tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", check))
    return parts, obj, container or ""


@attrs.frozen
class ScanResult:
    findings: tuple[Finding, ...]
    #: ``Kind/name`` of every object Checkov evaluated at least one check on.
    evaluated: frozenset[str]
    #: Every object handed to the scanner.
    scanned: tuple[Manifest, ...]
    checks_run: int
    version: str


def pod_spec(body: Mapping[str, Any]) -> Mapping[str, Any] | None:
    path = _POD_SPEC_PATHS.get(str(body.get("kind")))
    node: Any = body
    for key in path or ():
        node = node.get(key) if isinstance(node, Mapping) else None
    return node if path and isinstance(node, Mapping) else None


def _with_containers(
    body: Mapping[str, Any], containers: Sequence[Mapping[str, Any]], init: Sequence[Mapping[str, Any]], tag: str
) -> dict[str, Any]:
    out = copy.deepcopy(dict(body))
    out["metadata"]["name"] = f"{out['metadata']['name']}--{tag}"  # unique in the variants' run
    spec: Any = out
    for key in _POD_SPEC_PATHS[str(body["kind"])]:
        spec = spec[key]
    spec["containers"] = [copy.deepcopy(dict(c)) for c in containers]
    spec.pop("initContainers", None)
    if init:
        spec["initContainers"] = [copy.deepcopy(dict(c)) for c in init]
    return out


def variants(body: Mapping[str, Any]) -> list[tuple[str | None, dict[str, Any]]]:
    """``(container or None for the neutral variant, object)`` for a pod-bearing object, else nothing."""
    spec = pod_spec(body)
    if spec is None:
        return []
    out: list[tuple[str | None, dict[str, Any]]] = [(None, _with_containers(body, [NEUTRAL], [], "neutral"))]
    for i, container in enumerate(spec.get("containers") or ()):
        out.append((container["name"], _with_containers(body, [container], [], f"c{i}")))
    for i, container in enumerate(spec.get("initContainers") or ()):
        out.append((container["name"], _with_containers(body, [NEUTRAL], [container], f"i{i}")))
    return out


@attrs.frozen
class _Result:
    check: str
    title: str
    failed: bool
    container_keyed: bool


def _results(report: Mapping[str, Any]) -> dict[str, list[_Result]]:
    """Checkov's results (failed and passed) by file name."""
    by_file: dict[str, list[_Result]] = {}
    for outcome in ("failed_checks", "passed_checks"):
        for r in report["results"].get(outcome) or ():
            keys = (r.get("check_result") or {}).get("evaluated_keys") or ()
            keyed = any(_CONTAINER_KEY.search(str(k)) for k in keys)
            result = _Result(str(r["check_id"]), str(r.get("check_name") or ""), outcome == "failed_checks", keyed)
            by_file.setdefault(Path(str(r["file_path"])).name, []).append(result)
    return by_file


def _write(directory: Path, bodies: Iterable[Mapping[str, Any]]) -> list[str]:
    """One file per object (the report's ``file_path`` says which object a result is about)."""
    directory.mkdir()
    names = []
    for i, body in enumerate(bodies):
        name = f"{i:04d}.yaml"
        (directory / name).write_text(yaml.safe_dump(dict(body), sort_keys=False))
        names.append(name)
    return names


def scan(installed: checkov.Installed, manifests: Sequence[Manifest], workdir: Path | None = None) -> ScanResult:
    """Every finding of Checkov over ``manifests``, per check, object and container (module docstring)."""
    with tempfile.TemporaryDirectory(prefix="metax-scan-", dir=workdir) as tmp:
        root = Path(tmp)
        files = _write(root / "objects", (m.body for m in manifests))
        plan: list[tuple[int, str | None]] = []  # (index of the manifest, its variant's container)
        bodies: list[Mapping[str, Any]] = []
        for index, manifest in enumerate(manifests):
            for container, body in variants(manifest.body):
                plan.append((index, container))
                bodies.append(body)
        context = [m.body for m in manifests if pod_spec(m.body) is None]
        variant_files = _write(root / "variants", [*bodies, *context])
        objects_report = checkov.run(installed, root / "objects")
        variants_report = checkov.run(installed, root / "variants")
    by_object = _results(objects_report)
    by_variant = _results(variants_report)

    findings: dict[tuple[str, str, str | None], Finding] = {}

    def add(manifest: Manifest, result: _Result, container: str | None) -> None:
        finding = Finding(result.check, manifest.ref, container, result.title, manifest.source)
        findings.setdefault(finding.key, finding)

    variants_of: dict[int, list[tuple[str | None, list[_Result]]]] = {}
    for (index, container), name in zip(plan, variant_files[: len(plan)], strict=True):
        variants_of.setdefault(index, []).append((container, by_variant.get(name, [])))

    evaluated = set()
    checks_run = 0
    for index, (manifest, name) in enumerate(zip(manifests, files, strict=True)):
        results = by_object.get(name, [])
        checks_run += len(results)
        if results:
            evaluated.add(manifest.ref)
        failed = [r for r in results if r.failed]
        parts = variants_of.get(index)
        if parts is None:  # not a pod: Checkov's findings as they are
            for r in failed:
                add(manifest, r, None)
            continue
        (neutral_container, neutral), *containers = parts
        assert neutral_container is None
        if broken := sorted({r.check for r in neutral if r.failed and r.container_keyed}):
            raise checkov.ScannerError(
                f"the stand-in container fails {', '.join(broken)} in {manifest.ref}: update scan.NEUTRAL so that it "
                "passes every container check of this Checkov version"
            )
        pod_level = {r.check for r in neutral if r.failed}
        explained: set[str] = set()
        for container, container_results in containers:
            for r in container_results:
                if r.failed and (r.container_keyed or r.check not in pod_level):
                    add(manifest, r, container)
                    explained.add(r.check)
        for r in failed:
            if r.container_keyed and r.check not in explained:
                raise checkov.ScannerError(
                    f"{r.check} fails on a container of {manifest.ref}, but on no container scanned alone"
                )
            if not r.container_keyed and (r.check in pod_level or r.check not in explained):
                add(manifest, r, None)
    ordered = sorted(findings.values(), key=lambda f: sort_key(*f.key))
    return ScanResult(tuple(ordered), frozenset(evaluated), tuple(manifests), checks_run, installed.version)
