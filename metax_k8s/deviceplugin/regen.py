"""Regenerates the checked-in gRPC code of the kubelet device plugin API from ``v1beta1/api.proto``.

The generated modules are checked in so that the operator image needs no protoc at build or run time.
A test regenerates them into a temporary directory and compares byte for byte, so the checked-in code
can never drift from the .proto or from the pinned grpcio-tools version (its version is stamped into the
generated code, and the protobuf runtime range in pyproject.toml follows it).

Usage: ``python -m metax_k8s.deviceplugin.regen`` (rewrite in place) or ``... --check`` (exit 1 on drift).
"""

from __future__ import annotations

import argparse
import filecmp
import logging
import pathlib
import sys
import tempfile
from collections.abc import Sequence

log = logging.getLogger(__name__)

PROTO = pathlib.PurePosixPath("metax_k8s/deviceplugin/v1beta1/api.proto")
"""The .proto, relative to the repository root (the root is the protoc include path, so the generated
modules import each other as ``metax_k8s.deviceplugin.v1beta1.api_pb2``)."""

GENERATED = ("api_pb2.py", "api_pb2.pyi", "api_pb2_grpc.py")

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]


class RegenerationFailed(RuntimeError):
    """protoc refused the .proto (its messages went to stderr)."""


def generate(
    out_root: pathlib.Path, repo_root: pathlib.Path = REPO_ROOT, proto: pathlib.PurePosixPath = PROTO
) -> list[pathlib.Path]:
    """Run protoc on ``proto``, writing the modules under ``out_root`` (mirroring the package path)."""
    import importlib.resources

    from grpc_tools import (
        protoc,  # imported here: grpcio-tools is a development dependency only
    )

    well_known = str(importlib.resources.files("grpc_tools") / "_proto")
    target_dir = out_root / proto.parent
    target_dir.mkdir(parents=True, exist_ok=True)
    args = [
        "grpc_tools.protoc",
        f"-I{repo_root}",
        f"-I{well_known}",
        f"--python_out={out_root}",
        f"--pyi_out={out_root}",
        f"--grpc_python_out={out_root}",
        str(repo_root / proto),
    ]
    code = protoc.main(args)
    if code != 0:
        raise RegenerationFailed(f"protoc exited with {code} for {proto}")
    return [target_dir / name for name in GENERATED]


def drifted(repo_root: pathlib.Path = REPO_ROOT, proto: pathlib.PurePosixPath = PROTO) -> list[str]:
    """Names of checked-in generated files that differ from a fresh generation (empty when in sync)."""
    with tempfile.TemporaryDirectory() as tmp:
        fresh = generate(pathlib.Path(tmp), repo_root, proto)
        checked_in = repo_root / proto.parent
        return [
            path.name
            for path in fresh
            if not (checked_in / path.name).exists() or not filecmp.cmp(path, checked_in / path.name, shallow=False)
        ]


def main(argv: list[str] | None = None, proto: pathlib.PurePosixPath | Sequence[pathlib.PurePosixPath] = PROTO) -> int:
    """Regenerate (or ``--check``) the code of ``proto``, or of each of several .protos that share a regen.sh."""
    protos = [proto] if isinstance(proto, pathlib.PurePosixPath) else list(proto)
    parser = argparse.ArgumentParser(
        description=f"Regenerate the checked-in gRPC code of {', '.join(map(str, protos))}."
    )
    parser.add_argument("--check", action="store_true", help="only report drift, exit 1 when found")
    options = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if options.check:
        stale = [(p, name) for p in protos for name in drifted(REPO_ROOT, p)]
        for p, name in stale:
            log.error("%s/%s is out of date: run its regen.sh", p.parent, name)
        return 1 if stale else 0
    for p in protos:
        for path in generate(REPO_ROOT, REPO_ROOT, p):
            log.info("wrote %s", path.relative_to(REPO_ROOT))
    return 0


if __name__ == "__main__":
    sys.exit(main())
