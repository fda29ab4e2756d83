"""`metax-dev`: the developer command line (control plane, fake host, demo), apart from the product CLI."""

from __future__ import annotations

import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

from metax_dev import cli


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_console_script_is_declared_and_lists_the_developer_commands() -> None:
    scripts = {e.name: e.value for e in metadata.entry_points(group="console_scripts")}
    assert scripts["metax-dev"] == "metax_dev.cli:main"
    done = subprocess.run(
        [sys.executable, "-m", "metax_dev.cli", "--help"], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0
    for command in ("cluster", "fake-host", "demo"):
        assert command in done.stdout


def test_dev_fake_host_creates_a_host_the_real_adapter_reads(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from metax_hw import host

    code, out, _ = run(capsys, "fake-host", "--root", str(tmp_path / "h"), "--gpus", "3", "--host-driver", "none")
    assert code == 0 and "export PATH=" in out
    hw = host.open_host(tmp_path / "h")
    assert len(hw.devices.functions()) == 3
    assert hw.modules.state("metax") is None
