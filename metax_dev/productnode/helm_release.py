"""The product installed with the real ``helm install`` on a real node, from its own images (issue 21 item 3).

Shared by ``tests/e2e/test_product.py``, the real-node demo (`metax_dev.demo.realnode`) and
``benchmarks/realpods.py``: a real node (kubelet + containerd + runc
built here) on its own fake MetaX host, whose containerd imported the product's images (``./run images``,
`metax_dev.images.build`) and TEST payload images (one layer each, written by
`metax_dev.realnode.images.write_payload_image`: busybox for the init container's ``cp``, under ``/payload`` the
fake driver payload's ``driver/metax.ko`` or a fake MXMACA SDK, `metax_dev.fake_sdk`); the chart installed with
the values in `install_args`. The node is a *runtime host* (`metax_dev.realnode.node.RealNode.runtime_binds`): its
containerd reads ``/etc/containerd/config.toml`` and the wrapper and SDK under ``/var/lib/metax`` from the fake
host, under a real supervisor (daemontools), so container-runtime and maca run as the pods the chart deploys.

The values beyond the README's install command, and why:

* ``operator.testOnly.hostPathPrefix=<fake host root>`` (TEST ONLY, docs/realnode.md): the agents' hostPaths
  are the fake host's ``/sys``, ``/dev``, ``/var/lib/metax``, ... instead of the node's own;
* ``operator.nodeSelector`` and ``podTemplateSpec.nodeSelector``: this node (other real nodes of the session's
  control plane have no product images); ``gpuLabel.podTemplateSpec.nodeSelector``: the release's nodes
  (`RELEASE_NODE_LABEL`), so gpu-discovery runs on the CPU node too when there is one (`real_node`'s ``cpu_node``:
  a second real node on a fake host without GPUs, shown at the GPU host's path, `node.RealNode.host_alias`, so the
  one test-only host path prefix names each node's own host);
* ``exporter.deploy``, ``gpuScheduler.deploy`` and ``draDriver.deploy``: true (off by default), so every
  component runs;
* ``runtime.restartMode=signal``: the container-runtime pod restarts the node's containerd the way it does on a
  node whose runtime runs under a supervisor (it stops the daemon serving the socket, daemontools' ``supervise``
  starts it again); the socket is the usual one, in the node's own ``/run``, which the pod (hostPID: the node's PID
  namespace, `metax_dev.realnode.hostns`) reaches as ``/proc/1/root/run/containerd/containerd.sock``;
* ``maca.payload.images``: the fake SDK payload images the node imported;
* ``registry`` and ``operator.image.pullPolicy=Never`` (`IMPORTED`): the images the node imported, nothing ever
  pulled; or (`Source` with a pull secret, the e2e) the chart from ``oci://`` in the test registry
  (`metax_dev.registry`), every product image pulled by the node's containerd with the chart's default policy;
* ``driver.payload.registry``: the TEST payload images are always imported (the vendor's payloads, not ours).
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from metax_core.runtime import handler
from metax_core.wire import meta
from metax_dev import agents, fake_sdk
from metax_dev.controlplane import build as controlplane_build
from metax_dev.controlplane import cluster as controlplane
from metax_dev.images import build as images_build
from metax_dev.realnode import devnodes, images, launcher, node
from metax_dev.release.target import Target
from metax_hw import cri_calls
from metax_hw_fake import builder, host

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "metax-operator"
NAMESPACE = "metax-operator"
POD_GC_WAIT = 120.0
"""Seconds the release's pods get to go after the release is uninstalled, before its node stops (`real_node`)."""
RELEASE = "metax-operator"
PFS = 2
#: The fake host's own driver, and the payload's (the same: see docs/realnode.md "The product as real pods").
DRIVER_VERSION = "2.18.0"
IMPORTED_REGISTRY = "docker.io/library"
"""The chart's ``registry`` for images the node imported: the name ``./run images`` gives its archives without a
``--registry`` (`metax_dev.images.build.qualified`), so every reference names an imported image and, with
``pullPolicy=Never``, nothing is pulled. The TEST payload images (the vendor's, not the product's) are always
imported under it (``driver.payload.registry``)."""
PAYLOAD_IMAGE = f"{IMPORTED_REGISTRY}/driver-image:{DRIVER_VERSION}"
#: The MXMACA versions the maca pod installs (fake SDK payload images, `metax_dev.fake_sdk`).
SDK_VERSIONS = ("2.18.0.3", "2.9.1")
#: The node agents' DaemonSets that run on the node.
AGENTS = (
    "metax-gpu-discovery",  # unprivileged, on every node (on the CPU node too, when the release has one)
    "metax-gpu-label",
    "metax-container-runtime",
    "metax-driver",
    "metax-maca",
    "metax-vfio-manager",
    "metax-gpu-device",
    "metax-topo-worker",
    "metax-data-exporter",
)
#: The unprivileged Deployments besides the operator's (topology's cluster view, the scheduler extender).
DEPLOYMENTS = ("metax-topo-master", "metax-gpu-scheduler")
#: Off by chart default, deployed here: every component runs.
DEPLOYED = ("exporter", "gpuScheduler", "draDriver")
RELEASE_NODE_LABEL = "metax.dev/helm-release-node"
"""Carried by the release's real nodes (the GPU node and the CPU node): gpu-label's component selects it."""
DISCOVERY = AGENTS[0]
"""gpu-discovery's DaemonSet and image: on every node of the release (the CPU node's only product image)."""


class ReleaseError(Exception):
    """helm or kubectl failed, or what was awaited did not come; the text says what the cluster said."""


@dataclass(frozen=True)
class Source:
    """Where ``helm install`` takes the chart and the node its images from.

    `IMPORTED` (the default): the chart from this tree, the images the node's containerd imported
    (``pullPolicy=Never``). With a `pull_secret`, as an administrator installs (issue 39 item 3): the chart from
    ``oci://<registry>/charts/metax-operator`` and every image pulled by the node with the chart's default pull
    policy and the pull secret ``PULL_SECRET`` (`pull_secret` is its ``.dockerconfigjson``)."""

    chart: str
    registry: str
    version: str | None = None
    pull_secret: str | None = None
    helm_flags: tuple[str, ...] = ()
    """How helm reaches the chart's registry (`metax_dev.release.target.Target.helm_flags`)."""

    def args(self) -> list[str]:
        args = [self.chart, *self.helm_flags, "--set", f"registry={self.registry}"]
        if self.version is not None:
            args += ["--version", self.version]
        if self.pull_secret is None:
            args += ["--set", "operator.image.pullPolicy=Never"]
        else:
            args += ["--set-json", "imagePullSecrets=" + json.dumps([PULL_SECRET])]
        return args


IMPORTED = Source(str(CHART), IMPORTED_REGISTRY)


def pulled_from(target: Target, version: str, pull_secret: str) -> Source:
    """The release `version` in `target`'s registry, as an administrator installs it: the chart from ``oci://``,
    every image pulled with the pull secret (`pull_secret`: its ``.dockerconfigjson``)."""
    return Source(
        target.chart_reference(),
        target.registry,
        version,
        pull_secret=pull_secret,
        helm_flags=tuple(target.helm_flags()),
    )


PULL_SECRET = "metax-registry"
"""The ``kubernetes.io/dockerconfigjson`` Secret the release's pods pull with (chart value ``imagePullSecrets``)."""


@dataclass
class Release:
    """The node, its fake host, and helm/kubectl runners on the control plane."""

    plane: controlplane.ControlPlane
    member: node.RealNode
    fake: host.FakeHost
    helm_home: Path
    timings: dict[str, float] = field(default_factory=dict)
    host_before: set[str] = field(default_factory=set)
    runtime_before: tuple[bytes, int] = (b"", 0)
    """The node's containerd root file before the install: its bytes and mode (uninstall gives both back)."""
    extras: dict[str, Any] = field(default_factory=dict)
    """What a test module keeps beside the release (its own host-side agents)."""
    cpu: node.RealNode | None = None
    """The release's node without GPUs (`real_node`'s ``cpu_node``), None without one."""

    @property
    def node(self) -> str:
        return self.member.name

    def _env(self) -> dict[str, str]:
        return {
            **os.environ,
            "KUBECONFIG": str(self.plane.kubeconfig_path),
            "HELM_CACHE_HOME": str(self.helm_home / "cache"),
            "HELM_CONFIG_HOME": str(self.helm_home / "config"),
            "HELM_DATA_HOME": str(self.helm_home / "data"),
        }

    def helm(self, *args: str, check: bool = True, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        binary = str(controlplane_build.build(quiet=True).binary("helm"))
        done = subprocess.run(
            [binary, *args], cwd=REPO, env=self._env(), capture_output=True, text=True, timeout=timeout, check=False
        )
        if check and done.returncode != 0:
            raise ReleaseError(f"helm {' '.join(args)} failed ({done.returncode}):\n{done.stdout}{done.stderr}")
        return done

    def kubectl(self, *args: str, stdin: str | None = None, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        binary = str(controlplane_build.build(quiet=True).binary("kubectl"))
        return subprocess.run(
            [binary, *args], input=stdin, env=self._env(), capture_output=True, text=True, timeout=timeout, check=False
        )

    def install_args(self, source: Source = IMPORTED) -> list[str]:
        """``helm install`` of `source`; with a pull secret, the namespace and the Secret must exist first
        (`create_pull_secret`)."""
        pin = {"kubernetes.io/hostname": self.node}
        args = [
            "install",
            RELEASE,
            *source.args(),
            "-n",
            NAMESPACE,
            "--create-namespace",
            "--set",
            f"driver.payload.version={DRIVER_VERSION}",
            "--set",
            f"driver.payload.registry={IMPORTED_REGISTRY}",
            "--set",
            f"operator.testOnly.hostPathPrefix={self.fake.root}",
            "--set",
            "operator.uninstallTimeoutSeconds=30",
            "--set",
            "runtime.restartMode=signal",
            "--set-json",
            "maca.payload.images=" + json.dumps([fake_sdk.reference(v) for v in SDK_VERSIONS]),
            "--set-json",
            "operator.nodeSelector=" + json.dumps(pin),
            "--set-json",
            "podTemplateSpec=" + json.dumps({"spec": {"nodeSelector": pin}}),
            "--set-json",
            "gpuLabel.podTemplateSpec=" + json.dumps({"spec": {"nodeSelector": {RELEASE_NODE_LABEL: "true"}}}),
            "--wait",
            "--timeout=3m",
        ]
        for component in DEPLOYED:
            args += ["--set", f"{component}.deploy=true"]
        return args

    def upgrade_args(self, source: Source = IMPORTED) -> list[str]:
        """``helm upgrade`` of `source` with the values `install_args` gives."""
        args = self.install_args(source)
        args[0] = "upgrade"
        args.remove("--create-namespace")
        return args

    def cluster_operator(self) -> dict[str, Any]:
        """cluster-operator as the API server has it now."""
        done = self.kubectl("get", "clusteroperator", "cluster-operator", "-o", "json")
        if done.returncode != 0:
            raise ReleaseError(f"kubectl get clusteroperator cluster-operator failed: {done.stderr}")
        cr: dict[str, Any] = json.loads(done.stdout)
        return cr

    def ctr(self, *args: str) -> str:
        """``ctr`` on the GPU node's containerd (namespace k8s.io)."""
        m = self.member
        ctr = [str(m.bin_dir / "ctr"), "--address", str(m.containerd_socket), "-n", "k8s.io", *args]
        return subprocess.run(ctr, capture_output=True, text=True, timeout=60, check=True).stdout

    def retag_payload(self, repository: str) -> str:
        """The driver payload image under another repository on the GPU node (a rebuilt payload of the same driver,
        for a rollout that is a new driver revision driver-manager keeps; docs/realnode.md); its reference."""
        rebuilt = PAYLOAD_IMAGE.replace("driver-image:", f"{repository}:")
        self.ctr("images", "tag", PAYLOAD_IMAGE, rebuilt)
        return rebuilt

    def create_pull_secret(self, source: Source) -> None:
        """The namespace and `source`'s pull secret, as an administrator creates them before the install."""
        if source.pull_secret is None:
            return
        namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}
        secret = {
            "apiVersion": "v1",
            "kind": "Secret",
            "type": "kubernetes.io/dockerconfigjson",
            "metadata": {"name": PULL_SECRET, "namespace": NAMESPACE},
            "stringData": {".dockerconfigjson": source.pull_secret},
        }
        for manifest in (namespace, secret):
            done = self.kubectl("apply", "-f", "-", stdin=json.dumps(manifest))
            if done.returncode != 0:
                raise ReleaseError(f"kubectl apply {manifest['kind']}: {done.stderr}")

    def metax_sandboxes(self) -> list[str]:
        """The pod sandboxes on the GPU node that run with the ``metax`` runtime handler. Wait for none before
        ``helm uninstall``, as an administrator removes the GPU workloads first: the kubelet removes a deleted pod's
        sandbox at its next garbage collection (within a minute), and while one is left container-runtime keeps the
        wrapper its shim calls to delete it (docs/container-runtime.md, "Uninstall")."""
        return cri_calls.sandboxes_with_handler(str(self.member.containerd_socket), handler.RUNTIME_HANDLER)

    def runtime_config(self) -> tuple[bytes, int]:
        """The node's containerd root file now: its bytes and permission bits."""
        path = self.member.containerd_layout.config
        return path.read_bytes(), stat.S_IMODE(path.stat().st_mode)


def payload_image(directory: Path) -> Path:
    """The TEST driver payload image: the fake payload (`metax_dev.agents.write_payload`) under ``/payload``."""
    payload = agents.write_payload(directory / "payload", DRIVER_VERSION)
    return images.write_payload_image(directory / "driver-image.tar", PAYLOAD_IMAGE, payload)


def sdk_payload_images(directory: Path) -> list[Path]:
    """The TEST MXMACA payload images (`SDK_VERSIONS`): each a fake SDK under ``/payload/maca`` and busybox."""
    return [
        images.write_payload_image(
            directory / f"maca-{version}.tar",
            fake_sdk.reference(version),
            fake_sdk.payload_tree(directory / f"maca-{version}", version),
        )
        for version in SDK_VERSIONS
    ]


@contextmanager
def real_node(
    plane: controlplane.ControlPlane,
    built: images_build.Built | None,
    prefix: str = "helm-node",
    *,
    cpu_node: bool = False,
    registry_hosts: Callable[[Path], Path] | None = None,
    airgap_allowed: Sequence[str] | None = None,
) -> Iterator[Release]:
    """A real node (``<prefix>-0``) on its own fake host (udev stand-in running), torn down after; with ``cpu_node``
    also ``<prefix>-1`` on a fake host without GPUs. ``built``: the product's images, imported (the CPU node gets
    gpu-discovery's only); None: the nodes never saw them and pull them. ``registry_hosts``: writes containerd's
    registry hosts directory (`metax_dev.registry.Registry.write_containerd_hosts`) into the directory it gets
    and returns it: the nodes trust the test registry. ``airgap_allowed``: both nodes are air-gapped
    (`metax_dev.realnode.airgap`), reaching the API server and these ``IP:PORT`` endpoints only."""
    work = Path(tempfile.mkdtemp(prefix="metax-helmnode-"))
    hosts = None if registry_hosts is None else work / "certs.d"  # containerd's config_path: <host>/hosts.toml
    if registry_hosts is not None and hosts is not None:
        registry_hosts(hosts)
    product = [] if built is None else list(built.archives.values())
    nodes = launcher.RealNodes(plane, 0, prefix=prefix)
    fake = builder.FakeHostBuilder().gpus(PFS).vfio(True).host_driver(DRIVER_VERSION).build(work / "host")
    devnodes.make_device_nodes_real(fake.root)
    try:
        with devnodes.udev(fake.root):
            nodes.start()
            started = time.monotonic()
            payloads = [payload_image(work / "payload"), *sdk_payload_images(work / "sdk")]
            member = nodes.add_node(
                device_root=fake.root,
                images=[*product, *payloads],
                runtime_host=True,
                registry_config_dir=hosts,
                airgap_allowed=airgap_allowed,
            )
            release = Release(plane, member, fake, work / "helm")
            release.runtime_before = release.runtime_config()
            release.timings["node with images"] = time.monotonic() - started
            if cpu_node:
                cpu_host = builder.FakeHostBuilder().gpus(0).host_driver(None).build(work / "cpu-host")
                release.cpu = nodes.add_node(
                    device_root=cpu_host.root,
                    images=[] if built is None else [built.archives[DISCOVERY]],
                    host_alias=fake.root,
                    registry_config_dir=hosts,
                    airgap_allowed=airgap_allowed,
                )
                release.timings["CPU node"] = time.monotonic() - started - release.timings["node with images"]
            for m in (member, release.cpu):
                if m is not None:
                    release.kubectl("label", "node", m.name, f"{RELEASE_NODE_LABEL}=true").check_returncode()
            yield release
            # `helm uninstall --wait` returns once its objects are deleted; their pods go afterwards, through the
            # garbage collector and this node's kubelet. Stopped first, the node would leave them on the session's
            # control plane, and the next module's node (the same name) would take them over: a pod of this
            # release (another registry's image) among the next release's (a CI rehearsal's failure).
            poll(
                lambda: not pods(release),
                f"the pods in {NAMESPACE} gone",
                timeout=POD_GC_WAIT,
                explain=lambda: _names(release),
            )
    finally:
        nodes.stop()
        shutil.rmtree(work, ignore_errors=True)


def pods(release: Release) -> list[dict[str, Any]]:
    done = release.kubectl("get", "pods", "-n", NAMESPACE, "-o", "json")
    if done.returncode != 0:
        raise ReleaseError(f"kubectl get pods -n {NAMESPACE} failed: {done.stderr}")
    items: list[dict[str, Any]] = json.loads(done.stdout)["items"]
    return items


def _names(release: Release) -> str:
    return "still there: " + ", ".join(p["metadata"]["name"] for p in pods(release))


def component_pods(release: Release, name: str) -> list[dict[str, Any]]:
    """The live pods of the component whose `meta.APP_LABEL` is ``name`` (a Job's pods aside)."""
    return [
        p
        for p in pods(release)
        if p["metadata"]["labels"].get(meta.APP_LABEL) == name
        and "job-name" not in p["metadata"]["labels"]
        and not p["metadata"].get("deletionTimestamp")
    ]


#: Where on the fake host the agents write (compared before the install and after the uninstall).
AGENT_HOST_DIRS = ("var/lib/metax", "run/metax", "var/run/cdi", "var/log/metax")


def host_files(root: Path) -> set[str]:
    """The paths under the fake host's directories the agents write to."""
    return {str(p.relative_to(root)) for d in AGENT_HOST_DIRS for p in (root / d).rglob("*") if (root / d).exists()}


def ready_seconds(pod: dict[str, Any]) -> float | None:
    """Seconds from the pod's creation to its Ready condition (None: not Ready)."""
    from datetime import datetime

    created = datetime.fromisoformat(pod["metadata"]["creationTimestamp"].replace("Z", "+00:00"))
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition["type"] == "Ready" and condition["status"] == "True":
            ready = datetime.fromisoformat(condition["lastTransitionTime"].replace("Z", "+00:00"))
            return (ready - created).total_seconds()
    return None


def poll(
    predicate: Callable[[], Any],
    what: str,
    *,
    timeout: float,
    interval: float = 0.5,
    explain: Callable[[], str] | None = None,
    error: type[Exception] = ReleaseError,
) -> Any:
    """``predicate()``'s first truthy answer, asked every ``interval`` seconds; ``error`` naming ``what`` (and what
    ``explain()`` says) after ``timeout`` (the real-node tests' `pods.wait` raises AssertionError through it)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            detail = f"\n{explain()}" if explain is not None else ""
            raise error(f"timed out after {timeout:.0f}s waiting for {what}{detail}")
        time.sleep(interval)


def wait(predicate: Callable[[], Any], what: str, timeout: float, explain: Callable[[], str]) -> Any:
    return poll(predicate, what, timeout=timeout, explain=explain)
