"""Building the test cluster's binaries from Go modules, and the cache that makes it happen once.

Why this module exists: etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok (the control
plane), helm (the chart tests; its own module nested at ``gomod/cmd/helm``), and kubelet, kubectl, containerd,
ctr, the runc shim, runc and pause (a real node) are not downloaded but built from their upstream Go modules
(the small Go module in ``metax_dev/controlplane/gomod``, and the node's in ``metax_dev/realnode/gomod``),
which takes minutes cold. So the binaries are cached under a key that hashes everything that decides them
(every target of :mod:`metax_dev.controlplane.targets`: go.mod, go.sum, the ``.go``/``.c`` sources, the Go
version, the platform, the C toolchain, the flags); a test run with the same sources reuses them in no time,
and concurrent runs wait for one build instead of racing. The oldest supported Kubernetes minor
(:func:`build_oldest`) and CRI-O (crio, copyimg and pinns, :func:`build_crio`) are binary sets of their own, under
their own keys, built only by the sessions whose tests need them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import hashlib
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from metax_dev import cachedir
from metax_dev.controlplane import errors, oldest_source, processes, targets

logger = logging.getLogger(__name__)

#: Every binary of a build: the control plane's and a real node's.
BINARIES: Final = (*targets.CONTROL_PLANE, *targets.CHART, *targets.NODE)

#: Binary sets (about 650 MB each) kept in the cache; older ones are removed after a build.
CACHE_KEEP: Final = 3

_GO_INSTALL_HINT: Final = (
    "The test control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, "
    "kwok) and the real node (kubelet, containerd, runc) are built from Go modules in "
    "metax_dev/controlplane/gomod and metax_dev/realnode/gomod and need the Go toolchain "
    "(go >= 1.26) on PATH. Install Go, put its bin directory on PATH (or set "
    "METAX_CONTROLPLANE_GO to the go executable), then run "
    "`python -m metax_dev.controlplane build`. See docs/controlplane.md."
)


def go_module_dir() -> Path:
    """The Go module that builds the binaries (``$METAX_CONTROLPLANE_GO_MODULE`` overrides)."""
    override = os.environ.get("METAX_CONTROLPLANE_GO_MODULE")
    if override:
        return Path(override).resolve()
    # Shipped beside this module (package data), so an installed package finds it too.
    return Path(__file__).resolve().parent / "gomod"


def cache_root() -> Path:
    """Where built binaries are kept: ``$METAX_CONTROLPLANE_CACHE`` or the XDG cache dir."""
    return cachedir.cache_dir("controlplane", "METAX_CONTROLPLANE_CACHE")


def find_go() -> Path:
    """The ``go`` executable, or :class:`GoNotFoundError` with instructions."""
    override = os.environ.get("METAX_CONTROLPLANE_GO")
    candidates = [override] if override else [shutil.which("go"), "/usr/local/go/bin/go"]
    for candidate in candidates:
        if candidate and os.access(candidate, os.X_OK) and Path(candidate).is_file():
            return Path(candidate)
    raise errors.GoNotFoundError(_GO_INSTALL_HINT)


#: go.mod requirement -> name, for the control plane's module.
_CONTROL_PLANE_MODULES: Final = {
    "k8s.io/kubernetes": "kubernetes",
    "go.etcd.io/etcd/server/v3": "etcd",
    "sigs.k8s.io/kwok": "kwok",
}


def module_versions(
    module_dir: Path | None = None, wanted: Mapping[str, str] = _CONTROL_PLANE_MODULES
) -> dict[str, str]:
    """Versions of the upstream modules the Go module requires (``wanted``: requirement -> name), from its go.mod."""
    found: dict[str, str] = {}
    text = ((module_dir or go_module_dir()) / "go.mod").read_text()
    for line in text.splitlines():
        parts = line.strip().removeprefix("require").split()
        if len(parts) >= 2 and parts[0] in wanted and parts[1].startswith("v"):
            found[wanted[parts[0]]] = parts[1]
        elif len(parts) >= 2 and parts[0] == "go" and "go" not in found:
            found["go"] = parts[1]
    missing = sorted(set(wanted.values()) - set(found))
    if missing:
        raise errors.ControlPlaneError(f"{module_dir}/go.mod does not require {', '.join(missing)}")
    return found


def oldest_versions(module_dir: Path | None = None) -> dict[str, str]:
    """The Kubernetes (and Go directive) version of the oldest-minor module (``gomod-oldest``)."""
    return module_versions(module_dir or targets.oldest_module_dir(), {"k8s.io/kubernetes": "kubernetes"})


def _go_env(go: Path, module_dir: Path, env: Mapping[str, str]) -> dict[str, str]:
    result = subprocess.run(
        [str(go), "env", "-json", "GOVERSION", "GOOS", "GOARCH"],
        cwd=module_dir,
        env=dict(env),
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        raise errors.ControlPlaneError(f"`{go} env` failed:\n{result.stderr.strip()}")
    parsed: dict[str, str] = json.loads(result.stdout)
    return parsed


@dataclass(frozen=True)
class BuildResult:
    """Where the binaries are and what getting them cost."""

    bin_dir: Path
    seconds: float
    cached: bool
    key: str
    versions: Mapping[str, str]

    def binary(self, name: str) -> Path:
        return self.bin_dir / name


def _build_env() -> dict[str, str]:
    env = dict(os.environ)
    # Static binaries unless a target needs C (runc: libseccomp); see targets.Target.go_env.
    env["CGO_ENABLED"] = "0"
    return env


def _targets(module_dir: Path) -> list[targets.Target]:
    return targets.targets(module_dir, module_versions(module_dir)["kubernetes"])


def build_key(module_dir: Path | None = None, go: Path | None = None) -> str:
    """Hash of everything that decides the binaries: sources, go.mod/go.sum, toolchains, flags."""
    module_dir = module_dir or go_module_dir()
    return _key(go or find_go(), module_dir, _targets(module_dir))


def _key(go: Path, module_dir: Path, steps: list[targets.Target], extra: bytes = b"") -> str:
    go_env = _go_env(go, module_dir, _build_env())
    digest = hashlib.sha256()
    for key in ("GOVERSION", "GOOS", "GOARCH"):
        digest.update(f"{key}={go_env.get(key, '')}\0".encode())
    for target in steps:
        digest.update(targets.fingerprint(target))
    if extra:
        digest.update(b"extra\0" + extra)
    return digest.hexdigest()[:20]


def build(
    *,
    module_dir: Path | None = None,
    cache_dir: Path | None = None,
    force: bool = False,
    quiet: bool = False,
) -> BuildResult:
    """Build the control-plane and node binaries, or reuse the cached ones for the same sources.

    One ``go build -trimpath`` per Go module (the control plane's mains, kubelet and kubectl
    together, so their shared packages compile once; containerd's three; runc with CGO and
    libseccomp), then ``gcc -static`` for pause; Go's own build and module caches are reused as
    usual. The result lives in ``<cache>/<key>/bin`` where ``key`` hashes every target's sources,
    toolchain and flags (:func:`build_key`). A file lock makes concurrent callers wait for one
    build instead of racing.
    """
    started = time.monotonic()
    module_dir = (module_dir or go_module_dir()).resolve()
    if not (module_dir / "go.mod").is_file():
        raise errors.ControlPlaneError(f"no Go module at {module_dir} (set METAX_CONTROLPLANE_GO_MODULE)")
    go = find_go()
    versions = {**module_versions(module_dir), **targets.node_versions()}
    steps = _targets(module_dir)
    what = (
        f"kubernetes {versions['kubernetes']}, etcd {versions['etcd']}, kwok {versions['kwok']}, "
        f"containerd {versions['containerd']}, runc {versions['runc']}"
    )
    return _cached_build(
        _Plan(cache_dir or cache_root(), _key(go, module_dir, steps), steps, BINARIES, versions, what),
        go,
        started=started,
        force=force,
        quiet=quiet,
    )


def build_oldest(
    *,
    module_dir: Path | None = None,
    cache_dir: Path | None = None,
    force: bool = False,
    quiet: bool = False,
) -> BuildResult:
    """Build (or reuse) kube-apiserver, kube-controller-manager and kube-scheduler of the oldest supported minor.

    The same cached build as :func:`build`, for the one target of ``gomod-oldest``
    (:func:`targets.oldest_targets`), under ``<cache>/oldest/<key>``: its own key (its go.mod, go.sum,
    mains, flags, the Go toolchain and :mod:`oldest_source`), so it is built only by the sessions that run
    the compatibility tests, and editing it never invalidates the main binary set. Before compiling,
    :func:`oldest_source.prepare` makes the source tree in ``<key>/src`` (the module copied from the Go
    module cache, the OpenAPI definitions 1.23 does not ship generated by its own openapi-gen, a go.mod
    replacing ``k8s.io/kubernetes`` with that copy); ``go build`` runs there. etcd and kwok come from
    :func:`build`.
    """
    started = time.monotonic()
    module_dir = (module_dir or targets.oldest_module_dir()).resolve()
    if not (module_dir / "go.mod").is_file():
        raise errors.ControlPlaneError(f"no Go module at {module_dir}")
    go = find_go()
    versions = oldest_versions(module_dir)
    steps = targets.oldest_targets(module_dir, versions["kubernetes"])
    root = (cache_dir or cache_root()) / "oldest"
    return _cached_build(
        _Plan(
            root,
            _key(go, module_dir, steps, oldest_source.fingerprint()),
            steps,
            targets.OLDEST,
            versions,
            f"kubernetes {versions['kubernetes']}",
            prepare=lambda go, scratch, log: oldest_source.prepare(go, module_dir, scratch, log, _build_env()),
        ),
        go,
        started=started,
        force=force,
        quiet=quiet,
    )


def crio_cache_root(cache_dir: Path | None = None) -> Path:
    return (cache_dir or cache_root()) / "crio"


def build_crio(
    *,
    module_dir: Path | None = None,
    cache_dir: Path | None = None,
    force: bool = False,
    quiet: bool = False,
) -> BuildResult:
    """Build (or reuse) CRI-O: ``crio``, ``copyimg`` and ``pinns`` (:func:`targets.crio_targets`).

    The same cached build as :func:`build_oldest`, under ``<cache>/crio/<key>``, its own key (the module's go.mod and
    go.sum, its tags and flags, pinns' C sources from the Go module cache, the Go and C toolchains and libseccomp),
    so only the sessions that run the CRI-O tests build it (a few minutes cold) and editing it never invalidates the
    other binary sets; pruned like them. conmon is Debian's (package ``conmon``), runc the main set's."""
    started = time.monotonic()
    module_dir = (module_dir or targets.crio_module_dir()).resolve()
    if not (module_dir / "go.mod").is_file():
        raise errors.ControlPlaneError(f"no Go module at {module_dir}")
    go = find_go()
    versions = module_versions(module_dir, {"github.com/cri-o/cri-o": "cri-o"})
    cri_o = targets.module_source(go, module_dir, "github.com/cri-o/cri-o", _build_env())
    steps = targets.crio_targets(module_dir, cri_o / "pinns" / "src")
    return _cached_build(
        _Plan(
            crio_cache_root(cache_dir),
            _key(go, module_dir, steps),
            steps,
            targets.CRIO,
            versions,
            f"cri-o {versions['cri-o']}",
        ),
        go,
        started=started,
        force=force,
        quiet=quiet,
    )


@dataclass(frozen=True)
class _Plan:
    """One cached binary set: where, under which key, built by which targets, expected binaries."""

    root: Path
    key: str
    steps: list[targets.Target]
    binaries: tuple[str, ...]
    versions: Mapping[str, str]
    what: str
    #: Makes the source tree to build in under its scratch directory (go, scratch, build log) -> directory;
    #: ``None``: the targets build where they are.
    prepare: Callable[[Path, Path, Path], Path] | None = None


def _cached_build(plan: _Plan, go: Path, *, started: float, force: bool, quiet: bool) -> BuildResult:
    plan.root.mkdir(parents=True, exist_ok=True)
    target = plan.root / plan.key
    bin_dir = target / "bin"
    stamp = target / "complete"

    def report(cached: bool) -> BuildResult:
        seconds = time.monotonic() - started
        result = BuildResult(bin_dir, seconds, cached, plan.key, plan.versions)
        how = "reused cached" if cached else "built"
        message = f"control plane: {how} binaries ({plan.what}) in {seconds:.1f}s: {bin_dir}"
        logger.info("%s", message)
        if not quiet:
            print(message, file=sys.stderr, flush=True)
        return result

    with (plan.root / f"{plan.key}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if stamp.is_file() and not force and all((bin_dir / b).is_file() for b in plan.binaries):
            stamp.touch()  # marks it recently used, see _prune_cache
            return report(cached=True)
        staging = Path(tempfile.mkdtemp(prefix=f"{plan.key}.", suffix=".tmp", dir=plan.root))
        try:
            (staging / "bin").mkdir()
            log_path = staging / "build.log"
            if not quiet:
                print(
                    f"control plane: building {', '.join(plan.binaries)} with {go} "
                    "(a cold build takes several minutes) ...",
                    file=sys.stderr,
                    flush=True,
                )
            steps = plan.steps
            if plan.prepare is not None:
                source = plan.prepare(go, staging / "src", log_path)
                steps = [dataclasses.replace(step, source_dir=source) for step in steps]
            for step in steps:
                _run_target(step, go, staging / "bin", log_path)
            missing = [b for b in plan.binaries if not (staging / "bin" / b).is_file()]
            if missing:
                raise errors.ControlPlaneError(f"`go build` produced no {', '.join(missing)}")
            (staging / "complete").write_text(json.dumps(dict(plan.versions), sort_keys=True) + "\n")
            if target.exists():
                shutil.rmtree(target)
            staging.rename(target)
        finally:
            if staging.exists():
                shutil.rmtree(staging, ignore_errors=True)
    _prune_cache(plan.root, keep=CACHE_KEEP, current=plan.key)
    return report(cached=False)


def _command(target: targets.Target, go: Path, out_dir: Path) -> list[str]:
    if target.kind == "c":
        sources = [str(target.source_dir / p) for p in target.packages]
        return ["gcc", "-static", "-O2", "-Wall", *target.cflags, "-o", str(out_dir / target.binaries[0]), *sources]
    command = [str(go), "build", "-trimpath", "-buildvcs=false"]
    if target.tags:
        command += ["-tags", ",".join(target.tags)]
    command += ["-ldflags", target.ldflags, "-o", str(out_dir) + os.sep, *target.packages]
    return command


def _run_target(target: targets.Target, go: Path, out_dir: Path, log_path: Path) -> None:
    """One compiler invocation, its output appended to ``log_path``; raises with its tail."""
    command = _command(target, go, out_dir)
    logger.info("building %s: %s (cwd %s)", target.name, " ".join(command), target.source_dir)
    with log_path.open("ab") as log:
        log.write(f"== {target.name}: {' '.join(command)}\n".encode())
        log.flush()
        completed = subprocess.run(
            command,
            cwd=target.source_dir,
            env=target.go_env(_build_env()),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            check=False,
        )
    if completed.returncode != 0:
        hint = ""
        if target.cgo or target.kind == "c":
            hint = (
                "\n(runc, CRI-O, pinns and pause need gcc, libc6-dev, pkg-config, libseccomp-dev and "
                "busybox-static; `./run test` installs them on Debian)"
            )
        raise errors.ControlPlaneError(
            f"building {target.name} failed (exit {completed.returncode}) in "
            f"{target.source_dir}:\n{processes.tail(log_path)}{hint}"
        )


def _prune_cache(root: Path, *, keep: int, current: str) -> None:
    """Remove all but the ``keep`` most recently used binary sets (never ``current``)."""
    entries = [d for d in root.iterdir() if d.is_dir() and (d / "complete").is_file()]
    entries.sort(key=lambda d: (d / "complete").stat().st_mtime, reverse=True)
    for stale in [d for d in entries if d.name != current][max(0, keep - 1) :]:
        logger.info("removing old control-plane binaries %s", stale)
        shutil.rmtree(stale, ignore_errors=True)
        with contextlib.suppress(OSError):
            (root / f"{stale.name}.lock").unlink()
