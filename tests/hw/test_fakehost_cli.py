"""``python -m metax_dev.fakehost``: creates a fake host another process can open and drive."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from metax_core.inventory import FunctionKind
from metax_dev import fakehost
from metax_hw_fake.host import FakeHost


def test_cli_creates_a_host_another_process_can_use(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "node1"
    assert fakehost.main(["--root", str(root), "--gpus", "2", "--vfs", "2", "--payload-driver", "2.19.0"]) == 0
    assert "fake host at" in capsys.readouterr().out
    fake = FakeHost.open(root)
    functions = fake.devices.functions()
    assert [f.kind for f in functions].count(FunctionKind.VF) == 4
    assert fake.audit() == []
    smi = subprocess.run([str(fake.bin_dir / "mx-smi")], capture_output=True, text=True, check=True)
    assert smi.stdout.count("MetaX C500") == 6
    assert fakehost.main(["--root", str(root), "--gpus", "1"]) == 1
    assert "already holds a host tree" in capsys.readouterr().err


def test_module_entry_point_without_a_host_driver(tmp_path: Path) -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "metax_dev.fakehost",
            "--root",
            str(tmp_path / "n"),
            "--gpus",
            "1",
            "--host-driver",
            "none",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "metax module: not loaded" in result.stdout
    assert FakeHost.open(tmp_path / "n").modules.installed_version("metax") is None


def test_create_refuses_vfs_without_a_driver(tmp_path: Path) -> None:
    with pytest.raises(OSError, match="No such file or directory"):
        fakehost.create(tmp_path / "n", 1, vfs=2, host_driver=None)
