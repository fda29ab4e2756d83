"""A release (issue 39; R-RELEASE): image sizes per platform, release and bundle times and sizes, and every pod's
start on a node that pulls the images next to the same node with them imported, in one run.

Run from the repository root (root, Debian's docker-registry and skopeo, the cached images and Go binaries):
``python -m benchmarks.release [--no-pods]``. It

* builds every platform (from the cache: a warm run rebuilds nothing; the cold build's cost is docs/images.md's,
  measured once per machine) and reads each platform's largest archive (P9 goal: ≤ 200 MB);
* times `metax_dev.release.publish.make` (the OCI layout of every platform, the chart pinned to it, SBOMs, sums),
  the push of every index and the chart into a fresh test registry (`metax_dev.registry`), the bundle's writing
  and size, and `./run mirror` of the bundle into a second fresh registry;
* (without ``--no-pods``) installs the chart twice on a fresh real node of one control plane: from the tree with
  the images imported into the node's containerd (`helm_release.IMPORTED`, as the demo and benchmarks/realpods.py
  do), then from ``oci://`` in the registry on a node that never saw them and pulls each by digest (as the e2e
  does), and prints each component's pod creation -> container started -> Ready, side by side, with
  ``helm install --wait``'s own time.

Nothing is asserted. Printed as tables; ``figures()`` for ``python -m benchmarks``.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import attrs

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import figures as fig
from benchmarks.realpods import COMPONENTS, pod_times
from metax_dev import registry as test_registry
from metax_dev.controlplane import cluster
from metax_dev.images import build as images_build
from metax_dev.productnode import helm_release
from metax_dev.release import bundle, publish
from metax_dev.release.target import Target

PROJECT = "metax"


@attrs.frozen
class Install:
    """One ``helm install --wait`` and its pods: component -> (started, Ready) seconds after the pod's creation."""

    seconds: float
    pods: dict[str, tuple[float | None, float | None]]


@attrs.frozen
class Measured:
    largest: dict[str, tuple[str, float]]
    """Platform -> (its largest image, MB)."""
    steps: dict[str, float]
    """Step -> seconds (make, push, bundle, mirror)."""
    bundle_mb: float
    installs: dict[str, Install]
    """"imported" / "pulled" -> the install."""


def _target(registry: test_registry.Registry, work: Path) -> Target:
    return Target(
        f"{registry.host}/{PROJECT}", authfile=registry.auth_file(work / "auth.json"), cert_dir=registry.cert_dir
    )


def _install(
    plane: cluster.ControlPlane,
    built: images_build.Built | None,
    source: helm_release.Source,
    registry: test_registry.Registry | None,
) -> Install:
    hosts = None if registry is None else registry.write_containerd_hosts
    with helm_release.real_node(plane, built, prefix="bench-node", registry_hosts=hosts) as release:
        release.create_pull_secret(source)
        began = time.monotonic()
        release.helm(*release.install_args(source))
        seconds = time.monotonic() - began

        def started() -> bool:
            found = {p["metadata"]["labels"].get("app.kubernetes.io/name"): p for p in helm_release.pods(release)}
            return all(c in found and pod_times(found[c])[1] is not None for c in COMPONENTS)

        helm_release.wait(started, "every component's pod Ready", 300, lambda: "")
        pods = {}
        for pod in helm_release.pods(release):
            name = pod["metadata"]["labels"].get("app.kubernetes.io/name")
            if name in COMPONENTS and "job-name" not in pod["metadata"]["labels"]:
                pods[name] = pod_times(pod)
        release.helm("uninstall", helm_release.RELEASE, "-n", helm_release.NAMESPACE, "--wait")
        return Install(seconds, pods)


def measure(pods: bool = True) -> Measured:
    built = publish.build_platforms(publish.PLATFORMS)
    largest = {}
    for platform, b in built.items():
        name, archive = max(b.archives.items(), key=lambda item: item[1].stat().st_size)
        largest[platform] = (name, archive.stat().st_size / 1e6)
    steps: dict[str, float] = {}
    installs: dict[str, Install] = {}
    with tempfile.TemporaryDirectory(prefix="metax-bench-release.") as tmp:
        work = Path(tmp)
        began = time.monotonic()
        release = publish.make(work / "out", publish.PLATFORMS)
        steps["make (layout of 2 platforms, chart, SBOMs, sums)"] = time.monotonic() - began
        with test_registry.started(work / "registry") as registry:
            pushed = publish.push_layout(release.layout, release.chart, _target(registry, work))
            steps["push every index"] = pushed.timings["push images"]
            steps["push the chart"] = pushed.timings["push chart"]
        began = time.monotonic()
        written = bundle.write(release, work / bundle.name(release.version))
        steps["write the bundle"] = time.monotonic() - began
        bundle_mb = written.stat().st_size / 1e6
        with test_registry.started(work / "mirror") as registry:
            target = _target(registry, work / "mirror-auth")
            mirrored = bundle.mirror(written, target)
            steps["mirror the bundle (verify + push)"] = mirrored.seconds
            if pods:
                with cluster.ControlPlane(nodes=0, verbosity=0) as plane:
                    installs["imported"] = _install(plane, built[publish.PLATFORMS[0]], helm_release.IMPORTED, None)
                    source = helm_release.pulled_from(target, mirrored.version, registry.docker_config_json())
                    installs["pulled"] = _install(plane, None, source, registry)
    return Measured(largest, steps, bundle_mb, installs)


def to_figures(m: Measured) -> list[fig.Figure]:
    found = [
        fig.Figure(
            id="P9",
            what=f"largest image, {platform}, uncompressed ({name})",
            goal=fig.at_most(200.0, "MB"),
            value=mb,
            unit="MB",
            reference=", ".join(f"{p}: {v[1]:.1f} MB" for p, v in m.largest.items() if p != platform),
        )
        for platform, (name, mb) in m.largest.items()
    ]
    one_each = sum(mb for _, mb in m.largest.values())
    found.append(
        fig.Figure(
            id="P9",
            what="air-gapped bundle (every image of 2 platforms, chart, SBOMs, sums)",
            goal=fig.reported(),
            value=m.bundle_mb,
            unit="MB",
            reference=f"uncompressed, one image per platform (the others share its layers): {one_each:.0f} MB",
        )
    )
    for step, seconds in m.steps.items():
        found.append(fig.Figure(id="P9", what=f"release: {step}", goal=fig.reported(), value=seconds, unit="s"))
    if "pulled" in m.installs and "imported" in m.installs:
        found.append(
            fig.Figure(
                id="P9",
                what="helm install --wait on a node that pulls every image (cold containerd)",
                goal=fig.reported(),
                value=m.installs["pulled"].seconds,
                unit="s",
                reference=f"the images imported: {m.installs['imported'].seconds:.1f} s",
            )
        )
    return found


def figures(quick: bool = False, nodes: Sequence[int] = ()) -> list[fig.Figure]:
    return to_figures(measure(pods=not quick))


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--no-pods", action="store_true", help="skip the two installs on a real node")
    args = parser.parse_args(argv)
    m = measure(pods=not args.no_pods)
    print(f"\n{'platform':<14} {'largest image':<26} {'MB':>7}")
    for platform, (name, mb) in m.largest.items():
        print(f"{platform:<14} {name:<26} {mb:7.1f}")
    print(f"\n{'release step':<52} {'seconds':>8}")
    for step, seconds in m.steps.items():
        print(f"{step:<52} {seconds:8.1f}")
    print(f"{'bundle size':<52} {m.bundle_mb:6.1f} MB")
    if m.installs:
        imported, pulled = m.installs["imported"], m.installs["pulled"]
        print(f"\n{'component':<26} {'imported: started/Ready s':>26} {'pulled: started/Ready s':>26}")
        for component in COMPONENTS:
            i, p = imported.pods.get(component, (None, None)), pulled.pods.get(component, (None, None))
            cells = f"{_seconds(i[0]):>12} / {_seconds(i[1]):<11} {_seconds(p[0]):>12} / {_seconds(p[1]):<11}"
            print(f"{component:<26} {cells}")
        print(f"{'helm install --wait':<26} {imported.seconds:24.1f} s {pulled.seconds:24.1f} s")
    fig.print_figures(to_figures(m), "P9")
    return 0


if __name__ == "__main__":
    sys.exit(main())
