"""A real Kubernetes control plane on loopback, for integration tests and development.

Why this module exists: the operator's cluster adapter must be proven against the real
kube-apiserver (RBAC, admission, server-side apply, watches that survive a restart), and
workloads must really be scheduled and run, not faked. This module builds etcd,
kube-apiserver, kube-controller-manager, kube-scheduler and kwok from their upstream Go
modules (the small Go module in ``tests/controlplane``), caches the binaries, and starts
them on free 127.0.0.1 ports with a throw-away PKI, an admin kubeconfig and a number of
kwok-simulated nodes whose pods kwok marks Running.

Use it as a context manager::

    with ControlPlane(nodes=3) as cp:
        api = cp.api_client()        # kubernetes.client.ApiClient, admin credentials
        ...

or from a shell: ``python -m metax_dev.controlplane up --nodes 5`` (prints the
kubeconfig path and runs until Ctrl-C) and ``python -m metax_dev.controlplane build``.

Every process runs in its own process group; ``stop()``, an ``atexit`` hook and a
parent-death signal make sure none outlives the Python process that started it.
Nothing here dials anything but 127.0.0.1: nodes advertise 127.0.0.1, and the pod and
service ranges are bookkeeping only (see docs/controlplane.md).
"""

from __future__ import annotations

import argparse
import atexit
import base64
import contextlib
import ctypes
import datetime
import fcntl
import hashlib
import http.client
import ipaddress
import json
import logging
import os
import random
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType, TracebackType
from typing import TYPE_CHECKING, Any, Final

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

logger = logging.getLogger(__name__)

#: The binaries built from ``tests/controlplane/cmd/*``.
BINARIES: Final = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")

#: Annotation kwok selects the nodes it manages by (``--manage-nodes-with-annotation-selector``).
KWOK_NODE_ANNOTATION: Final = "kwok.x-k8s.io/node"
KWOK_NODE_ANNOTATION_VALUE: Final = "fake"
#: Label every node created here carries, to tell them apart from anything else.
KWOK_NODE_LABEL: Final = "type"
KWOK_NODE_LABEL_VALUE: Final = "kwok"

#: Service and pod ranges. They are only bookkeeping in objects: nothing here routes to them.
SERVICE_CLUSTER_IP_RANGE: Final = "10.96.0.0/16"
POD_CIDR: Final = "10.244.0.0/16"
SERVICE_ACCOUNT_ISSUER: Final = "https://kubernetes.default.svc.cluster.local"

_LOOPBACK: Final = "127.0.0.1"
_GO_INSTALL_HINT: Final = (
    "The test control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, "
    "kwok) is built from Go modules in tests/controlplane and needs the Go toolchain "
    "(go >= 1.26) on PATH. Install Go, put its bin directory on PATH (or set "
    "METAX_CONTROLPLANE_GO to the go executable), then run "
    "`python -m metax_dev.controlplane build`. See docs/controlplane.md."
)


class ControlPlaneError(RuntimeError):
    """The control plane could not be built, started or driven."""


class GoNotFoundError(ControlPlaneError):
    """No Go toolchain: the binaries cannot be built."""


# --------------------------------------------------------------------------- build


def go_module_dir() -> Path:
    """The Go module that builds the binaries (``$METAX_CONTROLPLANE_GO_MODULE`` overrides)."""
    override = os.environ.get("METAX_CONTROLPLANE_GO_MODULE")
    if override:
        return Path(override).resolve()
    return Path(__file__).resolve().parent.parent / "tests" / "controlplane"


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
    raise GoNotFoundError(_GO_INSTALL_HINT)


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
        raise ControlPlaneError(f"{module_dir}/go.mod does not require {', '.join(missing)}")
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
        raise ControlPlaneError(f"`{go} env` failed:\n{result.stderr.strip()}")
    parsed: dict[str, str] = json.loads(result.stdout)
    return parsed


def _source_files(module_dir: Path) -> list[Path]:
    files = [module_dir / "go.mod", module_dir / "go.sum"]
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
    return digest.hexdigest()[:20]


def _tail(path: Path, lines: int = 60) -> str:
    try:
        with path.open("rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - 64 * 1024))
            data = handle.read().decode("utf-8", errors="replace")
    except OSError as exc:
        return f"<cannot read {path}: {exc}>"
    return "\n".join(data.splitlines()[-lines:])


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
        raise ControlPlaneError(f"no Go module at {module_dir} (set METAX_CONTROLPLANE_GO_MODULE)")
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
                    f"control plane: building {', '.join(BINARIES)} with {go} "
                    f"(a cold build takes several minutes) ...",
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
            if completed.returncode != 0:
                raise ControlPlaneError(
                    f"`go build` of the control plane failed (exit {completed.returncode}) "
                    f"in {module_dir}:\n{_tail(log_path)}"
                )
            missing = [b for b in BINARIES if not (staging / "bin" / b).is_file()]
            if missing:
                raise ControlPlaneError(f"`go build` produced no {', '.join(missing)}")
            (staging / "complete").write_text(json.dumps(dict(versions), sort_keys=True) + "\n")
            if target.exists():
                shutil.rmtree(target)
            staging.rename(target)
        finally:
            if staging.exists():
                shutil.rmtree(staging, ignore_errors=True)
    _prune_cache(root, keep=CACHE_KEEP, current=key)
    return report(cached=False)


#: Binary sets (about 400 MB each) kept in the cache; older ones are removed after a build.
CACHE_KEEP: Final = 3


def _prune_cache(root: Path, *, keep: int, current: str) -> None:
    """Remove all but the ``keep`` most recently used binary sets (never ``current``)."""
    entries = [d for d in root.iterdir() if d.is_dir() and (d / "complete").is_file()]
    entries.sort(key=lambda d: (d / "complete").stat().st_mtime, reverse=True)
    for stale in [d for d in entries if d.name != current][max(0, keep - 1) :]:
        logger.info("removing old control-plane binaries %s", stale)
        shutil.rmtree(stale, ignore_errors=True)
        with contextlib.suppress(OSError):
            (root / f"{stale.name}.lock").unlink()


# --------------------------------------------------------------------------- PKI


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


@dataclass(frozen=True)
class _KeyPair:
    cert: Path
    key: Path

    def cert_b64(self) -> str:
        return base64.b64encode(self.cert.read_bytes()).decode()

    def key_b64(self) -> str:
        return base64.b64encode(self.key.read_bytes()).decode()


class _Pki:
    """A throw-away CA and the certificates and keys one control plane needs."""

    def __init__(self, directory: Path) -> None:
        self.dir = directory
        directory.mkdir(parents=True, exist_ok=True)
        self._ca_key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "metax-test-ca")])
        self._ca_name = name
        self._ca_cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(self._ca_key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(_now() - datetime.timedelta(hours=1))
            .not_valid_after(_now() + datetime.timedelta(days=365))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(
                x509.SubjectKeyIdentifier.from_public_key(self._ca_key.public_key()), critical=False
            )
            .sign(self._ca_key, hashes.SHA256())
        )
        self.ca = self._write("ca", self._ca_cert, self._ca_key)
        sa_key = ec.generate_private_key(ec.SECP256R1())
        self.sa_key = directory / "sa.key"
        self.sa_key.write_bytes(_key_pem(sa_key))
        self.sa_pub = directory / "sa.pub"
        self.sa_pub.write_bytes(
            sa_key.public_key().public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            )
        )

    def _write(
        self, stem: str, cert: x509.Certificate, key: ec.EllipticCurvePrivateKey
    ) -> _KeyPair:
        pair = _KeyPair(self.dir / f"{stem}.crt", self.dir / f"{stem}.key")
        pair.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        pair.key.write_bytes(_key_pem(key))
        pair.key.chmod(0o600)
        return pair

    def issue(
        self,
        stem: str,
        common_name: str,
        *,
        organizations: Sequence[str] = (),
        dns_names: Sequence[str] = (),
        ips: Sequence[str] = (),
        server: bool = False,
        client: bool = False,
    ) -> _KeyPair:
        key = ec.generate_private_key(ec.SECP256R1())
        attributes = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in organizations]
        attributes.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
        usages = []
        if server:
            usages.append(ExtendedKeyUsageOID.SERVER_AUTH)
        if client:
            usages.append(ExtendedKeyUsageOID.CLIENT_AUTH)
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name(attributes))
            .issuer_name(self._ca_name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(_now() - datetime.timedelta(hours=1))
            .not_valid_after(_now() + datetime.timedelta(days=365))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=False,
                    crl_sign=False,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(self._ca_key.public_key()),
                critical=False,
            )
        )
        alt_names: list[x509.GeneralName] = [x509.DNSName(d) for d in dns_names]
        alt_names += [x509.IPAddress(ipaddress.ip_address(i)) for i in ips]
        if alt_names:
            builder = builder.add_extension(x509.SubjectAlternativeName(alt_names), critical=False)
        return self._write(stem, builder.sign(self._ca_key, hashes.SHA256()), key)


def _write_kubeconfig(path: Path, server: str, ca: _KeyPair, user: str, creds: _KeyPair) -> None:
    # JSON is YAML: client-go and the Python client both read it, and no YAML writer is needed.
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "metax-test",
                "cluster": {"server": server, "certificate-authority-data": ca.cert_b64()},
            }
        ],
        "users": [
            {
                "name": user,
                "user": {
                    "client-certificate-data": creds.cert_b64(),
                    "client-key-data": creds.key_b64(),
                },
            }
        ],
        "contexts": [{"name": "metax-test", "context": {"cluster": "metax-test", "user": user}}],
        "current-context": "metax-test",
        "preferences": {},
    }
    path.write_text(json.dumps(config, indent=2) + "\n")
    path.chmod(0o600)


# --------------------------------------------------------------------------- processes

_allocated_ports: set[int] = set()
_ports_lock = threading.Lock()


def _free_port() -> int:
    """A free 127.0.0.1 TCP port below the ephemeral range (so clients never grab it)."""
    with _ports_lock:
        for _ in range(500):
            port = random.randint(20000, 32000)
            if port in _allocated_ports:
                continue
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
                try:
                    probe.bind((_LOOPBACK, port))
                except OSError:
                    continue
            _allocated_ports.add(port)
            return port
    raise ControlPlaneError("no free port on 127.0.0.1 in 20000-32000")


_PR_SET_PDEATHSIG: Final = 1


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    """Ask the kernel to SIGKILL the child when the thread that started it dies."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        pass


class _Process:
    """One control-plane process: its own session/process group and a log file."""

    def __init__(self, name: str, args: Sequence[str], log_path: Path) -> None:
        self.name = name
        self.args = list(args)
        self.log_path = log_path
        self.popen: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        on_main_thread = threading.current_thread() is threading.main_thread()
        with self.log_path.open("ab") as log:
            log.write(f"==> {time.strftime('%H:%M:%S')} {' '.join(self.args)}\n".encode())
            log.flush()
            self.popen = subprocess.Popen(
                self.args,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                # PDEATHSIG follows the starting *thread*: only safe from the main thread.
                preexec_fn=_die_with_parent if on_main_thread and sys.platform == "linux" else None,
            )
        logger.debug("started %s (pid %d)", self.name, self.popen.pid)

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def exit_code(self) -> int | None:
        return None if self.popen is None else self.popen.poll()

    def terminate(self) -> None:
        self._signal_group(signal.SIGTERM)

    def _signal_group(self, sig: signal.Signals) -> None:
        if self.popen is None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.popen.pid, sig)

    def wait_stopped(self, timeout: float) -> None:
        if self.popen is None:
            return
        try:
            self.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            logger.warning("%s did not stop in %.0fs after SIGTERM; killing it", self.name, timeout)
            self._signal_group(signal.SIGKILL)
            self.popen.wait(timeout=30)
        # Anything the process left in its group goes too.
        self._signal_group(signal.SIGKILL)
        self.popen = None

    def stop(self, timeout: float = 15.0) -> None:
        self.terminate()
        self.wait_stopped(timeout)

    def tail(self, lines: int = 60) -> str:
        return _tail(self.log_path, lines)


# --------------------------------------------------------------------------- HTTP


class _Https:
    """Minimal JSON-over-HTTPS client for the launcher's own requests (admin credentials)."""

    def __init__(self, port: int, ca: Path, client: _KeyPair | None) -> None:
        self.port = port
        self.context = ssl.create_default_context(cafile=str(ca))
        if client is not None:
            self.context.load_cert_chain(str(client.cert), str(client.key))

    def request(
        self, method: str, path: str, body: object | None = None, timeout: float = 10.0
    ) -> tuple[int, bytes]:
        connection = http.client.HTTPSConnection(
            _LOOPBACK, self.port, context=self.context, timeout=timeout
        )
        try:
            headers = {"Accept": "application/json"}
            payload = None
            if body is not None:
                payload = json.dumps(body).encode()
                headers["Content-Type"] = "application/json"
            connection.request(method, path, body=payload, headers=headers)
            response = connection.getresponse()
            return response.status, response.read()
        finally:
            connection.close()

    def ok(self, path: str) -> bool:
        try:
            status, _ = self.request("GET", path, timeout=3.0)
        except (OSError, http.client.HTTPException):
            return False
        return status == 200

    def json(self, method: str, path: str, body: object | None = None) -> Any:
        status, data = self.request(method, path, body)
        if status >= 300:
            raise ControlPlaneError(f"{method} {path}: HTTP {status}: {data[:500]!r}")
        return json.loads(data)


def _http_ok(port: int, path: str) -> bool:
    connection = http.client.HTTPConnection(_LOOPBACK, port, timeout=3.0)
    try:
        connection.request("GET", path)
        response = connection.getresponse()
        response.read()
        return response.status == 200
    except (OSError, http.client.HTTPException):
        return False
    finally:
        connection.close()


# --------------------------------------------------------------------------- control plane


@dataclass
class Timings:
    """Seconds spent in each phase of :meth:`ControlPlane.start` (``None``: not done)."""

    build: float | None = None
    first_api: float | None = None
    nodes_ready: float | None = None
    total: float | None = None
    apiserver_restarts: list[float] = field(default_factory=list)

    def summary(self) -> str:
        def fmt(value: float | None) -> str:
            return "-" if value is None else f"{value:.1f}s"

        return (
            f"build {fmt(self.build)}, first usable API {fmt(self.first_api)}, "
            f"nodes ready {fmt(self.nodes_ready)}, total {fmt(self.total)}"
        )


_WORKDIR_PREFIX: Final = "metax-controlplane-"
_KEEP_HINT: Final = " (METAX_CONTROLPLANE_KEEP=1 keeps all logs after stop)"
_OWNER_FILE: Final = "owner.pid"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a killed launcher may linger as a zombie until its parent reaps it
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    return state != "Z"


def _reap_stale_workdirs(parent: Path) -> None:
    """Remove work dirs left by a launcher that was killed (its processes died with it)."""
    for directory in parent.glob(f"{_WORKDIR_PREFIX}*"):
        try:
            owner = int((directory / _OWNER_FILE).read_text())
        except (OSError, ValueError):
            continue  # kept on purpose, being created, or not ours
        if owner != os.getpid() and not _pid_alive(owner):
            logger.info(
                "removing stale control-plane workdir %s (pid %d is gone)", directory, owner
            )
            shutil.rmtree(directory, ignore_errors=True)


_live: set[ControlPlane] = set()
_live_lock = threading.Lock()


def _stop_all_live() -> None:
    with _live_lock:
        planes = list(_live)
    for plane in planes:
        with contextlib.suppress(Exception):
            plane.stop()


atexit.register(_stop_all_live)


def _node_ready(node: Mapping[str, Any]) -> bool:
    for condition in node.get("status", {}).get("conditions") or []:
        if condition.get("type") == "Ready":
            return bool(condition.get("status") == "True")
    return False


class ControlPlane:
    """etcd + kube-apiserver + controller-manager + scheduler + kwok on 127.0.0.1.

    ``nodes`` kwok nodes named ``<node_prefix>-<i>`` are created and awaited Ready by
    :meth:`start`. ``workloads=False`` starts only etcd, kube-apiserver and kwok (no pods
    get scheduled then). ``bin_dir`` skips :func:`build`. The working directory (PKI,
    etcd data, logs, kubeconfigs) is removed by :meth:`stop` unless ``keep_workdir`` or
    ``$METAX_CONTROLPLANE_KEEP=1``.
    """

    def __init__(
        self,
        nodes: int = 3,
        *,
        bin_dir: Path | None = None,
        workloads: bool = True,
        node_prefix: str = "kwok-node",
        node_cpu: str = "32",
        node_memory: str = "256Gi",
        node_pods: str = "110",
        node_labels: Mapping[str, str] | None = None,
        startup_timeout: float = 120.0,
        keep_workdir: bool | None = None,
        workdir_parent: Path | None = None,
        verbosity: int = 1,
    ) -> None:
        if nodes < 0:
            raise ValueError("nodes must be >= 0")
        self.initial_nodes = nodes
        self.bin_dir = bin_dir
        self.workloads = workloads
        self.node_prefix = node_prefix
        self.node_cpu = node_cpu
        self.node_memory = node_memory
        self.node_pods = node_pods
        self.node_labels = dict(node_labels or {})
        self.startup_timeout = startup_timeout
        self.keep_workdir = (
            keep_workdir
            if keep_workdir is not None
            else os.environ.get("METAX_CONTROLPLANE_KEEP") == "1"
        )
        self.workdir_parent = workdir_parent
        self.verbosity = verbosity
        self.timings = Timings()
        self.node_names: list[str] = []
        self.build_result: BuildResult | None = None
        self._workdir: Path | None = None
        self._processes: dict[str, _Process] = {}
        self._ports: dict[str, int] = {}
        self._pki: _Pki | None = None
        self._admin: _KeyPair | None = None
        self._lock = threading.RLock()
        self._started = False

    # ---------------------------------------------------------------- properties

    @property
    def workdir(self) -> Path:
        if self._workdir is None:
            raise ControlPlaneError("control plane not started")
        return self._workdir

    @property
    def kubeconfig_path(self) -> Path:
        """Admin kubeconfig (``system:masters``) with embedded certificates."""
        return self.workdir / "admin.kubeconfig"

    @property
    def server_url(self) -> str:
        return f"https://{_LOOPBACK}:{self.port('kube-apiserver')}"

    @property
    def ca_path(self) -> Path:
        """The CA that signed the API server's serving certificate."""
        return self.workdir / "pki" / "ca.crt"

    @property
    def etcd_url(self) -> str:
        return f"http://{_LOOPBACK}:{self.port('etcd')}"

    @property
    def running(self) -> bool:
        return self._started

    def port(self, component: str) -> int:
        try:
            return self._ports[component]
        except KeyError:
            raise ControlPlaneError(f"no port for {component!r} (started?)") from None

    def log_path(self, component: str) -> Path:
        return self.workdir / "logs" / f"{component}.log"

    def log_tail(self, component: str, lines: int = 60) -> str:
        return _tail(self.log_path(component), lines)

    # ---------------------------------------------------------------- lifecycle

    def __enter__(self) -> ControlPlane:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def start(self) -> ControlPlane:
        """Build (or reuse) the binaries, start every component, create and await the nodes."""
        with self._lock:
            if self._started:
                return self
            if self.bin_dir is None:
                self.build_result = build()
                self.bin_dir = self.build_result.bin_dir
                self.timings.build = self.build_result.seconds
            with _live_lock:
                _live.add(self)
            self._started = True
            try:
                self._start_components()
            except BaseException:
                self.stop()
                raise
        return self

    def _start_components(self) -> None:
        started = time.monotonic()
        parent = self.workdir_parent or Path(tempfile.gettempdir())
        _reap_stale_workdirs(parent)
        self._workdir = Path(tempfile.mkdtemp(prefix=_WORKDIR_PREFIX, dir=parent))
        (self._workdir / _OWNER_FILE).write_text(f"{os.getpid()}\n")
        logger.info("control plane workdir %s", self._workdir)
        for component in (
            "etcd",
            "etcd-peer",
            "kube-apiserver",
            "kube-controller-manager",
            "kube-scheduler",
            "kwok",
        ):
            self._ports[component] = _free_port()
        self._write_pki_and_configs()

        self._start_etcd()
        self._start("kube-apiserver", self._apiserver_args())
        self._wait_apiserver_ready()
        self.timings.first_api = time.monotonic() - started
        logger.info(
            "control plane: first usable API after %.1fs at %s",
            self.timings.first_api,
            self.server_url,
        )

        self._start("kwok", self._kwok_args())
        if self.workloads:
            self._start("kube-controller-manager", self._controller_manager_args())
            self._start("kube-scheduler", self._scheduler_args())

        nodes_started = time.monotonic()
        if self.initial_nodes:
            self.add_nodes(self.initial_nodes, wait=True, timeout=self.startup_timeout)
        self.timings.nodes_ready = time.monotonic() - nodes_started

        self._wait_https_healthz("kwok")
        if self.workloads:
            self._wait_https_healthz("kube-controller-manager")
            self._wait_https_healthz("kube-scheduler")
            # The service-account controller runs: pods can be admitted in "default".
            self._wait_for(
                lambda: self._admin_http().ok("/api/v1/namespaces/default/serviceaccounts/default"),
                "the default service account (kube-controller-manager)",
                "kube-controller-manager",
            )
        self.timings.total = time.monotonic() - started
        logger.info("control plane ready: %s", self.timings.summary())

    def stop(self) -> None:
        """Stop every process (whole process groups) and remove the working directory."""
        with self._lock:
            processes = [
                self._processes[n]
                for n in ("kwok", "kube-scheduler", "kube-controller-manager", "kube-apiserver")
                if n in self._processes
            ]
            for process in processes:
                process.terminate()
            for process in processes:
                process.wait_stopped(15.0)
            if "etcd" in self._processes:
                self._processes["etcd"].stop(15.0)
            self._processes.clear()
            with _live_lock:
                _live.discard(self)
            if self._workdir is not None and self._workdir.exists():
                if self.keep_workdir:
                    with contextlib.suppress(OSError):
                        (self._workdir / _OWNER_FILE).unlink()
                    logger.info("control plane stopped; kept %s", self._workdir)
                else:
                    shutil.rmtree(self._workdir, ignore_errors=True)
            with _ports_lock:
                _allocated_ports.difference_update(self._ports.values())
            self._started = False

    def restart_apiserver(self, timeout: float = 60.0) -> float:
        """Stop kube-apiserver and start it again on the same port with the same etcd data.

        Returns the seconds from stop to ready. Clients' connections and watches break
        and must be re-established by the clients, as in a real API server restart.
        """
        with self._lock:
            process = self._processes.get("kube-apiserver")
            if process is None:
                raise ControlPlaneError("kube-apiserver is not running")
            began = time.monotonic()
            process.stop()
            process.start()
            self._wait_apiserver_ready(timeout)
            seconds = time.monotonic() - began
            self.timings.apiserver_restarts.append(seconds)
            logger.info("kube-apiserver restarted in %.1fs", seconds)
            return seconds

    # ---------------------------------------------------------------- clients

    def api_client(self) -> ApiClient:
        """A new ``kubernetes.client.ApiClient`` with admin credentials; close it when done."""
        from kubernetes import client as kube_client

        if self._pki is None or self._admin is None:
            raise ControlPlaneError("control plane not started")
        configuration = kube_client.Configuration(
            host=self.server_url,
            ssl_ca_cert=str(self._pki.ca.cert),
            cert_file=str(self._admin.cert),
            key_file=str(self._admin.key),
        )
        return kube_client.ApiClient(configuration)

    def _admin_http(self) -> _Https:
        if self._pki is None or self._admin is None:
            raise ControlPlaneError("control plane not started")
        return _Https(self.port("kube-apiserver"), self._pki.ca.cert, self._admin)

    # ---------------------------------------------------------------- nodes

    def node_manifest(self, name: str) -> dict[str, Any]:
        """The Node object created for a kwok node: kwok annotation, labels, resources."""
        resources = {"cpu": self.node_cpu, "memory": self.node_memory, "pods": self.node_pods}
        labels = {
            KWOK_NODE_LABEL: KWOK_NODE_LABEL_VALUE,
            "kubernetes.io/arch": "amd64",
            "kubernetes.io/os": "linux",
            "kubernetes.io/hostname": name,
            "kubernetes.io/role": "agent",
            "node-role.kubernetes.io/agent": "",
            **self.node_labels,
        }
        return {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": name,
                "labels": labels,
                "annotations": {
                    KWOK_NODE_ANNOTATION: KWOK_NODE_ANNOTATION_VALUE,
                    "node.alpha.kubernetes.io/ttl": "0",
                },
            },
            "spec": {},
            "status": {
                "allocatable": dict(resources),
                "capacity": dict(resources),
                "nodeInfo": {"architecture": "amd64", "operatingSystem": "linux"},
            },
        }

    def add_nodes(
        self,
        count: int,
        *,
        prefix: str | None = None,
        wait: bool = True,
        timeout: float = 120.0,
    ) -> list[str]:
        """Create ``count`` more kwok nodes (continuing the numbering) and await them Ready."""
        prefix = prefix or self.node_prefix
        http = self._admin_http()
        existing = set(self.node_names)
        names: list[str] = []
        index = 0
        while len(names) < count:
            candidate = f"{prefix}-{index}"
            if candidate not in existing:
                names.append(candidate)
            index += 1

        def create(name: str) -> None:
            status, data = http.request("POST", "/api/v1/nodes", self.node_manifest(name))
            if status not in (200, 201, 409):
                raise ControlPlaneError(f"creating node {name}: HTTP {status}: {data[:300]!r}")

        with ThreadPoolExecutor(max_workers=min(8, max(1, count))) as pool:
            list(pool.map(create, names))
        self.node_names.extend(names)
        if wait:
            self.wait_for_nodes_ready(names, timeout=timeout)
        return names

    def wait_for_nodes_ready(self, names: Iterable[str], timeout: float = 120.0) -> float:
        """Wait until kwok reports every named node Ready; returns the seconds waited."""
        wanted = set(names)
        began = time.monotonic()
        http = self._admin_http()
        selector = f"{KWOK_NODE_LABEL}%3D{KWOK_NODE_LABEL_VALUE}"

        def all_ready() -> bool:
            listing = http.json("GET", f"/api/v1/nodes?labelSelector={selector}")
            ready = {n["metadata"]["name"] for n in listing.get("items", []) if _node_ready(n)}
            return wanted <= ready

        self._wait_for(
            all_ready, f"{len(wanted)} kwok node(s) Ready", "kwok", timeout=timeout, interval=0.2
        )
        return time.monotonic() - began

    # ---------------------------------------------------------------- internals

    def _binary(self, name: str) -> str:
        if self.bin_dir is None:
            raise ControlPlaneError("no binaries")
        path = self.bin_dir / name
        if not path.is_file():
            raise ControlPlaneError(
                f"missing binary {path}; run `python -m metax_dev.controlplane build`"
            )
        return str(path)

    def _write_pki_and_configs(self) -> None:
        pki = _Pki(self.workdir / "pki")
        self._pki = pki
        self._apiserver_cert = pki.issue(
            "apiserver",
            "kube-apiserver",
            dns_names=[
                "localhost",
                "kubernetes",
                "kubernetes.default",
                "kubernetes.default.svc",
                "kubernetes.default.svc.cluster.local",
            ],
            ips=[_LOOPBACK, str(next(ipaddress.ip_network(SERVICE_CLUSTER_IP_RANGE).hosts()))],
            server=True,
        )
        self._serving_cert = pki.issue(
            "serving", "localhost", dns_names=["localhost"], ips=[_LOOPBACK], server=True
        )
        self._admin = pki.issue(
            "admin", "metax-test-admin", organizations=["system:masters"], client=True
        )
        server = f"https://{_LOOPBACK}:{self.port('kube-apiserver')}"
        _write_kubeconfig(self.kubeconfig_path, server, pki.ca, "admin", self._admin)
        identities = {
            "kube-controller-manager": ("system:kube-controller-manager", ()),
            "kube-scheduler": ("system:kube-scheduler", ()),
            "kwok": ("kwok-controller", ("system:masters",)),
        }
        for component, (common_name, orgs) in identities.items():
            pair = pki.issue(component, common_name, organizations=orgs, client=True)
            _write_kubeconfig(
                self.workdir / f"{component}.kubeconfig", server, pki.ca, component, pair
            )
        stages = subprocess.run(
            [self._binary("kwok"), "default-stages"], capture_output=True, text=True, check=False
        )
        if stages.returncode != 0 or "kind: Stage" not in stages.stdout:
            raise ControlPlaneError(f"`kwok default-stages` failed: {stages.stderr.strip()}")
        (self.workdir / "kwok.yaml").write_text(stages.stdout)

    def _start(self, name: str, args: Sequence[str]) -> _Process:
        process = _Process(name, [self._binary(name), *args], self.log_path(name))
        self._processes[name] = process
        process.start()
        return process

    def _start_etcd(self) -> None:
        client = f"http://{_LOOPBACK}:{self.port('etcd')}"
        peer = f"http://{_LOOPBACK}:{self.port('etcd-peer')}"
        self._start(
            "etcd",
            [
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
            ],
        )
        self._wait_for(
            lambda: _http_ok(self.port("etcd"), "/health"),
            "etcd /health",
            "etcd",
            timeout=30.0,
            interval=0.05,
        )

    def _apiserver_args(self) -> list[str]:
        assert self._pki is not None
        pki = self._pki
        return [
            f"--etcd-servers={self.etcd_url}",
            f"--bind-address={_LOOPBACK}",
            f"--advertise-address={_LOOPBACK}",
            f"--secure-port={self.port('kube-apiserver')}",
            f"--cert-dir={self.workdir / 'apiserver-certs'}",
            f"--tls-cert-file={self._apiserver_cert.cert}",
            f"--tls-private-key-file={self._apiserver_cert.key}",
            f"--client-ca-file={pki.ca.cert}",
            "--authorization-mode=Node,RBAC",
            "--enable-admission-plugins=NodeRestriction",
            "--allow-privileged=true",
            f"--service-account-issuer={SERVICE_ACCOUNT_ISSUER}",
            f"--service-account-key-file={pki.sa_pub}",
            f"--service-account-signing-key-file={pki.sa_key}",
            f"--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}",
            # 127.0.0.1 is no valid endpoint address: do not publish the kubernetes endpoints.
            "--endpoint-reconciler-type=none",
            "--profiling=false",
            "--event-ttl=1h",
            # Close open watches promptly on SIGTERM (restart_apiserver) instead of hanging.
            "--shutdown-watch-termination-grace-period=2s",
            f"--v={self.verbosity}",
        ]

    def _component_common(self, component: str) -> list[str]:
        assert self._pki is not None
        kubeconfig = self.workdir / f"{component}.kubeconfig"
        return [
            f"--kubeconfig={kubeconfig}",
            f"--authentication-kubeconfig={kubeconfig}",
            f"--authorization-kubeconfig={kubeconfig}",
            f"--bind-address={_LOOPBACK}",
            f"--secure-port={self.port(component)}",
            f"--tls-cert-file={self._serving_cert.cert}",
            f"--tls-private-key-file={self._serving_cert.key}",
            f"--client-ca-file={self._pki.ca.cert}",
            "--leader-elect=false",
            f"--v={self.verbosity}",
        ]

    def _controller_manager_args(self) -> list[str]:
        assert self._pki is not None
        return [
            *self._component_common("kube-controller-manager"),
            "--use-service-account-credentials=true",
            f"--service-account-private-key-file={self._pki.sa_key}",
            f"--root-ca-file={self._pki.ca.cert}",
            f"--cluster-signing-cert-file={self._pki.ca.cert}",
            f"--cluster-signing-key-file={self._pki.ca.key}",
            f"--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}",
            "--kube-api-qps=200",
            "--kube-api-burst=400",
        ]

    def _scheduler_args(self) -> list[str]:
        return self._component_common("kube-scheduler")

    def _kwok_args(self) -> list[str]:
        port = self.port("kwok")
        return [
            f"--kubeconfig={self.workdir / 'kwok.kubeconfig'}",
            f"--config={self.workdir / 'kwok.yaml'}",
            "--manage-all-nodes=false",
            "--manage-nodes-with-annotation-selector="
            f"{KWOK_NODE_ANNOTATION}={KWOK_NODE_ANNOTATION_VALUE}",
            # Nodes advertise loopback, so anything that dials a "kubelet" reaches kwok here.
            f"--node-ip={_LOOPBACK}",
            f"--node-port={port}",
            f"--server-address={_LOOPBACK}:{port}",
            f"--tls-cert-file={self._serving_cert.cert}",
            f"--tls-private-key-file={self._serving_cert.key}",
            f"--cidr={POD_CIDR}",
            "--node-lease-duration-seconds=40",
        ]

    def _wait_apiserver_ready(self, timeout: float | None = None) -> None:
        http = self._admin_http()
        self._wait_for(
            lambda: http.ok("/readyz"),
            "kube-apiserver /readyz",
            "kube-apiserver",
            timeout=timeout or self.startup_timeout,
            interval=0.1,
        )

    def _wait_https_healthz(self, component: str) -> None:
        assert self._pki is not None
        http = _Https(self.port(component), self._pki.ca.cert, None)
        self._wait_for(lambda: http.ok("/healthz"), f"{component} /healthz", component)

    def _wait_for(
        self,
        predicate: Callable[[], bool],
        what: str,
        component: str,
        *,
        timeout: float | None = None,
        interval: float = 0.25,
    ) -> None:
        """Poll ``predicate``; fail with the component's log tail if it dies or times out."""
        deadline = time.monotonic() + (timeout or self.startup_timeout)
        last_error: Exception | None = None
        while True:
            for name, process in self._processes.items():
                if not process.alive():
                    raise ControlPlaneError(
                        f"{name} exited with code {process.exit_code()} while waiting for {what}; "
                        f"last lines of {process.log_path.name}{_KEEP_HINT}:\n{process.tail()}"
                    )
            try:
                if predicate():
                    return
                last_error = None
            except (OSError, http.client.HTTPException, ControlPlaneError, ValueError) as exc:
                last_error = exc
            if time.monotonic() > deadline:
                detail = f" (last error: {last_error})" if last_error else ""
                raise ControlPlaneError(
                    f"timed out after {timeout or self.startup_timeout:.0f}s "
                    f"waiting for {what}{detail}; "
                    f"last lines of {component}.log{_KEEP_HINT}:\n{self.log_tail(component)}"
                )
            time.sleep(interval)


# --------------------------------------------------------------------------- CLI


def up(nodes: int = 3, *, workloads: bool = True) -> None:
    """Start a cluster with ``nodes`` kwok nodes, print how to reach it, run until Ctrl-C."""
    stop_requested = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop_requested.set()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        with ControlPlane(nodes=nodes, workloads=workloads) as plane:
            print(f"kubeconfig: {plane.kubeconfig_path}")
            print(f"server:     {plane.server_url}")
            print(f"nodes:      {', '.join(plane.node_names) or '-'}")
            print(f"timings:    {plane.timings.summary()}")
            print(f"logs:       {plane.workdir / 'logs'}")
            print(
                f"\nexport KUBECONFIG={plane.kubeconfig_path}\n\nCtrl-C stops the cluster.",
                flush=True,
            )
            while not stop_requested.wait(1.0):
                dead = [p.name for p in plane._processes.values() if not p.alive()]
                if dead:
                    raise ControlPlaneError(
                        f"{', '.join(dead)} exited; see {plane.workdir / 'logs'}"
                    )
            print("stopping ...", flush=True)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m metax_dev.controlplane",
        description="Build and run the MetaX operator's loopback Kubernetes test control plane.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    up_parser = sub.add_parser("up", help="start a cluster and wait for Ctrl-C")
    up_parser.add_argument("--nodes", type=int, default=3, help="kwok nodes to create (default 3)")
    up_parser.add_argument(
        "--no-workloads", action="store_true", help="no controller-manager and scheduler"
    )
    build_parser = sub.add_parser("build", help="build (or reuse) the binaries and print where")
    build_parser.add_argument("--force", action="store_true", help="rebuild even if cached")
    sub.add_parser("versions", help="print the upstream versions built")
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    try:
        if args.command == "up":
            up(args.nodes, workloads=not args.no_workloads)
        elif args.command == "build":
            result = build(force=args.force)
            print(result.bin_dir)
        else:
            for name, version in module_versions().items():
                print(f"{name} {version}")
    except ControlPlaneError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
