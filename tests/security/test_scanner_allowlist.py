"""The allowlist's rules on their own (metax_dev.scanner.allowlist): matching, stale entries, review, regeneration.

No scanner runs here: findings are made by hand. test_manifest_scanner.py applies the same rules to a real scan.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from metax_dev.scanner import allowlist
from metax_dev.scanner.scan import Finding

PRIVILEGED = Finding("CKV_K8S_16", "DaemonSet/metax-driver", "driver", "Container should not be privileged", "operator")
HOST_PID = Finding("CKV_K8S_17", "DaemonSet/metax-driver", None, "Containers should not share the host PID", "operator")
NO_LIMIT = Finding("CKV_K8S_11", "DaemonSet/metax-driver", "driver", "CPU limits should be set", "operator")

FILE = """\
scanner: checkov 1.0
reasons:
  privileged/metax-driver: "Table 1.3.1: loads the module"
allowed:
  - {check: CKV_K8S_16, object: DaemonSet/metax-driver, container: driver, reason: privileged/metax-driver}
  - {check: CKV_K8S_17, object: DaemonSet/metax-driver, reason: "Table 1.3.1: hostPID, docs/hardware.md"}
pending:
  - {check: CKV_K8S_11, object: DaemonSet/metax-driver, container: driver, issue: "issue 38 item 5: resources"}
"""


def _load(tmp_path: Path, text: str) -> allowlist.Allowlist:
    path = tmp_path / "allowlist.yaml"
    path.write_text(text)
    return allowlist.load(path)


def test_a_finding_matches_by_check_object_and_container(tmp_path: Path) -> None:
    listed = _load(tmp_path, FILE)
    assert listed.text(listed.entries[0]) == "Table 1.3.1: loads the module"
    regenerated = allowlist.regenerate(listed, [NO_LIMIT, HOST_PID, PRIVILEGED], "checkov 1.0")
    assert _load(tmp_path, regenerated) == listed  # nothing new, nothing stale: the same file
    assert allowlist.compare([PRIVILEGED, HOST_PID, NO_LIMIT], listed).clean
    other_container = Finding("CKV_K8S_16", "DaemonSet/metax-driver", "payload-0", "", "operator")
    on_the_pod = Finding("CKV_K8S_16", "DaemonSet/metax-driver", None, "", "operator")
    comparison = allowlist.compare([PRIVILEGED, HOST_PID, NO_LIMIT, other_container, on_the_pod], listed)
    assert comparison.new == (other_container, on_the_pod) and not comparison.stale


def test_an_entry_that_matches_nothing_is_stale_in_either_section(tmp_path: Path) -> None:
    comparison = allowlist.compare([HOST_PID], _load(tmp_path, FILE))
    assert [(e.section, e.check) for e in comparison.stale] == [("allowed", "CKV_K8S_16"), ("pending", "CKV_K8S_11")]
    text = allowlist.summary(comparison)
    assert "stale" in text and "CKV_K8S_16" in text and "CKV_K8S_11" in text


def test_a_new_finding_is_printed_ready_to_paste_without_a_reason(tmp_path: Path) -> None:
    text = allowlist.summary(allowlist.compare([PRIVILEGED, HOST_PID, NO_LIMIT, HOST_PID], _load(tmp_path, "")))
    line = (
        '- {check: CKV_K8S_17, object: DaemonSet/metax-driver, reason: ""}  # Containers should not share the host PID'
    )
    assert line in text
    pasted = _load(tmp_path, "allowed:\n" + "\n".join(f"  {allowlist.paste(f)}" for f in (PRIVILEGED, HOST_PID)))
    assert {e.key for e in pasted.entries} == {PRIVILEGED.key, HOST_PID.key}


def test_review_wants_a_cited_reason_an_issue_item_one_entry_per_finding_and_the_pinned_scanner(
    tmp_path: Path,
) -> None:
    assert allowlist.problems(_load(tmp_path, FILE), "checkov 1.0") == []
    bad = FILE.replace('"Table 1.3.1: loads the module"', '"it needs it"').replace("issue 38 item 5", "soon")
    bad += '  - {check: CKV_K8S_17, object: DaemonSet/metax-driver, issue: "issue 38 item 3: split"}\n'
    problems = allowlist.problems(_load(tmp_path, bad), "checkov 2.0")
    assert len(problems) == 4, problems
    assert problems[0].startswith("scanner:")
    assert any("no reason citing" in p and "CKV_K8S_16" in p for p in problems)
    assert any("issue N item M" in p and "CKV_K8S_11" in p for p in problems)
    assert any("twice" in p and "CKV_K8S_17" in p for p in problems)
    renamed = FILE.replace("reason: privileged/metax-driver", "reason: privileged/driver")
    problems = allowlist.problems(_load(tmp_path, renamed), "checkov 1.0")
    assert any("'privileged/driver' is no name" in p for p in problems)
    assert any("'privileged/metax-driver' is used by no entry" in p for p in problems)
    opened = FILE.replace("issue 38 item 5: resources", "open: nobody has it yet")
    assert allowlist.problems(_load(tmp_path, opened), "checkov 1.0") == []


def test_regeneration_keeps_reasons_drops_stale_entries_and_adds_new_ones_unreviewed(tmp_path: Path) -> None:
    new = Finding("CKV_K8S_8", "DaemonSet/metax-maca", "container-edit", "Liveness Probe Should be Configured", "x")
    text = allowlist.regenerate(_load(tmp_path, FILE), [HOST_PID, NO_LIMIT, new], "checkov 2.0")
    assert text.startswith(allowlist.HEADER) and "scanner: checkov 2.0\n" in text
    again = _load(tmp_path, text)
    assert [(e.section, e.check, e.why) for e in again.entries] == [
        ("allowed", "CKV_K8S_8", ""),
        ("allowed", "CKV_K8S_17", "Table 1.3.1: hostPID, docs/hardware.md"),
        ("pending", "CKV_K8S_11", "issue 38 item 5: resources"),
    ]
    assert again.reasons == {}  # privileged/metax-driver went with the stale entry that used it
    assert "  # CKV_K8S_8: Liveness Probe Should be Configured\n" in text  # each check's title before its entries
    assert allowlist.compare([HOST_PID, NO_LIMIT, new], again).clean
    assert any("no reason citing" in p for p in allowlist.problems(again, "checkov 2.0"))


@pytest.mark.parametrize(
    "text",
    [
        "allowed: [{check: CKV_K8S_16}]\n",
        "allowed: [{check: CKV_K8S_16, object: DaemonSet/x, because: y}]\n",
        "pending: [{check: CKV_K8S_16, object: DaemonSet/x, reason: y}]\n",
        "skipped: []\n",
        "reasons: {Has Spaces: text}\n",
    ],
)
def test_a_malformed_file_is_refused(tmp_path: Path, text: str) -> None:
    with pytest.raises(allowlist.AllowlistError):
        _load(tmp_path, text)
