"""containerd for one real node: its config, with every path under the node's directory.

Why this module exists: containerd's defaults point at host-wide places (``/var/lib/containerd``,
``/run/containerd``, ``/etc/cni``, ``/etc/cdi``); two nodes on one machine, and a clean host after
teardown, need them per node. The config also carries the sandbox fixes this machine needs (see
docs/realnode.md): ``restrict_oom_score_adj`` (no CAP_SYS_RESOURCE in the sandbox),
``netns_mounts_under_state_dir`` (pod network namespaces are bind-mounted under the node's state
dir), CDI on with the node's spec directories, runc from the cached build with its state root in
the node's directory, and a drop-in ``conf.d`` for extra runtime handlers.

containerd runs under a real service supervisor, Debian's daemontools ``supervise`` (`service_run_script`):
``supervise`` starts ``<node>/containerd/service/run`` and starts it again a second after it exits, as systemd's
``Restart=always`` in containerd's own unit does on a node. So the container-runtime agent's restart mode
``signal`` (it stops the daemon serving the socket, docs/container-runtime.md) restarts this node's containerd the
way it restarts a real node's; ``svc -t`` is the harness's own restart, ``svc -dx`` its stop.

A node whose runtime is configured from pods (``runtime_host``: container-runtime and maca as the chart deploys
them) reads its root file at the usual ``/etc/containerd/config.toml`` in its mount namespace, where the fake
host's ``etc/containerd`` is bound (`metax_dev.realnode.hostns`): the agent's pod edits that file through its
hostPath, and the imports it writes (``/etc/containerd/conf.d/99-metax.toml``) resolve in the node's namespace.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from metax_core.wire import host
from metax_dev.realnode import images

SUPERVISE = "supervise"
SVC = "svc"
"""Debian's daemontools (``./run`` installs the package): the supervisor and its control command."""
NAMESPACE_CONFIG = host.CONTAINERD_CONFIG
"""Where a ``runtime_host`` node's containerd reads its root file, in the node's mount namespace."""
NAMESPACE_SOCKET = "/run/containerd/containerd.sock"
"""Where every node's containerd serves, in the node's own ``/run`` (the usual path: the agents' pods reach it as
``/proc/1/root/run/containerd/containerd.sock``, as on any node); this process opens it through the node's
namespace holder (`metax_dev.realnode.hostns.MountNamespace.path`)."""


@dataclass(frozen=True)
class Layout:
    """The node's containerd paths."""

    base: Path
    etc: Path | None = None
    """Where its root file lives when not in ``base`` (a ``runtime_host`` node: the fake host's etc/containerd)."""

    @property
    def root(self) -> Path:
        return self.base / "root"

    @property
    def state(self) -> Path:
        return self.base / "state"

    @property
    def socket(self) -> str:
        """The socket as the node's processes (containerd, the kubelet, pods) open it."""
        return NAMESPACE_SOCKET

    @property
    def config(self) -> Path:
        return (self.etc or self.base) / "config.toml"

    @property
    def config_in_namespace(self) -> str:
        """The root file as containerd opens it in the node's mount namespace."""
        return NAMESPACE_CONFIG if self.etc is not None else str(self.config)

    @property
    def service(self) -> Path:
        """The supervised service directory (``run`` and daemontools' ``supervise/`` state)."""
        return self.base / "service"

    @property
    def dropins(self) -> Path:
        return self.base / "conf.d"

    @property
    def runc_root(self) -> Path:
        return self.base / "runc"

    @property
    def task_dir(self) -> Path:
        """Where the runc shim keeps one directory per task of the ``k8s.io`` namespace."""
        return self.state / "io.containerd.runtime.v2.task" / "k8s.io"

    def container_ids(self) -> list[str]:
        """IDs of the containers (sandboxes included) containerd has tasks for."""
        if not self.task_dir.is_dir():
            return []
        return sorted(d.name for d in self.task_dir.iterdir())


def _toml(value: object) -> str:
    # Strings, booleans and lists of strings are all this config needs; JSON spells them as TOML does.
    return json.dumps(value)


def config_text(
    layout: Layout,
    *,
    bin_dir: Path,
    cni_bin_dir: Path,
    cni_conf_dir: Path,
    cdi_dirs: Sequence[Path],
    stream_port: int,
    registry_config_dir: Path | None = None,
) -> str:
    """containerd 2.x config (version 3); ``registry_config_dir``: the CRI image service's registry ``config_path``
    (a ``certs.d`` directory of ``<host>/hosts.toml``, `metax_dev.registry.Registry.write_containerd_hosts`), for a
    node that pulls from the test registry."""
    cri_runtime = "plugins.'io.containerd.cri.v1.runtime'"
    cri_images = "plugins.'io.containerd.cri.v1.images'"
    runc = f"{cri_runtime}.containerd.runtimes.runc"
    registry = (
        []
        if registry_config_dir is None
        else [f"[{cri_images}.registry]", f"  config_path = {_toml(str(registry_config_dir))}"]
    )
    return "\n".join(
        [
            "version = 3",
            f"root = {_toml(str(layout.root))}",
            f"state = {_toml(str(layout.state))}",
            f"imports = [{_toml(str(layout.dropins / '*.toml'))}]",
            "",
            "[grpc]",
            f"  address = {_toml(layout.socket)}",
            "[ttrpc]",
            f"  address = {_toml(layout.socket + '.ttrpc')}",
            "[metrics]",
            '  address = ""',
            "",
            "[plugins.'io.containerd.grpc.v1.cri']",
            '  stream_server_address = "127.0.0.1"',
            f"  stream_server_port = {_toml(str(stream_port))}",
            "",
            f"[{cri_runtime}]",
            "  enable_cdi = true",
            f"  cdi_spec_dirs = [{', '.join(_toml(str(d)) for d in cdi_dirs)}]",
            "  restrict_oom_score_adj = true",
            "  netns_mounts_under_state_dir = true",
            "  enable_selinux = false",
            f"[{cri_runtime}.containerd]",
            '  default_runtime_name = "runc"',
            f"[{runc}]",
            '  runtime_type = "io.containerd.runc.v2"',
            f"[{runc}.options]",
            f"  BinaryName = {_toml(str(bin_dir / 'runc'))}",
            f"  Root = {_toml(str(layout.runc_root))}",
            "  SystemdCgroup = false",
            f"[{cri_runtime}.cni]",
            f"  bin_dirs = [{_toml(str(cni_bin_dir))}]",
            f"  conf_dir = {_toml(str(cni_conf_dir))}",
            "",
            f"[{cri_images}]",
            '  snapshotter = "overlayfs"',
            f"[{cri_images}.pinned_images]",
            f"  sandbox = {_toml(images.PAUSE_IMAGE)}",
            *registry,
            "",
            "[plugins.'io.containerd.nri.v1.nri']",
            "  disable = true",
            "",
        ]
    )


def write_config(layout: Layout, text: str) -> Path:
    """Create containerd's directories and write ``text`` (from :func:`config_text`) as its config."""
    for directory in (layout.root, layout.state, layout.dropins, layout.runc_root, layout.config.parent):
        directory.mkdir(parents=True, exist_ok=True)
    layout.config.write_text(text)
    return layout.config


def command(bin_dir: Path, layout: Layout) -> list[str]:
    """containerd's command line; PATH finds the runc shim in the cached build first."""
    path = f"{bin_dir}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    return ["env", f"PATH={path}", str(bin_dir / "containerd"), "--config", layout.config_in_namespace]


def service_run_script(bin_dir: Path, layout: Layout) -> str:
    """The ``run`` script ``supervise`` starts (and starts again whenever containerd exits)."""
    return "#!/bin/sh\nexec 2>&1\nexec " + " ".join(shlex.quote(a) for a in command(bin_dir, layout)) + "\n"


def write_service(bin_dir: Path, layout: Layout) -> list[str]:
    """The supervised service for containerd; the command that runs its supervisor."""
    layout.service.mkdir(parents=True, exist_ok=True)
    run = layout.service / "run"
    run.write_text(service_run_script(bin_dir, layout))
    run.chmod(0o755)
    return [SUPERVISE, str(layout.service)]
