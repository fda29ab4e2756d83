"""Regenerates the checked-in gRPC code of the kubelet's DRA-related APIs: the DRA plugin service (v1 and
v1beta1), plugin registration (v1) and resource health (v1alpha1).

The same generator as :mod:`metax_k8s.deviceplugin.regen` (checked-in code, so no protoc at build or run
time; a test regenerates into a temporary directory and compares byte for byte), over these four .protos.

Usage: ``python -m metax_k8s.dra.regen`` (rewrite in place) or ``... --check`` (exit 1 on drift).
"""

from __future__ import annotations

import pathlib
import sys

from metax_k8s.deviceplugin import regen

PROTOS = tuple(
    pathlib.PurePosixPath(p)
    for p in (
        "metax_k8s/dra/v1/api.proto",
        "metax_k8s/dra/v1beta1/api.proto",
        "metax_k8s/pluginregistration/v1/api.proto",
        "metax_k8s/drahealth/v1alpha1/api.proto",
    )
)
"""The .protos, relative to the repository root (the include path)."""


def drifted(repo_root: pathlib.Path = regen.REPO_ROOT) -> list[str]:
    """``<proto dir>/<file>`` of every checked-in generated file that differs from a fresh generation."""
    return [f"{proto.parent}/{name}" for proto in PROTOS for name in regen.drifted(repo_root, proto)]


def main(argv: list[str] | None = None) -> int:
    return regen.main(argv, PROTOS)


if __name__ == "__main__":
    sys.exit(main())
