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
import pathlib
import socket
import socketserver
import threading
from collections.abc import Mapping
from typing import Any

from metax_core import versions
from metax_core.errors import InvalidSpec
from metax_core.node import cdi
from metax_core.ports import node as node_ports
from metax_core.runtime import container_edit, edit_wire, sdk
from metax_hw import edit_host, unix_sockets
from services._agent import probe
from services.container_edit.config import Settings

log = logging.getLogger(__name__)

READ_TIMEOUT = 10.0
"""Seconds a connection may take to send its request (the wrapper sends at once)."""


class Editor:
    """The request → response step, without sockets (tests and the benchmark call it directly too)."""

    def __init__(self, settings: Settings, host: node_ports.ContainerEditHost | None = None) -> None:
        self.settings = settings
        self.host: node_ports.ContainerEditHost = host or edit_host.HostContainerEdit(
            settings.host_root,
            settings.host_path(settings.sdk_dir),
            settings.host_path(settings.in_use_dir),
            settings.host_path(settings.cdi_dir) / cdi.spec_file_name(),
        )
        self.served = 0

    def inputs(self, config: Any) -> container_edit.Inputs:
        spec = self.host.cdi_spec() if container_edit.cdi_requests(config) else None
        return container_edit.Inputs(
            installed=self.host.installed(),
            sdk_host_dir=str(self.settings.sdk_dir),
            cdi_spec=spec,
            device_info=self.host.device_info(_device_paths(spec)),
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
        self.host.record_use(sdk.Use(request.container_id, name, sdk.state_dir(request.root, request.container_id)))
        return self.host.has_version(name)

    def refuse(self, request: edit_wire.Request, message: str) -> edit_wire.Response:
        log.warning("container %s refused: %s", request.container_id, message)
        return edit_wire.Response(edit_wire.Status.REFUSED, message.encode())


def _device_paths(spec: Mapping[str, Any] | None) -> list[str]:
    """The host paths of the spec's device nodes (whose numbers the edit copies into the container)."""
    return [
        str(node.get("hostPath") or node.get("path", ""))
        for device in (spec or {}).get("devices", ())
        for node in (device.get("containerEdits") or {}).get("deviceNodes") or ()
    ]


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
        unix_sockets.clear_stale(path)
        super().__init__(str(path), _Handler)

    def server_bind(self) -> None:
        """The socket appears at its path already root-only (the runtime's): `unix_sockets.bind_private`."""
        unix_sockets.bind_private(self.socket, self.path)
        self.server_address = str(self.path)

    def close(self) -> None:
        self.server_close()
        unix_sockets.remove(self.path)


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
