"""Log records out over OTLP (gRPC or HTTP/protobuf), one ExportLogsServiceRequest per call.

The records are encoded straight into the opentelemetry-proto messages (the SDK's log encoder wants its own
log objects, which are not ours to build), and sent by the transport the spans use (otlp/transport.py), so
that an answer means the same for both signals (otlp/answers.py). What a record holds: model/logs.py.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..model.logs import SEVERITY_TEXT, LogRecord
from ..otlp.answers import Signal
from ..otlp.json_encoder import SCOPE_NAME
from ..otlp.limits import DEFAULT_MAX_REQUEST_BYTES, clamp_time, clean_attributes
from ..otlp.settings import ENV_OTLP_LOGS_ENDPOINT, OtlpSettings
from ..version import __version__
from .otlp_request import OtlpRequestSink


def logs_signal() -> Signal:
    """OTLP logs: /v1/logs, LogsService/Export, ExportLogsServiceResponse."""
    from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceResponse

    return Signal("logs", "v1/logs", "/opentelemetry.proto.collector.logs.v1.LogsService/Export",
                  ExportLogsServiceResponse, "rejected_log_records", "log records", ENV_OTLP_LOGS_ENDPOINT)


def _any_value(target: Any, value: Any) -> None:
    """Set an AnyValue message from a plain value (lists become arrays; anything else its text)."""
    if isinstance(value, bool):
        target.bool_value = value
    elif isinstance(value, int):
        target.int_value = value
    elif isinstance(value, float):
        target.double_value = value
    elif isinstance(value, (list, tuple)):
        for item in value:
            _any_value(target.array_value.values.add(), item)
    else:
        target.string_value = value if isinstance(value, str) else str(value)


def _key_values(target: Any, attributes: Mapping[str, Any]) -> None:
    for key, value in clean_attributes(attributes).items():
        pair = target.add()
        pair.key = key
        _any_value(pair.value, value)


def encode_logs(records: Sequence[LogRecord], resource: Mapping[str, Any]) -> Any:
    """The ExportLogsServiceRequest that carries ``records`` under one resource and our scope."""
    from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest

    request = ExportLogsServiceRequest()
    resource_logs = request.resource_logs.add()
    _key_values(resource_logs.resource.attributes, resource)
    scope_logs = resource_logs.scope_logs.add()
    scope_logs.scope.name, scope_logs.scope.version = SCOPE_NAME, __version__
    for record in records:
        out = scope_logs.log_records.add()
        out.time_unix_nano = out.observed_time_unix_nano = clamp_time(record.time_ns)
        out.severity_number = record.severity  # type: ignore[assignment]  # an enum's value, as protobuf takes it
        out.severity_text = SEVERITY_TEXT.get(record.severity, "")
        out.event_name = record.event_name
        if record.body is not None:
            out.body.string_value = record.body
        _key_values(out.attributes, record.attributes)
        if record.trace_id and record.span_id:
            out.trace_id = record.trace_id.to_bytes(16, "big")
            out.span_id = record.span_id.to_bytes(8, "big")
            out.flags = 1  # sampled, as the spans are
    return request


class OtlpLogSink(OtlpRequestSink[LogRecord]):
    """Sends log records over OTLP gRPC or HTTP/protobuf, one request of at most ``max_request_bytes`` per call;
    the export queue (queue.py) retries and splits as it does for spans."""

    noun = "log records"

    def __init__(self, settings: OtlpSettings, *, resource: Mapping[str, Any],
                 max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES) -> None:
        super().__init__(settings, logs_signal(), max_request_bytes=max_request_bytes)
        self._resource = dict(resource)

    def encode(self, records: Sequence[LogRecord]) -> bytes:
        """The ExportLogsServiceRequest of ``records``, serialized."""
        return encode_logs(records, self._resource).SerializeToString()
