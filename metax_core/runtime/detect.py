"""Which container runtime a node runs, and which configuration schema its version reads (C4, R-COMPAT).

The agent gathers facts from the host (which runtime sockets exist, what the host's own binary prints for
``--version``, run in the host's mount namespace) and `detect` decides. containerd is chosen when its socket
is there even if Docker's is too (Docker runs on containerd, and the kubelet talks CRI to containerd since
dockershim's removal); Docker only through its own socket (cri-dockerd); CRI-O through its socket.

`containerd_schema` holds the facts from containerd's own sources that decide how it is configured:

| containerd | config ``version`` | CRI runtime plugin | imports | CDI |
|---|---|---|---|---|
| 1.6 | 2 | ``io.containerd.grpc.v1.cri`` | replace whole plugin sections | none |
| 1.7 | 2 | ``io.containerd.grpc.v1.cri`` | replace whole plugin sections | ``enable_cdi``, off by default |
| 2.0–2.2 | 3 | ``io.containerd.cri.v1.runtime`` | deep-merged | on |
| 2.3+ | 4 | ``io.containerd.cri.v1.runtime`` | deep-merged | on |
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping

import attrs

from metax_core.errors import FieldError, InvalidSpec


class RuntimeKind(enum.Enum):
    CONTAINERD = "containerd"
    DOCKER = "docker"
    CRIO = "crio"


SOCKETS: Mapping[RuntimeKind, str] = {
    RuntimeKind.CONTAINERD: "/run/containerd/containerd.sock",
    RuntimeKind.CRIO: "/run/crio/crio.sock",
    RuntimeKind.DOCKER: "/run/docker.sock",
}
"""Where each runtime listens by default (host paths); the agent's settings may name others."""

Version = tuple[int, int, int]

_VERSION = re.compile(r"(?:^|\s)v?(\d+)\.(\d+)\.(\d+)")


@attrs.frozen
class Detected:
    kind: RuntimeKind
    version: Version

    @property
    def text(self) -> str:
        return f"{self.kind.value} {'.'.join(map(str, self.version))}"


def parse_version(kind: RuntimeKind, output: str) -> Version:
    """The version in ``<binary> --version`` output.

    containerd: ``containerd github.com/containerd/containerd 1.6.20~ds1 …`` or ``… /v2 v2.4.2``;
    Docker: ``Docker version 20.10.24+dfsg1, build 297e128``; CRI-O: ``crio version 1.30.0`` (or a
    ``Version:  1.30.0`` line)."""
    text = output.strip()
    if kind is RuntimeKind.CRIO:
        line = re.search(r"^\s*Version:\s*v?(\d+)\.(\d+)\.(\d+)", text, re.MULTILINE)
        found = line or _VERSION.search(text)
    else:
        found = _VERSION.search(text)
    if found is None:
        raise InvalidSpec([FieldError(f"{kind.value} --version", f"no version number in {text[:200]!r}")])
    major, minor, patch = (int(g) for g in found.groups())
    return (major, minor, patch)


def detect(
    sockets: Mapping[RuntimeKind, bool],
    versions: Mapping[RuntimeKind, str],
    where: Mapping[RuntimeKind, str] | None = None,
) -> Detected:
    """The node's runtime from which sockets exist (``where``: the paths looked at, for the message) and each
    present binary's ``--version`` output."""
    for kind in (RuntimeKind.CONTAINERD, RuntimeKind.CRIO, RuntimeKind.DOCKER):
        if sockets.get(kind):
            if kind not in versions:
                raise InvalidSpec(
                    [FieldError(kind.value, "its socket exists but its binary was not found on the host")]
                )
            return Detected(kind, parse_version(kind, versions[kind]))
    paths = where or SOCKETS
    present = ", ".join(f"{k.value} ({paths[k]})" for k in sockets)
    raise InvalidSpec([FieldError("runtime", f"no container runtime socket found; looked for {present}")])


class Cdi(enum.Enum):
    NONE = "none"
    """containerd 1.6: no CDI at all; devices come only through the ``metax`` handler."""
    OFF_BY_DEFAULT = "off-by-default"
    ON = "on"


@attrs.frozen
class ContainerdSchema:
    daemon: Version
    file_version: int
    """The config ``version`` this daemon writes by default (``containerd config default``)."""
    replaces_sections: bool
    """1.x: a plugin section in an imported file replaces the whole section (2.x deep-merges)."""
    cdi: Cdi

    @property
    def daemon_text(self) -> str:
        return ".".join(map(str, self.daemon))


def containerd_schema(version: Version) -> ContainerdSchema:
    major, minor, _ = version
    if (major, minor) < (1, 6):
        raise InvalidSpec(
            [FieldError("containerd", f"version {'.'.join(map(str, version))} is too old; 1.6 or later is supported")]
        )
    if major == 1:
        return ContainerdSchema(version, 2, True, Cdi.NONE if minor == 6 else Cdi.OFF_BY_DEFAULT)
    return ContainerdSchema(version, 3 if minor <= 2 else 4, False, Cdi.ON)


def cri_runtime_plugin(file_version: int) -> str:
    """The CRI plugin whose ``containerd.runtimes`` holds the runtime handlers, by config file version."""
    return "io.containerd.grpc.v1.cri" if file_version == 2 else "io.containerd.cri.v1.runtime"
