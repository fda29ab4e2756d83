"""The images for linux/arm64 (issue 39, item 6; docs/images.md "Platforms"): built here, run under emulation.

- the arm64 images' configuration says linux/arm64, they share every layer, and their archives live in
  ``build/images/linux-arm64/`` while the amd64 ones stay in ``build/images/``;
- their binaries are aarch64 (ELF ``e_machine`` 183): Debian's python3, the runtime wrapper (cross-compiled),
  the native extensions of the locked wheels; the amd64 ones are x86-64 (62);
- every console script answers ``--help`` and every image's entrypoint ``--version`` in the arm64 root, its
  Python running under qemu-user (it reports ``aarch64``);
- a warm build of either platform, right after the other's, rebuilds nothing (both share the cache's storage).
"""

from __future__ import annotations

import importlib.metadata
from pathlib import Path
from typing import Any

import pytest

from metax_core.runtime import handler
from metax_dev.images import build, buildah, definitions, platforms
from tests.images.conftest import read_archive, run_in_image
from tests.images.test_smoke import COMPLETION_PROTOCOL, SCRIPTS

SITE = "opt/metax/lib/python3.11/site-packages"


def _in_root(root: Path, path: str) -> Path:
    """`path` inside the unpacked image `root`, its symbolic links (absolute ones too) resolved in the image."""
    current = root
    parts = [p for p in path.split("/") if p]
    hops = 0
    while parts:
        part = parts.pop(0)
        if part == "..":
            current = current.parent if current != root else root
            continue
        candidate = current / part
        if candidate.is_symlink():
            hops += 1
            assert hops < 40, f"symlink loop at {candidate}"
            target = str(candidate.readlink())
            current = root if target.startswith("/") else current
            parts = [p for p in target.split("/") if p and p != "."] + parts
            continue
        current = candidate
    return current


def elf_machine(binary: Path) -> int:
    """``e_machine`` of an ELF file's header (62 EM_X86_64, 183 EM_AARCH64), in the header's own byte order."""
    header = binary.read_bytes()[:20]
    assert header[:4] == b"\x7fELF", f"{binary} is not ELF"
    return int.from_bytes(header[18:20], "little" if header[5] == 1 else "big")


def test_the_arm64_archives_say_linux_arm64_and_share_their_layers(
    built: build.Built, built_arm64: build.Built, configs_arm64: dict[str, dict[str, Any]]
) -> None:
    assert built_arm64.platform == "linux/arm64"
    assert set(built_arm64.archives) == set(built.archives)
    for name, archive in built_arm64.archives.items():
        assert archive.parent == build.DEFAULT_OUT / "linux-arm64", archive
        assert built.archives[name].parent == build.DEFAULT_OUT
        config = configs_arm64[name]
        assert (config["os"], config["architecture"]) == ("linux", "arm64"), name
    layer_sets = {tuple(la["digest"] for la in read_archive(a)[1]["layers"]) for a in built_arm64.archives.values()}
    assert len(layer_sets) == 1
    amd64_layers = {la["digest"] for la in read_archive(built.archives["metax-operator"])[1]["layers"]}
    assert not amd64_layers & set(next(iter(layer_sets))), "an arm64 layer is an amd64 one"


def test_the_arm64_binaries_are_aarch64_and_the_amd64_ones_x86_64(rootfs: Path, rootfs_arm64: Path) -> None:
    binaries = ["/opt/metax/bin/python", "/usr/bin/python3", "/usr/bin/kmod", handler.WRAPPER_IMAGE_PATH]
    for root, p in ((rootfs, platforms.AMD64), (rootfs_arm64, platforms.ARM64)):
        for binary in binaries:
            assert elf_machine(_in_root(root, binary)) == p.elf_machine, (p.name, binary)
        # The native extensions of the locked wheels are the platform's.
        extensions = sorted((root / SITE / "grpc" / "_cython").glob("cygrpc*.so"))
        assert extensions and all(elf_machine(e) == p.elf_machine for e in extensions), (p.name, extensions)
        wheel = next((root / SITE).glob("grpcio-*.dist-info")) / "WHEEL"
        assert f"_{p.machine}" in wheel.read_text(), (p.name, wheel.read_text())
    assert not list(rootfs_arm64.glob("usr/lib/*/gconv/*")), "glibc's iconv modules are in the arm64 image"


def test_the_arm64_python_runs_under_qemu(rootfs_arm64: Path, configs_arm64: dict[str, dict[str, Any]]) -> None:
    ran = run_in_image(
        rootfs_arm64,
        configs_arm64["metax-operator"],
        ["-c", "import platform, grpc, cryptography.x509, re2, yaml._yaml; print(platform.machine())"],
        entrypoint=["/opt/metax/bin/python"],
    )
    assert (ran.returncode, ran.stdout.strip()) == (0, "aarch64"), ran.stderr


@pytest.mark.parametrize("script", [s for s in SCRIPTS if s != COMPLETION_PROTOCOL])
def test_every_console_script_answers_help_in_the_arm64_image(
    script: str, rootfs_arm64: Path, configs_arm64: dict[str, dict[str, Any]]
) -> None:
    ran = run_in_image(rootfs_arm64, configs_arm64["metax-operator"], ["--help"], entrypoint=[script], timeout=120)
    assert ran.returncode == 0, f"{script} --help: {ran.stderr}"
    assert "usage:" in ran.stdout.lower(), ran.stdout
    assert "Traceback" not in ran.stderr


def test_every_arm64_image_entrypoint_answers_version(
    rootfs_arm64: Path, configs_arm64: dict[str, dict[str, Any]], defs: definitions.Definitions
) -> None:
    version = importlib.metadata.version("metax-gpu-operator")
    for image in defs.images:
        ran = run_in_image(rootfs_arm64, configs_arm64[image.name], ["--version"], timeout=120)
        assert ran.returncode == 0, f"{image.name}: {ran.stderr}"
        assert ran.stdout.strip() == version, f"{image.name}: {ran.stdout!r}"


def test_a_warm_build_of_either_platform_rebuilds_nothing(built: build.Built, built_arm64: build.Built) -> None:
    for before in (built, built_arm64):
        again = build.build(platform=before.platform)
        assert again.cached, before.platform
        assert again.digests == before.digests
        assert again.seconds < 10, f"{before.platform}: {again.seconds:.1f} s"


def test_platforms_are_parsed_from_the_command_line() -> None:
    assert platforms.parse("all") == (platforms.AMD64, platforms.ARM64)
    assert platforms.parse("linux/arm64, linux/amd64,linux/arm64") == (platforms.ARM64, platforms.AMD64)
    with pytest.raises(buildah.ImageBuildError, match="unknown platform 'linux/s390x'"):
        platforms.parse("linux/s390x")
    assert platforms.archive_dir(Path("/o"), platforms.AMD64) == Path("/o")
    assert platforms.archive_dir(Path("/o"), platforms.ARM64) == Path("/o/linux-arm64")
