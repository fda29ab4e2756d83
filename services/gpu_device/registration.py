"""gpu-device's plugin servers, one per offered resource, and their registration with the kubelet.

Why apart from the loop: the loop (`services.gpu_device.agent`) decides what to offer; this keeps the servers
serving what it offers and registered with the kubelet that runs now. A resource no longer offered is withdrawn
(its list emptied, its server stopped); a server that stopped serving (or fails its probe) is started again and
registers again; a kubelet restart makes each resource register again, once per kubelet socket generation.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from metax_core.errors import PortError
from metax_core.node import devices
from metax_core.ports import node as node_ports
from services._agent import loop

log = logging.getLogger(__name__)

KubeletWatch = Callable[[], object]
"""Returns something that changes when kubelet restarts (its socket's inode and ctime), None when absent."""


class Registrations:
    """The servers by resource and, for each registered one, the kubelet socket generation it registered with."""

    def __init__(
        self,
        factory: Callable[[devices.Resource], node_ports.ResourcePlugin],
        kubelet: KubeletWatch,
        say: loop.Say,
    ) -> None:
        self.factory = factory
        self.kubelet_watch = kubelet
        self.say = say
        self.plugins: dict[devices.Resource, node_ports.ResourcePlugin] = {}
        self.registered: dict[devices.Resource, object] = {}
        """Each registered resource → the kubelet socket generation (fingerprint) it registered with."""
        self.kubelet: object = None

    def ready(self, plan: devices.Plan) -> tuple[bool, str]:
        """Ready (the pod's readinessProbe, R-READY) when every resource offered is registered with the kubelet."""
        active = plan.active()
        missing = sorted(r.value for r in active if r not in self.registered)
        if not active or missing:
            return False, ""
        return True, "registered with the kubelet: " + ", ".join(sorted(r.value for r in active))

    def offer(self, plan: devices.Plan, *, probe: bool) -> None:
        """Serve ``plan``'s devices: withdraw what it no longer offers, (re)start and (re)register the rest."""
        self.watch_kubelet()
        for resource in set(self.plugins) - plan.active():
            plugin = self.plugins.pop(resource)
            plugin.update(())
            plugin.stop()
            self.registered.pop(resource, None)
            log.info("%s is no longer offered on this node", resource.value)
        for resource in sorted(plan.active(), key=lambda r: r.value):
            self._serve(resource, plan.devices[resource], probe)

    def stop(self) -> None:
        """Stop every server: the kubelet sees the streams end."""
        for resource in list(self.plugins):
            self.plugins.pop(resource).stop()
        self.registered.clear()

    def watch_kubelet(self) -> None:
        """Notice a new kubelet; re-register only what registered with an older one.

        Registration is once per kubelet socket generation: each resource remembers the fingerprint of
        kubelet.sock it registered under, read just before its Register call. A kubelet restart that lands
        inside a tick, after this check, makes the plugin register with the new kubelet in that same tick
        (kubelet wipes our socket first, so the own-socket check restarts the server); the next tick then
        sees the new fingerprint but finds the resource already registered under it, and leaves the working
        stream alone instead of registering a second time. A restart that lands after the read (while the
        Register call is answered, or before this thread runs again) leaves the resource under the old
        fingerprint, so the next tick registers it with the new kubelet: read after the call, it was filed
        under the new kubelet that never heard of it, and was never registered again when the kubelet kept
        our socket.
        """
        fingerprint = self.kubelet_watch()
        if fingerprint != self.kubelet:
            if fingerprint is None:
                log.warning("kubelet's registration socket is gone: waiting for kubelet")
            self.kubelet = fingerprint
        stale = [r for r, generation in self.registered.items() if generation != fingerprint]
        if stale and fingerprint is not None:
            log.info(
                "kubelet restarted: restarting %s and registering again", ", ".join(sorted(r.value for r in stale))
            )
        for resource in stale:
            del self.registered[resource]
            plugin = self.plugins.get(resource)
            if plugin is not None and fingerprint is not None:
                plugin.stop()

    def _serve(self, resource: devices.Resource, advertised: Sequence[devices.Device], probe: bool) -> None:
        plugin = self.plugins.get(resource)
        if plugin is None:
            plugin = self.plugins[resource] = self.factory(resource)
        plugin.update(advertised)
        if not plugin.serving() or (probe and not plugin.probe()):
            if resource in self.registered:
                log.warning("%s plugin server is not serving: restarting it", resource.value)
            try:
                plugin.start()
            except PortError as exc:
                self.say(f"serve:{resource.value}", str(exc), logging.ERROR)
                return
            self.registered.pop(resource, None)
        if resource not in self.registered and self.kubelet is not None:
            generation = self.kubelet_watch()
            try:
                plugin.register()
            except PortError as exc:
                self.say(f"register:{resource.value}", str(exc), logging.WARNING)
                return
            self.say.forget(f"register:{resource.value}")
            self.registered[resource] = generation
