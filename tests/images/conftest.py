"""Fixtures for the image tests: the images built once per session (cached: seconds when nothing changed),
one image's root filesystem unpacked by Debian's umoci, and a way to run a program in it.

Why `unshare` + `chroot` and not runc: the runc built here comes with the real node's Go build (tens of
minutes cold on this machine), while the properties under test are kernel mechanisms util-linux and coreutils
reach directly, as root, in seconds: a private mount namespace whose root is a read-only bind mount of the
image's root filesystem (``readOnlyRootFilesystem``), a fresh PID namespace with its own ``/proc``, a
``/tmp`` tmpfs (the emptyDir the chart mounts), and ``chroot --userspec`` to a random non-root UID, which
drops every capability as ``runAsNonRoot`` with ``capabilities: drop: [ALL]`` does. The image's own
configuration (entrypoint, user, environment) is read from the archive as built.

The linux/arm64 images (``built_arm64``, ``rootfs_arm64``) run the same way: the kernel hands their aarch64
programs to qemu-user-static through binfmt_misc (`metax_dev.images.platforms.ensure_emulation` registers it
with the F flag, so it works inside the chroot), which is how the build itself ran them.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tarfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from metax_dev.images import build, definitions, platforms


@pytest.fixture(scope="session")
def built() -> build.Built:
    return build.build()


@pytest.fixture(scope="session")
def built_arm64(built: build.Built) -> build.Built:
    """The linux/arm64 images, from the same cache (one cold build per machine: docs/images.md), built after the
    amd64 ones so that a session's first failure is the native build's; qemu registered even when cached."""
    arm64 = build.build(platform=platforms.ARM64.name)
    platforms.ensure_emulation(platforms.ARM64)
    return arm64


@pytest.fixture(scope="session")
def defs() -> definitions.Definitions:
    return definitions.load()


def read_archive(archive: Path) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """(index, manifest, config) of a one-image OCI archive."""
    with tarfile.open(archive) as tar:

        def blob(digest: str) -> dict[str, Any]:
            member = tar.extractfile("blobs/sha256/" + digest.removeprefix("sha256:"))
            assert member is not None
            loaded: dict[str, Any] = json.load(member)
            return loaded

        index_file = tar.extractfile("index.json")
        assert index_file is not None
        index: dict[str, Any] = json.load(index_file)
        manifest = blob(index["manifests"][0]["digest"])
        return index, manifest, blob(manifest["config"]["digest"])


@pytest.fixture(scope="session")
def configs(built: build.Built) -> dict[str, dict[str, Any]]:
    """Image name -> its OCI image configuration."""
    return {name: read_archive(archive)[2] for name, archive in built.archives.items()}


@pytest.fixture(scope="session")
def configs_arm64(built_arm64: build.Built) -> dict[str, dict[str, Any]]:
    return {name: read_archive(archive)[2] for name, archive in built_arm64.archives.items()}


def unpack(archive: Path, work: Path) -> Path:
    """The root filesystem of a one-image OCI archive, unpacked by umoci under `work`."""
    layout = work / "layout"
    layout.mkdir()
    with tarfile.open(archive) as tar:
        tar.extractall(layout, filter="tar")
    tag = json.loads((layout / "index.json").read_text())["manifests"][0]["annotations"][
        "org.opencontainers.image.ref.name"
    ]
    bundle = work / "bundle"
    subprocess.run(["umoci", "unpack", "--image", f"{layout}:{tag}", str(bundle)], check=True, capture_output=True)
    return bundle / "rootfs"


@pytest.fixture(scope="session")
def rootfs(built: build.Built, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The root filesystem of the images (they share every layer), unpacked from an archive by umoci."""
    work = tmp_path_factory.mktemp("image")
    yield unpack(built.archives["metax-operator"], work)
    shutil.rmtree(work, ignore_errors=True)


@pytest.fixture(scope="session")
def rootfs_arm64(built_arm64: build.Built, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The linux/arm64 images' root filesystem."""
    work = tmp_path_factory.mktemp("image-arm64")
    yield unpack(built_arm64.archives["metax-operator"], work)
    shutil.rmtree(work, ignore_errors=True)


@dataclass(frozen=True)
class Ran:
    returncode: int
    stdout: str
    stderr: str


def run_in_image(
    rootfs: Path,
    config: Mapping[str, Any],
    args: Sequence[str],
    *,
    user: str | None = None,
    env: Mapping[str, str] | None = None,
    entrypoint: Sequence[str] | None = None,
    timeout: float = 60,
) -> Ran:
    """Run the image's entrypoint (or `entrypoint`) with `args` in a read-only root, as the image's user or `user`
    (``uid:gid``), with the image's environment plus `env`, ``HOME=/`` as the kubelet sets it."""
    c = config["config"]
    environment = dict(e.split("=", 1) for e in c.get("Env", []))
    environment.setdefault("HOME", "/")
    environment.update(env or {})
    argv = [*(entrypoint if entrypoint is not None else c["Entrypoint"]), *args]
    who = user or c.get("User") or "0:0"
    root = str(rootfs)
    script = (
        'set -e; R="$1"; U="$2"; shift 2; '
        'mount --bind "$R" "$R"; mount -o remount,bind,ro "$R"; '
        'mount -t proc proc "$R/proc"; mount -t tmpfs -o mode=1777 tmpfs "$R/tmp"; '
        'mount -t tmpfs tmpfs "$R/dev"; for d in null zero random urandom; do '
        ': > "$R/dev/$d"; mount --bind "/dev/$d" "$R/dev/$d"; done; '
        'exec chroot --userspec="$U" "$R" /usr/bin/env -i "$@"'
    )
    command = [
        "unshare",
        "--mount",
        "--pid",
        "--fork",
        "--propagation",
        "private",
        "--",
        "sh",
        "-c",
        script,
        "sh",
        root,
        who,
        *(f"{k}={v}" for k, v in sorted(environment.items())),
        *argv,
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)
    return Ran(done.returncode, done.stdout, done.stderr)
