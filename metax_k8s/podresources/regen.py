"""Regenerates the checked-in gRPC code of the kubelet PodResources API from ``v1/api.proto``.

The same generator as :mod:`metax_k8s.deviceplugin.regen` (checked-in code, so no protoc at build or run
time; a test regenerates into a temporary directory and compares byte for byte), pointed at this API's
.proto, so each API's entry point stays next to its .proto.

Usage: ``python -m metax_k8s.podresources.regen`` (rewrite in place) or ``... --check`` (exit 1 on drift).
"""

from __future__ import annotations

import pathlib
import sys

from metax_k8s.deviceplugin import regen

PROTO = pathlib.PurePosixPath("metax_k8s/podresources/v1/api.proto")
"""The .proto, relative to the repository root (the include path, so the modules import each other as
``metax_k8s.podresources.v1.api_pb2``)."""

GENERATED = regen.GENERATED


def drifted(repo_root: pathlib.Path = regen.REPO_ROOT) -> list[str]:
    """Names of checked-in generated files that differ from a fresh generation (empty when in sync)."""
    return regen.drifted(repo_root, PROTO)


def main(argv: list[str] | None = None) -> int:
    return regen.main(argv, PROTO)


if __name__ == "__main__":
    sys.exit(main())
