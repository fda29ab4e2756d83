"""The kmod adapter's two readings for the payload's vermagic choice: the running kernel, a module file's vermagic.

Aspects covered (on the fake host, whose tools are real subprocesses with kmod's output): the running release
from ``<root>/proc/sys/kernel/osrelease`` and the flags of an in-tree module; a host without in-tree modules
gives the release alone; ``modinfo -F vermagic`` of a file outside the host root (the payload image's, read
DIRECT even when the kmod tools run in the host's namespace); a file that is no module is a HardwareError.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from metax_core import errors
from metax_core.node import payload_layout
from metax_hw_fake import builder, kmods

RELEASE = "6.1.0-57-amd64"


def test_running_kernel_is_the_hosts_release_with_its_modules_flags(tmp_path: Path) -> None:
    fake = builder.FakeHostBuilder().gpus(1).kernel_release(RELEASE).build(tmp_path / "h")
    running = fake.modules.running_kernel()
    assert running == payload_layout.RunningKernel(RELEASE, payload_layout.Vermagic.parse(kmods.vermagic(RELEASE)))
    (fake.root / f"lib/modules/{RELEASE}/modules.dep").write_text("")
    assert fake.modules.running_kernel() == payload_layout.RunningKernel(RELEASE, None)


def test_file_vermagic_reads_a_payload_file_outside_the_host_root(tmp_path: Path) -> None:
    fake = builder.FakeHostBuilder().gpus(1).kernel_release(RELEASE).build(tmp_path / "h")
    module = tmp_path / "payload" / payload_layout.module_relpath("6.1.0-56-amd64")
    kmods.write_module_file(module, "metax", "2.20.0", "metax", [], {}, vermagic=kmods.vermagic("6.1.0-56-amd64"))
    magic = fake.modules.file_vermagic(str(module))
    assert magic == payload_layout.Vermagic("6.1.0-56-amd64", ("SMP", "mod_unload", "modversions"))
    junk = tmp_path / "payload" / "driver" / "junk" / "metax.ko"
    junk.parent.mkdir(parents=True)
    junk.write_text("not a module")
    with pytest.raises(errors.HardwareError, match="modinfo exited with 1"):
        fake.modules.file_vermagic(str(junk))


def test_payload_files_are_read_direct_even_when_kmod_runs_in_the_hosts_namespace(tmp_path: Path) -> None:
    from metax_hw import host, tools

    fake = builder.FakeHostBuilder().gpus(1).build(tmp_path / "h")
    opened = host.open_host(fake.root, module_tools=tools.ExecMode.HOST)
    assert opened.modules.runner.mode is tools.ExecMode.HOST
    assert opened.modules.local_runner.mode is tools.ExecMode.DIRECT
