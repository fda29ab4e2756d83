"""What a pod of the product holds: its containers' security contexts, the ServiceAccount token only in the containers
that call the API, and the vendor payload init containers' confinement (R-SECURITY, R-NODEBOUND; issue 38 item 2).

Why a module of its own: which container holds a credential and which runs with which privilege is the surface a
security review reads (docs/security.md), and it is decided here once for every workload the operator renders:

* **Tokens only where needed.** Every pod sets ``automountServiceAccountToken: false``; a pod whose workload has a
  ServiceAccount gets the same projected volume the kubelet would mount (a bound, expiring token, the cluster's CA
  and the namespace), mounted **only into the agent container** — the container that calls the API. The maca pod's
  container-edit sidecar and every payload init container get none.
* **Payload init containers** run the vendor's payload image (`cp -a /payload/. …`): no token, no privilege
  escalation, every capability dropped (a copy of root-owned files into an emptyDir needs none; a payload whose
  files belong to another user fails visibly: the payload contract, docs/configuration.md), the runtime's default
  seccomp profile, a read-only root (they write only the shared emptyDir) and memory and CPU limits.
* **Read-only roots everywhere.** Every container the operator renders has a read-only root filesystem and its own
  small ``/tmp`` (an emptyDir: the readiness probe's file, a tool's temporaries); the agents write only the host
  paths of 000 §1.3.2. On a privileged container this guards against accidents, not an intruder (privilege can
  remount); on the unprivileged ones it is part of the confinement.
* **Unprivileged means confined.** A workload that Table 1.3.1 does not make privileged runs as the images' own
  non-root user (`UNPRIVILEGED_USER`), with no capability, no privilege escalation and the runtime's default
  seccomp profile, set on the pod and on the container.
"""

from __future__ import annotations

from typing import Any

from metax_core.components import Workload

TOKEN_VOLUME = "kube-api-access"
"""The projected volume's name (the kubelet names the one it injects ``kube-api-access-<random>``)."""
TOKEN_PATH = "/var/run/secrets/kubernetes.io/serviceaccount"
"""Where a Kubernetes client looks for its in-cluster credentials."""
TOKEN_EXPIRATION_SECONDS = 3607
"""The kubelet's own default for the volume it injects: renewed at 80 % of its life."""
ROOT_CA = "kube-root-ca.crt"
"""The ConfigMap every namespace gets with the cluster's CA (the kube-controller-manager publishes it)."""


def token_volume() -> dict[str, Any]:
    """The credentials a container needs to call the API, as the kubelet would inject them."""
    return {
        "name": TOKEN_VOLUME,
        "projected": {
            "defaultMode": 0o444,
            "sources": [
                {"serviceAccountToken": {"path": "token", "expirationSeconds": TOKEN_EXPIRATION_SECONDS}},
                {"configMap": {"name": ROOT_CA, "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                {
                    "downwardAPI": {
                        "items": [
                            {"path": "namespace", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}
                        ]
                    }
                },
            ],
        },
    }


def token_mount() -> dict[str, Any]:
    return {"name": TOKEN_VOLUME, "mountPath": TOKEN_PATH, "readOnly": True}


UNPRIVILEGED_USER = 65532
"""The user (and group) of the images' unprivileged components (images/images.toml ``[app] user``; the chart's
operator Deployment runs as it too)."""
SCRATCH_VOLUME = "tmp"
SCRATCH_PATH = "/tmp"
SCRATCH_SIZE = "64Mi"


def container_security(workload: Workload) -> dict[str, Any]:
    """An agent container's security context: privileged where Table 1.3.1 says so, else confined."""
    if workload.privileged:
        return {"privileged": True, "readOnlyRootFilesystem": True}
    return {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "runAsNonRoot": True,
        "runAsUser": UNPRIVILEGED_USER,
        "runAsGroup": UNPRIVILEGED_USER,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def pod_security_context(workload: Workload) -> dict[str, Any] | None:
    """The pod's security context of an unprivileged workload (its containers' user, non-root, seccomp); None for a
    privileged one, whose containers' contexts say everything that applies to them."""
    if workload.privileged:
        return None
    return {
        "runAsNonRoot": True,
        "runAsUser": UNPRIVILEGED_USER,
        "runAsGroup": UNPRIVILEGED_USER,
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def scratch_volume(name: str = SCRATCH_VOLUME) -> dict[str, Any]:
    """A container's own writable ``/tmp`` under its read-only root."""
    return {"name": name, "emptyDir": {"sizeLimit": SCRATCH_SIZE}}


def scratch_mount(name: str = SCRATCH_VOLUME) -> dict[str, Any]:
    return {"name": name, "mountPath": SCRATCH_PATH, "readOnly": False}


PAYLOAD_SECURITY: dict[str, Any] = {
    "allowPrivilegeEscalation": False,
    "privileged": False,
    "readOnlyRootFilesystem": True,
    "capabilities": {"drop": ["ALL"]},
    "seccompProfile": {"type": "RuntimeDefault"},
}
"""A payload init container's security context (the module's docstring says why each)."""
PAYLOAD_RESOURCES: dict[str, Any] = {
    "requests": {"cpu": "10m", "memory": "32Mi"},
    "limits": {"cpu": "1", "memory": "256Mi"},
}
"""A copy of files: page cache beyond the memory limit is reclaimed, not killed for; the CPU limit keeps a copy of
gigabytes of SDK from starving the node's other pods while it runs."""


WHY: dict[str, str] = {
    "metax-gpu-discovery": "reads which PCI functions are MetaX GPUs from /sys (world-readable) and sets "
    "`gpu.installed` on its node: no privilege, so it alone runs on every node",
    "metax-gpu-label": "runs mx-smi, which opens the GPUs' device nodes, for names, memory, health and MetaXLink",
    "metax-container-runtime": "edits the node's runtime configuration, checks it with the node's own daemon in the "
    "host's namespaces and restarts the daemon (hostPID: nsenter, its socket and PID)",
    "metax-driver": "loads and unloads the kernel module with the host's modprobe (hostPID: nsenter), sets module "
    "parameters and VFs through /sys, flashes firmware",
    "metax-maca": "installs and collects MXMACA SDK versions on the host; reads runc's state through /proc/1/root "
    "(hostPID) to know which versions running containers use; its container-edit sidecar edits containers' device "
    "nodes",
    "metax-gpu-device": "the kubelet's device plugin: device nodes, health through mx-smi, CDI specs (hostPID: "
    "Table 1.3.1)",
    "metax-data-exporter": "GPU telemetry from the device nodes (libmxsml or mx-smi) and the kubelet's "
    "PodResources; no ServiceAccount, no token",
    "metax-vfio-manager": "binds GPUs to vfio-pci through /sys and loads vfio-pci (R-KUBEVIRT)",
    "metax-topo-master": "builds the cluster's topology view from node annotations: API only",
    "metax-topo-worker": "reads the node's GPU topology (mx-smi on the device nodes, PCI and NUMA from /sys)",
    "metax-gpu-scheduler": "the scheduler extender: reads nodes and pods, answers the scheduler over HTTP",
    "metax-dra-driver": "the kubelet's DRA plugin on DRA nodes: gpu-device's device access and CDI writes, its "
    "node's ResourceSlices (R-DRA)",
}
"""Why each workload holds what it holds (000 Table 1.3.1, §1.3.3): the permissions table of the chart README and
docs/security.md (`metax_dev.chart`), one line each; a workload without a line fails the generation."""
