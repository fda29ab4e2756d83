"""container-runtime on real containerd daemons: configuration apply + restart time, and the agent's memory (P8).

Run from the repository root: ``python -m benchmarks.container_runtime [--rounds 5]``. For Debian's containerd
1.6 and the real node's 2.4.2 (whichever is here), a daemon is started with its own root, state and socket
(`metax_dev.containerd_host`: in its own mount namespace, restarted by the harness's supervisor), and

* **plain restart**: the supervisor restarts containerd, until its CRI answers (the reference: what any
  configuration change costs on this machine, without us);
* **apply + restart**: one agent round on a node without our configuration: plan, backup, write, validate
  with ``containerd config dump``, restart, and the check that the running daemon has the handler;
* **steady round**: a round with nothing to do (reads, one ``--version``, one CRI status; no write, no restart);
* **uninstall**: files back, one restart;
* **agent peak RSS**: a separate process that runs the agent through apply, 20 steady rounds and uninstall,
  its VmHWM beside a bare interpreter's and the same imports without running (goal P8: ≤ 60 MiB).

Nothing is asserted: numbers depend on the machine. Printed as a table.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence

ROOT = pathlib.Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import figures as fig
from metax_dev import containerd_host

ROOT_FILE = "version = {version}\n{paths}\n# the node's own settings\n"


def _binaries() -> dict[str, tuple[pathlib.Path, pathlib.Path, str, int]]:
    found: dict[str, tuple[pathlib.Path, pathlib.Path, str, int]] = {}
    if containerd_host.DEBIAN_CONTAINERD.is_file():
        found["1.6 (Debian)"] = (containerd_host.DEBIAN_CONTAINERD, containerd_host.DEBIAN_RUNC, "/usr/bin", 2)
    try:
        bin_dir = containerd_host.harness_bin()
        found["2.4.2 (real node's)"] = (bin_dir / "containerd", bin_dir / "runc", str(bin_dir), 4)
    except Exception as exc:  # a benchmark reports what it could not measure
        print(f"containerd 2.4.2 not available: {exc}", file=sys.stderr)
    return found


def _timed(action: Callable[[], object]) -> float:
    started = time.perf_counter()
    action()
    return (time.perf_counter() - started) * 1000


def _node(
    tmp: pathlib.Path, name: str, spec: tuple[pathlib.Path, pathlib.Path, str, int]
) -> containerd_host.RuntimeNode:
    binary, runc, bin_path, version = spec
    node = containerd_host.make(tmp / name.split()[0], binary, runc, bin_path)
    node.root_config.write_text(ROOT_FILE.format(version=version, paths=node.daemon_paths(version)))
    node.start()
    return node


def measure_daemon(
    tmp: pathlib.Path, name: str, spec: tuple[pathlib.Path, pathlib.Path, str, int], rounds: int
) -> dict[str, float]:
    node = _node(tmp, name, spec)
    try:
        plain, apply, steady, undo = [], [], [], []
        for _ in range(rounds):
            plain.append(_timed(lambda: (node.supervisor.restart(), node.wait_serving())))
        for _ in range(rounds):
            agent = node.agent()
            apply.append(_timed(agent.tick))
            signal = node.signal()
            if signal is None or not signal.ready:
                raise SystemExit(f"{name}: the agent is not ready: {signal}")
            for _ in range(3):
                agent.wake()
                steady.append(_timed(agent.tick))
            undo.append(_timed(agent.containerd.uninstall))
        return {
            "plain restart": statistics.median(plain),
            "apply + restart": statistics.median(apply),
            "steady round": statistics.median(steady),
            "uninstall": statistics.median(undo),
        }
    finally:
        node.supervisor.stop()


CHILD = """
import json, pathlib, sys, tempfile
sys.path.insert(0, {root!r})
mode = sys.argv[1]
def hwm():
    for line in pathlib.Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
if mode == "run":
    from metax_dev import containerd_host
    binary, runc, bin_path, version = sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="metax-crbench-"))
    node = containerd_host.make(tmp / "node", pathlib.Path(binary), pathlib.Path(runc), bin_path)
    node.root_config.write_text("version = %d\\n%s" % (version, node.daemon_paths(version)))
    node.start()
    try:
        agent = node.agent()
        agent.tick()
        assert node.signal().ready
        for _ in range(20):
            agent.wake(); agent.tick()
        agent.containerd.uninstall()
    finally:
        node.supervisor.stop()
        import shutil; shutil.rmtree(tmp, ignore_errors=True)
elif mode == "imports":
    from services.container_runtime import bootstrap  # noqa: F401
    from metax_hw import container_runtime, hostfiles  # noqa: F401
    import grpc  # noqa: F401  (imported lazily by the CRI client)
print(json.dumps(hwm()))
"""


def child_rss(*args: str) -> float:
    code = CHILD.format(root=str(ROOT))
    done = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"child {args} failed: {done.stderr[-2000:]}")
    return float(json.loads(done.stdout.strip().splitlines()[-1]))


def measure(rounds: int) -> tuple[dict[str, dict[str, float]], dict[str, float]]:
    """(per containerd: median ms of each measure, peak RSS MiB of the agent and its two references)."""
    binaries = _binaries()
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="metax-crbench-"))
    try:
        results = {name: measure_daemon(tmp, name, spec, rounds) for name, spec in binaries.items()}
        name, spec = next(iter(binaries.items()))
        rss = {
            "bare interpreter": child_rss("bare"),
            "agent's imports": child_rss("imports"),
            f"agent running (containerd {name})": child_rss("run", str(spec[0]), str(spec[1]), spec[2], str(spec[3])),
        }
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return results, rss


def to_figures(rss: dict[str, float]) -> list[fig.Figure]:
    running = next(k for k in rss if k.startswith("agent running"))
    imports = rss["agent's imports"]
    return [
        fig.Figure(
            id="P8",
            what=f"container-runtime {running} (apply, 20 steady rounds, uninstall), peak RSS",
            goal=fig.at_most(60.0, "MiB"),
            value=rss[running],
            unit="MiB",
            reference=f"bare interpreter {rss['bare interpreter']:.1f} MiB; its imports alone {imports:.1f} MiB",
        )
    ]


def figures(quick: bool = False, nodes: Sequence[int] = ()) -> list[fig.Figure]:
    return to_figures(measure(1 if quick else 5)[1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    results, rss = measure(args.rounds)
    measures = ["plain restart", "apply + restart", "steady round", "uninstall"]
    print(f"\ncontainer-runtime, median of {args.rounds} (ms)")
    print(f"{'measure':<20}" + "".join(f"{n:>24}" for n in results))
    for m in measures:
        print(f"{m:<20}" + "".join(f"{results[n][m]:>24.0f}" for n in results))
    print("\npeak RSS (VmHWM, MiB; goal P8: agent <= 60)")
    for what, mib in rss.items():
        print(f"{what:<44}{mib:>8.1f}")
    fig.print_figures(to_figures(rss), "P8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
