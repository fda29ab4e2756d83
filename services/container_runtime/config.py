"""container-runtime's settings, from the environment the operator renders (`metax_core.cluster.workloads`)."""

from __future__ import annotations

import enum
import os
from collections.abc import Mapping

import attrs

from metax_core.runtime import crio, handler
from metax_core.spec.fieldtypes import RestartMode
from metax_core.wire import agent_env, host
from services._agent import settings as agent_settings
from services._agent.settings import HostPath, Seconds, env


class RuntimeChoice(enum.Enum):
    AUTO = "auto"
    CONTAINERD = "containerd"
    DOCKER = "docker"
    CRIO = "crio"


@attrs.frozen(kw_only=True)
class Settings(agent_settings.NodeAgentSettings):
    runtime: RuntimeChoice = attrs.field(default=RuntimeChoice.AUTO, metadata=env("METAX_CONTAINER_RUNTIME"))
    """Which runtime to configure; ``auto`` detects it from the sockets on the host."""
    containerd_config: HostPath = attrs.field(
        default=HostPath(host.CONTAINERD_CONFIG), metadata=env("METAX_CONTAINERD_CONFIG")
    )
    containerd_binary: str | None = attrs.field(default=None, metadata=env("METAX_CONTAINERD_BINARY"))
    """The host's containerd program (a name on the host's PATH, or a host path); unset: the running daemon's own
    binary, run in the daemon's own mount namespace (else ``containerd`` on the host's PATH)."""
    docker_config: HostPath = attrs.field(default=HostPath(host.DOCKER_CONFIG), metadata=env("METAX_DOCKER_CONFIG"))
    docker_binary: str = attrs.field(default="dockerd", metadata=env("METAX_DOCKER_BINARY"))
    crio_config: HostPath = attrs.field(default=HostPath(crio.CONFIG), metadata=env("METAX_CRIO_CONFIG"))
    """CRI-O's main file (read by ``crio config``; never written)."""
    crio_config_dir: HostPath = attrs.field(default=HostPath(crio.DROPIN_DIR), metadata=env("METAX_CRIO_CONFIG_DIR"))
    """CRI-O's drop-in directory, where our ``99-metax.conf`` goes."""
    crio_binary: str = attrs.field(default="crio", metadata=env("METAX_CRIO_BINARY"))
    runtime_socket: HostPath | None = attrs.field(default=None, metadata=env(agent_env.RUNTIME_SOCKET.name))
    """The runtime's CRI socket; default: the runtime's usual one (`metax_core.runtime.detect.SOCKETS`)."""
    restart_mode: RestartMode = attrs.field(
        default=RestartMode.SYSTEMD, metadata=env(agent_env.RUNTIME_RESTART_MODE.name)
    )
    """How the runtime is restarted after a change: systemd, signal (its supervisor starts it again) or none."""
    service: str | None = attrs.field(default=None, metadata=env("METAX_RUNTIME_SERVICE"))
    """The systemd unit that runs the runtime; default: the runtime's usual one (containerd, docker, crio)."""
    host_namespaces: bool = attrs.field(default=True, metadata=env("METAX_HOST_NAMESPACES"))
    """Run the host's programs in the host's namespaces (nsenter, hostPID) and reach sockets through /proc/1/root."""
    wrapper_source: str = attrs.field(default=handler.WRAPPER_IMAGE_PATH, metadata=env("METAX_WRAPPER_SOURCE"))
    """The wrapper in this container's filesystem (the image), installed on the host."""
    toolkit_dir: HostPath = attrs.field(default=HostPath(handler.TOOLKIT_HOST_DIR), metadata=env("METAX_TOOLKIT_DIR"))
    wrapper_runc: HostPath | None = attrs.field(default=None, metadata=env("METAX_WRAPPER_RUNC"))
    """The runc the wrapper execs (its ``.conf``); default: the first ``runc`` on the runtime's PATH."""
    edit_socket: HostPath = attrs.field(
        default=HostPath(handler.EDIT_SOCKET_HOST_PATH), metadata=env(agent_env.EDIT_SOCKET)
    )
    """The container-edit service's socket the wrapper calls (its ``.conf``)."""
    state_dir: HostPath = attrs.field(
        default=HostPath("/var/lib/metax/container-runtime"), metadata=env("METAX_RUNTIME_STATE_DIR")
    )
    """Where the record of our edits lives (`metax_core.runtime.record`)."""
    restart_wait: Seconds = attrs.field(default=Seconds(60.0), metadata=env("METAX_RUNTIME_RESTART_WAIT"))
    """Seconds a restarted runtime has to serve again with our handler before the restart counts as failed."""
    interval: Seconds = attrs.field(default=Seconds(30.0), metadata=env("METAX_RUNTIME_INTERVAL"))
    """Seconds between rounds (each round re-reads the files: a re-render that dropped our part is repaired)."""

    @property
    def wrapper_host_path(self) -> str:
        return f"{self.toolkit_dir.rstrip('/')}/{handler.WRAPPER_NAME}"


def from_env(environ: Mapping[str, str] | None = None, **fixed: object) -> Settings:
    return agent_settings.load(Settings, os.environ if environ is None else environ, **fixed)
