"""A well-known manifest scanner over the chart and every workload the operator renders (R-SECURITY; issue 38, "Tests").

Checkov (`metax_dev.scanner`, docs/security.md "The manifest scanner") reads the chart rendered with every option
that adds objects (metax_dev/scanner/scan-values.yaml) and every object ``metax-operator render`` makes of the
``cluster-operator`` that chart creates, and reports per check, object and container. Its findings must be exactly
the reviewed allowlist, tests/security/scanner-allowlist.yaml: in ``allowed`` the privileges that 000 Table 1.3.1,
§1.3.2/§1.3.3 or the component's doc requires, each with its reason; in ``pending`` the findings being fixed, each
with the issue item that fixes it. A finding that no entry matches fails (printed as a ready-to-paste entry whose
reason a reviewer must write), and so does an entry that matches no finding (stale: the list shrinks when a privilege
goes away). ``python -m metax_dev.scanner --write`` regenerates the file for review.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from metax_core import components
from metax_dev.scanner import allowlist, checkov, inputs, scan
from metax_dev.scanner.__main__ import scanner_name

ALLOWLIST = Path(__file__).with_name("scanner-allowlist.yaml")


def test_every_finding_is_in_the_allowlist(scan_result: scan.ScanResult) -> None:
    comparison = allowlist.compare(scan_result.findings, allowlist.load(ALLOWLIST))
    assert not comparison.new, "\n" + allowlist.summary(allowlist.Comparison(comparison.new, ()))


def test_every_allowlist_entry_is_still_found(scan_result: scan.ScanResult) -> None:
    comparison = allowlist.compare(scan_result.findings, allowlist.load(ALLOWLIST))
    assert not comparison.stale, "\n" + allowlist.summary(allowlist.Comparison((), comparison.stale))


def test_every_allowlist_entry_is_reviewed_against_the_pinned_scanner() -> None:
    """A reason that cites what requires the privilege, a pending entry that names its fix, no finding twice, and
    the file reviewed against the Checkov version the scan runs."""
    problems = allowlist.problems(allowlist.load(ALLOWLIST), scanner_name(checkov.locked_version()))
    assert not problems, "\n".join(problems)


def test_the_scan_values_turn_on_every_switch_of_the_chart() -> None:
    """An option added to the chart later (a `deploy` or `enabled` switch) is scanned from the start."""
    assert inputs.switches_off() == []


def test_the_scan_sees_every_workload_of_the_chart_and_of_the_operator(scan_result: scan.ScanResult) -> None:
    scanned = {(m.source, m.ref) for m in scan_result.scanned}
    for info in components.CATALOGUE:
        for workload in info.workloads:
            assert ("operator", f"{workload.kind.value}/{workload.name}") in scanned, workload.name
    assert ("chart", "Deployment/metax-operator") in scanned
    assert ("chart", "Job/metax-operator-cleanup") in scanned  # the pre-delete hook
    assert ("chart", "Job/metax-operator-crd") in scanned  # the pre-upgrade hook (R-UPGRADE)
    pods = [m.ref for m in scan_result.scanned if scan.pod_spec(m.body) is not None]
    assert pods and not [p for p in pods if p not in scan_result.evaluated], "objects Checkov evaluated no check on"


def _container(name: str, **extra: Any) -> dict[str, Any]:
    return {**scan.NEUTRAL, "name": name, **extra}


PROBE = inputs.Manifest(
    "test",
    {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "probe", "namespace": "scan-test"},
        "spec": {
            "selector": {"matchLabels": {"app": "probe"}},
            "template": {
                "metadata": {"labels": {"app": "probe"}},
                "spec": {
                    "hostPID": True,
                    "automountServiceAccountToken": False,
                    "initContainers": [{"name": "copy", "image": scan.NEUTRAL["image"], "command": ["cp"]}],
                    "containers": [
                        _container("clean"),
                        _container("first", securityContext={"privileged": True}),
                        _container("second", securityContext={"privileged": True}),
                    ],
                },
            },
        },
    },
)


def test_findings_name_every_container_not_only_the_first_that_fails(scanner: checkov.Installed) -> None:
    """Checkov stops at a pod's first failing container; the scan names each one, pod-level checks once per pod."""
    keys = {f.key for f in scan.scan(scanner, [PROBE]).findings}
    assert {("CKV_K8S_16", "DaemonSet/probe", "first"), ("CKV_K8S_16", "DaemonSet/probe", "second")} <= keys
    assert ("CKV_K8S_20", "DaemonSet/probe", "copy") in keys  # an init container without a securityContext
    assert ("CKV_K8S_17", "DaemonSet/probe", None) in keys  # hostPID: the pod's
    assert not [k for k in keys if k[0] == "CKV_K8S_17" and k[2] is not None]
    assert not [k for k in keys if k[2] in ("clean", scan.NEUTRAL_NAME)]
