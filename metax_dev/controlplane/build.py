"""Building the control-plane binaries from Go modules, and the cache that makes it happen once.

Why this module exists: etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok
(and helm, for the chart tests, from its own module nested at ``cmd/helm``) are not downloaded
but built from their upstream Go modules (the small Go module in
``metax_dev/controlplane/gomod``), which takes minutes cold. So the binaries are cached under a key that
hashes everything that decides them (go.mod, go.sum, every ``.go`` file of that module, the Go
version, the platform and the flags); a test run with the same sources reuses them in no time,
and concurrent runs wait for one build instead of racing.
"""

from __future__ import annotations

import contextlib
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
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from metax_dev.controlplane import errors, processes

logger = logging.getLogger(__name__)

#: The binaries built from ``metax_dev/controlplane/gomod/cmd/*``.
BINARIES: Final = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok", "helm")

#: Binaries built from a Go module of their own, nested at ``cmd/<name>`` (their dependencies would clash with
#: the control plane's pins): name -> the upstream main package its go.mod's ``tool`` line names.
NESTED: Final = {"helm": "helm.sh/helm/v3/cmd/helm"}

#: Binary sets (about 400 MB each) kept in the cache; older ones are removed after a build.
CACHE_KEEP: Final = 3

_GO_INSTALL_HINT: Final = (
    "The test control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, "
    "kwok) is built from Go modules in metax_dev/controlplane/gomod and needs the Go toolchain "
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
    override = os.environ.get("METAX_CONTROLPLANE_CACHE")
    if override:
        return Path(override)
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg) / "metax-operator" / "controlplane"


def find_go() -> Path:
    """The ``go`` executable, or :class:`GoNotFoundError` with instructions."""
    override = os.environ.get("METAX_CONTROLPLANE_GO")
    candidates = [override] if override else [shutil.which("go"), "/usr/local/go/bin/go"]
    for candidate in candidates:
        if candidate and os.access(candidate, os.X_OK) and Path(candidate).is_file():
            return Path(candidate)
    raise errors.GoNotFoundError(_GO_INSTALL_HINT)


def module_versions(module_dir: Path | None = None) -> dict[str, str]:
    """Versions of the upstream modules the Go module requires, read from its go.mod."""
    wanted = {
        "k8s.io/kubernetes": "kubernetes",
        "go.etcd.io/etcd/server/v3": "etcd",
        "sigs.k8s.io/kwok": "kwok",
    }
    found: dict[str, str] = {}
    text = ((module_dir or go_module_dir()) / "go.mod").read_text()
    for line in text.splitlines():
        parts = line.strip().split()
        if len(parts) >= 2 and parts[0] in wanted and parts[1].startswith("v"):
            found[wanted[parts[0]]] = parts[1]
        elif len(parts) >= 2 and parts[0] == "go" and "go" not in found:
            found["go"] = parts[1]
    missing = sorted(set(wanted.values()) - set(found))
    if missing:
        raise errors.ControlPlaneError(f"{module_dir}/go.mod does not require {', '.join(missing)}")
    return found


def _ldflags(kubernetes_version: str) -> str:
    major, minor = kubernetes_version.lstrip("v").split(".")[:2]
    flags = ["-s", "-w"]
    for pkg in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        flags += [
            f"-X {pkg}.gitVersion={kubernetes_version}",
            f"-X {pkg}.gitMajor={major}",
            f"-X {pkg}.gitMinor={minor}",
            f"-X {pkg}.gitTreeState=clean",
        ]
    return " ".join(flags)


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


def _source_files(module_dir: Path) -> list[Path]:
    files = [module_dir / "go.mod", module_dir / "go.sum"]
    files += sorted(module_dir / "cmd" / name / f for name in NESTED for f in ("go.mod", "go.sum"))
    files += sorted(p for p in module_dir.rglob("*.go") if p.is_file())
    return files


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
    # Static binaries: no C toolchain needed, and the same result on every machine.
    env["CGO_ENABLED"] = "0"
    return env


def build_key(module_dir: Path | None = None, go: Path | None = None) -> str:
    """Hash of everything that decides the binaries: sources, go.mod/go.sum, Go, flags."""
    module_dir = module_dir or go_module_dir()
    go = go or find_go()
    env = _build_env()
    go_env = _go_env(go, module_dir, env)
    versions = module_versions(module_dir)
    digest = hashlib.sha256()
    for path in _source_files(module_dir):
        digest.update(str(path.relative_to(module_dir)).encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    for key in ("GOVERSION", "GOOS", "GOARCH"):
        digest.update(f"{key}={go_env.get(key, '')}\0".encode())
    digest.update(f"CGO_ENABLED={env['CGO_ENABLED']}\0".encode())
    digest.update(_ldflags(versions["kubernetes"]).encode())
    for name in NESTED:
        digest.update(_nested_ldflags(module_dir / "cmd" / name).encode())
    return digest.hexdigest()[:20]


def _nested_ldflags(nested_dir: Path) -> str:
    """helm's version and the Kubernetes version it reports to templates (its client-go), as its Makefile sets."""
    found: dict[str, str] = {}
    for line in (nested_dir / "go.mod").read_text().splitlines():
        parts = line.strip().split()
        if len(parts) >= 2 and parts[0] in ("helm.sh/helm/v3", "k8s.io/client-go"):
            found[parts[0]] = parts[1]
    if len(found) != 2:
        raise errors.ControlPlaneError(f"{nested_dir}/go.mod does not require helm.sh/helm/v3 and k8s.io/client-go")
    minor = found["k8s.io/client-go"].lstrip("v").split(".")[1]
    flags = ["-s", "-w", f"-X helm.sh/helm/v3/internal/version.version={found['helm.sh/helm/v3']}"]
    for pkg in ("helm.sh/helm/v3/pkg/lint/rules", "helm.sh/helm/v3/pkg/chartutil"):
        flags += [f"-X {pkg}.k8sVersionMajor=1", f"-X {pkg}.k8sVersionMinor={minor}"]
    return " ".join(flags)


def build(
    *,
    module_dir: Path | None = None,
    cache_dir: Path | None = None,
    force: bool = False,
    quiet: bool = False,
) -> BuildResult:
    """Build the control-plane binaries, or reuse the cached ones for the same sources.

    All five mains are built by one ``go build -trimpath`` invocation so their shared
    packages compile once; Go's own build and module caches are reused as usual. The
    result lives in ``<cache>/<key>/bin`` where ``key`` hashes go.mod, go.sum, the main
    sources, the Go version and the flags. A file lock makes concurrent callers wait for
    one build instead of racing.
    """
    started = time.monotonic()
    module_dir = (module_dir or go_module_dir()).resolve()
    if not (module_dir / "go.mod").is_file():
        raise errors.ControlPlaneError(f"no Go module at {module_dir} (set METAX_CONTROLPLANE_GO_MODULE)")
    go = find_go()
    versions = module_versions(module_dir)
    key = build_key(module_dir, go)
    root = cache_dir or cache_root()
    root.mkdir(parents=True, exist_ok=True)
    target = root / key
    bin_dir = target / "bin"
    stamp = target / "complete"

    def report(cached: bool) -> BuildResult:
        seconds = time.monotonic() - started
        result = BuildResult(bin_dir, seconds, cached, key, versions)
        how = "reused cached" if cached else "built"
        message = (
            f"control plane: {how} binaries (kubernetes {versions['kubernetes']}, "
            f"etcd {versions['etcd']}, kwok {versions['kwok']}) in {seconds:.1f}s: {bin_dir}"
        )
        logger.info("%s", message)
        if not quiet:
            print(message, file=sys.stderr, flush=True)
        return result

    with (root / f"{key}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if stamp.is_file() and not force and all((bin_dir / b).is_file() for b in BINARIES):
            stamp.touch()  # marks it recently used, see _prune_cache
            return report(cached=True)
        staging = Path(tempfile.mkdtemp(prefix=f"{key}.", suffix=".tmp", dir=root))
        try:
            (staging / "bin").mkdir()
            log_path = staging / "build.log"
            command = [
                str(go),
                "build",
                "-trimpath",
                "-buildvcs=false",
                "-ldflags",
                _ldflags(versions["kubernetes"]),
                "-o",
                str(staging / "bin") + os.sep,
                "./cmd/...",
            ]
            if not quiet:
                print(
                    f"control plane: building {', '.join(BINARIES)} with {go} (a cold build takes several minutes) ...",
                    file=sys.stderr,
                    flush=True,
                )
            logger.info("building control plane: %s (cwd %s)", " ".join(command), module_dir)
            with log_path.open("wb") as log:
                completed = subprocess.run(
                    command,
                    cwd=module_dir,
                    env=_build_env(),
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    check=False,
                )
            for name, package in NESTED.items():
                if completed.returncode != 0:
                    break
                nested = module_dir / "cmd" / name
                with log_path.open("ab") as log:
                    completed = subprocess.run(
                        [
                            *(str(go), "build", "-trimpath", "-buildvcs=false"),
                            *("-ldflags", _nested_ldflags(nested), "-o", str(staging / "bin" / name), package),
                        ],
                        cwd=nested,
                        env=_build_env(),
                        stdin=subprocess.DEVNULL,
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        check=False,
                    )
            if completed.returncode != 0:
                raise errors.ControlPlaneError(
                    f"`go build` of the control plane failed (exit {completed.returncode}) "
                    f"in {module_dir}:\n{processes.tail(log_path)}"
                )
            missing = [b for b in BINARIES if not (staging / "bin" / b).is_file()]
            if missing:
                raise errors.ControlPlaneError(f"`go build` produced no {', '.join(missing)}")
            (staging / "complete").write_text(json.dumps(dict(versions), sort_keys=True) + "\n")
            if target.exists():
                shutil.rmtree(target)
            staging.rename(target)
        finally:
            if staging.exists():
                shutil.rmtree(staging, ignore_errors=True)
    _prune_cache(root, keep=CACHE_KEEP, current=key)
    return report(cached=False)


def _prune_cache(root: Path, *, keep: int, current: str) -> None:
    """Remove all but the ``keep`` most recently used binary sets (never ``current``)."""
    entries = [d for d in root.iterdir() if d.is_dir() and (d / "complete").is_file()]
    entries.sort(key=lambda d: (d / "complete").stat().st_mtime, reverse=True)
    for stale in [d for d in entries if d.name != current][max(0, keep - 1) :]:
        logger.info("removing old control-plane binaries %s", stale)
        shutil.rmtree(stale, ignore_errors=True)
        with contextlib.suppress(OSError):
            (root / f"{stale.name}.lock").unlink()
