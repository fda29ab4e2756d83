"""What the cached build produces: one entry per compiler invocation, and what decides its output.

Why this module exists: the test cluster needs binaries from three upstream code bases that cannot
share one Go module (their dependency pins differ) and do not share one build environment (runc needs
CGO and libseccomp; everything else is static). Each :class:`Target` names a module directory, the
packages it builds, the binaries that come out and the environment and flags; :func:`targets` lists
them in build order and :func:`fingerprint` feeds everything that decides a target's binaries into the
cache key of :mod:`metax_dev.controlplane.build`. The node's ``pause`` program (plain C, compiled with
``gcc -static``) is a target too, so the whole node needs one cached build. CRI-O's build (:func:`crio_targets`:
crio and copyimg with CGO, pinns in C from the cri-o module's own sources) is a binary set of its own.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from metax_dev.controlplane import errors

#: The realnode package ships the node-side Go modules and the pause source (package data).
_REALNODE_DIR: Final = Path(__file__).resolve().parent.parent / "realnode"

#: Binaries the control plane uses (``metax_dev/controlplane/gomod/cmd/*``, one ``go build``).
CONTROL_PLANE: Final = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")
#: Binaries the chart tests use (``metax_dev/controlplane/gomod/cmd/helm``, a Go module of its own: helm pins
#: newer Kubernetes client libraries than the control plane).
CHART: Final = ("helm",)
_HELM_MODULE: Final = "helm.sh/helm/v3"
#: Binaries a real node uses (docs/realnode.md).
NODE: Final = ("kubelet", "kubectl", "containerd", "ctr", "containerd-shim-runc-v2", "runc", "pause")
#: CRI-O and what it needs beside conmon and runc (docs/container-runtime.md): ``crio`` and the test tool ``copyimg``
#: that puts an image archive into its storage (both from ``metax_dev/realnode/gomod/crio``, one ``go build``, CGO for
#: libseccomp), and ``pinns``, the small C program CRI-O pins a pod's namespaces with (``pinns/src`` of the cri-o
#: module, ``gcc -static``).
CRIO: Final = ("crio", "copyimg", "pinns")
#: Binaries of the oldest Kubernetes minor the product supports (R-COMPAT), from their own Go module
#: (``metax_dev/controlplane/gomod-oldest``, one ``go build``): a second control plane runs them with the etcd
#: and kwok above. kube-controller-manager and kube-scheduler must not be newer than kube-apiserver (the
#: version skew policy), so they come at the old minor too.
OLDEST: Final = ("kube-apiserver", "kube-controller-manager", "kube-scheduler")

_CONTAINERD_CMDS: Final = ("containerd", "ctr", "containerd-shim-runc-v2")
_CONTAINERD_MODULE: Final = "github.com/containerd/containerd/v2"
_RUNC_MODULE: Final = "github.com/opencontainers/runc"
_CRIO_MODULE: Final = "github.com/cri-o/cri-o"
#: CRI-O's Makefile tags as its ``hack/*_tag.sh`` pick them on a Debian host without gpgme, btrfs, SELinux or AppArmor
#: headers: the containers/image OpenPGP verifier instead of gpgme, no btrfs graph driver, seccomp (libseccomp-dev).
CRIO_TAGS: Final = (
    "containers_image_ostree_stub",
    "exclude_graphdriver_btrfs",
    "btrfs_noversion",
    "containers_image_openpgp",
    "seccomp",
)
#: pinns as CRI-O's ``pinns/Makefile`` builds it (its ``-Werror`` left out: a newer gcc's new warning must not fail
#: the test bed's build).
PINNS_CFLAGS: Final = ("-std=c99", "-Os", "-Wextra")
#: runc's default tags minus ``libpathrs`` (a Rust library Debian does not package).
RUNC_TAGS: Final = ("seccomp", "urfave_cli_no_docs")


@dataclass(frozen=True)
class Target:
    """One compiler invocation of the cached build."""

    name: str
    kind: str  # "go" or "c"
    source_dir: Path
    packages: tuple[str, ...]
    binaries: tuple[str, ...]
    cgo: bool = False
    tags: tuple[str, ...] = ()
    ldflags: str = ""
    #: What else decides the output, e.g. the C compiler and libseccomp versions.
    toolchain: tuple[str, ...] = field(default=())
    #: C only: flags after the build's own (``-static -O2 -Wall``); ``packages`` are the sources, compiled together.
    cflags: tuple[str, ...] = ()

    def sources(self) -> list[Path]:
        if self.kind == "c":
            return sorted(p for p in self.source_dir.glob("*.c") if p.is_file())
        files = [self.source_dir / "go.mod", self.source_dir / "go.sum"]
        files += sorted(p for p in self.source_dir.rglob("*.go") if p.is_file())
        return files

    def go_env(self, base: Mapping[str, str]) -> dict[str, str]:
        env = dict(base)
        env["CGO_ENABLED"] = "1" if self.cgo else "0"
        return env


def kubernetes_ldflags(kubernetes_version: str) -> str:
    """Stamp the Kubernetes version as upstream's release build does (``/version``, ``--version``)."""
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


def required_version(go_mod: Path, module: str) -> str:
    """The version of ``module`` that ``go_mod`` requires, or ``""``."""
    for line in go_mod.read_text().splitlines():
        parts = line.strip().removeprefix("require").split()
        if len(parts) >= 2 and parts[0] == module and parts[1].startswith("v"):
            return parts[1]
    return ""


def helm_ldflags(helm_dir: Path) -> str:
    """helm's version and the Kubernetes version it reports to templates (its client-go), as its Makefile sets."""
    helm = required_version(helm_dir / "go.mod", _HELM_MODULE)
    client_go = required_version(helm_dir / "go.mod", "k8s.io/client-go")
    if not helm or not client_go:
        raise errors.ControlPlaneError(f"{helm_dir}/go.mod does not require {_HELM_MODULE} and k8s.io/client-go")
    minor = client_go.lstrip("v").split(".")[1]
    flags = ["-s", "-w", f"-X {_HELM_MODULE}/internal/version.version={helm}"]
    for pkg in (f"{_HELM_MODULE}/pkg/lint/rules", f"{_HELM_MODULE}/pkg/chartutil"):
        flags += [f"-X {pkg}.k8sVersionMajor=1", f"-X {pkg}.k8sVersionMinor={minor}"]
    return " ".join(flags)


def oldest_module_dir() -> Path:
    """The Go module of the oldest supported Kubernetes minor (package data beside ``gomod``)."""
    return Path(__file__).resolve().parent / "gomod-oldest"


def containerd_module_dir() -> Path:
    return _REALNODE_DIR / "gomod" / "containerd"


def runc_module_dir() -> Path:
    return _REALNODE_DIR / "gomod" / "runc"


def pause_source_dir() -> Path:
    return _REALNODE_DIR / "pause"


def crio_module_dir() -> Path:
    return _REALNODE_DIR / "gomod" / "crio"


def crio_version(module_dir: Path | None = None) -> str:
    """The cri-o version the CRI-O module requires (its go.mod)."""
    go_mod = (module_dir or crio_module_dir()) / "go.mod"
    version = required_version(go_mod, _CRIO_MODULE)
    if not version:
        raise errors.ControlPlaneError(f"{go_mod} does not require {_CRIO_MODULE}")
    return version


def module_source(go: Path, module_dir: Path, module: str, env: Mapping[str, str]) -> Path:
    """Where the Go module cache holds ``module`` at the version ``module_dir``'s go.mod requires (downloaded if
    missing, verified against its go.sum): the C sources a Go module ships, such as CRI-O's pinns."""
    done = subprocess.run(
        [str(go), "mod", "download", "-json", module],
        cwd=module_dir,
        env=dict(env),
        capture_output=True,
        text=True,
        check=False,
    )
    try:
        found = json.loads(done.stdout) if done.stdout.strip() else {}
    except ValueError:
        found = {}
    directory = found.get("Dir") if isinstance(found, dict) else None
    if done.returncode != 0 or not isinstance(directory, str) or not directory:
        detail = (found.get("Error") if isinstance(found, dict) else None) or done.stderr.strip()
        raise errors.ControlPlaneError(f"`go mod download {module}` in {module_dir} failed: {detail}")
    return Path(directory)


def node_versions() -> dict[str, str]:
    """containerd and runc versions, read from their modules' go.mod files."""
    return {
        "containerd": required_version(containerd_module_dir() / "go.mod", _CONTAINERD_MODULE),
        "runc": required_version(runc_module_dir() / "go.mod", _RUNC_MODULE),
    }


def _tool_version(*command: str) -> str:
    if shutil.which(command[0]) is None:
        return f"{command[0]}: missing"
    done = subprocess.run(list(command), capture_output=True, text=True, check=False)
    first = (done.stdout or done.stderr).strip().splitlines()
    return f"{' '.join(command)}: {first[0] if first else ''} (exit {done.returncode})"


def targets(control_plane_module: Path, kubernetes_version: str) -> list[Target]:
    """Every invocation of the cached build, in order."""
    containerd = node_versions()["containerd"]
    cc = _tool_version("gcc", "--version")
    return [
        Target(
            name="kubernetes, etcd, kwok",
            kind="go",
            source_dir=control_plane_module,
            packages=("./cmd/...",),
            binaries=(*CONTROL_PLANE, "kubelet", "kubectl"),
            ldflags=kubernetes_ldflags(kubernetes_version),
        ),
        Target(
            name="helm",
            kind="go",
            source_dir=control_plane_module / "cmd" / "helm",
            packages=(f"{_HELM_MODULE}/cmd/helm",),
            binaries=CHART,
            ldflags=helm_ldflags(control_plane_module / "cmd" / "helm"),
        ),
        Target(
            name=f"containerd {containerd}",
            kind="go",
            source_dir=containerd_module_dir(),
            packages=tuple(f"{_CONTAINERD_MODULE}/cmd/{c}" for c in _CONTAINERD_CMDS),
            binaries=_CONTAINERD_CMDS,
            ldflags=f"-s -w -X {_CONTAINERD_MODULE}/version.Version={containerd}",
        ),
        Target(
            name="runc",
            kind="go",
            source_dir=runc_module_dir(),
            packages=(_RUNC_MODULE,),
            binaries=("runc",),
            cgo=True,
            tags=RUNC_TAGS,
            ldflags="-s -w",
            toolchain=(cc, _tool_version("pkg-config", "--modversion", "libseccomp")),
        ),
        Target(
            name="pause",
            kind="c",
            source_dir=pause_source_dir(),
            packages=("pause.c",),
            binaries=("pause",),
            toolchain=(cc,),
        ),
    ]


def oldest_targets(module_dir: Path, kubernetes_version: str) -> list[Target]:
    """The build of the oldest supported minor: its three mains in one invocation (shared packages compile once)."""
    return [
        Target(
            name=f"kubernetes {kubernetes_version}",
            kind="go",
            source_dir=module_dir,
            packages=("./cmd/...",),
            binaries=OLDEST,
            ldflags=kubernetes_ldflags(kubernetes_version),
        )
    ]


def crio_targets(module_dir: Path, pinns_dir: Path) -> list[Target]:
    """The CRI-O build: crio and copyimg in one ``go build`` (CGO: libseccomp), then pinns from ``pinns_dir`` (the
    cri-o module's ``pinns/src`` in the Go module cache, `module_source`)."""
    version = crio_version(module_dir)
    cc = _tool_version("gcc", "--version")
    return [
        Target(
            name=f"cri-o {version}",
            kind="go",
            source_dir=module_dir,
            packages=(f"{_CRIO_MODULE}/cmd/crio", f"{_CRIO_MODULE}/test/copyimg"),
            binaries=("crio", "copyimg"),
            cgo=True,
            tags=CRIO_TAGS,
            # CRI-O's version is a constant of its source; the build date its Makefile stamps is fixed here, so the
            # same sources give the same binary
            ldflags=f"-s -w -X {_CRIO_MODULE}/internal/version.buildDate=1970-01-01T00:00:00Z",
            toolchain=(cc, _tool_version("pkg-config", "--modversion", "libseccomp")),
        ),
        Target(
            name="pinns",
            kind="c",
            source_dir=pinns_dir,
            packages=tuple(p.name for p in sorted(pinns_dir.glob("*.c"))),
            binaries=("pinns",),
            toolchain=(cc,),
            cflags=PINNS_CFLAGS,
        ),
    ]


def fingerprint(target: Target) -> bytes:
    """Everything that decides ``target``'s binaries, as bytes for the cache key."""
    parts = [
        f"target={target.name}\0kind={target.kind}\0cgo={target.cgo}\0".encode(),
        f"tags={','.join(target.tags)}\0ldflags={target.ldflags}\0".encode(),
        f"packages={','.join(target.packages)}\0".encode(),
    ]
    parts += [line.encode() + b"\0" for line in target.toolchain]
    if target.cflags:  # absent before C flags were a field: the other targets' keys stay what they were
        parts.append(f"cflags={' '.join(target.cflags)}\0".encode())
    for path in target.sources():
        parts.append(str(path.relative_to(target.source_dir)).encode() + b"\0")
        parts.append(path.read_bytes() + b"\0")
    return b"".join(parts)
