"""data-exporter's round: every ``sample_interval``, read the GPUs and who holds them; serve the result.

The sampler (this agent's loop thread) reads the hardware port's telemetry once (one mx-smi run) and the
kubelet's PodResources ``List``, folds them into the sample (`metax_core.metrics.telemetry.advance`: each
GPU's faults step the core's verdict machine, as gpu-device's do; a GPU that stops answering keeps its series),
and replaces the `collector.View` scrapes render. A failing read keeps the last good one, counts an error and
says so once; a failed telemetry reading is unknown (`telemetry.failed`: verdicts kept for the grace, then
HealthUnknown). A reading that showed a fault not in force yet brings the next one forward (`Rules.recheck`).
The HTTP server (``/metrics``, ``/healthz``, ``/readyz``) runs on its own threads and never waits on a sampling.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

import attrs
import prometheus_client

from metax_core import release
from metax_core.errors import HardwareError, PortError
from metax_core.metrics import attribution, exposition, names, telemetry
from metax_core.ports import hardware
from services._agent import base, cluster, endpoints
from services.data_exporter import collector
from services.data_exporter.config import Settings

log = logging.getLogger(__name__)

PodDevices = Callable[[], Sequence[attribution.HeldDevices]]
"""The devices each container holds (the kubelet's PodResources ``List``); PortError when it cannot say."""


@attrs.frozen
class Sources:
    """What the exporter samples: the GPUs through the hardware port, the holders through the kubelet."""

    gpus: hardware.GpuTelemetry
    pods: PodDevices | None = None
    """None: no attribution (no kubelet socket configured)."""


class DataExporter(base.NodeAgentBase):
    name = "data-exporter"
    round_chore = "sample"

    def __init__(
        self,
        settings: Settings,
        *,
        hw: Sources,
        ports: cluster.ClusterPorts,
        board: Any = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        # no API access (`cluster.no_api`): the exporter's ServiceAccount is the default one, without a token;
        # no readiness signal either (nothing waits for the exporter): its publisher is never used
        super().__init__(settings, self.name, ports=ports, board=None, log=log, clock=clock)
        self.settings = settings
        self.hw = hw
        self.clock = clock
        self.view = collector.View()
        self.options = exposition.Options(
            hostname=settings.node_name, exported_pod_labels=settings.exported_pod_labels, version=release.running()
        )
        # What changes only per sampling is rendered once per sampling (`served`: its text, the ages' lines); a scrape
        # adds the ages as of now and the process's own metrics (`registry`): cheap whatever the GPU count (P7).
        self.per_sampling = prometheus_client.CollectorRegistry(auto_describe=False)
        self.per_sampling.register(
            collector.SampleCollector(lambda: self.view, self.options, clock, families=names.PER_SAMPLING)
        )
        self.registry = prometheus_client.CollectorRegistry(auto_describe=False)
        prometheus_client.ProcessCollector(registry=self.registry)
        self.served = self._render()
        self.server: endpoints.Endpoints | None = None

    def ready(self) -> tuple[bool, str]:
        if self.view.sample.sampled_at is None:
            return False, "no telemetry sample yet"
        return True, f"serving {len(self.view.sample.gpus)} GPU function(s)"

    def serve(self) -> endpoints.Endpoints:
        """Start the HTTP endpoints (once); OSError (port in use) is a PortError the loop retries."""
        if self.server is None:
            try:
                self.server = endpoints.Endpoints(
                    self.settings.address,
                    self.settings.port,
                    ready=self.ready,
                    routes={"/metrics": self.metrics},
                ).start()
            except OSError as exc:
                raise PortError(f"cannot listen on {self.settings.address}:{self.settings.port}: {exc}") from exc
        return self.server

    def metrics(self, request: endpoints.Request) -> endpoints.Response:
        """``/metrics``: the latest sampling's text, then the ages as of now and the process's metrics."""
        rendered, ages = self.served  # one reference: both from the same sampling
        body = rendered + ages.text(self.clock()) + prometheus_client.generate_latest(self.registry)
        return endpoints.Response(200, body, prometheus_client.CONTENT_TYPE_LATEST)

    def tick(self) -> None:
        try:
            server = self.serve()
            self.say("serve", f"serving /metrics on {self.settings.address}:{server.port}")
        except PortError as exc:  # retried every tick, said once; sampling goes on meanwhile
            self.say("serve", str(exc), logging.ERROR)
            self.probe.not_ready()
        if self.chores.due("sample", self.settings.sample_interval):
            self.sample()
        elif self.server is not None and self.view.sample.sampled_at is not None:
            self.probe.ready("serving metrics")  # written only when it changes

    def sample(self) -> None:
        stats = dict(self.view.stats)
        started = self.clock()
        current = self.view.sample
        rules = self.settings.health_rules
        try:
            current = telemetry.advance(current, self.hw.gpus.telemetry(), self.clock(), rules)
            stats[names.Collector.TELEMETRY] = self._stat(stats, names.Collector.TELEMETRY, started, True)
            self.say("telemetry", f"sampling {len(current.gpus)} GPU function(s)")
        except HardwareError as exc:
            current = telemetry.failed(current, self.clock(), rules, failure=str(exc))
            stats[names.Collector.TELEMETRY] = self._stat(stats, names.Collector.TELEMETRY, started, False)
            self.say(
                "telemetry",
                f"cannot sample the GPUs (health unknown: verdicts kept for {rules.unknown_grace:g} s): {exc}",
                logging.WARNING,
            )
        if current.recheck:  # confirm a new fault (or a recovery) sooner, as gpu-device does
            self.chores.later("sample", rules.recheck_after(self.settings.sample_interval))
        holdings = self.view.holdings
        if self.hw.pods is not None:
            started = self.clock()
            try:
                holdings = attribution.holdings(self.hw.pods())
                stats[names.Collector.POD_RESOURCES] = self._stat(stats, names.Collector.POD_RESOURCES, started, True)
                self.say("pods", f"{len(holdings)} GPU function(s) held by pods")
            except PortError as exc:
                stats[names.Collector.POD_RESOURCES] = self._stat(stats, names.Collector.POD_RESOURCES, started, False)
                self.say(
                    "pods", f"cannot read the kubelet's PodResources, keeping the last holders: {exc}", logging.WARNING
                )
        self.view = collector.View(sample=current, holdings=holdings, stats=stats)
        self.served = self._render()
        if self.server is not None:
            self.probe.ready("serving metrics")

    def _render(self) -> tuple[bytes, collector.Ages]:
        return prometheus_client.generate_latest(self.per_sampling), collector.Ages.of(self.view, self.options)

    def _stat(
        self, stats: dict[names.Collector, exposition.CollectorStats], which: names.Collector, started: float, ok: bool
    ) -> exposition.CollectorStats:
        before = stats.get(which, exposition.CollectorStats())
        return exposition.CollectorStats(
            duration=max(0.0, self.clock() - started), ok=ok, errors=before.errors + (0 if ok else 1)
        )

    def shutdown(self) -> None:
        self.probe.not_ready()
        if self.server is not None:
            self.server.stop()
            self.server = None
        log.info("data-exporter stopped")
