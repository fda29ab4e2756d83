"""Running another architecture's programs on this machine (`metax_dev.images.platforms.ensure_emulation`).

- on this machine, linux/arm64 programs run: qemu-aarch64 registered with the F flag (a second call changes
  nothing);
- a registration is made from Debian's ``.conf`` with the F flag added when missing;
- what cannot work says so in one error naming the file: no qemu-user-static, a registration without F.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from metax_dev.images import buildah, platforms

RISCV = platforms.Platform("linux/riscv64", "riscv64", "riscv64", 243, "riscv64-linux-gnu-gcc")
"""Not this machine's: its emulation goes through the fake directories below."""
LINE = r":qemu-riscv64:M::\x7fELF\x02\x01\x01:\xff\xff\xff\xff\xff\xff\xff:/usr/bin/true:OP"


@pytest.fixture
def fake(tmp_path: Path) -> tuple[Path, Path]:
    binfmt, conf = tmp_path / "binfmt_misc", tmp_path / "binfmt.d"
    binfmt.mkdir()
    conf.mkdir()
    (binfmt / "register").write_text("")
    (binfmt / "status").write_text("enabled\n")
    return binfmt, conf


def test_arm64_programs_run_on_this_machine() -> None:
    platforms.ensure_emulation(platforms.ARM64)
    platforms.ensure_emulation(platforms.ARM64)
    if not platforms.is_native(platforms.ARM64):
        entry = (platforms.BINFMT_MISC / "qemu-aarch64").read_text().splitlines()
        assert entry[0] == "enabled"
        assert "F" in next(s for s in entry if s.startswith("flags:"))


def test_the_registration_comes_from_debians_conf_with_the_f_flag(fake: tuple[Path, Path]) -> None:
    binfmt, conf = fake
    (conf / "qemu-riscv64.conf").write_text(f"# qemu-user-static\n{LINE}\n")
    # The fake kernel does not create the entry: the error says what was written.
    with pytest.raises(buildah.ImageBuildError, match="no .*qemu-riscv64 came"):
        platforms.ensure_emulation(RISCV, binfmt_misc=binfmt, conf_dir=conf)
    assert (binfmt / "register").read_text() == LINE + "F"


def test_an_existing_registration_is_used_when_it_has_the_f_flag(fake: tuple[Path, Path]) -> None:
    binfmt, conf = fake
    (conf / "qemu-riscv64.conf").write_text(LINE)
    (binfmt / "qemu-riscv64").write_text("enabled\ninterpreter /usr/bin/true\nflags: POF\n")
    platforms.ensure_emulation(RISCV, binfmt_misc=binfmt, conf_dir=conf)
    assert (binfmt / "register").read_text() == ""
    (binfmt / "qemu-riscv64").write_text("enabled\ninterpreter /usr/bin/true\nflags: P\n")
    with pytest.raises(buildah.ImageBuildError, match="without the F flag"):
        platforms.ensure_emulation(RISCV, binfmt_misc=binfmt, conf_dir=conf)


def test_without_qemu_user_static_the_error_says_what_to_install(fake: tuple[Path, Path]) -> None:
    binfmt, conf = fake
    with pytest.raises(
        buildah.ImageBuildError, match="qemu-riscv64.conf is missing: install Debian's qemu-user-static"
    ):
        platforms.ensure_emulation(RISCV, binfmt_misc=binfmt, conf_dir=conf)
