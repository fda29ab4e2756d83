"""One DRA driver served to the kubelet: its registration socket and its DRA socket (R-DRA).

The server knows the protocol only; what to prepare and which health to stream are asked of the service
(`ports.node.ClaimPreparer`, `ports.node.HealthFeed`). Protocol facts this code relies on (the kubelet's
plugin watcher and DRA manager, 1.36):

- the plugin watcher watches ``<root-dir>/plugins_registry`` and calls GetInfo on every socket that appears
  there, then NotifyRegistrationStatus; the endpoint GetInfo names is dialled right away, so the DRA socket
  serves before the registration socket exists (`start`);
- the DRA socket carries the DRAPlugin service in the versions GetInfo lists (``v1.DRAPlugin``,
  ``v1beta1.DRAPlugin``; the kubelet picks the newest it knows) and ``DRAResourceHealth``;
- a restarted kubelet finds the registration socket again and registers the plugin anew;
- every claim of a request gets an entry in the answer; an error there makes the kubelet retry the claim.
"""

from __future__ import annotations

import concurrent.futures
import logging
import pathlib
import stat
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import grpc

from metax_core.dra import model
from metax_core.errors import PortError
from metax_core.ports import node as node_ports
from metax_k8s.dra.v1 import api_pb2 as v1
from metax_k8s.dra.v1 import api_pb2_grpc as v1_grpc
from metax_k8s.dra.v1beta1 import api_pb2 as v1beta1
from metax_k8s.dra.v1beta1 import api_pb2_grpc as v1beta1_grpc
from metax_k8s.drahealth.v1alpha1 import api_pb2 as health_pb2
from metax_k8s.drahealth.v1alpha1 import api_pb2_grpc as health_grpc
from metax_k8s.pluginregistration.v1 import api_pb2 as reg_pb2
from metax_k8s.pluginregistration.v1 import api_pb2_grpc as reg_grpc

log = logging.getLogger(__name__)

PLUGIN_TYPE = "DRAPlugin"
SUPPORTED_VERSIONS = ("v1.DRAPlugin", "v1beta1.DRAPlugin")
DRA_SOCKET = "dra.sock"
HEALTH_STATES = {
    model.HealthState.UNKNOWN: health_pb2.UNKNOWN,
    model.HealthState.HEALTHY: health_pb2.HEALTHY,
    model.HealthState.UNHEALTHY: health_pb2.UNHEALTHY,
}


class ServeFailed(PortError):
    """A socket of the driver could not be listened on."""


def _claims(request: Any) -> list[model.ClaimRef]:
    return [model.ClaimRef(c.namespace, c.uid, c.name) for c in request.claims]


def _answer_all(
    claims: Sequence[model.ClaimRef], call: Callable[[], Mapping[str, Any]], what: str, failed: Callable[[str], Any]
) -> dict[str, Any]:
    """The service's answer with an entry for every claim (an error for those it left out or when it raised)."""
    try:
        answers = dict(call())
    except Exception as exc:  # the kubelet retries a claim with an error; a failed call helps no one
        log.exception("%s failed", what)
        return {c.uid: failed(f"{what} failed: {exc}") for c in claims}
    return {c.uid: answers.get(c.uid, failed(f"{what}: the driver gave no answer for claim {c.uid}")) for c in claims}


class _DraPlugin:
    """DRAPlugin in one API version (``pb`` the version's messages; both versions have the same shape)."""

    def __init__(self, server: DraPluginServer, pb: Any) -> None:
        self._server = server
        self._pb = pb

    def _device(self, d: model.PreparedDevice) -> Any:
        device = self._pb.Device(
            request_names=list(d.request_names), pool_name=d.pool, device_name=d.device, cdi_device_ids=list(d.cdi_ids)
        )
        if d.share_id is not None and "share_id" in self._pb.Device.DESCRIPTOR.fields_by_name:
            device.share_id = d.share_id  # v1 only: v1beta1 predates consumable capacity
        return device

    def NodePrepareResources(self, request: Any, context: Any) -> Any:
        claims = _claims(request)
        outcomes = _answer_all(
            claims, lambda: self._server.preparer.prepare(claims), "NodePrepareResources", model.ClaimOutcome.failed
        )
        return self._pb.NodePrepareResourcesResponse(
            claims={
                uid: self._pb.NodePrepareResourceResponse(
                    devices=[self._device(d) for d in outcome.devices], error=outcome.error
                )
                for uid, outcome in outcomes.items()
            }
        )

    def NodeUnprepareResources(self, request: Any, context: Any) -> Any:
        claims = _claims(request)
        errors = _answer_all(claims, lambda: self._server.preparer.unprepare(claims), "NodeUnprepareResources", str)
        return self._pb.NodeUnprepareResourcesResponse(
            claims={uid: self._pb.NodeUnprepareResourceResponse(error=error) for uid, error in errors.items()}
        )


class _V1(_DraPlugin, v1_grpc.DRAPluginServicer):  # type: ignore[misc, unused-ignore]
    def __init__(self, server: DraPluginServer) -> None:
        super().__init__(server, v1)


class _V1beta1(_DraPlugin, v1beta1_grpc.DRAPluginServicer):  # type: ignore[misc, unused-ignore]
    def __init__(self, server: DraPluginServer) -> None:
        super().__init__(server, v1beta1)


class _Health(health_grpc.DRAResourceHealthServicer):  # type: ignore[misc, unused-ignore]
    def __init__(self, server: DraPluginServer) -> None:
        self._server = server

    def NodeWatchResources(self, request: Any, context: Any) -> Iterator[Any]:
        feed = self._server.health
        sent = -1
        self._server.streams += 1
        try:
            while context.is_active() and self._server.running:
                reports, version = feed.current()
                if version != sent:
                    sent = version
                    log.debug("health stream: %d device(s), version %d", len(reports), version)
                    yield health_pb2.NodeWatchResourcesResponse(devices=[to_proto_health(r) for r in reports])
                    continue
                feed.wait_changed(sent, timeout=1.0)
        finally:
            self._server.streams -= 1


def to_proto_health(report: model.DeviceHealthReport) -> Any:
    return health_pb2.DeviceHealth(
        device=health_pb2.DeviceIdentifier(pool_name=report.pool, device_name=report.device),
        health=HEALTH_STATES[report.state],
        last_updated_time=int(report.updated_at),
        health_check_timeout_seconds=report.check_timeout_seconds,
        message=report.message,
    )


class _Registration(reg_grpc.RegistrationServicer):  # type: ignore[misc, unused-ignore]
    def __init__(self, server: DraPluginServer) -> None:
        self._server = server

    def GetInfo(self, request: Any, context: Any) -> Any:
        return reg_pb2.PluginInfo(
            type=PLUGIN_TYPE,
            name=self._server.driver,
            endpoint=str(self._server.endpoint),
            supported_versions=list(SUPPORTED_VERSIONS),
        )

    def NotifyRegistrationStatus(self, request: Any, context: Any) -> Any:
        self._server.registered = (bool(request.plugin_registered), str(request.error))
        if self._server.on_registration is not None:
            self._server.on_registration(bool(request.plugin_registered), str(request.error))
        return reg_pb2.RegistrationStatusResponse()


class DraPluginServer:
    """Serves ``driver`` on ``<plugin_dir>/dra.sock`` and registers it at ``<registry_dir>/<driver>-reg.sock``.

    ``endpoint``: the DRA socket's path as the kubelet sees it, when the driver sees it elsewhere (a container
    with the host's kubelet directory under ``/host``); default the path it listens on."""

    def __init__(
        self,
        driver: str,
        *,
        plugin_dir: pathlib.Path,
        registry_dir: pathlib.Path,
        preparer: node_ports.ClaimPreparer,
        health: node_ports.HealthFeed,
        on_registration: Callable[[bool, str], None] | None = None,
        endpoint: pathlib.Path | None = None,
        max_workers: int = 8,
    ) -> None:
        self.driver = driver
        self.plugin_dir = plugin_dir
        self.registry_dir = registry_dir
        self.preparer = preparer
        self.health = health
        self.on_registration = on_registration
        self.endpoint = endpoint or self.dra_socket
        self.max_workers = max_workers
        self.registered: tuple[bool, str] | None = None
        """The kubelet's last NotifyRegistrationStatus: (registered, error); None before any."""
        self.running = False
        self.streams = 0
        """Open health streams (each holds a worker thread until its client goes away)."""
        self._servers: list[grpc.Server] = []

    @property
    def dra_socket(self) -> pathlib.Path:
        return self.plugin_dir / DRA_SOCKET

    @property
    def registration_socket(self) -> pathlib.Path:
        return self.registry_dir / f"{self.driver}-reg.sock"

    def _listen(self, path: pathlib.Path, add: Callable[[grpc.Server], None], prefix: str) -> grpc.Server:
        path.parent.mkdir(parents=True, exist_ok=True)
        _remove_socket(path)
        executor = concurrent.futures.ThreadPoolExecutor(max_workers=self.max_workers, thread_name_prefix=prefix)
        server = grpc.server(executor)
        add(server)
        try:
            port = server.add_insecure_port(f"unix://{path}")
        except RuntimeError as exc:
            raise ServeFailed(f"cannot listen on {path}: {exc}") from exc
        if port == 0:
            raise ServeFailed(f"cannot listen on {path}")
        server.start()
        return server

    def start(self) -> None:
        """Serve the DRA socket, then the registration socket (the kubelet dials the first once it sees the
        second). Stale sockets of a killed process are replaced; a running server is stopped first."""
        self.stop()
        self.running = True

        def dra(server: grpc.Server) -> None:
            v1_grpc.add_DRAPluginServicer_to_server(_V1(self), server)  # type: ignore[no-untyped-call, unused-ignore]
            v1beta1_grpc.add_DRAPluginServicer_to_server(_V1beta1(self), server)  # type: ignore[no-untyped-call, unused-ignore]
            health_grpc.add_DRAResourceHealthServicer_to_server(_Health(self), server)  # type: ignore[no-untyped-call, unused-ignore]

        def registration(server: grpc.Server) -> None:
            reg_grpc.add_RegistrationServicer_to_server(_Registration(self), server)  # type: ignore[no-untyped-call, unused-ignore]

        try:
            self._servers.append(self._listen(self.dra_socket, dra, "dra"))
            self._servers.append(self._listen(self.registration_socket, registration, "dra-reg"))
        except ServeFailed:
            self.stop()
            raise
        log.info("serving %s on %s (registration %s)", self.driver, self.dra_socket, self.registration_socket)

    def stop(self, grace: float = 1.0) -> None:
        """Withdraw the registration socket, then stop serving; both socket files are removed."""
        self.running = False
        servers, self._servers = self._servers, []
        for server in reversed(servers):
            server.stop(grace).wait()
        if servers:
            _remove_socket(self.registration_socket)
            _remove_socket(self.dra_socket)
            log.info("stopped serving %s", self.driver)

    def serving(self) -> bool:
        return len(self._servers) == 2 and all(_is_socket(p) for p in (self.dra_socket, self.registration_socket))


def _is_socket(path: pathlib.Path) -> bool:
    try:
        return stat.S_ISSOCK(path.lstat().st_mode)
    except OSError:
        return False


def _remove_socket(path: pathlib.Path) -> None:
    """Remove a socket file (a stale one of a killed process, or ours); anything else there is left alone."""
    if _is_socket(path):
        path.unlink(missing_ok=True)
