"""Where a release goes: a registry path with its credentials and CA, as skopeo's and helm's flags.

Why a module of its own: skopeo (the images) and helm (the chart) reach the same registry with the same
credentials and CA but spell them differently (``--dest-authfile``/``--dest-cert-dir`` against
``--registry-config``/``--ca-file``); one record says both, and the refused registry is named once
(`metax_core.spec.names.registry_problem`, the rule the chart and the operator apply).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from metax_core.spec import names
from metax_dev.images import buildah

CHARTS_PATH: Final = "charts"
"""The chart's repository under the registry path: ``oci://<registry>/charts/metax-operator``. Not the seed's
``oci://DOMAIN/PROJECT/metax-operator``: that repository holds the operator's image (docs/images.md)."""
CHART_NAME: Final = "metax-operator"


class ReleaseError(RuntimeError):
    """A release step failed; the message names the step and the tool's own words."""


def run(argv: Sequence[str], step: str, *, cwd: Path | None = None) -> str:
    """The images build's runner (`metax_dev.images.buildah.run`: the tool's stdout, or its own words in the
    error), its failure a release step's."""
    try:
        return buildah.run(argv, step, cwd=cwd)
    except buildah.ImageBuildError as exc:
        raise ReleaseError(str(exc)) from exc


@dataclass(frozen=True)
class Target:
    """A registry path (``HOST[:PORT][/PROJECT]``) and how to reach it."""

    registry: str
    authfile: Path | None = None
    """A containers-auth.json (``{"auths": {host: {"auth": ...}}}``): skopeo's ``--authfile`` and helm's
    ``--registry-config`` read the same file."""
    cert_dir: Path | None = None
    """A directory holding the registry's CA as ``ca.crt`` (skopeo's cert dir; helm gets ``ca.crt``)."""

    def __post_init__(self) -> None:
        if problem := names.registry_problem(self.registry):
            raise ReleaseError(f"--registry {self.registry!r}: {problem}")

    def image(self, name: str, version: str) -> str:
        return f"{self.registry}/{name}:{version}"

    @property
    def chart_repository(self) -> str:
        """What ``helm push`` takes: ``oci://<registry>/charts``."""
        return f"oci://{self.registry}/{CHARTS_PATH}"

    def chart_reference(self) -> str:
        """What ``helm install`` takes: ``oci://<registry>/charts/metax-operator``."""
        return f"{self.chart_repository}/{CHART_NAME}"

    def skopeo_flags(self, side: str = "") -> list[str]:
        """skopeo's flags for this registry: ``side`` ``dest`` for a copy to it (``--dest-authfile``, ...), ``""``
        for a command that only reads from it (``skopeo inspect``: ``--authfile``, ``--cert-dir``)."""
        prefix = f"--{side}-" if side else "--"
        flags = []
        if self.authfile is not None:
            flags += [f"{prefix}authfile", str(self.authfile)]
        if self.cert_dir is not None:
            flags += [f"{prefix}cert-dir", str(self.cert_dir)]
        return flags

    def helm_flags(self) -> list[str]:
        flags = []
        if self.authfile is not None:
            flags += ["--registry-config", str(self.authfile)]
        if self.cert_dir is not None:
            flags += ["--ca-file", str(self.cert_dir / "ca.crt")]
        return flags

    def install_line(self, version: str) -> str:
        """The administrator's install command for this release in this registry (seed 001 §3.2.1)."""
        return (
            f"helm install {CHART_NAME} {self.chart_reference()} --version {version} "
            f"-n metax-operator --create-namespace --set registry={self.registry} --wait"
        )
