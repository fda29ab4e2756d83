"""How each control-plane component is configured: its credentials, config files and flags.

Why this module exists: the flags are where the test control plane's behaviour is decided (RBAC
and NodeRestriction on, no leader election, nodes on loopback, watches that close promptly on
restart), and they are easiest to read and review apart from the code that starts and waits for
the processes. Everything here writes files or returns argument lists; the only program it
runs are ``kwok default-stages``, whose output (plus a test-only crash-loop stage) becomes kwok's config, and
``kube-apiserver --version``, since an older minor (R-COMPAT) lacks some flags.
"""

from __future__ import annotations

import ipaddress
import json
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import yaml

from metax_dev.controlplane import errors, network, nodes, pki

SERVICE_ACCOUNT_ISSUER: Final = "https://kubernetes.default.svc.cluster.local"

#: Everything that listens, and so gets a loopback port.
PORTS: Final = (
    "etcd",
    "etcd-peer",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kwok",
)

#: Client identities (common name, groups) of the components that talk to the API server.
_CLIENT_IDENTITIES: Final[dict[str, tuple[str, tuple[str, ...]]]] = {
    "kube-controller-manager": ("system:kube-controller-manager", ()),
    "kube-scheduler": ("system:kube-scheduler", ()),
    "kwok": ("kwok-controller", ("system:masters",)),
}


@dataclass(frozen=True)
class Credentials:
    """The CA and the certificates the launcher itself and the components' flags refer to."""

    authority: pki.Pki
    """The CA (and the service-account key pair)."""
    apiserver: pki.KeyPair
    """kube-apiserver's serving certificate."""
    serving: pki.KeyPair
    """The serving certificate of every other component (localhost, 127.0.0.1)."""
    admin: pki.KeyPair
    """A ``system:masters`` client certificate."""


def write_credentials(workdir: Path, server: str) -> Credentials:
    """A fresh PKI under ``workdir/pki`` and a kubeconfig for the admin and each component."""
    authority = pki.Pki(workdir / "pki")
    apiserver = authority.issue(
        "apiserver",
        "kube-apiserver",
        dns_names=[
            "localhost",
            "kubernetes",
            "kubernetes.default",
            "kubernetes.default.svc",
            "kubernetes.default.svc.cluster.local",
        ],
        ips=[
            network.LOOPBACK,
            str(next(ipaddress.ip_network(network.SERVICE_CLUSTER_IP_RANGE).hosts())),
        ],
        server=True,
    )
    serving = authority.issue("serving", "localhost", dns_names=["localhost"], ips=[network.LOOPBACK], server=True)
    admin = authority.issue("admin", "metax-test-admin", organizations=["system:masters"], client=True)
    pki.write_kubeconfig(workdir / "admin.kubeconfig", server, authority.ca, "admin", admin)
    for component, (common_name, orgs) in _CLIENT_IDENTITIES.items():
        pair = authority.issue(component, common_name, organizations=orgs, client=True)
        pki.write_kubeconfig(workdir / f"{component}.kubeconfig", server, authority.ca, component, pair)
    return Credentials(authority, apiserver, serving, admin)


#: A test-only image tag suffix: kwok puts a pod that runs (or init-runs) an image whose tag ends with it into a
#: crash loop instead of making it Ready (tests of a failing driver rollout, R-ROLLOUT), e.g. the driver
#: payload version ``2.14.7-metax-test-crash``.
CRASH_TAG_SUFFIX: Final = "-metax-test-crash"
_CRASH_QUERY: Final = (
    "[(.spec.initContainers // [])[], (.spec.containers // [])[]]"
    f' | map(.image // "" | endswith("{CRASH_TAG_SUFFIX}")) | any'
)

_CRASH_LOOP_STATUS: Final = """{{ $now := Now }}
conditions:
- lastTransitionTime: {{ $now | Quote }}
  status: "True"
  type: Initialized
- lastTransitionTime: {{ $now | Quote }}
  status: "False"
  type: Ready
  reason: ContainersNotReady
- lastTransitionTime: {{ $now | Quote }}
  status: "False"
  type: ContainersReady
  reason: ContainersNotReady
containerStatuses:
{{ range .spec.containers }}
- image: {{ .image | Quote }}
  name: {{ .name | Quote }}
  ready: false
  started: false
  restartCount: 6
  lastState:
    terminated:
      exitCode: 1
      reason: Error
      startedAt: {{ $now | Quote }}
      finishedAt: {{ $now | Quote }}
  state:
    waiting:
      reason: CrashLoopBackOff
      message: back-off 5m0s restarting failed container (a metax-test-crash image)
{{ end }}
phase: Running
startTime: {{ $now | Quote }}
"""


def _crash_loop_stage() -> dict[str, Any]:
    """A Pending pod with a `CRASH_TAG_SUFFIX` image goes straight into CrashLoopBackOff, Ready False, and stays."""
    return {
        "apiVersion": "kwok.x-k8s.io/v1alpha1",
        "kind": "Stage",
        "metadata": {"name": "metax-test-pod-crash-loop"},
        "spec": {
            "resourceRef": {"apiGroup": "v1", "kind": "Pod"},
            "selector": {
                "matchExpressions": [
                    {"key": ".metadata.deletionTimestamp", "operator": "DoesNotExist"},
                    {"key": _CRASH_QUERY, "operator": "In", "values": ["true"]},
                    {"key": ".status.phase", "operator": "In", "values": ["Pending"]},
                ]
            },
            "next": {"statusTemplate": _CRASH_LOOP_STATUS},
        },
    }


def kwok_stages(default_stages: str, pod_ready_ms: int = 0) -> str:
    """kwok's default stages, with pod-ready skipping crash-test pods, plus the crash-loop stage. ``pod_ready_ms``:
    how long a bound pod stays Pending before pod-ready makes it Running and Ready (kwok's default: at once)."""
    stages = [s for s in yaml.safe_load_all(default_stages) if s]
    ready = [s for s in stages if s.get("kind") == "Stage" and s["metadata"]["name"] == "pod-ready"]
    if len(ready) != 1:
        raise errors.ControlPlaneError("`kwok default-stages` has no pod-ready stage to exclude crash-test pods from")
    # The query yields one bool per pod, so pod-ready and the crash loop never both match a pod.
    ready[0]["spec"]["selector"]["matchExpressions"].append(
        {"key": _CRASH_QUERY, "operator": "NotIn", "values": ["true"]}
    )
    if pod_ready_ms > 0:
        ready[0]["spec"]["delay"] = {"durationMilliseconds": pod_ready_ms}
    stages.append(_crash_loop_stage())
    return yaml.safe_dump_all(stages, sort_keys=False)


def write_kwok_config(workdir: Path, kwok: str, pod_ready_ms: int = 0) -> None:
    """kwok's ``--config``: its own default stages, so they match the kwok version built (`kwok_stages`)."""
    stages = subprocess.run([kwok, "default-stages"], capture_output=True, text=True, check=False)
    if stages.returncode != 0 or "kind: Stage" not in stages.stdout:
        raise errors.ControlPlaneError(f"`kwok default-stages` failed: {stages.stderr.strip()}")
    (workdir / "kwok.yaml").write_text(kwok_stages(stages.stdout, pod_ready_ms))


def kubernetes_minor(apiserver: str) -> int:
    """The minor version of a kube-apiserver binary, from ``--version`` (``Kubernetes v1.23.17`` -> 23)."""
    done = subprocess.run([apiserver, "--version"], capture_output=True, text=True, check=False)
    words = done.stdout.split()
    if done.returncode != 0 or len(words) != 2 or not words[1].startswith("v1."):
        raise errors.ControlPlaneError(f"`{apiserver} --version` said {done.stdout.strip() or done.stderr.strip()!r}")
    return int(words[1].split(".")[1])


@dataclass(frozen=True)
class Config:
    """One control plane's work dir, ports, credentials and log verbosity.

    Every component's command line follows from these; the methods return the arguments
    after the binary.
    """

    workdir: Path
    ports: Mapping[str, int]
    credentials: Credentials
    verbosity: int
    kubernetes_minor: int
    """The minor of the kube-apiserver binary started (`kubernetes_minor`): older ones lack some flags."""
    node_lease_seconds: int = 40
    """kwok's node Lease duration; kube-controller-manager's node monitor grace period is 10 s more."""

    @property
    def etcd_url(self) -> str:
        return f"http://{network.LOOPBACK}:{self.ports['etcd']}"

    def etcd_args(self) -> list[str]:
        client = self.etcd_url
        peer = f"http://{network.LOOPBACK}:{self.ports['etcd-peer']}"
        return [
            "--name=metax-test",
            f"--data-dir={self.workdir / 'etcd'}",
            f"--listen-client-urls={client}",
            f"--advertise-client-urls={client}",
            f"--listen-peer-urls={peer}",
            f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster=metax-test={peer}",
            "--initial-cluster-state=new",
            "--unsafe-no-fsync=true",
            "--log-level=warn",
        ]

    def apiserver_args(self) -> list[str]:
        authority = self.credentials.authority
        return [
            f"--etcd-servers={self.etcd_url}",
            f"--bind-address={network.LOOPBACK}",
            f"--advertise-address={network.LOOPBACK}",
            f"--secure-port={self.ports['kube-apiserver']}",
            f"--cert-dir={self.workdir / 'apiserver-certs'}",
            f"--tls-cert-file={self.credentials.apiserver.cert}",
            f"--tls-private-key-file={self.credentials.apiserver.key}",
            f"--client-ca-file={authority.ca.cert}",
            "--authorization-mode=Node,RBAC",
            "--enable-admission-plugins=NodeRestriction",
            "--allow-privileged=true",
            f"--service-account-issuer={SERVICE_ACCOUNT_ISSUER}",
            f"--service-account-key-file={authority.sa_pub}",
            f"--service-account-signing-key-file={authority.sa_key}",
            f"--service-cluster-ip-range={network.SERVICE_CLUSTER_IP_RANGE}",
            # 127.0.0.1 is no valid endpoint address: do not publish the kubernetes endpoints.
            "--endpoint-reconciler-type=none",
            # Admission webhooks (and aggregated APIs) referenced by a Service are called at the Service's
            # EndpointSlice address (pod IP + targetPort) instead of its ClusterIP, which nothing routes here:
            # the chart's own webhook Service then reaches the operator pod on a process node
            # (docs/processnode.md).
            "--enable-aggregator-routing=true",
            "--profiling=false",
            "--event-ttl=1h",
            *(
                # Close open watches promptly on SIGTERM (restart_apiserver) instead of hanging (flag since 1.27;
                # the oldest minor's control plane is never restarted).
                ["--shutdown-watch-termination-grace-period=2s"] if self.kubernetes_minor >= 27 else []
            ),
            f"--v={self.verbosity}",
        ]

    def _component_common(self, component: str) -> list[str]:
        kubeconfig = self.workdir / f"{component}.kubeconfig"
        return [
            f"--kubeconfig={kubeconfig}",
            f"--authentication-kubeconfig={kubeconfig}",
            f"--authorization-kubeconfig={kubeconfig}",
            f"--bind-address={network.LOOPBACK}",
            f"--secure-port={self.ports[component]}",
            f"--tls-cert-file={self.credentials.serving.cert}",
            f"--tls-private-key-file={self.credentials.serving.key}",
            f"--client-ca-file={self.credentials.authority.ca.cert}",
            "--leader-elect=false",
            f"--v={self.verbosity}",
        ]

    def controller_manager_args(self) -> list[str]:
        authority = self.credentials.authority
        return [
            *self._component_common("kube-controller-manager"),
            "--use-service-account-credentials=true",
            f"--service-account-private-key-file={authority.sa_key}",
            f"--root-ca-file={authority.ca.cert}",
            f"--cluster-signing-cert-file={authority.ca.cert}",
            f"--cluster-signing-key-file={authority.ca.key}",
            f"--service-cluster-ip-range={network.SERVICE_CLUSTER_IP_RANGE}",
            "--kube-api-qps=200",
            "--kube-api-burst=400",
            # a kwok node is NotReady once its Lease is older than this (default 50 s)
            f"--node-monitor-grace-period={self.node_lease_seconds + 10}s",
        ]

    def scheduler_args(self, extenders: Sequence[Mapping[str, Any]] = ()) -> list[str]:
        """kube-scheduler's flags; with ``extenders``, a KubeSchedulerConfiguration file carrying them (the
        client connection and leader election then come from the file: kube-scheduler ignores those flags
        when ``--config`` is given)."""
        common = self._component_common("kube-scheduler")
        if not extenders:
            return common
        path = self.workdir / "kube-scheduler-config.json"
        document = {
            "apiVersion": "kubescheduler.config.k8s.io/v1",
            "kind": "KubeSchedulerConfiguration",
            "clientConnection": {"kubeconfig": str(self.workdir / "kube-scheduler.kubeconfig")},
            "leaderElection": {"leaderElect": False},
            "extenders": [dict(e) for e in extenders],
        }
        path.write_text(json.dumps(document, indent=2))
        return [f"--config={path}", *(a for a in common if not a.startswith(("--kubeconfig=", "--leader-elect=")))]

    def kwok_args(self) -> list[str]:
        port = self.ports["kwok"]
        return [
            f"--kubeconfig={self.workdir / 'kwok.kubeconfig'}",
            f"--config={self.workdir / 'kwok.yaml'}",
            "--manage-all-nodes=false",
            f"--manage-nodes-with-annotation-selector={nodes.KWOK_NODE_ANNOTATION}={nodes.KWOK_NODE_ANNOTATION_VALUE}",
            # Nodes advertise loopback, so anything that dials a "kubelet" reaches kwok here.
            f"--node-ip={network.LOOPBACK}",
            f"--node-port={port}",
            f"--server-address={network.LOOPBACK}:{port}",
            f"--tls-cert-file={self.credentials.serving.cert}",
            f"--tls-private-key-file={self.credentials.serving.key}",
            f"--cidr={network.POD_CIDR}",
            f"--node-lease-duration-seconds={self.node_lease_seconds}",
        ]
