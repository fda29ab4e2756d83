"""One QEMU boot per test session: the guest runs every hardware case once; tests read its per-case results.

Why a session fixture: a boot under TCG costs 20-40 s, a case a few seconds. The fixture fetches (or reuses)
the cached Debian kernel, boots it with the in-guest program (`tests.realkernel.guest`), and parses the
``@@RK <json>`` lines of the serial console (`tests.realkernel.results`). The boot is bounded by
``vm.BOOT_TIMEOUT``; whatever the guest printed is kept for the failure messages.
"""

from __future__ import annotations

import os
import sys

import pytest

from tests.realkernel import kernel, vm
from tests.realkernel.results import GuestRun, parse


@pytest.fixture(scope="session")
def guest_run(tmp_path_factory: pytest.TempPathFactory) -> GuestRun:
    workdir = tmp_path_factory.mktemp("realkernel")
    cached = kernel.fetch()
    command = [os.path.realpath(sys.executable), "-m", "tests.realkernel.guest"]
    boot = vm.boot(cached, workdir, command, {})
    (workdir / "console.txt").write_text(boot.console)
    return GuestRun(boot, parse(boot.console), workdir)
