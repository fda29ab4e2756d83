"""gpu-device's CDI spec, kept in step with what it advertises (issue 20, item 3; docs/device-plugin.md).

Why a module of its own: the agent's loop decides devices; this keeps the spec file, its kept entries and
the Allocate record behind three calls. `sync` writes the spec for a plan (plus the entries of withdrawn
devices still needed, `metax_core.node.cdi_sync.decide_entries`) *before* the agent sends any list, and
returns the CDI names on disk, which the agent offers (`cdi_sync.advertisable`) and Allocate checks;
`allocated` records what Allocate handed out (from the gRPC threads); `retire` leaves, on stop, only the
entries pods hold. It gathers (the spec on disk, PodResources) and applies (the file); the rules are
`cdi_sync`'s.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence

from metax_core.errors import HardwareError, InvalidSpec, PortError
from metax_core.inventory import PciAddress
from metax_core.node import cdi, cdi_sync, devices
from metax_core.ports import node as node_ports
from services._agent import loop

log = logging.getLogger(__name__)

HeldDevices = Callable[[], Mapping[str, Sequence[str]]]
"""The devices pods hold on this node (the kubelet's PodResources List): resource name → device IDs.
Raises PortError when the kubelet cannot be asked."""


class CdiKeeper:
    def __init__(
        self,
        sink: node_ports.CdiSink,
        *,
        held: HeldDevices | None,
        grace: float,
        held_interval: float,
        clock: Callable[[], float],
        say: loop.Say,
    ) -> None:
        self._sink = sink
        self._held = held
        self._grace = grace
        self._clock = clock
        self._say = say
        self._chores = loop.Chores(clock)
        self._held_interval = held_interval
        self._entries: Mapping[str, cdi_sync.Entry] | None = None
        """The entries the spec holds (None until the spec found at start was read)."""
        self._allocated: dict[str, float] = {}
        """CDI name → when Allocate last handed it out (written by the gRPC threads, under the lock)."""
        self._lock = threading.Lock()
        self._holders: frozenset[str] | None = None
        """CDI names pods held at the last PodResources read (None: unknown)."""
        self._holders_read = False

    @property
    def sink(self) -> node_ports.CdiSink:
        """The spec file itself (the uninstall removes it whole, services/gpu_device/undo.py)."""
        return self._sink

    def allocated(self, resource: devices.Resource, ids: Sequence[str]) -> None:
        """Allocate handed out ``ids``: their entries stay at least ``grace`` seconds from now."""
        now = self._clock()
        with self._lock:
            for device_id in ids:
                name = devices.cdi_name(resource, device_id)
                if name is not None:
                    self._allocated[name] = now

    def sync(self, plan: devices.Plan, device_nodes: Mapping[PciAddress, Sequence[str]], now: float) -> frozenset[str]:
        """Write the spec for ``plan`` plus the withdrawn entries still needed; return the names on disk."""
        if self._entries is None:
            self._entries = self._seed(now)
        wanted = devices.cdi_devices(plan, device_nodes)
        withdrawn = set(self._entries) - {d.name for d in wanted}
        held: frozenset[str] | None = frozenset()
        if not withdrawn:
            self._holders, self._holders_read = None, False  # the next withdrawal reads PodResources at once
        else:
            if not self._holders_read or self._chores.due("held", self._held_interval, now):
                self._holders, self._holders_read = self._read_held(), True
            held = self._holders
        with self._lock:
            allocated = dict(self._allocated)
        decision = cdi_sync.decide_entries(
            wanted, self._entries, held=held, now=now, grace=self._grace, allocated=allocated
        )
        for name in decision.dropped:
            with self._lock:
                self._allocated.pop(name, None)
            self._say.forget(f"kept:{name}")
            log.info("dropped the CDI entry of %s: no pod holds it", name)
        for name, why in sorted(decision.kept.items()):
            self._say(f"kept:{name}", f"keeping the CDI entry of withdrawn {name}: {why.value}")
        self._entries = decision.entries
        try:
            self._sink.write(cdi.build_spec(decision.devices()))
        except (HardwareError, InvalidSpec) as exc:
            self._say("cdi", f"cannot write the CDI spec: {exc}", logging.ERROR)
            return self._read_on_disk()
        self._say.forget("cdi")
        return frozenset(decision.entries)

    def retire(self) -> None:
        """On stop: keep only the entries pods hold (all while that is unknown); no spec when none is held."""
        held = self._read_held()
        if self._entries is None:
            self._entries = self._seed(self._clock())
        keep = {n: e for n, e in self._entries.items() if held is None or n in held}
        try:
            self._sink.write(cdi.build_spec(tuple(keep[n].device for n in sorted(keep))))
        except (HardwareError, InvalidSpec) as exc:
            log.error("%s", exc)
            return
        if keep:
            why = "the kubelet's PodResources cannot be read" if held is None else "pods hold them"
            log.info("kept the CDI entries of %s in the spec: %s", ", ".join(sorted(keep)), why)

    def _seed(self, now: float) -> dict[str, cdi_sync.Entry]:
        """The spec a previous run left (pods may hold its devices): its entries are kept like withdrawn ones."""
        try:
            found = cdi_sync.seed(self._sink.read(), now)
        except HardwareError as exc:
            log.warning("ignoring the CDI spec found at start: %s", exc)
            return {}
        if found:
            log.info("found a CDI spec with %d entries at start: keeping them while needed", len(found))
        return found

    def _read_on_disk(self) -> frozenset[str]:
        try:
            return cdi_sync.names_in(self._sink.read())
        except HardwareError as exc:
            self._say("cdi-read", f"cannot read the CDI spec: {exc}", logging.ERROR)
            return frozenset()

    def _read_held(self) -> frozenset[str] | None:
        """CDI names of the devices pods hold (PodResources); None when that cannot be known."""
        if self._held is None:
            return None
        try:
            held = cdi_sync.held_names(self._held())
        except PortError as exc:
            self._say("held", f"cannot ask the kubelet which devices pods hold: {exc}", logging.WARNING)
            return None
        self._say.forget("held")
        return held
