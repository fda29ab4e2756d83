"""The CLI as a hostile or careless user drives it (issue 10): every report reproduced, each answered with
lines on stderr and exit 2, never a traceback, a hang or unbounded memory.

Aspects: binary input, non-string keys, deep nesting, aliases ("billion laughs"), /dev/zero, a catastrophic
regex, pre-release ordering in ``maca resolve``, the one-line syntax error, and each command (validate,
render, rollout plan) on the same inputs.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from services.cli import main as cli

COMMANDS = (("validate",), ("render",), ("rollout", "plan", "--nodes", "3"))
VALID = "registry: registry.example.com/metax\ndriver:\n  payload:\n    version: '2.32.0'\n"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _command(command: tuple[str, ...], path: str) -> list[str]:
    if command[0] == "rollout":
        return ["rollout", "plan", "-f", path, *command[2:]]
    return [command[0], "-f", path]


LAUGHS = "a: &a ['x','x','x','x','x','x','x','x','x']\n" + "".join(
    f"{b}: &{b} [*{a},*{a},*{a},*{a},*{a},*{a},*{a},*{a},*{a}]\n" for a, b in zip("abcdefgh", "bcdefghi", strict=True)
)
HOSTILE: dict[str, tuple[bytes, str]] = {
    "binary": (bytes(range(128, 256)) * 8 + os.urandom(500), "is not UTF-8 text"),
    "non-string key": (b"1: x\n", "x.yaml:1:1: key 1 must be a string"),
    "nested non-string key": (b"gpuLabel: {1: x}\n", "x.yaml:1:12: key 1 must be a string"),
    "deep nesting": (b"a: " + b"[" * 50_000 + b"]" * 50_000, "nested deeper than 64 levels"),
    "billion laughs": (
        (
            "podTemplateSpec:\n  spec:\n    affinity:\n"
            + "".join("      " + line + "\n" for line in LAUGHS.splitlines())
        ).encode(),
        "anchors and aliases",
    ),
    "nul bytes": (b"\0" * 4096, "character U+0000 is not allowed"),
    "a huge integer": (b"gpuDevice:\n  healthyInterval: " + b"9" * 5000 + b"\n", "integer longer than 30 digits"),
    "syntax error": (b"driver:\n  payload: [1, 2\n", "x.yaml:3:1: expected ',' or ']'"),
}


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c[0])
@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_files_get_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: tuple[str, ...], case: str
) -> None:
    content, message = HOSTILE[case]
    path = tmp_path / "x.yaml"
    path.write_bytes(content)
    code, out, err = run(capsys, *_command(command, str(path)))
    assert (code, out) == (2, "")
    assert message in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1, err


def test_a_syntax_error_is_one_file_line_column_message_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "values.yaml"
    path.write_text("driver:\n  payload: {version: '1'\nmaca: x\n")
    code, _, err = run(capsys, "validate", "-f", str(path))
    assert code == 2
    assert err == f"{path}:3:1: expected ',' or '}}', but got '<scalar>'\n"


def test_dev_zero_is_refused_by_its_size_not_read_to_the_end(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "validate", "-f", "/dev/zero")
    assert code == 2 and "is larger than 1048576 bytes" in err


def test_a_catastrophic_regex_is_matched_in_linear_time_or_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # (a+)+$ against 41 a's and a mismatch ran for seconds with Python's re; RE2 answers at once.
    path = tmp_path / "x.yaml"
    path.write_text(VALID + "vfioManager:\n  vfioConfig:\n  - nodeName: '(a+)+$'\n    gpus: all\n")
    assert run(capsys, "validate", "-f", str(path))[0] == 0
    path.write_text(VALID + "vfioManager:\n  vfioConfig:\n  - nodeName: '(a)\\1'\n    gpus: all\n")
    code, _, err = run(capsys, "validate", "-f", str(path))
    assert code == 2 and "vfioManager.vfioConfig[0].nodeName: is not a regular expression RE2 accepts" in err


def test_maca_resolve_ranks_a_release_above_its_pre_releases(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "maca", "resolve", "maca-2.18", "--available", "2.18.0.3,2.18.0.3-rc1")
    assert (code, out) == (0, "2.18.0.3\n")


def test_every_error_of_a_section_is_reported_at_once(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "x.yaml"
    path.write_text(VALID.replace("driver:\n", "driver:\n  upgradePolicy: {maxUnavailable: abc, maxParallel: 150%}\n"))
    code, _, err = run(capsys, "validate", "-f", str(path))
    assert code == 2
    assert "driver.upgradePolicy.maxUnavailable" in err and "driver.upgradePolicy.maxParallel" in err


def test_set_file_tolerations_text_is_read_as_the_list(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # helm --set-file tolerations=tolerations.yaml puts the file's text into values (§3.2.4).
    path = tmp_path / "values.yaml"
    listing = "- key: gpu\n  operator: Exists\n  effect: NoSchedule\n"
    path.write_text(VALID + "tolerations: |\n" + "".join(f"  {line}\n" for line in listing.splitlines()))
    code, out, _ = run(capsys, "render", "-f", str(path), "--component", "gpu-label")
    assert code == 0 and "key: gpu" in out


def test_a_huge_fleet_is_refused_instead_of_simulated(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "x.yaml"
    path.write_text(VALID + "  upgradePolicy: {upgradeSteps: [{replicas: 100%}]}\n")
    code, _, err = run(capsys, "rollout", "plan", "-f", str(path), "--nodes", "1000000000")
    assert code == 2 and "--nodes must be between 1 and" in err


@pytest.mark.parametrize(
    ("option", "message"),
    [
        (("--version", "1.0\n"), "error: --version must be a valid image tag"),
        (("--namespace", "A_B"), "error: --namespace must be a DNS name"),
    ],
)
def test_render_options_that_would_make_invalid_objects_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], option: tuple[str, str], message: str
) -> None:
    path = tmp_path / "x.yaml"
    path.write_text(VALID)
    code, out, err = run(capsys, "render", "-f", str(path), *option)
    assert (code, out) == (2, "") and err.startswith(message)
