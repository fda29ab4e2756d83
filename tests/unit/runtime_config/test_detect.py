"""Detecting the node's runtime and the schema its version reads (C4, R-COMPAT), from real ``--version`` lines."""

from __future__ import annotations

import pytest

from metax_core.errors import InvalidSpec
from metax_core.runtime import detect

K = detect.RuntimeKind


@pytest.mark.parametrize(
    ("kind", "output", "version"),
    [
        (K.CONTAINERD, "containerd github.com/containerd/containerd 1.6.20~ds1 1.6.20~ds1-1+deb12u3\n", (1, 6, 20)),
        (K.CONTAINERD, "containerd github.com/containerd/containerd/v2 v2.4.2 \n", (2, 4, 2)),
        (K.CONTAINERD, "containerd containerd.io 1.7.27 05044ec0a9a75232cad458027ca83437aae3f4da\n", (1, 7, 27)),
        (K.DOCKER, "Docker version 20.10.24+dfsg1, build 297e128\n", (20, 10, 24)),
        (K.CRIO, "crio version 1.30.4\n", (1, 30, 4)),
        (K.CRIO, "INFO[0000] Starting CRI-O\nVersion:        1.29.1\nGitCommit: abc\n", (1, 29, 1)),
    ],
)
def test_versions_from_real_output(kind: detect.RuntimeKind, output: str, version: detect.Version) -> None:
    assert detect.parse_version(kind, output) == version


def test_no_version_is_an_error_naming_the_program() -> None:
    with pytest.raises(InvalidSpec, match="containerd --version: no version number"):
        detect.parse_version(K.CONTAINERD, "command not found")


def test_containerd_wins_over_docker_and_a_missing_socket_is_named() -> None:
    found = detect.detect({K.CONTAINERD: True, K.DOCKER: True}, {K.CONTAINERD: "containerd x v2.1.0", K.DOCKER: "x"})
    assert found == detect.Detected(K.CONTAINERD, (2, 1, 0)) and found.text == "containerd 2.1.0"
    assert detect.detect({K.DOCKER: True}, {K.DOCKER: "Docker version 27.3.1, build x"}).kind is K.DOCKER
    with pytest.raises(InvalidSpec, match="no container runtime socket found"):
        detect.detect({K.CONTAINERD: False}, {})
    with pytest.raises(InvalidSpec, match="its socket exists but its binary was not found"):
        detect.detect({K.CRIO: True}, {})


@pytest.mark.parametrize(
    ("version", "file_version", "replaces", "cdi"),
    [
        ((1, 6, 20), 2, True, detect.Cdi.NONE),
        ((1, 7, 27), 2, True, detect.Cdi.OFF_BY_DEFAULT),
        ((2, 0, 4), 3, False, detect.Cdi.ON),
        ((2, 2, 1), 3, False, detect.Cdi.ON),
        ((2, 3, 0), 4, False, detect.Cdi.ON),
        ((2, 4, 2), 4, False, detect.Cdi.ON),
    ],
)
def test_containerd_schema_by_version(
    version: detect.Version, file_version: int, replaces: bool, cdi: detect.Cdi
) -> None:
    schema = detect.containerd_schema(version)
    assert (schema.file_version, schema.replaces_sections, schema.cdi) == (file_version, replaces, cdi)


def test_containerd_before_1_6_is_refused() -> None:
    with pytest.raises(InvalidSpec, match="1.5.11 is too old; 1.6 or later"):
        detect.containerd_schema((1, 5, 11))
