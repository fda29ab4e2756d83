"""The real-kernel harness's own pieces, without booting: console parsing, vmlinux extraction, the initramfs.

Aspects covered: ``@@RK`` lines are found after console noise and a line cut by a kernel message is dropped
(not misread); the ELF kernel is found after a false xz magic in a bzImage; the newc archive has the init
script, kmod links and 4-byte alignment; ``METAX_REALKERNEL_ACCEL`` overrides the KVM/TCG choice.
"""

from __future__ import annotations

import lzma
from pathlib import Path

import pytest

from tests.realkernel import kernel, results, vm


def test_console_markers_are_parsed_and_cut_lines_dropped() -> None:
    console = "\n".join(
        [
            "[    0.000000] Linux version 6.1",
            '@@RK {"init": "up"}',
            '[    3.1] nvme nvme0: @@RK {"case": "a", "ok": true, "message": ""}',
            '@@RK {"case": "b", "ok": fa[    4.2] random kernel line',
            '@@RK {"case": "c", "ok": false, "message": "CaseFailed: x"}',
            "@@RK [1, 2]",
        ]
    )
    records = results.parse(console)
    assert records == [
        {"init": "up"},
        {"case": "a", "ok": True, "message": ""},
        {"case": "c", "ok": False, "message": "CaseFailed: x"},
    ]


def test_vmlinux_is_the_elf_inside_the_xz_stream() -> None:
    elf = b"\x7fELF" + bytes(range(256)) * 64
    bzimage = b"MZ setup" + b"\xfd7zXZ\x00 not a stream" + b"\0" * 100 + lzma.compress(elf, format=lzma.FORMAT_XZ)
    assert kernel.extract_vmlinux(bzimage + b"trailer") == elf
    with pytest.raises(RuntimeError, match="no xz-compressed ELF"):
        kernel.extract_vmlinux(b"MZ" + lzma.compress(b"not an elf", format=lzma.FORMAT_XZ))


def test_initramfs_is_a_newc_archive_with_init_and_kmod_links(tmp_path: Path) -> None:
    modules = tmp_path / "lib/modules/6.1.0-test"
    (modules / "kernel/fs/9p").mkdir(parents=True)
    (modules / "kernel/fs/9p/9p.ko").write_bytes(b"\0module")
    (modules / "modules.dep").write_text("kernel/fs/9p/9p.ko:\n")
    cached = kernel.Kernel(tmp_path, "6.1.0-test", "linux-image-test", "1")
    mounts = [vm.Share("rk0", Path("/usr"))]
    archive = vm.initramfs(cached, mounts, ["/usr/bin/python3", "-m", "x"], {"A": "1"}, boot_modules=["9p"])
    names, offset = [], 0
    while True:
        header = archive[offset : offset + 110]
        assert header[:6] == b"070701" and offset % 4 == 0
        size, name_size = int(header[54:62], 16), int(header[94:102], 16)
        name = archive[offset + 110 : offset + 110 + name_size - 1].decode()
        data_at = offset + 110 + name_size + (-(110 + name_size) % 4)
        names.append(name)
        if name == "init":
            init = archive[data_at : data_at + size].decode()
        if name == "TRAILER!!!":
            break
        offset = data_at + size + (-size % 4)
    assert {"bin/busybox", "sbin/modprobe", "lib/modules/6.1.0-test/kernel/fs/9p/9p.ko", "init"} <= set(names)
    assert "insmod /lib/modules/6.1.0-test/kernel/fs/9p/9p.ko" in init
    assert "mount -t 9p" in init and "rk0 /usr" in init and "A='1' /usr/bin/python3 -m x" in init
    assert init.rstrip().endswith("poweroff -f")


def test_accel_override(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("METAX_REALKERNEL_ACCEL", "tcg")
    assert vm.choose_accel() == "tcg"
    monkeypatch.delenv("METAX_REALKERNEL_ACCEL")
    assert vm.choose_accel() in ("kvm", "tcg")
