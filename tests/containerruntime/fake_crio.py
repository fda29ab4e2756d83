"""A TEST-ONLY stand-in for CRI-O, kept for what the real one (`metax_dev.crio_host`, one version) cannot be: a CRI-O
of another version, such as one older than the 1.23 the agent supports (`test_crio_fake`). It behaves as the real
CRI-O does in what the agent relies on, and `test_crio_contract` checks that against the real 1.35 for the same
files (the same verdict from ``crio config``, the same runtimes in ``GET /config``).

Run as a program (``python fake_crio.py …``, standard library + tomlkit only, so the agent runs it as a host
binary through its ``crio`` argument):

* ``--version`` prints ``crio version <FAKE_CRIO_VERSION or 1.30.4>``;
* ``--config C --config-dir D config``: loads ``C`` then every file under ``D`` (recursively, hidden files too, in
  lexical order: CRI-O's ``filepath.Walk``), a later file's option winning, except that a runtime handler's table
  replaces the handler whole (CRI-O decodes ``[crio.runtime.runtimes.<name>]`` into a new entry of its map); checks
  that ``default_runtime`` names a handler (CRI-O's ``Validate(false)`` checks no handler's path or type); prints
  the effective configuration as TOML, or exits 1 with the reason;
* ``--config C --config-dir D --listen SOCKET``: the daemon. It loads the files once at start (files that do not
  load: exit 1), drops a handler whose ``runtime_type`` is unknown or whose ``runtime_path`` does not exist (empty:
  its name is looked up on PATH), with a warning, and exits 1 if that is the default one (CRI-O's
  ``ValidateRuntimes``), then serves ``GET /config`` (the configuration as TOML, as ``crio status config`` reads
  it) over HTTP on the unix socket. Its service manager is the tests' ``metax_dev.containerd_host.Supervisor`` (a
  restart is a stop and a new start, as systemd's).
"""

from __future__ import annotations

import argparse
import http.server
import os
import pathlib
import shutil
import socketserver
import sys
from typing import Any

import tomlkit

VERSION = "1.30.4"
BUILTIN: dict[str, Any] = {
    "crio": {
        "runtime": {
            "default_runtime": "crun",
            "runtimes": {"crun": {"runtime_path": "", "runtime_type": "oci", "runtime_root": "/run/crun"}},
        }
    }
}
"""CRI-O's own defaults (``crio config --default``), the part the agent looks at."""
RUNTIMES = ("crio", "runtime", "runtimes")
TYPES = ("", "oci", "vm", "pod")


def _merge(into: dict[str, Any], layer: dict[str, Any], at: tuple[str, ...] = ()) -> None:
    for key, value in layer.items():
        if at != RUNTIMES and isinstance(value, dict) and isinstance(into.get(key), dict):
            _merge(into[key], value, (*at, key))
        else:
            into[key] = value


def _walk(directory: pathlib.Path) -> list[pathlib.Path]:
    """Every file under ``directory`` in the order of Go's ``filepath.Walk``: lexical, depth first."""
    found: list[pathlib.Path] = []
    for name in sorted(os.listdir(directory)):
        path = directory / name
        if path.is_dir():
            found += _walk(path)
        else:
            found.append(path)
    return found


def load(config: str, config_dir: str) -> dict[str, Any]:
    """The effective configuration, or ValueError naming the file and what is wrong."""
    effective: dict[str, Any] = tomlkit.parse(tomlkit.dumps(BUILTIN)).unwrap()
    files = [pathlib.Path(config)] if os.path.isfile(config) else []
    if os.path.isdir(config_dir):
        files += _walk(pathlib.Path(config_dir))
    for path in files:
        try:
            _merge(effective, tomlkit.parse(path.read_text()).unwrap())
        except Exception as exc:  # tomlkit raises several kinds; CRI-O says "unable to decode configuration"
            raise ValueError(f"unable to decode configuration {path}: {exc}") from None
    runtime = effective["crio"]["runtime"]
    if runtime["default_runtime"] not in runtime["runtimes"]:
        name = runtime["default_runtime"]
        raise ValueError(
            f"validating runtime config: default_runtime set to {name!r}, "
            f"but no runtime entry table [crio.runtime.runtimes.{name}] was found"
        )
    return effective


def validate_runtimes(effective: dict[str, Any]) -> None:
    """At the daemon's start: a handler that cannot run is dropped, the default one is fatal (ValueError)."""
    runtime = effective["crio"]["runtime"]
    for name, handler in list(runtime["runtimes"].items()):
        path = handler.get("runtime_path", "")
        problem = ""
        if handler.get("runtime_type", "") not in TYPES:
            problem = f"invalid `runtime_type` {handler.get('runtime_type')!r} for runtime {name!r}"
        elif not path and shutil.which(name) is None:
            problem = f"{name!r} not found in $PATH"
        elif path and not os.path.exists(path):
            problem = f"invalid runtime_path for runtime {name!r}: {path}"
        if not problem:
            continue
        if name == runtime["default_runtime"]:
            raise ValueError(f"runtime validation: {problem}")
        print(f"Runtime handler {name!r} is being ignored due to: {problem}", file=sys.stderr)
        del runtime["runtimes"][name]


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
        print(f"crio version {os.environ.get('FAKE_CRIO_VERSION', VERSION)}")
        return 0
    parser = argparse.ArgumentParser(prog="crio")
    parser.add_argument("--config", default="/etc/crio/crio.conf")
    parser.add_argument("--config-dir", default="/etc/crio/crio.conf.d")
    parser.add_argument("--listen")
    parser.add_argument("command", nargs="?", choices=["config"])
    args = parser.parse_args(argv)  # an unknown flag exits 2 at once (the Supervisor's failed start)
    try:
        effective = load(args.config, args.config_dir)
        if args.command != "config":
            validate_runtimes(effective)
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
