"""Running one probe of a container, as the kubelet does: httpGet, exec, tcpSocket.

Why a module of its own: the result decides a pod's Ready condition and a container's restarts, so each handler
must behave as the kubelet's does: httpGet succeeds on 200-399 and does not verify an HTTPS certificate, exec
succeeds on exit code 0, tcpSocket on a connection; every handler gives up at ``timeoutSeconds``.
"""

from __future__ import annotations

import http.client
import socket
import ssl
import subprocess
from collections.abc import Mapping
from pathlib import Path

import attrs

from metax_dev.processnode import podspec


@attrs.frozen
class Result:
    success: bool
    detail: str


def run(probe: podspec.Probe, pod_ip: str, env: Mapping[str, str], cwd: Path) -> Result:
    if probe.action == "httpGet":
        return _http(probe, probe.host or pod_ip)
    if probe.action == "tcpSocket":
        try:
            with socket.create_connection((probe.host or pod_ip, probe.port), timeout=probe.timeout):
                return Result(True, "connected")
        except OSError as exc:
            return Result(False, f"dial tcp {probe.host or pod_ip}:{probe.port}: {exc}")
    try:
        done = subprocess.run(
            list(probe.command),
            env=dict(env),
            cwd=cwd,
            capture_output=True,
            timeout=probe.timeout,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return Result(False, f"command timed out after {probe.timeout:g}s")
    except OSError as exc:
        return Result(False, f"exec {probe.command[:1]}: {exc}")
    output = (done.stdout + done.stderr).decode(errors="replace").strip()[-500:]
    return Result(done.returncode == 0, f"exit code {done.returncode}: {output}")


def _http(probe: podspec.Probe, host: str) -> Result:
    connection: http.client.HTTPConnection
    if probe.scheme.upper() == "HTTPS":
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE  # the kubelet does not verify probe certificates either
        connection = http.client.HTTPSConnection(host, probe.port, timeout=probe.timeout, context=context)
    else:
        connection = http.client.HTTPConnection(host, probe.port, timeout=probe.timeout)
    try:
        connection.request("GET", probe.path, headers={"User-Agent": "kube-probe/metax-processnode"})
        response = connection.getresponse()
        response.read(1024)
        ok = 200 <= response.status < 400
        return Result(ok, f"HTTP {response.status}")
    except (OSError, http.client.HTTPException) as exc:
        return Result(False, f"GET {probe.scheme.lower()}://{host}:{probe.port}{probe.path}: {exc}")
    finally:
        connection.close()
