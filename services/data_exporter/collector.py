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
    """Renders ``families`` of the view on each collect (the exporter keeps two: the families that change per
    sampling, rendered once per sampling, and the ages, rendered per scrape)."""

    def __init__(
        self,
        view: Callable[[], View],
        options: exposition.Options,
        clock: Callable[[], float],
        families: tuple[names.Family, ...] = names.ALL,
    ) -> None:
        self._view = view
        self._options = options
        self._clock = clock
        self._families = families

    def describe(self) -> Iterator[metrics_core.Metric]:
        for family in self._families:
            yield _family(family, self._options.exported_pod_labels)

    def collect(self) -> Iterator[metrics_core.Metric]:
        view = self._view()
        exported = self._options.exported_pod_labels
        rendered = exposition.render(
            view.sample, view.holdings, view.stats, self._options, self._clock(), families=self._families
        )
        for series in rendered:
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


def _escape(value: str) -> str:
    """A label value as the text format writes it (backslash, double quote and newline escaped)."""
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


@attrs.frozen
class Ages:
    """The age families, laid out once per sampling: each line's name and labels and the time it counts from,
    so a scrape only subtracts (`text`); rendering 80 GPUs' labels per scrape cost more than the rest of it."""

    head: dict[names.Family, str]
    lines: dict[names.Family, tuple[tuple[str, float], ...]]

    @classmethod
    def of(cls, view: View, options: exposition.Options) -> Ages:
        head: dict[names.Family, str] = {}
        lines: dict[names.Family, tuple[tuple[str, float], ...]] = {}
        for series in exposition.origins(view.sample, view.holdings, options):
            family = series.family
            head[family] = f"# HELP {family.name} {_help(family.help)}\n# TYPE {family.name} {family.kind.value}\n"
            keys = family.label_keys(options.exported_pod_labels)
            lines[family] = tuple(
                (
                    family.name
                    + "{"
                    + ",".join(f'{k}="{_escape(v)}"' for k, v in zip(keys, values, strict=True))
                    + "} ",
                    origin,
                )
                for values, origin in series.samples
            )
        return cls(head, lines)

    def text(self, now: float) -> bytes:
        parts: list[str] = []
        for family, head in self.head.items():
            parts.append(head)
            parts += [f"{prefix}{max(0.0, now - origin)!r}\n" for prefix, origin in self.lines[family]]
        return "".join(parts).encode()
