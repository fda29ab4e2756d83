"""A connection to the Kubernetes API for the node agents, without importing the `kubernetes` package.

Why: `HttpApi` speaks JSON over urllib3 itself and takes from the `kubernetes` package only its
configuration loader, TLS setup and connection pool. Importing that package costs each process about
20 MiB of resident memory (its configuration loader pulls in requests, requests-oauthlib, oauthlib,
pydantic, dateutil, google-auth hooks, ...), a third of a node agent's budget (P8: ≤ 60 MiB per agent on
every GPU node). A node agent only ever needs two configurations: in-cluster (its ServiceAccount token,
the cluster CA, ``KUBERNETES_SERVICE_HOST``) and, as a local process next to the test control plane, a
kubeconfig with a server, a CA and a client certificate or token. `connect` builds those here; any other
kubeconfig (exec plugins, auth providers, basic auth) falls back to `client.api_client`, so nothing that
worked before stops working, it only costs the memory it cost before.

`Connection` has the four attributes `HttpApi` reads from a `kubernetes.client.ApiClient`
(``configuration.host``, ``configuration.auth_settings()``, ``default_headers``, ``rest_client.pool_manager``),
so `HttpApi` takes either.
"""

from __future__ import annotations

import base64
import binascii
import logging
import os
import pathlib
import ssl
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

import urllib3
import yaml

from metax_core.errors import ClusterError
from metax_k8s import client

log = logging.getLogger(__name__)

TOKEN_REFRESH = 60.0
"""Seconds between re-reads of a token file (bound ServiceAccount tokens are rotated by the kubelet)."""
POOL_SIZE = 8
"""Connections kept per host: one per watch thread plus the rounds' requests, without urllib3's
'connection pool is full' warnings."""
_SIMPLE_USER_KEYS = {"client-certificate", "client-certificate-data", "client-key", "client-key-data", "token"}
_SIMPLE_USER_KEYS |= {"tokenFile"}


class Unsupported(Exception):
    """The kubeconfig needs something only the `kubernetes` package does (exec plugin, auth provider...)."""


class _Token:
    """A bearer token, from a fixed value or a file re-read every `TOKEN_REFRESH` seconds."""

    def __init__(self, value: str | None, path: pathlib.Path | None, clock: Callable[[], float]) -> None:
        self._value, self._path, self._clock = value, path, clock
        self._read_at = -float("inf")
        self._lock = threading.Lock()

    def get(self) -> str | None:
        if self._path is None:
            return self._value
        with self._lock:
            if self._clock() - self._read_at >= TOKEN_REFRESH:
                try:
                    self._value = self._path.read_text().strip()
                except OSError as exc:
                    if self._value is None:
                        raise _config_error(f"token {self._path}", str(exc)) from exc
                    log.warning("cannot re-read token %s, keeping the last one: %s", self._path, exc)
                self._read_at = self._clock()
            return self._value


class _Configuration:
    def __init__(self, host: str, token: _Token) -> None:
        self.host = host
        self._token = token

    def auth_settings(self) -> dict[str, dict[str, str]]:
        token = self._token.get()
        if not token:
            return {}
        return {"BearerToken": {"in": "header", "key": "authorization", "value": f"Bearer {token}"}}


class _Rest:
    def __init__(self, pool_manager: urllib3.PoolManager) -> None:
        self.pool_manager = pool_manager


class Connection:
    """Host, auth and a TLS connection pool: what `metax_k8s.client.HttpApi` needs of an API client."""

    def __init__(self, host: str, context: ssl.SSLContext | None, token: _Token, source: str) -> None:
        self.configuration = _Configuration(host, token)
        self.default_headers: dict[str, str] = {}
        self.rest_client = _Rest(urllib3.PoolManager(num_pools=2, maxsize=POOL_SIZE, ssl_context=context))
        self.source = source

    def close(self) -> None:
        self.rest_client.pool_manager.clear()


def connect(
    kubeconfig: str | os.PathLike[str] | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    service_account: pathlib.Path | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> client.ApiClientLike:
    """A client for `HttpApi`: in-cluster inside a pod (files under $METAX_SERVICEACCOUNT_DIR if set), else
    ``kubeconfig`` or $KUBECONFIG.

    Returns a `Connection` when this module can build it, else `client.api_client`'s ApiClient.
    Raises `ClusterError` (verb ``configure``) naming the source when the configuration is unusable.
    """
    env = os.environ if environ is None else environ
    if kubeconfig is None and env.get("KUBERNETES_SERVICE_HOST"):
        if service_account is None:
            service_account = pathlib.Path(env.get(client.SERVICE_ACCOUNT_DIR_ENV) or client.SERVICE_ACCOUNT_DIR)
        connection = in_cluster(env, service_account, clock)
    else:
        path = pathlib.Path(
            os.fspath(kubeconfig) if kubeconfig is not None else env.get("KUBECONFIG") or "~/.kube/config"
        )
        path = path.expanduser()
        try:
            connection = from_kubeconfig(path, clock)
        except Unsupported as exc:
            log.info("kubeconfig %s: %s; using the kubernetes package's loader", path, exc)
            return client.api_client(path)
    log.info("using %s (%s)", connection.source, connection.configuration.host)
    return connection


def in_cluster(env: Mapping[str, str], service_account: pathlib.Path, clock: Callable[[], float]) -> Connection:
    """The pod's ServiceAccount: token (re-read), the cluster CA, the API service's host and port."""
    host, port = env.get("KUBERNETES_SERVICE_HOST", ""), env.get("KUBERNETES_SERVICE_PORT", "")
    if not host or not port:
        raise _config_error(
            "in-cluster configuration", "KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT must be set"
        )
    if ":" in host:  # IPv6
        host = f"[{host}]"
    ca = service_account / "ca.crt"
    try:
        context = ssl.create_default_context(cafile=str(ca))
    except (OSError, ssl.SSLError) as exc:
        raise _config_error("in-cluster configuration", f"CA {ca}: {exc}") from exc
    token = _Token(None, service_account / "token", clock)
    token.get()  # unreadable token: fail now, naming the file
    return Connection(f"https://{host}:{port}", context, token, "in-cluster configuration")


def from_kubeconfig(path: pathlib.Path, clock: Callable[[], float]) -> Connection:
    """The current context of a kubeconfig with a server, a CA and a client certificate or token.

    Raises `Unsupported` for anything else a kubeconfig can say about users (exec, auth-provider, basic
    auth) and `ClusterError` when the file is missing or malformed.
    """
    source = f"kubeconfig {path}"
    try:
        config = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise _config_error(source, str(exc)) from exc
    if not isinstance(config, dict):
        raise _config_error(source, "not a kubeconfig (expected a mapping)")
    context_name = config.get("current-context")
    context = _named(config, "contexts", "context", context_name, source)
    cluster = _named(config, "clusters", "cluster", context.get("cluster"), source)
    user = _named(config, "users", "user", context.get("user"), source) if context.get("user") else {}
    extra = set(user) - _SIMPLE_USER_KEYS
    if extra:
        raise Unsupported(f"user settings {sorted(extra)}")
    if cluster.get("proxy-url") or cluster.get("tls-server-name"):
        raise Unsupported("proxy-url or tls-server-name")
    server = cluster.get("server")
    if not isinstance(server, str) or not server:
        raise _config_error(source, f"cluster {context.get('cluster')!r} has no server")
    base = path.parent
    context_ssl: ssl.SSLContext | None = None
    if server.startswith("https://"):
        context_ssl = _tls(cluster, user, base, source)
    token = user.get("token")
    token_file = user.get("tokenFile")
    return Connection(
        server.rstrip("/"),
        context_ssl,
        _Token(token, base / token_file if token_file and not token else None, clock),
        source,
    )


def _named(config: dict[str, Any], section: str, key: str, name: object, source: str) -> dict[str, Any]:
    for entry in config.get(section) or []:
        if isinstance(entry, dict) and entry.get("name") == name and isinstance(entry.get(key), dict):
            found: dict[str, Any] = entry[key]
            return found
    raise _config_error(
        source, f"{section}: no entry named {name!r} (current-context {config.get('current-context')!r})"
    )


def _tls(cluster: Mapping[str, Any], user: Mapping[str, Any], base: pathlib.Path, source: str) -> ssl.SSLContext:
    try:
        if cluster.get("insecure-skip-tls-verify"):
            context = ssl.create_default_context()
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        elif cluster.get("certificate-authority-data"):
            context = ssl.create_default_context(cadata=_decode(cluster["certificate-authority-data"], source))
        elif cluster.get("certificate-authority"):
            context = ssl.create_default_context(cafile=str(base / cluster["certificate-authority"]))
        else:
            context = ssl.create_default_context()
        cert = _material(user, "client-certificate", base, source)
        key = _material(user, "client-key", base, source)
        if cert and key:
            _load_chain(context, cert, key)
        elif cert or key:
            raise _config_error(source, "a client certificate needs both client-certificate and client-key")
    except (OSError, ssl.SSLError) as exc:
        raise _config_error(source, f"TLS: {exc}") from exc
    return context


def _material(user: Mapping[str, Any], name: str, base: pathlib.Path, source: str) -> pathlib.Path | bytes | None:
    if user.get(f"{name}-data"):
        return _decode(user[f"{name}-data"], source).encode()
    if user.get(name):
        return base / str(user[name])
    return None


def _load_chain(context: ssl.SSLContext, cert: pathlib.Path | bytes, key: pathlib.Path | bytes) -> None:
    """`load_cert_chain` reads files only: inline data goes through a private temporary directory."""
    with tempfile.TemporaryDirectory(prefix="metax-kubeconfig-") as tmp:
        paths = []
        for name, item in (("cert.pem", cert), ("key.pem", key)):
            if isinstance(item, bytes):
                target = pathlib.Path(tmp) / name
                target.touch(mode=0o600)
                target.write_bytes(item)
                paths.append(target)
            else:
                paths.append(item)
        context.load_cert_chain(str(paths[0]), str(paths[1]))


def _decode(data: object, source: str) -> str:
    try:
        return base64.b64decode(str(data), validate=True).decode()
    except (binascii.Error, UnicodeDecodeError) as exc:
        raise _config_error(source, f"base64 data: {exc}") from exc


def _config_error(source: str, detail: str) -> ClusterError:
    return ClusterError("configure", "the Kubernetes API client", f"{source}: {detail}")
