"""The edit service: one request per connection on the unix socket, answered by the core's pure edit.

Each request: read the header and config.json (`edit_wire`), gather what the edit needs from the host (the
installed SDK versions, the node's MetaX CDI spec, the device nodes' numbers), ask
`container_edit.edit`, and when the container gets an SDK version, write its in-use record BEFORE answering
and then check the version is still installed (the removal protocol of `metax_core.runtime.sdk`: the maca
agent hides a version before it reads the records, so either it sees this record or this check sees the
version gone). Every failure is an answer the wrapper can print, never a dropped connection.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import pathlib
import socket
import socketserver
import stat
import tempfile
import threading
from typing import Any

from metax_core import versions
from metax_core.errors import InvalidSpec
from metax_core.node import cdi
from metax_core.runtime import container_edit, edit_wire, sdk
from services._agent import probe
from services.container_edit.config import Settings

log = logging.getLogger(__name__)

READ_TIMEOUT = 10.0
"""Seconds a connection may take to send its request (the wrapper sends at once)."""


class Editor:
    """The request → response step, without sockets (tests and the benchmark call it directly too)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.sdk_dir = settings.host_path(settings.sdk_dir)
        self.in_use_dir = settings.host_path(settings.in_use_dir)
        self.cdi_file = settings.host_path(settings.cdi_dir) / cdi.spec_file_name()
        self.served = 0

    def installed(self) -> tuple[versions.Version, ...]:
        try:
            return tuple(sdk.installed(os.listdir(self.sdk_dir)))
        except FileNotFoundError:
            return ()

    def cdi_spec(self) -> dict[str, Any] | None:
        try:
            doc = json.loads(self.cdi_file.read_text())
        except (OSError, ValueError):
            return None
        return doc if isinstance(doc, dict) else None

    def device_info(self, spec: dict[str, Any] | None) -> dict[str, container_edit.DeviceInfo]:
        found: dict[str, container_edit.DeviceInfo] = {}
        for device in (spec or {}).get("devices", ()):
            for node in (device.get("containerEdits") or {}).get("deviceNodes") or ():
                path = str(node.get("hostPath") or node.get("path", ""))
                try:
                    st = os.stat(self.settings.host_path(path))
                except OSError:
                    continue
                kind = "c" if stat.S_ISCHR(st.st_mode) else "b" if stat.S_ISBLK(st.st_mode) else None
                if kind is not None:
                    found[path] = container_edit.DeviceInfo(kind, os.major(st.st_rdev), os.minor(st.st_rdev))
        return found

    def inputs(self, config: Any) -> container_edit.Inputs:
        spec = self.cdi_spec() if container_edit.cdi_requests(config) else None
        return container_edit.Inputs(
            installed=self.installed(),
            sdk_host_dir=str(self.settings.sdk_dir),
            cdi_spec=spec,
            device_info=self.device_info(spec),
            node_qos=self.settings.node_qos,
        )

    def answer(self, request: edit_wire.Request) -> edit_wire.Response:
        self.served += 1
        try:
            config = json.loads(request.config)
        except ValueError as exc:
            return self.refuse(request, f"config.json of container {request.container_id} is not JSON: {exc}")
        for attempt in (1, 2):
            try:
                edited = container_edit.edit(config, self.inputs(config))
            except container_edit.Refusal as exc:
                return self.refuse(request, exc.message)
            if not edited.changed:
                return edit_wire.Response(edit_wire.Status.UNCHANGED)
            if edited.maca is None or self.record(request, edited.maca):
                log.info("container %s: edited%s", request.container_id, f" (MXMACA {edited.maca})" * bool(edited.maca))
                body = json.dumps(edited.config, separators=(",", ":")).encode()
                return edit_wire.Response(edit_wire.Status.EDITED, body)
            log.info(
                "container %s: MXMACA %s was removed meanwhile (attempt %d)", request.container_id, edited.maca, attempt
            )
        return self.refuse(request, "the MXMACA version it resolved to was removed while the container started")

    def record(self, request: edit_wire.Request, version: versions.Version) -> bool:
        """Write the in-use record, then say whether the version is still installed (see the module docstring)."""
        name = sdk.version_dir(version)
        use = sdk.Use(request.container_id, name, sdk.state_dir(request.root, request.container_id))
        _publish(self.in_use_dir / sdk.use_file_name(request.container_id), sdk.render_use(use))
        return (self.sdk_dir / name).is_dir()

    def refuse(self, request: edit_wire.Request, message: str) -> edit_wire.Response:
        log.warning("container %s refused: %s", request.container_id, message)
        return edit_wire.Response(edit_wire.Status.REFUSED, message.encode())


def _publish(path: pathlib.Path, text: str) -> None:
    """Write ``path`` through a temporary file and a rename: readers see a whole record or none. No fsync: the
    records live under /run (a tmpfs), which a crash or reboot empties together with every container; an fsync
    would only cost each GPU container's start a disk flush on hosts whose /run is on disk."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(tmp, path)
    except BaseException:
        pathlib.Path(tmp).unlink(missing_ok=True)
        raise


def read_request(conn: socket.socket) -> edit_wire.Request:
    buffer = b""
    while (parts := edit_wire.split_header(buffer)) is None:
        chunk = conn.recv(65536)
        if not chunk:
            raise InvalidSpec([])  # the peer went away before a whole header
        buffer += chunk
    header = edit_wire.parse_header(parts[0])
    body = bytearray(parts[1])
    while len(body) < header.length:
        chunk = conn.recv(min(1 << 20, header.length - len(body)))
        if not chunk:
            break
        body += chunk
    return edit_wire.parse_request(parts[0] + b"\n" + bytes(body))


class _Handler(socketserver.BaseRequestHandler):
    server: Server

    def handle(self) -> None:
        conn: socket.socket = self.request
        conn.settimeout(READ_TIMEOUT)
        try:
            request = read_request(conn)
        except (InvalidSpec, OSError) as exc:
            message = "; ".join(e.message for e in exc.errors) if isinstance(exc, InvalidSpec) else str(exc)
            log.warning("unreadable request: %s", message or "connection closed early")
            with contextlib.suppress(OSError):
                conn.sendall(edit_wire.render_response(edit_wire.Response(edit_wire.Status.REFUSED, message.encode())))
            return
        try:
            response = self.server.editor.answer(request)
        except Exception as exc:  # an answer for every request: the container's start error says what broke
            log.exception("container %s: edit failed", request.container_id)
            response = edit_wire.Response(edit_wire.Status.REFUSED, f"container-edit failed: {exc}".encode())
        with contextlib.suppress(OSError):
            conn.sendall(edit_wire.render_response(response))


class Server(socketserver.ThreadingUnixStreamServer):
    daemon_threads = True

    def __init__(self, path: pathlib.Path, editor: Editor) -> None:
        self.editor = editor
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileNotFoundError):
            path.unlink()  # a socket left by a killed run: nobody listens on it
        super().__init__(str(path), _Handler)

    def server_bind(self) -> None:
        """Bind under a staging name, make the socket root-only (the runtime's), then rename it into place: it
        appears at its path already 0600. Never through the umask: that is the whole process's, and another
        thread creating files meanwhile would get 0600 directories too (CI hit it: the runtime tests and
        metax_dev.productnode run the service in a thread next to code that makes directories)."""
        staging = self.path.with_name(f".{self.path.name}~")
        staging.unlink(missing_ok=True)  # left by a run killed between bind and rename
        self.socket.bind(str(staging))
        try:
            os.chmod(staging, 0o600)
            os.replace(staging, self.path)
        except BaseException:
            staging.unlink(missing_ok=True)
            raise
        self.server_address = str(self.path)

    def close(self) -> None:
        self.server_close()
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()


def serve(settings: Settings, stop: threading.Event, editor: Editor | None = None) -> None:
    """Listen on the socket until ``stop``; the socket is removed at the end."""
    server = Server(settings.host_path(settings.socket), editor or Editor(settings))
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.5}, daemon=True)
    thread.start()
    ready = probe.ProbeFile(settings.probe_file)
    ready.ready(f"listening on {server.path}")
    log.info("container-edit listening on %s", server.path)
    try:
        stop.wait()
    finally:
        ready.not_ready()
        server.shutdown()
        server.close()
        log.info("container-edit stopped")
