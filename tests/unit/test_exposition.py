"""exposition.py: a cached render is byte for byte what prometheus_client renders, in every format a scrape can
ask for, render after render while values, exemplars and series change."""

from __future__ import annotations

import math

import pytest
from prometheus_client import CollectorRegistry, Counter, Enum, Gauge, Histogram, Info, Summary
from prometheus_client.core import (
    CounterMetricFamily,
    Exemplar,
    GaugeHistogramMetricFamily,
    GaugeMetricFamily,
    StateSetMetricFamily,
)
from prometheus_client.exposition import choose_encoder
from prometheus_client.metrics_core import Metric
from prometheus_client.samples import Exemplar as ExemplarRecord
from prometheus_client.samples import Sample

from copilot_otel.metrics.collectors import LiveSession
from copilot_otel.metrics.registry import Metrics
from copilot_otel.web.exposition import CachedExposition

ACCEPTS = [
    "",  # Prometheus text 0.0.4
    "text/plain;version=1.0.0;escaping=allow-utf-8",
    "text/plain;version=1.0.0;escaping=dots",
    "application/openmetrics-text;version=1.0.0",
    "application/openmetrics-text;version=1.0.0;escaping=values",
    "application/openmetrics-text",
]
ODD = 'a "quoted"\\ back\nnew line, ünïcödé \u2028 \r'


class Custom:
    """Families made at scrape time: timestamps, units, a gauge histogram, a state set, values that change."""

    def __init__(self) -> None:
        self.round = 0

    def collect(self):
        r = self.round
        gauge = GaugeMetricFamily("custom_temperature", "Help with a \\ and a\nnew line.", labels=["where", "odd"],
                                  unit="celsius")
        gauge.add_metric(["in", ODD], [0.0, -0.0, math.nan, math.inf, -math.inf, 1e21, 1.5e-7, 3][r % 6],
                         timestamp=[None, 1.5, 2, 1700000000.123][r % 4])
        gauge.add_metric(["out", ""], -0.0 if r % 2 else 0.0)
        yield gauge
        counter = CounterMetricFamily("custom_things", "Things.", labels=["kind"])
        counter.add_metric(["a"], r, timestamp=r or None)
        yield counter
        yield GaugeHistogramMetricFamily("custom_queue", "Queue.", buckets=[("1", r), ("+Inf", r + 1)], gsum_value=r)
        states = StateSetMetricFamily("custom_state", "State.", labels=["unit"])
        states.add_metric(["x"], {"on": r % 2 == 0, "off": r % 2 == 1})
        yield states
        # Only the timestamp changes (OpenMetrics writes 1 and 1.0 apart), or only the exemplar.
        stamped = GaugeMetricFamily("custom_stamped", "Stamped.", labels=["n"])
        stamped.add_metric(["1"], 1, timestamp=[1, 1.0, 2, None][r % 4])
        yield stamped
        fixed = CounterMetricFamily("custom_fixed", "Fixed.", labels=["n"])
        fixed.add_metric(["1"], 5, exemplar=Exemplar({"trace_id": f"{r % 2}"}, 1))
        fixed.add_metric(["2"], 5, exemplar=Exemplar({"trace_id": "x"}, [1, 1.0, 0.0, -0.0, 2][r % 5]))
        fixed.add_metric(["3"], 5, exemplar=Exemplar({"trace_id": "x"}, 1, [None, 1, 1.0, 2.5][r % 4]))
        yield fixed
        if r % 3 == 1:  # a family that comes and goes
            yield GaugeMetricFamily("custom_sometimes", "Sometimes.", value=r)


def a_registry():
    registry = CollectorRegistry()
    counter = Counter("things", "Things counted.", ["kind"], registry=registry)
    gauge = Gauge("level", "A level.", ["place"], registry=registry)
    histogram = Histogram("latency_seconds", "Latency.", ["route"], registry=registry, buckets=(0.1, 1, 10))
    summary = Summary("sizes_bytes", "Sizes.", registry=registry)
    info = Info("build", "Build.", registry=registry)
    enum = Enum("phase", "Phase.", states=["a", "b"], registry=registry)
    custom = Custom()
    registry.register(custom)

    def change(r: int) -> None:
        custom.round = r
        counter.labels(ODD).inc(r)
        counter.labels(f"k{r % 4}").inc(0.5, {"trace_id": f"{r:032x}", "span_id": ODD[:8]} if r % 2 else None)
        gauge.labels("x").set([0.0, -0.0, math.nan, 7, -math.inf][r % 5])
        histogram.labels(f"r{r % 3}").observe(r * 0.7, {"trace_id": f"{r:032x}"} if r % 3 else None)
        histogram.labels("fixed")
        summary.observe(r)
        info.info({"version": f"1.{r}", "odd": ODD})
        enum.state("ab"[r % 2])

    return registry, change


def test_the_library_internals_the_cache_keys_on_are_the_ones_it_was_written_for():
    """exposition.py keys a line on every field of prometheus_client's Sample and Exemplar and copies a family
    with its samples replaced: a release that adds a field or renames one fails here, by name, not by a stale
    line in production (pyproject.toml pins prometheus-client below 0.27 for this)."""
    assert Sample._fields == ("name", "labels", "value", "timestamp", "exemplar", "native_histogram"), (
        f"prometheus_client's Sample is now {Sample._fields}: _sample_key in web/exposition.py must cover it")
    assert ExemplarRecord._fields == ("labels", "value", "timestamp"), (
        f"prometheus_client's Exemplar is now {ExemplarRecord._fields}: _sample_key in web/exposition.py must cover it")
    family = Metric("things", "Things.", "counter")
    assert set(vars(family)) == {"name", "documentation", "unit", "type", "samples"}, (
        f"prometheus_client's Metric now holds {sorted(vars(family))}: CachedExposition's header key must cover it")


@pytest.mark.parametrize("accept", ACCEPTS)
def test_every_render_is_the_librarys_own(accept):
    registry, change = a_registry()
    encoder, content_type = choose_encoder(accept)
    cached = CachedExposition(encoder, openmetrics=content_type.startswith("application/openmetrics-text"))
    for r in range(12):
        change(r)
        assert cached(registry) == encoder(registry), f"round {r}"
        assert cached(registry) == encoder(registry), f"round {r}, nothing changed"


@pytest.mark.parametrize("accept", ACCEPTS[::3])
def test_the_daemons_registry_under_a_flood_of_tool_names(accept):
    sessions = [LiveSession("s1", "working")]
    metrics = Metrics(resource={"service.name": "copilot-otel"}, max_label_values=20)
    metrics.add_live_sessions(lambda: sessions)
    encoder, content_type = choose_encoder(accept)
    cached = CachedExposition(encoder, openmetrics=content_type.startswith("application/openmetrics-text"))
    for n in range(60):
        tool = metrics.labels.value("tool", f"mcp-tool-{n:06d}")
        metrics.tool_calls.labels(tool, "success").inc(1, {"trace_id": f"{n:032x}", "span_id": f"{n:016x}"})
        metrics.tool_duration.labels(tool).observe(n / 10, {"trace_id": f"{n:032x}", "span_id": f"{n:016x}"})
        metrics.count_event("tool.execution_complete")
        if n % 7 == 0:
            sessions.append(LiveSession(f"s{n}", "stuck", stalled_seconds=n, tool=tool))
        if n % 5 == 0:
            body = encoder(metrics.registry)
            assert cached(metrics.registry) == body or _only_process_figures_differ(cached(metrics.registry), body)


def _only_process_figures_differ(a: bytes, b: bytes) -> bool:
    """The process collector reads CPU time and memory afresh at each render: those lines may differ."""
    lines_a, lines_b = a.split(b"\n"), b.split(b"\n")
    return len(lines_a) == len(lines_b) and all(x == y or (x.startswith(b"process_") and y.startswith(b"process_"))
                                                for x, y in zip(lines_a, lines_b))
