"""Running the real helm (built from its Go module with the control plane) against the session control plane.

`Helm.run` runs one helm command with the control plane's kubeconfig and helm's own state in a temporary
directory; `install_command` turns the README's install command (`metax_dev.chart.INSTALL_COMMANDS`) into
arguments, so the tests run exactly what the README says. `ours` lists what the chart and the operator
create, for "nothing of ours remains" checks.
"""

from __future__ import annotations

import os
import shlex
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from metax_core.cluster import node_policy
from metax_core.errors import ClusterError, NotFound, NotServed
from metax_dev import chart
from metax_dev.controlplane import build
from metax_k8s.api import Api

REPO = Path(__file__).resolve().parents[2]
CHART_DIR = REPO / "charts" / "metax-operator"
NAMESPACE = "metax-operator"
RELEASE = "metax-operator"


class Helm:
    def __init__(self, kubeconfig: Path, home: Path) -> None:
        self.binary = str(build.build(quiet=True).binary("helm"))
        self.env = {
            **os.environ,
            "KUBECONFIG": str(kubeconfig),
            "HELM_CACHE_HOME": str(home / "cache"),
            "HELM_CONFIG_HOME": str(home / "config"),
            "HELM_DATA_HOME": str(home / "data"),
        }

    def run(self, *args: str, check: bool = True, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            [self.binary, *args], cwd=REPO, env=self.env, capture_output=True, text=True, timeout=timeout, check=False
        )
        if check and result.returncode != 0:
            raise AssertionError(f"helm {' '.join(args)} failed ({result.returncode}):\n{result.stdout}{result.stderr}")
        return result


def readme_command(command: str, **placeholders: str) -> list[str]:
    """A README command as arguments (after ``helm``), with DOMAIN/PROJECT and VERSION filled in."""
    text = command.replace("\\\n", " ")
    for key, value in placeholders.items():
        text = text.replace(key, value)
    words = shlex.split(text)
    assert words[0] == "helm"
    return words[1:]


def install_command(registry: str, version: str) -> list[str]:
    return readme_command(chart.INSTALL_COMMANDS, **{"DOMAIN/PROJECT": registry, "VERSION": version})


def uninstall_command() -> list[str]:
    return readme_command(chart.UNINSTALL_COMMANDS)


# (api version, kind, name, namespace) of everything the chart creates.
CHART_OBJECTS: Sequence[tuple[str, str, str, str | None]] = (
    ("apps/v1", "Deployment", "metax-operator", NAMESPACE),
    ("v1", "ServiceAccount", "metax-operator", NAMESPACE),
    ("rbac.authorization.k8s.io/v1", "ClusterRole", "metax-operator", None),
    ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding", "metax-operator", None),
    ("rbac.authorization.k8s.io/v1", "Role", "metax-operator", NAMESPACE),
    ("rbac.authorization.k8s.io/v1", "RoleBinding", "metax-operator", NAMESPACE),
    ("rbac.authorization.k8s.io/v1", "Role", "metax-operator-events", "default"),
    ("rbac.authorization.k8s.io/v1", "RoleBinding", "metax-operator-events", "default"),
    ("v1", "Service", "metax-operator-webhook", NAMESPACE),
    ("v1", "Secret", "metax-operator-webhook", NAMESPACE),
    ("admissionregistration.k8s.io/v1", "ValidatingWebhookConfiguration", "metax-operator-webhook", None),
    ("gpu.metax-tech.com/v1alpha1", "ClusterOperator", "cluster-operator", None),
)


NODE_BOUND_OBJECTS: Sequence[tuple[str, str, str, str | None]] = (
    (node_policy.API_VERSION, "ValidatingAdmissionPolicy", node_policy.POLICY_NAME, None),
    (node_policy.API_VERSION, "ValidatingAdmissionPolicyBinding", node_policy.POLICY_NAME, None),
)
"""What the chart adds from Kubernetes 1.30 on (`node_policy.MINIMUM_KUBERNETES`, R-NODEBOUND): on older servers
these kinds are not served, and `present` finds none of them."""


def present(api: Api, objects: Sequence[tuple[str, str, str, str | None]]) -> list[str]:
    found = []
    for api_version, kind, name, namespace in objects:
        try:
            api.get(api_version, kind, name, namespace)
            found.append(f"{kind} {namespace or ''}/{name}")
        except NotFound:
            pass
        except ClusterError as exc:  # the CRD is not installed (yet): no such object either
            if "does not serve this kind" not in str(exc):
                raise
    return found


def labelled_ours(api: Api) -> list[str]:
    """Every object labelled as part of the product, in the kinds the chart and the operator create."""
    found = []
    kinds = [
        ("apps/v1", "DaemonSet"),
        ("apps/v1", "Deployment"),
        ("v1", "ConfigMap"),
        ("v1", "Secret"),
        ("v1", "ServiceAccount"),
        ("v1", "Service"),
        ("batch/v1", "Job"),
        ("rbac.authorization.k8s.io/v1", "Role"),
        ("rbac.authorization.k8s.io/v1", "RoleBinding"),
        ("rbac.authorization.k8s.io/v1", "ClusterRole"),
        ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"),
        ("admissionregistration.k8s.io/v1", "ValidatingWebhookConfiguration"),
        *((api_version, kind) for api_version, kind, _, _ in NODE_BOUND_OBJECTS),
    ]
    for api_version, kind in kinds:
        try:
            items = api.list(api_version, kind, label_selector="app.kubernetes.io/part-of=metax-gpu-operator").items
        except NotServed:  # an older server (the node-bound policy's kinds): none of ours either
            continue
        for item in items:
            meta: dict[str, Any] = item["metadata"]
            found.append(f"{kind} {meta.get('namespace', '')}/{meta['name']}")
    return found
