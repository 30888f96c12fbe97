"""Prometheus metrics through prometheus-client: one `CollectorRegistry` per
engine or worker, never the process-wide default one, so several engines in
one process keep their metrics apart.

Imported only when metrics are first asked for (`Engine.metrics`,
`Engine.metrics_registry` and the worker's), so a process that never
exposes them does not load prometheus-client.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Final, final

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from .._base._observe import Labels, Metrics

GaugeSample = tuple[str, Labels, float]

# The gauges an engine reports besides its counts: name to help text.
ENGINE_GAUGES: Final = {
    "trio_durable_leases_held": "Runs whose lease this engine holds (a turn in flight).",
    "trio_durable_queue_limit": "Steps of a flow-control queue that may run at once, fleet-wide.",
    "trio_durable_queue_admitted": (
        "Steps holding a slot of a flow-control queue, fleet-wide, as last read from the store."
    ),
    "trio_durable_queue_waiting": (
        "Steps waiting for a slot of a flow-control queue, fleet-wide, as last read from the store."
    ),
}


def _order(sample: tuple[tuple[str, Labels], float]) -> tuple[str, Labels, float]:
    # A histogram's buckets in the order of their bounds, not as strings.
    (name, labels), _ = sample
    le = dict(labels).get("le")
    rest = tuple(pair for pair in labels if pair[0] != "le")
    return (name, rest, 0.0 if le is None else float(le))


@final
class _Collector(Collector):
    """Reads the counts (and gauges) of an engine or worker each time the
    registry is collected."""

    def __init__(
        self,
        counts: Callable[[], Sequence[Metrics]],
        gauge_help: Mapping[str, str],
        gauges: Callable[[], Iterable[GaugeSample]],
    ) -> None:
        self._counts = counts
        self._gauge_help = gauge_help
        self._gauges = gauges

    def collect(self) -> Iterable[Metric]:
        values: dict[tuple[str, Labels], float] = {}
        for metrics in self._counts():
            for key, value in metrics.samples().items():
                values[key] = values.get(key, 0.0) + value
        for family, (kind, help_text) in Metrics.FAMILIES.items():
            metric = Metric(family, help_text, kind)
            for (name, labels), value in sorted(values.items(), key=_order):
                if name == family or name.startswith(family + "_"):
                    metric.add_sample(name, dict(labels), value)
            yield metric
        gauges: dict[str, Metric] = {
            name: Metric(name, help_text, "gauge") for name, help_text in self._gauge_help.items()
        }
        for name, labels, value in self._gauges():
            gauges[name].add_sample(name, dict(labels), value)
        yield from gauges.values()


def _no_gauges() -> Iterable[GaugeSample]:
    return ()


def metrics_registry(
    counts: Callable[[], Sequence[Metrics]],
    gauge_help: Mapping[str, str] | None = None,
    gauges: Callable[[], Iterable[GaugeSample]] = _no_gauges,
) -> CollectorRegistry:
    """A registry of its own whose one collector reads ``counts`` (summed)
    and ``gauges`` (families named in ``gauge_help``) at each scrape."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Collector(counts, gauge_help or {}, gauges))
    return registry


def render(registry: CollectorRegistry) -> str:
    """``registry``'s metrics in the Prometheus text format (0.0.4)."""
    return generate_latest(registry).decode()
