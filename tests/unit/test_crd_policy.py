"""Which ClusterOperator CRD the cluster serves after an operator starts (metax_core.cluster.crd_policy, R-UPGRADE).

Aspects: apply when the cluster's CRD is unstamped, older, the same or not a version; keep a newer one (never a
downgrade); when the cluster already serves this release's CRD; what an older operator says about fields from a
newer release and about a CRD it could not bring up to date; the annotation read back from a live CRD.
"""

from __future__ import annotations

import pytest

from metax_core.cluster import crd_policy
from metax_core.cluster.crd_policy import Choice
from metax_core.wire import meta


@pytest.mark.parametrize(
    ("live", "choice"),
    [
        (None, Choice.APPLY),  # installed by hand, or by a chart from before releases were stamped
        ("0.1.0", Choice.APPLY),  # helm upgrade from the previous release: Helm left its CRD
        ("0.2.0", Choice.APPLY),  # the same release (a restart): applying it again changes nothing
        ("0.2.0-rc1", Choice.APPLY),  # a pre-release ranks below its release
        ("hand-edited", Choice.APPLY),
        ("0.10.0", Choice.KEEP_NEWER),  # numbers, not text: 0.10 > 0.2
        ("0.3.0", Choice.KEEP_NEWER),  # helm rollback to 0.2.0 from 0.3.0
    ],
)
def test_an_operator_applies_its_crd_unless_the_cluster_serves_a_newer_release(
    live: str | None, choice: Choice
) -> None:
    assert crd_policy.choose(live, "0.2.0") is choice


def test_only_this_release_established_is_already_served() -> None:
    assert crd_policy.already_served("0.2.0", "0.2.0", established=True)
    assert not crd_policy.already_served("0.2.0", "0.2.0", established=False)  # applied, not served yet: wait again
    assert not crd_policy.already_served("0.1.0", "0.2.0", established=True)
    assert not crd_policy.already_served(None, "0.2.0", established=True)


def test_an_older_operator_says_where_the_fields_it_does_not_know_come_from() -> None:
    note = crd_policy.newer_fields_note("0.3.0", "0.2.0")
    assert "0.3.0" in note and "0.2.0" in note and "remove them from the spec" in note
    assert crd_policy.newer_fields_note("0.2.0", "0.2.0") == ""  # same release: the fields are simply unknown
    assert crd_policy.newer_fields_note(None, "0.2.0") == ""


def test_an_outdated_crd_names_both_releases_and_why() -> None:
    message = crd_policy.outdated_message("0.1.0", "0.2.0", "customresourcedefinitions is forbidden")
    assert "0.1.0" in message and "(0.2.0)" in message and "forbidden" in message and "docs/upgrade.md" in message
    assert "unknown" in crd_policy.outdated_message(None, "0.2.0", "x")


def test_the_release_is_read_from_the_crd_annotation() -> None:
    assert crd_policy.release_of({"metadata": {"annotations": {meta.CRD_RELEASE: "0.1.0"}}}) == "0.1.0"
    assert crd_policy.release_of({"metadata": {}}) is None
    assert crd_policy.release_of(None) is None
