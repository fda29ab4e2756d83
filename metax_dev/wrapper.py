"""Build the runtime wrapper ``metax-container-runtime`` (C, ``services/container_edit/wrapper.c``) on the build
host with ``gcc -static`` (or a cross compiler for another architecture's image: Debian's
``aarch64-linux-gnu-gcc``), cached by its source and the compiler's version.

Why here and not in the image: the product images carry no compiler (docs/images.md); the images build copies
this binary to `metax_core.runtime.handler.WRAPPER_IMAGE_PATH`, and the tests run the same binary in front of
the real runc. Static, so the node's runtime can run it on any host whatever its libc.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import tempfile
from pathlib import Path

from metax_core.runtime import handler
from metax_dev import cachedir

SOURCE = Path(__file__).resolve().parents[1] / "services" / "container_edit" / "wrapper.c"
FLAGS = ("-static", "-O2", "-Wall", "-Wextra", "-Werror", "-Wno-format-truncation")


class WrapperBuildError(RuntimeError):
    pass


def cache_root() -> Path:
    return cachedir.cache_dir("wrapper")


def _compiler(cc: str) -> str:
    try:
        done = subprocess.run([cc, "--version"], capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError) as exc:
        raise WrapperBuildError(
            f"{cc} is needed to build {handler.WRAPPER_NAME} (Debian's gcc, or gcc-aarch64-linux-gnu and "
            f"libc6-dev-arm64-cross for arm64: ./run installs them): {exc}"
        ) from exc
    return done.stdout.splitlines()[0]


def build(cache: Path | None = None, *, cc: str = "gcc") -> Path:
    """The wrapper binary made by `cc` (this machine's gcc, or a cross compiler such as
    ``aarch64-linux-gnu-gcc``): compiled once per source and compiler, then reused."""
    source = SOURCE.read_bytes()
    key = hashlib.sha256(source + _compiler(cc).encode() + " ".join(FLAGS).encode()).hexdigest()[:16]
    target = (cache or cache_root()) / key / handler.WRAPPER_NAME
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".build-")
    os.close(fd)
    done = subprocess.run([cc, *FLAGS, "-o", tmp, str(SOURCE)], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        Path(tmp).unlink(missing_ok=True)
        raise WrapperBuildError(f"{cc} failed on {SOURCE}:\n{done.stderr.strip()}")
    os.chmod(tmp, 0o755)
    os.replace(tmp, target)
    return target
