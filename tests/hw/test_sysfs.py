"""The sysfs helpers and the tool runner: symlinks resolved inside the root, kernel errors and tool failures
turned into HardwareError with the kernel's or the tool's own words, deadlines enforced.
"""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path

import pytest

from metax_core import errors
from metax_hw import sysfs, tools


def test_absolute_links_stay_inside_the_root(tmp_path: Path) -> None:
    (tmp_path / "sys/devices/pci0000:00/0000:00:01.0").mkdir(parents=True)
    (tmp_path / "sys/bus/pci/devices").mkdir(parents=True)
    os.symlink("/sys/devices/pci0000:00/0000:00:01.0", tmp_path / "sys/bus/pci/devices/0000:00:01.0")
    os.symlink("../../../devices/pci0000:00/0000:00:01.0", tmp_path / "sys/bus/pci/devices/rel")
    tree = sysfs.HostTree(tmp_path)
    expected = tmp_path / "sys/devices/pci0000:00/0000:00:01.0"
    assert tree.resolve(tree.path("/sys/bus/pci/devices/0000:00:01.0")) == expected
    assert tree.resolve(tree.path("/sys/bus/pci/devices/rel")) == expected
    assert tree.host_path(expected) == "/sys/devices/pci0000:00/0000:00:01.0"


def test_link_loops_are_an_os_error(tmp_path: Path) -> None:
    os.symlink("b", tmp_path / "a")
    os.symlink("a", tmp_path / "b")
    with pytest.raises(OSError, match="Too many levels"):
        sysfs.HostTree(tmp_path).resolve(tmp_path / "a")


def test_reads(tmp_path: Path) -> None:
    tree = sysfs.HostTree(tmp_path)
    (tmp_path / "vendor").write_text("0x9999\n")
    (tmp_path / "numa").write_text("-1\n")
    (tmp_path / "bad").write_text("many\n")
    assert tree.read_int(tmp_path / "vendor", operation="read", device=None) == 0x9999
    assert tree.read_int(tmp_path / "numa", operation="read", device=None) == -1
    assert tree.read_int(tmp_path / "missing", operation="read", device=None) is None
    with pytest.raises(errors.HardwareError, match="/bad holds 'many', not a number"):
        tree.read_int(tmp_path / "bad", operation="read", device="0000:01:00.0")
    with pytest.raises(errors.HardwareError, match="Is a directory"):
        tree.read(tmp_path, operation="read", device=None)


def test_writes_carry_the_kernels_refusal(tmp_path: Path) -> None:
    def busy(path: Path, value: str) -> None:
        raise OSError(errno.EBUSY, os.strerror(errno.EBUSY))

    tree = sysfs.HostTree(tmp_path, busy)
    with pytest.raises(
        errors.HardwareError,
        match=r"^bind on 0000:01:00.0 failed: writing 0000:01:00.0 to /sys/bus/pci/drivers/x/bind: "
        r"Device or resource busy \(EBUSY\)$",
    ) as caught:
        tree.write(tree.path("/sys/bus/pci/drivers/x/bind"), "0000:01:00.0", operation="bind", device="0000:01:00.0")
    assert (caught.value.operation, caught.value.device) == ("bind", "0000:01:00.0")
    target = tmp_path / "attr"
    target.write_text("")
    sysfs.HostTree(tmp_path).write(target, "1", operation="write", device=None)
    assert target.read_text() == "1"


def _script(tmp_path: Path, name: str, body: str) -> None:
    path = tmp_path / name
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(0o755)


def test_tool_runner_reports_failures(tmp_path: Path) -> None:
    _script(tmp_path, "ok", 'echo "out $LC_ALL $*"; echo warn >&2')
    _script(tmp_path, "bad", "echo 'rmmod: ERROR: Module metax is in use' >&2; exit 1")
    _script(tmp_path, "slow", f"exec {shutil.which('sleep')} 30")
    runner = tools.ToolRunner([str(tmp_path)], timeout=0.5)
    result = runner.run("ok", ["a", "b"], operation="probe")
    assert (result.stdout, result.stderr) == ("out C a b\n", "warn\n")
    with pytest.raises(
        errors.HardwareError, match="^unload on metax failed: bad exited with 1: rmmod: ERROR: Module metax is in use$"
    ):
        runner.run("bad", [], operation="unload", device="metax")
    with pytest.raises(errors.HardwareError, match="slow did not answer within 0.5 s and was killed"):
        runner.run("slow", [], operation="query")
    with pytest.raises(errors.HardwareError, match="missing not found on PATH"):
        runner.run("missing", [], operation="query")


def test_host_mode_needs_nsenter(tmp_path: Path) -> None:
    runner = tools.ToolRunner([str(tmp_path)], mode=tools.ExecMode.HOST)
    with pytest.raises(errors.HardwareError, match="nsenter not found"):
        runner.run("modprobe", ["metax"], operation="load module", device="metax")
    _script(tmp_path, "nsenter", 'echo "$*"')
    assert runner.run("modprobe", ["metax"], operation="load").stdout == "--target 1 --mount -- modprobe metax\n"


def test_a_host_root_without_sys_is_refused_at_open(tmp_path: Path) -> None:
    # An agent pod without its hostPath mounts: one clear error at start, not an empty host reported as healthy.
    from metax_hw import host

    with pytest.raises(errors.HardwareError, match=r"/sys does not exist: the host's /sys is not mounted under"):
        host.open_host(tmp_path / "host")
    (tmp_path / "host" / "sys").mkdir(parents=True)
    assert host.open_host(tmp_path / "host").root == tmp_path / "host"
