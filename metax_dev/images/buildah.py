"""Running Debian's tools for the image build: one error type, and buildah on its own storage.

Why a module of its own: every step of `metax_dev.images.build` runs a tool and must say which step failed
with the tool's own words; buildah always runs with the same storage, driver and isolation.
"""

from __future__ import annotations

import logging
import os
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Final

logger = logging.getLogger(__name__)

_DETERMINISTIC_ENV: Final = ("PYTHONHASHSEED=0",)
"""Python's string hashing fixed, so bytecode of set constants is the same on every build."""


class ImageBuildError(RuntimeError):
    """A build step failed; the message names the step and the tool's own output."""


def run(argv: Sequence[str], step: str, *, env: dict[str, str] | None = None, cwd: Path | None = None) -> str:
    logger.debug("%s: %s", step, " ".join(argv))
    try:
        done = subprocess.run(
            list(argv), capture_output=True, text=True, check=False, env=env, cwd=cwd, stdin=subprocess.DEVNULL
        )
    except FileNotFoundError as exc:
        raise ImageBuildError(f"{step}: {argv[0]} not found (./run installs Debian's buildah, mmdebstrap)") from exc
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip()[-3000:]
        raise ImageBuildError(f"{step}: `{' '.join(argv[:3])} ...` exited with {done.returncode}: {tail}")
    return done.stdout


class Buildah:
    """Debian's buildah on its own vfs storage under the cache (no daemon, nothing shared with the host)."""

    def __init__(self, storage: Path) -> None:
        self.prefix = [
            "buildah",
            "--root",
            str(storage / "root"),
            "--runroot",
            str(storage / "runroot"),
            "--storage-driver",
            "vfs",
        ]

    def __call__(self, *args: str, step: str) -> str:
        env = dict(os.environ, BUILDAH_ISOLATION="chroot", TMPDIR=str(Path(self.prefix[2]).parent / "tmp"))
        Path(env["TMPDIR"]).mkdir(parents=True, exist_ok=True)
        return run([*self.prefix, *args], step, env=env).strip()

    def has_image(self, name: str) -> bool:
        return self._succeeds("inspect", "--type", "image", name)

    def has_manifest_list(self, name: str) -> bool:
        """Whether `name` is a manifest list in this storage (`inspect --type image` does not see lists)."""
        return self._succeeds("manifest", "inspect", name)

    def _succeeds(self, *args: str) -> bool:
        done = subprocess.run([*self.prefix, *args], capture_output=True, check=False, env=dict(os.environ))
        return done.returncode == 0

    def run(
        self, container: str, argv: Sequence[str], *, step: str, volumes: Sequence[str] = (), env: Sequence[str] = ()
    ) -> str:
        args = ["run", "--isolation", "chroot"]  # chroot isolation shares the host network; nothing here needs one
        for v in volumes:
            args += ["--volume", v]
        for e in (*_DETERMINISTIC_ENV, *env):
            args += ["--env", e]
        return self(*args, container, "--", *argv, step=step)

    def commit(self, container: str, target: str, epoch: int, *, step: str, rm: bool = True) -> str:
        args = ["commit", "--quiet", "--format", "oci", "--timestamp", str(epoch), "--identity-label=false"]
        if rm:
            args.append("--rm")
        return self(*args, container, target, step=step)
