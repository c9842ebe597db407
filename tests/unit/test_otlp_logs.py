"""delivery/otlp_logs.py and the logs settings: what turns the logs signal on, and the request a log record becomes."""

from __future__ import annotations

import pytest

from copilot_otel.base.parsing import ConfigError
from copilot_otel.config import Config
from copilot_otel.delivery.otlp_logs import encode_logs
from copilot_otel.model.logs import SEVERITY_ERROR, LogRecord
from copilot_otel.otlp.settings import OtlpSettings


def test_logs_are_off_unless_otel_logs_exporter_names_otlp():
    """Unset or none: no logs (the daemon has always exported traces and metrics only); otlp takes the logs
    endpoint, else the generic one; the model makes log records only then."""
    assert OtlpSettings.logs_from_env({}) is None
    assert OtlpSettings.logs_from_env({"OTEL_LOGS_EXPORTER": "none",
                                       "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4317"}) is None
    generic = OtlpSettings.logs_from_env({"OTEL_LOGS_EXPORTER": "otlp",
                                          "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4317"})
    assert generic is not None and (generic.endpoint, generic.protocol) == ("http://127.0.0.1:4317", "grpc")
    own = OtlpSettings.logs_from_env({"OTEL_LOGS_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://a:4317",
                                      "OTEL_EXPORTER_OTLP_LOGS_ENDPOINT": "http://b:4318/v1/logs",
                                      "OTEL_EXPORTER_OTLP_LOGS_PROTOCOL": "http/protobuf"})
    assert own is not None and (own.endpoint, own.protocol) == ("http://b:4318/v1/logs", "http/protobuf")
    assert not Config.from_env({}).model.logs
    assert Config.from_env({"OTEL_LOGS_EXPORTER": "otlp",
                            "OTEL_EXPORTER_OTLP_LOGS_ENDPOINT": "http://127.0.0.1:4317"}).model.logs


@pytest.mark.parametrize("env, said", [
    ({"OTEL_LOGS_EXPORTER": "otlp"}, "needs an endpoint"),
    ({"OTEL_LOGS_EXPORTER": "console"}, "console is not supported"),
    ({"OTEL_LOGS_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_LOGS_ENDPOINT": "localhost:4317"}, "is not a URL"),
])
def test_a_logs_setting_that_cannot_work_is_refused_at_start(env, said):
    """A setting that could deliver nothing is a ConfigError naming what to fix, before anything starts."""
    with pytest.raises(ConfigError, match=said):
        Config.from_env(env)


def test_a_record_becomes_one_log_record_of_the_request():
    """Time, severity, event name, body, attributes (clamped like a span's) and the span link; the resource once."""
    records = [LogRecord(1_796_299_200_000_000_000, "github.copilot.api_error", SEVERITY_ERROR,
                         {"event.name": "github.copilot.api_error", "http.response.status_code": 500,
                          "huge": 10 ** 30, "flag": True, "share": 0.5}, trace_id=7, span_id=9, body="text"),
               LogRecord(5, "github.copilot.session_end", 9, {"event.name": "github.copilot.session_end"})]
    request = encode_logs(records, {"host.name": "box", "service.name": "copilot-otel"})
    (resource_logs,) = request.resource_logs
    assert {kv.key: kv.value.string_value for kv in resource_logs.resource.attributes} == {
        "host.name": "box", "service.name": "copilot-otel"}
    error, end = resource_logs.scope_logs[0].log_records
    assert (error.time_unix_nano, error.severity_number, error.severity_text, error.event_name, error.body.string_value
            ) == (1_796_299_200_000_000_000, 17, "ERROR", "github.copilot.api_error", "text")
    assert error.trace_id == (7).to_bytes(16, "big") and error.span_id == (9).to_bytes(8, "big") and error.flags == 1
    values = {kv.key: kv.value for kv in error.attributes}
    assert values["http.response.status_code"].int_value == 500 and values["huge"].int_value == (1 << 63) - 1
    assert values["flag"].bool_value is True and values["share"].double_value == 0.5
    assert end.trace_id == b"" and end.span_id == b"" and not end.HasField("body")
