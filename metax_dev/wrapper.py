"""Build the runtime wrapper ``metax-container-runtime`` (C, ``services/container_edit/wrapper.c``) on the build
host with ``gcc -static``, cached by its source and the compiler's version.

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


def _compiler() -> str:
    try:
        done = subprocess.run(["gcc", "--version"], capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError) as exc:
        raise WrapperBuildError(f"gcc is needed to build {handler.WRAPPER_NAME} (Debian package gcc): {exc}") from exc
    return done.stdout.splitlines()[0]


def build(cache: Path | None = None) -> Path:
    """The wrapper binary: compiled once per source and compiler, then reused."""
    source = SOURCE.read_bytes()
    key = hashlib.sha256(source + _compiler().encode() + " ".join(FLAGS).encode()).hexdigest()[:16]
    target = (cache or cache_root()) / key / handler.WRAPPER_NAME
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".build-")
    os.close(fd)
    done = subprocess.run(["gcc", *FLAGS, "-o", tmp, str(SOURCE)], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        Path(tmp).unlink(missing_ok=True)
        raise WrapperBuildError(f"gcc failed on {SOURCE}:\n{done.stderr.strip()}")
    os.chmod(tmp, 0o755)
    os.replace(tmp, target)
    return target
