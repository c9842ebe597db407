"""metrics/otlp_push.py and its configuration: the registry as OpenTelemetry metrics data (sums, gauges,
histograms with per-bucket counts), OTEL_METRICS_EXPORTER and the OTLP metrics variables, and a
push that fails without raising."""

from __future__ import annotations

import pytest
from opentelemetry.sdk.metrics.export import Gauge, Histogram, MetricExporter, MetricExportResult, Sum
from opentelemetry.sdk.resources import Resource

from copilot_otel.config import Config, ConfigError, OtlpSettings
from copilot_otel.metrics.families import LLM_BUCKETS
from copilot_otel.metrics.otlp_push import MetricsPusher, metrics_data
from copilot_otel.metrics.registry import Metrics
from copilot_otel.model.records import MetricUpdate
from copilot_otel.vocab import Metric

RESOURCE = Resource({"service.name": "copilot-otel", "team": "octo"})


def test_the_registry_becomes_sums_gauges_and_histograms():
    """Counters are cumulative monotonic sums named without _total, gauges gauges, histograms keep their
    bounds with Prometheus' cumulative buckets turned into counts per bucket; target_info stays out."""
    metrics = Metrics(process=False, resource={"team": "octo"})
    metrics.apply(MetricUpdate(Metric.PREMIUM_REQUESTS, ("m", "o/r"), 2.0))
    for seconds in (0.3, 0.3, 7.0):
        metrics.apply(MetricUpdate(Metric.LLM_CALL_DURATION, ("m",), seconds))
    data = metrics_data(metrics.registry, RESOURCE, 100, 200)
    (resource_metrics,) = data.resource_metrics
    assert resource_metrics.resource is RESOURCE
    by_name = {m.name: m for m in resource_metrics.scope_metrics[0].metrics}
    assert "target_info" not in by_name and "target" not in by_name
    premium = by_name["copilot_premium_requests"].data
    assert isinstance(premium, Sum) and premium.is_monotonic
    assert [(p.attributes, p.value, p.start_time_unix_nano, p.time_unix_nano) for p in premium.data_points] == [
        ({"model": "m", "repository": "o/r"}, 2.0, 100, 200)]
    assert isinstance(by_name["copilot_otel_build_info"].data, Gauge)
    duration = by_name["copilot_llm_call_duration_seconds"]
    assert isinstance(duration.data, Histogram) and duration.unit == "s"
    (point,) = duration.data.data_points
    assert (point.count, point.sum, point.attributes) == (3, pytest.approx(7.6), {"model": "m"})
    assert list(point.explicit_bounds) == list(LLM_BUCKETS) == [0.25, 0.5, 1, 2, 4, 8, 15, 30, 60, 120, 300]
    assert list(point.bucket_counts) == [0, 2, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0]  # 0.3 twice in (0.25, 0.5], 7 in (4, 8]


@pytest.mark.parametrize("environ,expected", [
    ({}, None),
    ({"OTEL_METRICS_EXPORTER": "prometheus"}, None),
    ({"OTEL_METRICS_EXPORTER": "none"}, None),
    ({"OTEL_METRICS_EXPORTER": "otlp"}, OtlpSettings(None, "grpc")),
    ({"OTEL_METRICS_EXPORTER": "prometheus, OTLP", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318",
      "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"}, OtlpSettings("http://127.0.0.1:4318", "http/protobuf")),
    ({"OTEL_METRICS_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4317",
      "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT": "http://127.0.0.1:9/v1/metrics",
      "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL": "http/protobuf"}, OtlpSettings("http://127.0.0.1:9/v1/metrics",
                                                                           "http/protobuf")),
])
def test_where_metrics_are_pushed(environ, expected):
    """OTEL_METRICS_EXPORTER names otlp (in a list, any case): the metrics-specific variables win over the
    generic ones; otherwise nothing is pushed (Prometheus pull is always served)."""
    assert Config.from_env(environ).metrics_otlp == expected


@pytest.mark.parametrize("environ,message", [
    ({"OTEL_METRICS_EXPORTER": "statsd"}, "OTEL_METRICS_EXPORTER='statsd': statsd is not supported"),
    ({"OTEL_METRICS_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL": "http/json"},
     "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL='http/json' is not supported"),
    ({"OTEL_METRICS_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT": "localhost:4317"},
     "OTLP endpoint 'localhost:4317' is not a URL"),
])
def test_a_bad_metrics_setting_is_one_clear_error(environ, message):
    """Each bad variable is named at start-up."""
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        Config.from_env(environ)


class _Refusing(MetricExporter):
    """An exporter whose backend refuses (or, with ``raises``, that raises): what the real ones do is
    tested against a real receiver in tests/e2e/test_cost.py."""

    def __init__(self, raises: bool = False) -> None:
        super().__init__()
        self.raises, self.exports, self.closed = raises, 0, False

    def export(self, metrics_data, timeout_millis: float = 10_000, **kwargs) -> MetricExportResult:
        self.exports += 1
        if self.raises:
            raise RuntimeError("boom")
        return MetricExportResult.FAILURE

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        return True

    def shutdown(self, timeout_millis: float = 30_000, **kwargs) -> None:
        self.closed = True


@pytest.mark.parametrize("raises", [False, True])
def test_a_failed_push_is_counted_never_raised(raises):
    """A refused or raising export is a failed push; stop() still pushes once more and closes the exporter."""
    exporter = _Refusing(raises)
    pusher = MetricsPusher(Metrics(process=False).registry, exporter, RESOURCE, interval=3600)
    assert pusher.push() is False
    assert pusher.start().stop() is False
    assert (exporter.exports, pusher.failures, exporter.closed) == (2, 2, True)


def _floats(message) -> list[float]:
    """Every float (double) value set anywhere in a protobuf message, nested messages and lists included."""
    found = []
    for descriptor, value in message.ListFields():
        values = value if descriptor.is_repeated else [value]
        for item in values:
            if descriptor.type == descriptor.TYPE_MESSAGE:
                found.extend(_floats(item))
            elif descriptor.type in (descriptor.TYPE_DOUBLE, descriptor.TYPE_FLOAT):
                found.append(item)
    return found


def test_the_push_on_the_wire_holds_no_nan():
    """A push over OTLP/HTTP, decoded as the ExportMetricsServiceRequest the backend gets: no NaN in any
    field. The registry's histograms leave min and max out (Prometheus keeps none), the GenAI instruments
    send the real ones."""
    import math

    from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest

    from copilot_otel.metrics.genai import GenAi
    from copilot_otel.metrics.otlp_push import OtlpMetricExporter
    from tests.support.backends import MetricsHttp

    metrics = Metrics(process=False)
    for seconds in (0.3, 7.0):
        metrics.apply(MetricUpdate(Metric.LLM_CALL_DURATION, ("m",), seconds))
        metrics.apply(MetricUpdate(GenAi.EXECUTE_TOOL_DURATION, ("bash", "function", "", ""), seconds))
    with MetricsHttp() as backend:
        exporter = OtlpMetricExporter(OtlpSettings(f"{backend.base}/v1/metrics", "http/protobuf"))
        pusher = MetricsPusher(metrics.registry, exporter, RESOURCE, interval=3600, genai=metrics.genai)
        assert pusher.push() is True
        exporter.shutdown()
    (body,) = backend.requests
    request = ExportMetricsServiceRequest.FromString(body)
    floats = _floats(request)
    assert floats and not [value for value in floats if math.isnan(value)]
    histograms = {m.name: m.histogram.data_points[0] for m in request.resource_metrics[0].scope_metrics[0].metrics
                  if m.HasField("histogram")}
    registry_point = histograms["copilot_llm_call_duration_seconds"]
    assert registry_point.count == 2 and not registry_point.HasField("min") and not registry_point.HasField("max")
    genai_point = histograms[GenAi.EXECUTE_TOOL_DURATION.value]
    assert (genai_point.min, genai_point.max) == (0.3, 7.0)
