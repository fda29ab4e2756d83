"""Regenerates the checked-in gRPC code of the kubelet PodResources API from ``v1/api.proto``.

Same scheme as :mod:`metax_k8s.deviceplugin.regen` (checked-in code, so no protoc at build or run time;
a test regenerates into a temporary directory and compares byte for byte), for the second kubelet API
the project speaks. Kept apart from that module so each API's generator stays next to its .proto.

Usage: ``python -m metax_k8s.podresources.regen`` (rewrite in place) or ``... --check`` (exit 1 on drift).
"""

from __future__ import annotations

import argparse
import filecmp
import importlib.resources
import logging
import pathlib
import sys
import tempfile

log = logging.getLogger(__name__)

PROTO = pathlib.PurePosixPath("metax_k8s/podresources/v1/api.proto")
"""The .proto, relative to the repository root (the include path, so the modules import each other as
``metax_k8s.podresources.v1.api_pb2``)."""

GENERATED = ("api_pb2.py", "api_pb2.pyi", "api_pb2_grpc.py")

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]


class RegenerationFailed(RuntimeError):
    """protoc refused the .proto (its messages went to stderr)."""


def generate(out_root: pathlib.Path, repo_root: pathlib.Path = REPO_ROOT) -> list[pathlib.Path]:
    """Run protoc on the .proto, writing the modules under ``out_root`` (mirroring the package path)."""
    from grpc_tools import protoc  # a development dependency only

    well_known = str(importlib.resources.files("grpc_tools") / "_proto")
    target_dir = out_root / PROTO.parent
    target_dir.mkdir(parents=True, exist_ok=True)
    code = protoc.main(
        [
            "grpc_tools.protoc",
            f"-I{repo_root}",
            f"-I{well_known}",
            f"--python_out={out_root}",
            f"--pyi_out={out_root}",
            f"--grpc_python_out={out_root}",
            str(repo_root / PROTO),
        ]
    )
    if code != 0:
        raise RegenerationFailed(f"protoc exited with {code} for {PROTO}")
    return [target_dir / name for name in GENERATED]


def drifted(repo_root: pathlib.Path = REPO_ROOT) -> list[str]:
    """Names of checked-in generated files that differ from a fresh generation (empty when in sync)."""
    with tempfile.TemporaryDirectory() as tmp:
        fresh = generate(pathlib.Path(tmp), repo_root)
        checked_in = repo_root / PROTO.parent
        return [
            path.name
            for path in fresh
            if not (checked_in / path.name).exists() or not filecmp.cmp(path, checked_in / path.name, shallow=False)
        ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only report drift, exit 1 when found")
    options = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if options.check:
        stale = drifted()
        for name in stale:
            log.error("%s is out of date: run metax_k8s/podresources/regen.sh", name)
        return 1 if stale else 0
    for path in generate(REPO_ROOT):
        log.info("wrote %s", path.relative_to(REPO_ROOT))
    return 0


if __name__ == "__main__":
    sys.exit(main())
