"""Every program of the images starts inside them (issue 21, Build 4; docs/images.md).

- each console script of pyproject.toml answers ``--help`` in the image (the image's environment, a
  read-only root), and each image's own entrypoint answers ``--version`` with the package version;
- the unprivileged component (the operator) starts with a read-only root filesystem as a random non-root UID
  with no capabilities, gets as far as connecting to the API server, and says in one line that it cannot;
- a privileged agent started without its host paths (no ``/host``) stops with one clear line, exit code 2,
  not a traceback.
"""

from __future__ import annotations

import importlib.metadata
import secrets
import tomllib
from pathlib import Path
from typing import Any

import pytest

from metax_dev.images import definitions
from tests.images.conftest import run_in_image

SCRIPTS = sorted(tomllib.loads((definitions.REPO / "pyproject.toml").read_text())["project"]["scripts"])
AGENT_IMAGES = ("metax-gpu-label", "metax-driver", "metax-vfio-manager", "metax-gpu-device", "metax-data-exporter")


def _random_uid() -> int:
    return 10_000 + secrets.randbelow(2**31 - 20_000)


COMPLETION_PROTOCOL = "kubectl_complete-metax"
"""kubectl's plugin completion program: its arguments are the words to complete (``--help`` is one), so it
answers kubectl's protocol instead of --help (docs/doctor.md)."""


@pytest.mark.parametrize("script", [s for s in SCRIPTS if s != COMPLETION_PROTOCOL])
def test_every_console_script_answers_help_in_the_image(
    script: str, rootfs: Path, configs: dict[str, dict[str, Any]]
) -> None:
    ran = run_in_image(rootfs, configs["metax-operator"], ["--help"], entrypoint=[script])
    assert ran.returncode == 0, f"{script} --help: {ran.stderr}"
    assert "usage:" in ran.stdout.lower(), ran.stdout
    assert "Traceback" not in ran.stderr


def test_the_kubectl_completion_program_answers_kubectls_protocol_in_the_image(
    rootfs: Path, configs: dict[str, dict[str, Any]]
) -> None:
    assert COMPLETION_PROTOCOL in SCRIPTS
    ran = run_in_image(rootfs, configs["metax-operator"], ["doc"], entrypoint=[COMPLETION_PROTOCOL])
    assert ran.returncode == 0, ran.stderr
    *words, directive = ran.stdout.split()
    assert words == ["doctor"] and directive.startswith(":"), ran.stdout


def test_every_image_entrypoint_answers_version(
    rootfs: Path, configs: dict[str, dict[str, Any]], defs: definitions.Definitions
) -> None:
    version = importlib.metadata.version("metax-gpu-operator")
    for image in defs.images:
        ran = run_in_image(rootfs, configs[image.name], ["--version"])
        assert ran.returncode == 0, f"{image.name}: {ran.stderr}"
        assert ran.stdout.strip() == version, f"{image.name}: {ran.stdout!r}"


def test_the_operator_starts_read_only_as_a_random_non_root_uid(
    rootfs: Path, configs: dict[str, dict[str, Any]]
) -> None:
    uid = _random_uid()
    ran = run_in_image(
        rootfs,
        configs["metax-operator"],
        [],
        user=f"{uid}:{uid}",
        # What the chart's Deployment sets, with an API server that is not there.
        env={
            "METAX_NAMESPACE": "metax-operator",
            "POD_NAME": "metax-operator-0",
            "KUBERNETES_SERVICE_HOST": "127.0.0.1",
            "KUBERNETES_SERVICE_PORT": "1",
        },
    )
    assert ran.returncode == 2, f"uid {uid}: exit {ran.returncode}: {ran.stderr}"
    assert "Traceback" not in ran.stderr, ran.stderr
    lines = [line for line in ran.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), ran.stderr
    # Proof of the sandbox the component ran in: it could not write its root, and was not root.
    probe = run_in_image(
        rootfs,
        configs["metax-operator"],
        ["-c", "import os; open('/probe', 'w')"],
        user=f"{uid}:{uid}",
        entrypoint=["/opt/metax/bin/python"],
    )
    assert probe.returncode == 1 and "Read-only file system" in probe.stderr, probe.stderr
    ids = run_in_image(rootfs, configs["metax-operator"], ["-u"], user=f"{uid}:{uid}", entrypoint=["id"])
    assert ids.stdout.strip() == str(uid)


@pytest.mark.parametrize("image", AGENT_IMAGES)
def test_an_agent_without_its_host_paths_stops_with_one_clear_line(
    image: str, rootfs: Path, configs: dict[str, dict[str, Any]]
) -> None:
    ran = run_in_image(
        rootfs,
        configs[image],
        [],
        # What the operator renders (metax_core.cluster.workloads), without the pod's /host mounts.
        env={"NODE_NAME": "gpu-node-1", "METAX_HOST_ROOT": "/host", "METAX_NAMESPACE": "metax-operator"},
    )
    assert ran.returncode == 2, f"{image}: exit {ran.returncode}: {ran.stderr}"
    assert "Traceback" not in ran.stderr, ran.stderr
    lines = [line for line in ran.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, ran.stderr
    assert "cannot start" in lines[0] and "/host" in lines[0], lines[0]
