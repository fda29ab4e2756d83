"""The kubelet of one real node: its identity, its configuration and its command line.

Why this module exists: the kubelet is where this machine's sandbox limits show, and each needs a
setting (docs/realnode.md): cgroup v1 in hybrid mode (``failCgroupV1: false``, ``cgroupsPerQOS:
false`` and no enforced node allocatable), no CAP_SYS_RESOURCE (``oomScoreAdj: 0``), and a loopback
node IP, which the kubelet refuses as a node address (``--cloud-provider=external``; the stand-in cloud
controller in :mod:`metax_dev.realnode.cloud` sets the address). Everything else is the usual: a
client certificate ``system:node:<name>`` signed by the control plane's CA (so the Node authorizer and
NodeRestriction apply), its own serving certificate, every directory under the node's own, ports on
127.0.0.1 only. Its API accepts anyone on loopback (the API server calls it without a client
certificate for logs and exec), which is acceptable for a test node that listens on 127.0.0.1 only.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from metax_dev.controlplane import network, pki


@dataclass(frozen=True)
class Layout:
    """The kubelet's paths in the node's directory."""

    base: Path

    @property
    def root_dir(self) -> Path:
        return self.base / "root"

    @property
    def config(self) -> Path:
        return self.base / "config.json"

    @property
    def kubeconfig(self) -> Path:
        return self.base / "kubelet.kubeconfig"

    @property
    def pki_dir(self) -> Path:
        return self.base / "pki"

    @property
    def pod_logs(self) -> Path:
        return self.base / "pod-logs"

    @property
    def resolv_conf(self) -> Path:
        return self.base / "resolv.conf"

    @property
    def pod_resources_socket(self) -> Path:
        """The PodResources API (``--root-dir``/pod-resources/kubelet.sock)."""
        return self.root_dir / "pod-resources" / "kubelet.sock"


def write_identity(layout: Layout, authority: pki.Pki, node_name: str, server: str) -> pki.KeyPair:
    """Client and serving certificates, and the kubelet's kubeconfig; returns the serving pair."""
    layout.pki_dir.mkdir(parents=True, exist_ok=True)
    client = authority.issue(
        "kubelet-client",
        f"system:node:{node_name}",
        organizations=["system:nodes"],
        client=True,
        directory=layout.pki_dir,
    )
    serving = authority.issue(
        "kubelet-serving",
        node_name,
        dns_names=[node_name, "localhost"],
        ips=[network.LOOPBACK],
        server=True,
        directory=layout.pki_dir,
    )
    pki.write_kubeconfig(layout.kubeconfig, server, authority.ca, f"system:node:{node_name}", client)
    return serving


def config(
    layout: Layout,
    *,
    serving: pki.KeyPair,
    ca: Path,
    runtime_socket: Path,
    port: int,
    healthz_port: int,
    max_pods: int = 32,
) -> dict[str, object]:
    """A KubeletConfiguration (kubelet.config.k8s.io/v1beta1) for this machine."""
    endpoint = f"unix://{runtime_socket}"
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "address": network.LOOPBACK,
        "port": port,
        "readOnlyPort": 0,
        "healthzBindAddress": network.LOOPBACK,
        "healthzPort": healthz_port,
        "tlsCertFile": str(serving.cert),
        "tlsPrivateKeyFile": str(serving.key),
        "authentication": {
            "anonymous": {"enabled": True},
            "webhook": {"enabled": False},
            "x509": {"clientCAFile": str(ca)},
        },
        "authorization": {"mode": "AlwaysAllow"},
        "containerRuntimeEndpoint": endpoint,
        "imageServiceEndpoint": endpoint,
        "cgroupDriver": "cgroupfs",
        # cgroup v1 (hybrid) on this machine: allowed, without per-QoS cgroups.
        "failCgroupV1": False,
        "cgroupsPerQOS": False,
        "enforceNodeAllocatable": [],
        # No CAP_SYS_RESOURCE in the sandbox: the kubelet must not lower its own OOM score.
        "oomScoreAdj": 0,
        "failSwapOn": False,
        "podLogsDir": str(layout.pod_logs),
        "resolvConf": str(layout.resolv_conf),
        # A DNS address for pods' resolv.conf (nothing answers there, as nothing routes off loopback).
        "clusterDNS": ["10.96.0.10"],
        "clusterDomain": "cluster.local",
        "maxPods": max_pods,
        "registerNode": True,
        "serializeImagePulls": False,
        "evictionHard": {"memory.available": "1Mi", "nodefs.available": "1%", "imagefs.available": "1%"},
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "nodeStatusUpdateFrequency": "2s",
        "nodeStatusReportFrequency": "10s",
        "syncFrequency": "5s",
        "fileCheckFrequency": "5s",
        "shutdownGracePeriod": "0s",
        "logging": {"format": "text"},
    }


def write_config(layout: Layout, body: dict[str, object]) -> None:
    for directory in (layout.root_dir, layout.pod_logs):
        directory.mkdir(parents=True, exist_ok=True)
    layout.resolv_conf.write_text("nameserver 127.0.0.1\n")
    layout.config.write_text(json.dumps(body, indent=2) + "\n")  # JSON is YAML


def command(kubelet: Path, layout: Layout, node_name: str, verbosity: int = 1) -> list[str]:
    return [
        str(kubelet),
        f"--config={layout.config}",
        f"--kubeconfig={layout.kubeconfig}",
        f"--root-dir={layout.root_dir}",
        f"--cert-dir={layout.pki_dir}",
        f"--hostname-override={node_name}",
        f"--node-ip={network.LOOPBACK}",
        # The kubelet refuses a loopback address for its node; an external "cloud" sets it.
        "--cloud-provider=external",
        f"--v={verbosity}",
    ]
