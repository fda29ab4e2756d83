"""`metax-operator rollout plan` (services.cli.rollout): the §3.2.8 example, failures, and bad input.

Covers: the exact JSON of the seed's 10-node example (loops 1,1 | 2,1 | 2,1 | 1,1; pauses manual,
10000ms, 10000ms, manual); --fail with fallback pause and rollback; --node-names order; the table output;
invalid policies (one ``path: message`` line per error, exit 2), unknown --fail nodes, unreadable files.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest
import yaml

from metax_core.spec.names import REGISTRY_EXAMPLE
from services.cli import rollout as cli_rollout

SEED_SPEC = {
    "registry": REGISTRY_EXAMPLE,
    "driver": {
        "payload": {"version": "2.0.0"},
        "upgradePolicy": {
            "enableRollout": True,
            "upgradeSteps": [
                {"replicas": 2, "pause": None},
                {"replicas": 5, "pauseDuration": 10000},
                {"replicas": 8, "pauseDuration": 10000},
                {"replicas": "100%", "pause": None},
            ],
            "pause": False,
            "maxParallel": "50%",
            "maxUnavailable": 0,
            "maxFailureThreshold": 3,
            "fallback": "pause",
        },
    },
}


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="metax-operator")
    cli_rollout.add_parser(parser.add_subparsers(dest="command"))
    return parser.parse_args(argv)


def write(tmp_path: Path, document: object) -> str:
    path = tmp_path / "cluster-operator.yaml"
    path.write_text(yaml.safe_dump(document))
    return str(path)


def plan(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli_rollout.run(parse("rollout", "plan", *argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_seed_example_as_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    document = {
        "apiVersion": "gpu.metax-tech.com/v1alpha1",
        "kind": "ClusterOperator",
        "metadata": {"name": "cluster-operator"},
        "spec": SEED_SPEC,
    }
    code, out, err = plan(capsys, "-f", write(tmp_path, document), "--nodes", "10", "-o", "json")
    assert (code, err) == (0, "")
    assert json.loads(out) == {
        "steps": [
            {"replicas": 2, "batches": [["node-01"], ["node-02"]], "pause": "manual"},
            {"replicas": 5, "batches": [["node-03", "node-04"], ["node-05"]], "pause": "10000ms"},
            {"replicas": 8, "batches": [["node-06", "node-07"], ["node-08"]], "pause": "10000ms"},
            {"replicas": 10, "batches": [["node-09"], ["node-10"]], "pause": "manual"},
        ],
        "outcome": "Completed",
    }


def test_a_failing_node_pauses_the_rollout_at_its_step(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = plan(capsys, "-f", write(tmp_path, SEED_SPEC), "--nodes", "10", "--fail", "node-04", "-o", "json")
    result = json.loads(out)
    assert (code, result["outcome"]) == (0, "Paused")
    assert [s["replicas"] for s in result["steps"]] == [2, 5]
    assert result["steps"][1]["batches"] == [["node-03", "node-04"]]


def test_fallback_rollback_in_the_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    document = json.loads(json.dumps(SEED_SPEC))
    document["driver"]["upgradePolicy"]["fallback"] = "rollback"
    code, out, _ = plan(capsys, "-f", write(tmp_path, document), "--nodes", "10", "--fail", "node-03")
    assert code == 0
    assert "retry 3: node-03" in out
    assert "Fallback: rollback." in out
    assert "loop 2: node-03, node-04" in out  # the rollback's second loop
    assert "Outcome: RolledBack" in out


def test_node_names_are_taken_in_name_order(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = plan(capsys, "-f", write(tmp_path, SEED_SPEC), "--node-names", "gpu-b, gpu-a,gpu-c", "-o", "json")
    steps = json.loads(out)["steps"]
    assert code == 0
    assert [loop for s in steps for loop in s["batches"]] == [["gpu-a"], ["gpu-b"], ["gpu-c"]]


def test_disabled_and_paused_files_are_planned_as_enabled(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    document = json.loads(json.dumps(SEED_SPEC))
    document["driver"]["upgradePolicy"].update(enableRollout=False, pause=True)
    code, out, err = plan(capsys, "-f", write(tmp_path, document), "--nodes", "3", "-o", "json")
    assert (code, json.loads(out)["outcome"]) == (0, "Completed")
    assert "enableRollout is false" in err and "pause is true" in err


def test_an_invalid_policy_prints_one_line_per_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    document = json.loads(json.dumps(SEED_SPEC))
    policy = document["driver"]["upgradePolicy"]
    policy["maxParallel"] = "150%"
    policy["upgradeSteps"][1]["replicas"] = 1
    policy["upgradeSteps"][3]["replicas"] = 9
    code, out, err = plan(capsys, "-f", write(tmp_path, document), "--nodes", "10")
    assert (code, out) == (2, "")
    assert err.splitlines() == [
        'driver.upgradePolicy.maxParallel: must be an integer from 0 to 100000 or a percentage from "0%" to "100%", '
        "got string '150%'",
        "driver.upgradePolicy.upgradeSteps[1].replicas: must not be lower than an earlier step's (1 < 2)",
        'driver.upgradePolicy.upgradeSteps[3].replicas: the last step must be "100%" so that every node is upgraded',
    ]


def test_a_disabled_policy_is_checked_as_if_enabled(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    document = {
        "registry": REGISTRY_EXAMPLE,
        "driver": {"payload": {"version": "1"}, "upgradePolicy": {"upgradeSteps": [{"replicas": 3}]}},
    }
    code, _, err = plan(capsys, "-f", write(tmp_path, document), "--nodes", "5")
    assert code == 2
    assert 'upgradeSteps[0].replicas: the last step must be "100%"' in err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (("--nodes", "0"), "--nodes must be between 1 and 10000"),
        (("--node-names", "a,b,a"), "--node-names lists a more than once"),
        (("--node-names", " , "), "--node-names must name at least one node"),
        (("--nodes", "3", "--fail", "node-04"), "--fail names nodes that are not in the fleet: node-04"),
    ],
)
def test_bad_fleets_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: tuple[str, ...], message: str
) -> None:
    code, out, err = plan(capsys, "-f", write(tmp_path, SEED_SPEC), *argv)
    assert (code, out, err) == (2, "", f"error: {message}\n")


def test_an_unreadable_file_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = plan(capsys, "-f", str(tmp_path / "missing.yaml"), "--nodes", "3")
    assert code == 2
    assert err.startswith("error: cannot read")


def test_nodes_and_node_names_exclude_each_other() -> None:
    with pytest.raises(SystemExit, match="2"):
        parse("rollout", "plan", "-f", "x", "--nodes", "3", "--node-names", "a")


def test_on_canary_failure_rollback_in_the_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 41: `rollout plan` shows the choice and what it does to a failing canary (no retry, node-01 back)."""
    document = json.loads(json.dumps(SEED_SPEC))
    document["driver"]["upgradePolicy"]["onCanaryFailure"] = "rollback"
    code, printed, _ = plan(capsys, "-f", write(tmp_path, document), "--nodes", "10", "--fail", "node-01")
    out = " ".join(printed.split())  # the table's lines as words (the console wraps at its width)
    assert code == 0
    assert "If a node fails: a failed canary (step 1) is rolled back at once (onCanaryFailure: rollback)" in out
    assert "retry" not in out  # maxFailureThreshold 3 does not apply to the canary
    assert "onCanaryFailure: rollback, at once." in out and "loop 1: node-01" in out
    assert "Outcome: RolledBack" in out


def test_the_drain_choice_in_the_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 41: `rollout plan` says what the rollout does with busy nodes."""
    document = json.loads(json.dumps(SEED_SPEC))
    _, plain, _ = plan(capsys, "-f", write(tmp_path, document), "--nodes", "10")
    assert "If a node runs GPU workloads: wait for its GPU workloads to end (drain is off)" in " ".join(plain.split())
    document["driver"]["upgradePolicy"]["drain"] = {"enable": True, "timeoutSeconds": 300}
    code, printed, _ = plan(capsys, "-f", write(tmp_path, document), "--nodes", "10")
    out = " ".join(printed.split())
    assert code == 0 and "If a node runs GPU workloads: drain it: cordon, evict its GPU pods" in out
    assert "at most 50% nodes at a time; released after 300s" in out
