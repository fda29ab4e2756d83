"""How long the loopback test control plane takes to build and to start.

Why this module exists: the integration and end-to-end suites pay these costs on every CI
run (90 minutes on 2 cores in total), so they are measured, not guessed. Nothing is
asserted: the numbers depend on the machine.

Run from the repository root::

    python -m benchmarks.controlplane_startup [--cold] [--runs 3] [--nodes 100]

``--cold`` also measures a build from nothing: empty Go build cache, empty Go module
cache (every module downloaded again from the module proxy) and empty binary cache, all
in temporary directories that are removed afterwards. Without it the cold row says
"not measured". The other rows: a rebuild with warm Go caches but no cached binaries
(what a change to a main or go.mod costs), a build that finds its binaries in the cache,
the time from launching etcd to the first usable API (kube-apiserver /readyz), to a
cluster with 3 Ready kwok nodes and working controller-manager and scheduler, to 100
Ready kwok nodes, and an API server restart.
"""

from __future__ import annotations

import argparse
import logging
import os
import pathlib
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

ROOT = pathlib.Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from metax_dev.controlplane import build, cluster

logger = logging.getLogger(__name__)


@contextmanager
def _env(**values: str) -> Iterator[None]:
    saved = {key: os.environ.get(key) for key in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _cold_build() -> float:
    with tempfile.TemporaryDirectory(prefix="metax-cp-cold-") as scratch:
        base = pathlib.Path(scratch)
        flags = (os.environ.get("GOFLAGS", "") + " -modcacherw").strip()
        with _env(GOCACHE=str(base / "gocache"), GOMODCACHE=str(base / "gomod"), GOFLAGS=flags):
            return build.build(cache_dir=base / "bin-cache", quiet=True).seconds


def _relink() -> float:
    with tempfile.TemporaryDirectory(prefix="metax-cp-relink-") as scratch:
        return build.build(cache_dir=pathlib.Path(scratch), quiet=True).seconds


def _fmt(values: Sequence[float]) -> str:
    if not values:
        return "not measured"
    if len(values) == 1:
        return f"{values[0]:.1f}s"
    return f"{statistics.median(values):.1f}s (min {min(values):.1f}, max {max(values):.1f})"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--cold", action="store_true", help="also build from empty Go caches")
    parser.add_argument("--runs", type=int, default=3, help="start-up runs to take the median of")
    parser.add_argument("--nodes", type=int, default=100, help="size of the big kwok cluster")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)

    rows: list[tuple[str, str]] = []
    cold = [_cold_build()] if args.cold else []
    rows.append(("cold build (empty Go build + module caches)", _fmt(cold)))
    warm_build = build.build(quiet=True)  # fills the real cache if it is empty
    rows.append(("rebuild, Go caches warm (no cached binaries)", _fmt([_relink()])))
    rows.append(("build with cached binaries", _fmt([build.build(quiet=True).seconds])))

    first_api: list[float] = []
    small_ready: list[float] = []
    restarts: list[float] = []
    for _ in range(args.runs):
        with cluster.ControlPlane(nodes=3, bin_dir=warm_build.bin_dir) as plane:
            first_api.append(plane.timings.first_api or 0.0)
            small_ready.append(plane.timings.total or 0.0)
            restarts.append(plane.restart_apiserver())
    rows.append(("time to first usable API (etcd launch -> /readyz)", _fmt(first_api)))
    rows.append(("time to ready cluster with 3 kwok nodes", _fmt(small_ready)))
    rows.append(("kube-apiserver restart (stop -> /readyz)", _fmt(restarts)))

    big_total: list[float] = []
    big_nodes: list[float] = []
    for _ in range(args.runs):
        started = time.monotonic()
        with cluster.ControlPlane(nodes=args.nodes, bin_dir=warm_build.bin_dir) as plane:
            big_total.append(time.monotonic() - started)
            big_nodes.append(plane.timings.nodes_ready or 0.0)
    rows.append((f"time to {args.nodes} Ready kwok nodes (from etcd launch)", _fmt(big_total)))
    rows.append((f"  of which creating + awaiting the {args.nodes} nodes", _fmt(big_nodes)))

    versions = build.module_versions()
    print(
        f"\ntest control plane: kubernetes {versions['kubernetes']}, etcd {versions['etcd']}, "
        f"kwok {versions['kwok']}; {os.cpu_count()} CPUs; median of {args.runs} runs\n"
    )
    width = max(len(label) for label, _ in rows)
    print(f"{'measurement':<{width}}  seconds")
    print(f"{'-' * width}  {'-' * 30}")
    for label, value in rows:
        print(f"{label:<{width}}  {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
