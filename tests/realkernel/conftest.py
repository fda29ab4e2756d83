"""One QEMU boot per test session: the guest runs every hardware case once; tests read its per-case results.

Why a session fixture: a boot under TCG costs 20-40 s, a case a few seconds. The fixture fetches (or reuses)
the cached Debian kernel and the test driver payloads built for it (`metax_dev.kpayload`: a module compiled
against the booted kernel's headers and one for another kernel, `kpayload.other_kernel`; each written as its OCI
archive and unpacked from it), boots the kernel with the in-guest program (`tests.realkernel.guest`), and
parses the ``@@RK <json>`` lines of the serial console (`tests.realkernel.results`). The boot is bounded by
``vm.BOOT_TIMEOUT``; whatever the guest printed is kept for the failure messages.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from metax_dev import kpayload
from tests.realkernel import guest, kernel, payloadcases, vm
from tests.realkernel.results import GuestRun, parse


def payloads(cached: kernel.Kernel, workdir: Path) -> Path:
    """``covering`` (the booted kernel's module and the previous ABI's) and ``foreign`` (only the latter)."""
    other_headers = kpayload.other_kernel(cached.release)
    other = other_headers.release
    modules = kpayload.build_modules(
        [cached.release], payloadcases.VERSION, image_version=cached.version, others=[other_headers]
    )
    target = workdir / "payloads"
    for name, chosen in (("covering", modules), ("foreign", {other: modules[other]})):
        built = kpayload.assemble(workdir / "built" / name, chosen)
        archive = kpayload.write_image(workdir / f"{name}.tar", f"metax.test/driver-payload:{name}", built)
        kpayload.unpack_image(archive, target / name)
    return target


@pytest.fixture(scope="session")
def guest_run(tmp_path_factory: pytest.TempPathFactory) -> GuestRun:
    workdir = tmp_path_factory.mktemp("realkernel")
    cached = kernel.fetch()
    extra, env, error = {}, {}, None
    try:
        extra = {"payloads": payloads(cached, workdir)}
        env = {guest.PAYLOADS_ENV: str(workdir / "stage" / "payloads")}
    except (RuntimeError, OSError) as exc:
        error = f"building the test payloads failed: {exc}"
    command = [os.path.realpath(sys.executable), "-m", "tests.realkernel.guest"]
    boot = vm.boot(cached, workdir, command, env, extra=extra)
    (workdir / "console.txt").write_text(boot.console)
    return GuestRun(boot, parse(boot.console), workdir, error)
