"""Launchers share one record of the sysctls the kubelet changes: the first records the host's values,
later ones (in this or another process) get the same record even though a kubelet has changed the
values meanwhile, and only the last one to leave writes them back; a dead holder does not count."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from metax_dev.realnode import hygiene

pytestmark = pytest.mark.realnode


def test_last_holder_restores_what_the_first_recorded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    host = {"vm/overcommit_memory": "0", "kernel/panic": "1"}
    monkeypatch.setattr(hygiene, "SHARED_STATE", tmp_path / "state")
    monkeypatch.setattr(hygiene, "read_sysctls", lambda: dict(host))
    monkeypatch.setattr(hygiene, "write_sysctls", host.update)
    other = subprocess.Popen(["sleep", "60"])
    try:
        first = hygiene.hold_sysctls(other.pid)
        host.update({"vm/overcommit_memory": "1", "kernel/panic": "10"})  # a kubelet started
        second = hygiene.hold_sysctls(os.getpid())
        third = hygiene.hold_sysctls(os.getpid())  # a second launcher in the same process
        assert first == second == third == {"vm/overcommit_memory": "0", "kernel/panic": "1"}

        hygiene.release_sysctls(os.getpid(), second)
        hygiene.release_sysctls(other.pid, first)
        assert host["kernel/panic"] == "10"  # one holder is left
        hygiene.release_sysctls(os.getpid(), third)
        assert host == {"vm/overcommit_memory": "0", "kernel/panic": "1"}
        assert not (tmp_path / "state").exists()

        hygiene.hold_sysctls(other.pid)
        other.kill()
        other.wait()
        host["kernel/panic"] = "10"
        hygiene.hold_sysctls(os.getpid())  # the dead holder is forgotten: this records afresh
        hygiene.release_sysctls(os.getpid(), {})
        assert host["kernel/panic"] == "10"
    finally:
        other.kill()
        other.wait()
