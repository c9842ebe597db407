"""OTLP metrics push (OTEL_METRICS_EXPORTER=otlp): the metrics of the Prometheus registry, every one, as
OpenTelemetry metrics data, pushed over OTLP (gRPC or HTTP) by the SDK's periodic reader and our exporter.

The registry stays the one place the metrics live, so /metrics and the push always say the same.
Counters become cumulative monotonic sums, gauges gauges, histograms explicit-bucket histograms with
the same bounds. Names stay the Prometheus ones (a counter without its ``_total``, which a Prometheus
or Mimir OTLP endpoint adds back), so the dashboards and alert rules in deploy/ work on pushed
metrics too. ``target_info`` is not sent: the resource itself carries that identity. A series' exemplar (the
span of its latest update, one per histogram bucket) goes with its data point. The GenAI semantic-convention
instruments the CLI's own OTel exports (metrics/genai.py) go with them, under the CLI's names.

The data is encoded by the SDK's encoder and sent by otlp/transport.py, as the traces are: the SDK's
exporters count any 2xx (and 3xx) as a delivery and their HTTP timeout bounds each socket operation,
not the push, so a backend that trickles its answer held a push (and the daemon's stop) for good.
"""

from __future__ import annotations

import logging
import math
import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from opentelemetry.sdk.metrics import Exemplar
from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    Gauge,
    Histogram,
    HistogramDataPoint,
    Metric,
    MetricExporter,
    MetricExportResult,
    MetricsData,
    NumberDataPoint,
    ResourceMetrics,
    ScopeMetrics,
    Sum,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from prometheus_client import CollectorRegistry

from ..base.redact import redact, redact_url
from ..otlp.answers import Signal
from ..otlp.contract import ExportError
from ..otlp.json_encoder import SCOPE_NAME
from ..otlp.retry import Backoff, RetryPolicy
from ..otlp.settings import ENV_OTLP_METRICS_ENDPOINT, OtlpSettings
from ..version import __version__
from .genai import GenAiMetrics
from .labels import SPAN_ID, TRACE_ID

log = logging.getLogger(__name__)

ENV_EXPORT_INTERVAL = "OTEL_METRIC_EXPORT_INTERVAL"  # milliseconds, as the SDK reads it
DEFAULT_INTERVAL = 60.0
ABANDON_WAIT = 1.0  # seconds for the pushing thread to end once its push in flight was abandoned
_SCOPE = InstrumentationScope(SCOPE_NAME, __version__)
_CUMULATIVE = AggregationTemporality.CUMULATIVE


def _interval_from_env() -> float:
    try:
        seconds = float(os.environ.get(ENV_EXPORT_INTERVAL, "")) / 1000.0
    except ValueError:
        return DEFAULT_INTERVAL
    return seconds if math.isfinite(seconds) and seconds > 0 else DEFAULT_INTERVAL


def metrics_signal() -> Signal:
    """OTLP metrics: /v1/metrics, MetricsService/Export, ExportMetricsServiceResponse."""
    from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceResponse

    return Signal("metrics", "v1/metrics", "/opentelemetry.proto.collector.metrics.v1.MetricsService/Export",
                  ExportMetricsServiceResponse, "rejected_data_points", "data points", ENV_OTLP_METRICS_ENDPOINT)


class OtlpMetricExporter(MetricExporter):
    """The SDK's MetricExporter over otlp/transport.py: one request per push, within the OTLP timeout, a
    delivery only when the backend's answer is one. ``last_error`` says why the last push failed."""

    def __init__(self, settings: OtlpSettings) -> None:
        super().__init__()
        from opentelemetry.exporter.otlp.proto.common.metrics_encoder import encode_metrics

        from ..otlp.transport import make_transport

        self._encode = encode_metrics
        self._transport = make_transport(settings, metrics_signal())
        self.description = self._transport.description
        self.last_error: str | None = None
        self.last_reason: str | None = None  # ExportError.reason of the last failure
        self.last_exception: ExportError | None = None  # the last failure (the retry policy reads its delay)

    def export(self, metrics_data: MetricsData, timeout_millis: float | None = None,
               **kwargs: Any) -> MetricExportResult:
        """Push once, within ``timeout_millis`` (at most the OTLP timeout); SUCCESS only for a delivery."""
        try:
            receipt = self._transport.send(self._encode(metrics_data).SerializeToString(),
                                           None if timeout_millis is None else timeout_millis / 1000)
        except ExportError as exc:
            self.last_error, self.last_reason, self.last_exception = redact(str(exc)), exc.reason, exc
            return MetricExportResult.FAILURE
        self.last_error = self.last_reason = self.last_exception = None
        if receipt.rejected or receipt.message:
            log.warning("%s accepted the metrics but dropped %d data point(s): %s", self.description,
                        receipt.rejected, receipt.message or "no reason given")
        return MetricExportResult.SUCCESS

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        """Nothing is buffered here."""
        return True

    def abort(self) -> None:
        """End a push in flight now (it fails)."""
        self._transport.abort()

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
        """Close the channel or session."""
        self._transport.close()


def make_exporter(settings: OtlpSettings) -> MetricExporter:
    """The exporter that pushes to where the settings say (OTEL_EXPORTER_OTLP_(METRICS_)*)."""
    return OtlpMetricExporter(settings)


def metrics_data(registry: CollectorRegistry, resource: Resource, start_ns: int, now_ns: int,
                 genai: GenAiMetrics | None = None, starts: Mapping[str, int] | None = None) -> MetricsData:
    """What the registry (and the GenAI instruments) hold now, as OpenTelemetry metrics data (cumulative
    since ``start_ns``, or since ``starts[name]`` for a family whose totals a run before began)."""
    metrics = [] if genai is None else genai.data(start_ns, now_ns)
    begun = start_ns
    for family in registry.collect():
        start_ns = starts.get(family.name, begun) if starts else begun
        data: Any = None
        if family.type == "counter":
            points = _numbers(family.samples, family.name + "_total", start_ns, now_ns)
            data = Sum(points, _CUMULATIVE, is_monotonic=True) if points else None
        elif family.type == "gauge":
            points = _numbers(family.samples, family.name, start_ns, now_ns)
            data = Gauge(points) if points else None
        elif family.type == "histogram":
            buckets = _histogram_points(family.name, family.samples, start_ns, now_ns)
            data = Histogram(buckets, _CUMULATIVE) if buckets else None
        if data is not None:
            unit = "s" if family.unit == "seconds" or family.name.endswith("_seconds") else ""
            metrics.append(Metric(family.name, family.documentation, unit, data))
    return MetricsData([ResourceMetrics(resource, [ScopeMetrics(_SCOPE, metrics, "")], resource.schema_url)])


def _numbers(samples: Iterable[Any], name: str, start_ns: int, now_ns: int) -> list[NumberDataPoint]:
    return [NumberDataPoint(dict(s.labels), start_ns, now_ns, s.value, _exemplars(s)) for s in samples
            if s.name == name]


def _exemplars(sample: Any) -> list[Exemplar]:
    """A sample's exemplar (labels.exemplar_labels: the span it was measured on) as an OTLP exemplar."""
    found = sample.exemplar
    if found is None:
        return []
    try:
        trace_id, span_id = int(found.labels[TRACE_ID], 16), int(found.labels[SPAN_ID], 16)
    except (KeyError, ValueError):
        return []
    return [Exemplar({}, found.value, int(found.timestamp * 1e9), span_id, trace_id)]


def _histogram_points(name: str, samples: Iterable[Any], start_ns: int, now_ns: int) -> list[HistogramDataPoint]:
    """Prometheus' cumulative buckets (le) -> OTLP per-bucket counts, one point per label set."""
    series: dict[tuple, dict[str, Any]] = {}
    for sample in samples:
        labels = {k: v for k, v in sample.labels.items() if k != "le"}
        entry = series.setdefault(tuple(sorted(labels.items())), {"labels": labels, "buckets": [], "sum": 0.0,
                                                                  "count": 0, "exemplars": []})
        if sample.name == name + "_bucket":
            entry["buckets"].append((float(sample.labels["le"]), sample.value))
            entry["exemplars"].extend(_exemplars(sample))
        elif sample.name == name + "_sum":
            entry["sum"] = sample.value
        elif sample.name == name + "_count":
            entry["count"] = int(sample.value)
    points = []
    for entry in series.values():
        buckets = sorted(entry["buckets"])
        cumulative = [count for _le, count in buckets]
        counts = [int(c - p) for c, p in zip(cumulative, [0.0] + cumulative[:-1])]
        bounds = [le for le, _count in buckets if math.isfinite(le)]
        # A Prometheus histogram keeps no min or max: they are left out (OTLP's optional fields), never NaN.
        points.append(HistogramDataPoint(entry["labels"], start_ns, now_ns, entry["count"], entry["sum"], counts,
                                         bounds, None, None, entry["exemplars"]))  # type: ignore[arg-type]
        # (the SDK's dataclass types min and max as float; its encoder leaves out what is None)
    return points


class MetricsPusher:
    """Pushes the registry over OTLP every ``interval`` seconds (OTEL_METRIC_EXPORT_INTERVAL), once
    more at ``stop``; a failed push is logged, counted (``on_result`` gets its reason; None for a push that went
    through) and said by ``note()``, never raised (the daemon goes on)."""

    def __init__(self, registry: CollectorRegistry, exporter: MetricExporter, resource: Resource, *,
                 interval: float | None = None, clock=time.time_ns, genai: GenAiMetrics | None = None,
                 on_result: Callable[[str | None], None] = lambda reason: None,
                 starts: Callable[[], Mapping[str, int]] = dict, retry: RetryPolicy = RetryPolicy()) -> None:
        self.registry = registry
        self._backoff = Backoff(retry)
        self._starts = starts  # families counting since before this process (resumed totals): their start
        self.genai = genai
        self.exporter = exporter
        self.resource = resource
        self.interval = interval if interval is not None else _interval_from_env()
        self._clock = clock
        self._start_ns = clock()  # counters count from this process' start
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.pushes = self.failures = 0
        self._on_result = on_result
        self.failing: tuple[int, float, str] | None = None  # pushes failed in a row, since when, the last error

    def push(self, timeout: float | None = None) -> bool:
        """Send what the registry holds now (within ``timeout`` seconds, if given); True if the backend accepted it."""
        data = metrics_data(self.registry, self.resource, self._start_ns, self._clock(), self.genai, self._starts())
        try:
            if timeout is None:
                result = self.exporter.export(data)
            else:
                result = self.exporter.export(data, timeout_millis=timeout * 1000)
        except Exception:  # an exporter should not raise; a daemon must not die of one that does
            log.exception("OTLP metrics export raised")
            result = MetricExportResult.FAILURE
        ok = result is MetricExportResult.SUCCESS
        self.pushes += 1
        if ok:
            if self.failing is not None:
                log.info("OTLP metrics push works again, after %d failed push(es)", self.failing[0])
            self.failing = None
            self._on_result(None)
            return ok
        self.failures += 1
        why = getattr(self.exporter, "last_error", None) or "OTLP metrics export failed"
        count, since = (self.failing[0], self.failing[1]) if self.failing is not None else (0, time.time())
        self.failing = (count + 1, since, why)
        self._on_result(getattr(self.exporter, "last_reason", None) or "error")
        log.warning("%s; the next push sends the totals again", why)
        return ok

    def note(self) -> str | None:
        """What /healthz says of the push while it fails (None while it works)."""
        failing = self.failing
        if failing is None:
            return None
        count, since, why = failing
        return (f"metrics push failing, {count} push(es) in a row since {time.strftime('%H:%M:%S', time.gmtime(since))}"
                f" UTC; last: {why}")

    def start(self) -> MetricsPusher:
        """Push every ``interval`` seconds on a thread of its own."""
        self._thread = threading.Thread(target=self._run, name="copilot-otel-metrics-push", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        wait = self.interval
        while not self._stop.wait(wait):
            wait = self.next_wait(self.push())

    def next_wait(self, delivered: bool) -> float:
        """Seconds to the next push after one that was ``delivered`` or not: the interval, or sooner as the retry
        policy says after a failure (every push sends the totals, so a retry never waits past the next push), or as
        long as the backend asked (Retry-After, RetryInfo; capped by the policy)."""
        if delivered:
            self._backoff.reset()
            return self.interval
        error = getattr(self.exporter, "last_exception", None)
        wait = self._backoff.next(error)
        return wait if getattr(error, "retry_after", None) is not None else min(wait, self.interval)

    def stop(self, timeout: float = 10.0) -> bool:
        """Stop the thread (abandoning a push in flight), push the final totals within ``timeout`` seconds, close
        the exporter; True if that last push went through."""
        self._stop.set()
        abort = getattr(self.exporter, "abort", None)
        deadline = time.monotonic() + ABANDON_WAIT
        while self._thread is not None and self._thread.is_alive() and time.monotonic() < deadline:
            if abort is not None:
                abort()
            self._thread.join(0.05)
        try:
            return self.push(timeout)
        finally:
            self.exporter.shutdown(timeout_millis=timeout * 1000)


def start_pushing(settings: OtlpSettings, registry: CollectorRegistry, genai: GenAiMetrics | None = None, *,
                  resource: Mapping[str, Any] | None = None,
                  on_result: Callable[[str | None], None] = lambda reason: None,
                  starts: Callable[[], Mapping[str, int]] = dict) -> MetricsPusher:
    """A started pusher of ``registry`` (and the GenAI instruments) to where the settings say
    (OTEL_METRICS_EXPORTER=otlp), under ``resource`` (the attributes every span carries)."""
    from ..otlp.resource import build_resource

    pusher = MetricsPusher(registry, make_exporter(settings), build_resource(resource), genai=genai,
                           on_result=on_result, starts=starts)
    log.info("pushing metrics every %g s over OTLP (%s) to %s", pusher.interval, settings.protocol,
             redact_url(settings.endpoint) if settings.endpoint else "the exporter's default endpoint")
    return pusher.start()
