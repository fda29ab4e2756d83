"""A TEST-ONLY stand-in for CRI-O (no CRI-O runs here: Debian bookworm does not package it): the parts of its
behaviour the container-runtime agent relies on, as CRI-O's own sources and man pages describe them.

Run as a program (``python fake_crio.py …``, standard library + tomlkit only, so the agent runs it as a host
binary through its ``crio`` argument):

* ``--version`` prints ``crio version 1.30.4``;
* ``--config C --config-dir D config``: loads ``C`` then every file of ``D`` in lexical order, a later file's
  option winning (crio.conf.d(5)), validates (every runtime handler's ``runtime_type`` is oci/vm/pod and its
  ``runtime_path`` an executable file; ``default_runtime`` names a handler), prints the effective configuration
  as TOML, or exits 1 with the reason;
* ``--config C --config-dir D --listen SOCKET``: the daemon. It loads the files once at start (a start on
  files that do not validate exits 1, as CRI-O does) and serves ``GET /config`` (the loaded configuration as
  TOML, as ``crio status config`` reads it) over HTTP on the unix socket. Its service manager is the tests'
  ``metax_dev.containerd_host.Supervisor`` (a restart is a stop and a new start, as systemd's).
"""

from __future__ import annotations

import argparse
import http.server
import os
import pathlib
import socketserver
import sys
from typing import Any

import tomlkit

VERSION = "1.30.4"
BUILTIN: dict[str, Any] = {
    "crio": {
        "runtime": {
            "default_runtime": "runc",
            "runtimes": {"runc": {"runtime_path": "", "runtime_type": "oci", "runtime_root": "/run/runc"}},
        }
    }
}


def _merge(into: dict[str, Any], layer: dict[str, Any]) -> None:
    for key, value in layer.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            _merge(into[key], value)
        else:
            into[key] = value


def load(config: str, config_dir: str) -> dict[str, Any]:
    """The effective configuration, or ValueError naming the file and what is wrong."""
    effective: dict[str, Any] = tomlkit.parse(tomlkit.dumps(BUILTIN)).unwrap()
    files = [pathlib.Path(config)] if os.path.isfile(config) else []
    if os.path.isdir(config_dir):
        files += sorted(p for p in pathlib.Path(config_dir).iterdir() if p.is_file())
    for path in files:
        try:
            _merge(effective, tomlkit.parse(path.read_text()).unwrap())
        except Exception as exc:  # tomlkit raises several kinds; CRI-O says "parsing config"
            raise ValueError(f"parsing config file {path}: {exc}") from None
    runtime = effective["crio"]["runtime"]
    for name, handler in runtime["runtimes"].items():
        if handler.get("runtime_type", "oci") not in ("oci", "vm", "pod"):
            raise ValueError(f"validating runtime config: invalid runtime_type for runtime {name!r}")
        path = handler.get("runtime_path", "")
        if path and not (os.path.isfile(path) and os.access(path, os.X_OK)):
            raise ValueError(f"validating runtime config: invalid runtime_path for runtime {name!r}: {path}")
    if runtime["default_runtime"] not in runtime["runtimes"]:
        raise ValueError(f"validating runtime config: default_runtime {runtime['default_runtime']!r} is not defined")
    return effective


def _serve(socket_path: str, text: str) -> None:
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = text.encode() if self.path == "/config" else b"not found\n"
            self.send_response(200 if self.path == "/config" else 404)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    class Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
        daemon_threads = True

        def get_request(self) -> tuple[Any, Any]:
            request, _ = self.socket.accept()
            return request, ("local", 0)  # http.server logs a client address; a unix socket has none

    pathlib.Path(socket_path).unlink(missing_ok=True)
    with Server(socket_path, Handler) as server:
        server.serve_forever()


def main(argv: list[str]) -> int:
    if argv == ["--version"]:
        print(f"crio version {VERSION}")
        return 0
    parser = argparse.ArgumentParser(prog="crio")
    parser.add_argument("--config", default="/etc/crio/crio.conf")
    parser.add_argument("--config-dir", default="/etc/crio/crio.conf.d")
    parser.add_argument("--listen")
    parser.add_argument("command", nargs="?", choices=["config"])
    args = parser.parse_args(argv)  # an unknown flag exits 2 at once (the Supervisor's failed start)
    try:
        effective = load(args.config, args.config_dir)
    except ValueError as exc:
        print(exc, file=sys.stderr)
        return 1
    text = tomlkit.dumps(effective)
    if args.command == "config":
        sys.stdout.write(text)
        return 0
    _serve(args.listen, text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
