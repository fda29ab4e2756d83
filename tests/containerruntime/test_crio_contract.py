"""The fake CRI-O (`fake_crio`) against the real one (`metax_dev.crio_host`, CRI-O 1.35) (C4, R-COMPAT): the same
files give the same verdict from ``crio config`` (loads or not, and whether it declares ``metax`` running the
wrapper: `metax_core.runtime.crio.checked`, the agent's dry run) with the same handlers, and the daemons started on
them come up or fail alike and serve the same runtimes in ``GET /config`` (what the agent's readiness reads).

The cases are what the agent meets on a node: the administrator's files alone and with our drop-in; a later drop-in
naming another ``metax``, or setting only another option of it (CRI-O replaces a handler's table whole: ``metax``
then runs nothing and the daemon drops it); an earlier one naming another ``metax`` (ours wins); a drop-in in a
subdirectory (read too); our drop-in naming a wrapper that is not there (the dry run does not look at handlers' paths;
the daemon drops the handler); another handler of an unknown ``runtime_type`` (dropped by the daemon only); a
``crio.conf`` or a drop-in that does not parse; a truncated temporary of a write in ``crio.conf.d`` (CRI-O reads
hidden files: it refuses); ``default_runtime`` naming no handler."""

from __future__ import annotations

import subprocess
from collections.abc import Mapping
from typing import Any

import pytest
import tomlkit

from metax_core.runtime import crio

from .conftest import CrioNode, FakeCrioNode

OURS = "99-metax.conf"
OTHER_METAX = "[crio.runtime.runtimes.metax]\nruntime_path = '/bin/true'\n"
MISSING = "/nonexistent/metax-container-runtime"

#: case -> (text appended to crio.conf, files of crio.conf.d; "{wrapper}" is the wrapper's path)
CASES: Mapping[str, tuple[str, Mapping[str, str]]] = {
    "the administrator's files alone": ("", {"10-admin.conf": "[crio.api]\nstream_idle_timeout = '5m'\n"}),
    "with our drop-in": ("", {"10-admin.conf": "[crio.api]\nstream_idle_timeout = '5m'\n", OURS: "{dropin}"}),
    "a later drop-in names another metax": ("", {OURS: "{dropin}", "99-zz-admin.conf": OTHER_METAX}),
    "a later drop-in sets another option of metax": (
        "",
        {OURS: "{dropin}", "99-zz-admin.conf": "[crio.runtime.runtimes.metax]\nmonitor_env = ['A=b']\n"},
    ),
    "an earlier drop-in names another metax": ("", {"50-admin.conf": OTHER_METAX, OURS: "{dropin}"}),
    "a drop-in in a subdirectory": ("", {OURS: "{dropin}", "zz/metax.conf": OTHER_METAX}),
    "our drop-in names a wrapper that is not there": ("", {OURS: crio.dropin(MISSING)}),
    "another handler of an unknown runtime_type": (
        "",
        {
            OURS: "{dropin}",
            "50-kata.conf": "[crio.runtime.runtimes.kata]\nruntime_path = '/bin/sh'\nruntime_type = 'x'\n",
        },
    ),
    "a crio.conf that does not parse": ("[crio.runtime\n", {OURS: "{dropin}"}),
    "a drop-in that does not parse": ("", {"50-admin.conf": "[crio.runtime\n", OURS: "{dropin}"}),
    "a truncated temporary of a write": (
        "",
        {OURS: "{dropin}", f".{OURS}.k2j4.tmp": "[crio.runtime.runtimes.metax]\nrun"},
    ),
    "default_runtime names no handler": (
        "",
        {OURS: "{dropin}", "50-admin.conf": "[crio.runtime]\ndefault_runtime = 'x'\n"},
    ),
}


def _lay_out(node: CrioNode | FakeCrioNode, admin: str, extra: str, files: Mapping[str, str], wrapper: str) -> None:
    node.config.write_text(admin + extra)
    for name, text in files.items():
        path = node.config_dir / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text.replace("{dropin}", crio.dropin(wrapper)))


def _verdict(done: subprocess.CompletedProcess[str], wrapper: str) -> tuple[bool, bool, dict[str, str]]:
    """(loads, declares metax running the wrapper, every handler's runtime_path) of a ``crio config`` run."""
    if done.returncode != 0:
        return False, False, {}
    runtimes = tomlkit.parse(done.stdout).unwrap()["crio"]["runtime"]["runtimes"]
    declared, _ = crio.checked(done.stdout, wrapper)
    return True, declared, {name: table.get("runtime_path") or "" for name, table in runtimes.items()}


def _served(config: Mapping[str, Any]) -> dict[str, tuple[str, str, str]]:
    runtimes = config["crio"]["runtime"]["runtimes"]
    return {
        n: (t.get("runtime_path", ""), t.get("runtime_type", ""), t.get("runtime_root", ""))
        for n, t in runtimes.items()
    }


def _exit_code(process: subprocess.Popen[bytes] | None) -> int:
    assert process is not None
    return process.wait(timeout=30)


@pytest.mark.realnode  # the real CRI-O: root, a mount namespace, cgroups
@pytest.mark.parametrize("case", list(CASES))
def test_the_fake_and_the_real_crio_agree(crio: CrioNode, fake_crio: FakeCrioNode, case: str) -> None:
    extra, files = CASES[case]
    admin = crio.admin_config()  # the fake reads it too: it has runc as the default runtime, the rest it ignores
    wrapper = MISSING if "not there" in case else str(crio.wrapper_source)
    _lay_out(crio, admin, extra, files, wrapper)
    _lay_out(fake_crio, admin, extra, files, wrapper)

    real_done, fake_done = crio.crio_config(), fake_crio.crio_config()
    real, fake = _verdict(real_done, wrapper), _verdict(fake_done, wrapper)
    assert fake == real, f"crio config: the real said {real_done.stderr[-600:]}"

    crio.supervisor.start()
    fake_crio.supervisor.start()
    if not real[0]:  # files crio config refuses: no daemon comes up on them
        assert _exit_code(crio.supervisor.process) != 0 and _exit_code(fake_crio.supervisor.process) != 0
        return
    assert _served(fake_crio.running()) == _served(crio.running()), crio.log_tail()
