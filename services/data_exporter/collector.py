"""The prometheus-client side of the exporter: a custom Collector that renders the latest sample.

Why a custom Collector (client_python's pattern) on its own registry: ``collect()`` runs on every scrape, so
it must only render what the sampler already has (`metax_core.metrics.exposition`), never read the hardware;
``describe()`` lets the registry know the families without a collect at registration.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import attrs
from prometheus_client import metrics_core
from prometheus_client.registry import Collector

from metax_core.metrics import attribution, exposition, names
from metax_core.metrics.telemetry import Sample


@attrs.frozen
class View:
    """What a scrape renders: replaced whole by the sampler (one reference assignment), read by scrapes."""

    sample: Sample = Sample()
    holdings: attribution.Holdings = attrs.field(factory=dict)
    stats: dict[names.Collector, exposition.CollectorStats] = attrs.field(factory=dict)


def _family(family: names.Family, exported: bool) -> metrics_core.Metric:
    keys = list(family.label_keys(exported))
    if family.kind is names.Kind.COUNTER:
        return metrics_core.CounterMetricFamily(family.name, family.help, labels=keys)
    if family.kind is names.Kind.INFO:
        return metrics_core.InfoMetricFamily(family.name, family.help, labels=[])
    return metrics_core.GaugeMetricFamily(family.name, family.help, labels=keys, unit="")


class SampleCollector(Collector):
    def __init__(self, view: Callable[[], View], options: exposition.Options, clock: Callable[[], float]) -> None:
        self._view = view
        self._options = options
        self._clock = clock

    def describe(self) -> Iterator[metrics_core.Metric]:
        for family in names.ALL:
            yield _family(family, self._options.exported_pod_labels)

    def collect(self) -> Iterator[metrics_core.Metric]:
        view = self._view()
        exported = self._options.exported_pod_labels
        for series in exposition.render(view.sample, view.holdings, view.stats, self._options, self._clock()):
            metric = _family(series.family, exported)
            keys = series.family.label_keys(exported)
            for values, value in series.samples:
                if isinstance(metric, metrics_core.InfoMetricFamily):
                    metric.add_metric([], dict(zip(keys, values, strict=True)))
                elif isinstance(metric, metrics_core.CounterMetricFamily):
                    metric.add_metric(list(values), value)
                else:
                    assert isinstance(metric, metrics_core.GaugeMetricFamily)
                    metric.add_metric(list(values), value)
            yield metric
