"""OTLP over gRPC or HTTP/protobuf: spans out, one request per call, and what the backend's answer means.

The spans are encoded by the OpenTelemetry SDK's own encoder (``encode_spans``); the request is
sent by otlp/transport.py rather than by the SDK's exporters because the export queue must know
*why* a request failed (those exporters only log it and return FAILURE), they retry on their own
for up to their whole timeout, they measure a request's size only after deciding to send it, they
count any 2xx (even a 3xx) as a delivery, and their HTTP timeout applies to each socket operation,
not to the request. What each answer means: otlp/answers.py.
"""

from __future__ import annotations

from collections.abc import Sequence

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event as OTelEvent
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import Link, SpanContext, SpanKind, Status, StatusCode, TraceFlags

from ..model.records import KIND_CLIENT, STATUS_ERROR, STATUS_OK, SpanRecord
from ..otlp.answers import Signal
from ..otlp.json_encoder import SCOPE_NAME
from ..otlp.limits import DEFAULT_MAX_REQUEST_BYTES, clean
from ..otlp.resource import build_resource
from ..otlp.settings import ENV_OTLP_TRACES_ENDPOINT, OtlpSettings
from ..version import __version__
from .otlp_request import OtlpRequestSink

_SCOPE = InstrumentationScope(SCOPE_NAME, __version__)
_KINDS = {KIND_CLIENT: SpanKind.CLIENT}
_STATUS = {STATUS_OK: StatusCode.OK, STATUS_ERROR: StatusCode.ERROR}


def traces_signal() -> Signal:
    """OTLP traces: /v1/traces, TraceService/Export, ExportTraceServiceResponse."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

    return Signal("traces", "v1/traces", "/opentelemetry.proto.collector.trace.v1.TraceService/Export",
                  ExportTraceServiceResponse, "rejected_spans", "spans", ENV_OTLP_TRACES_ENDPOINT)


def to_readable_span(record: SpanRecord, resource: Resource) -> ReadableSpan:
    """A span record (clamped to what OTLP can carry) as the SDK's ReadableSpan, for its encoder."""
    record = clean(record)
    flags = TraceFlags(TraceFlags.SAMPLED)
    parent = (
        SpanContext(record.trace_id, record.parent_span_id, is_remote=False, trace_flags=flags)
        if record.parent_span_id is not None
        else None
    )
    return ReadableSpan(
        name=record.name,
        context=SpanContext(record.trace_id, record.span_id, is_remote=False, trace_flags=flags),
        parent=parent,
        resource=resource,
        attributes=dict(record.attributes),
        events=[OTelEvent(e.name, dict(e.attributes), e.time_ns) for e in record.events],
        links=[Link(SpanContext(trace_id, span_id, is_remote=False, trace_flags=flags))
               for trace_id, span_id in record.links],
        kind=_KINDS.get(record.kind, SpanKind.INTERNAL),
        status=Status(_STATUS[record.status], record.status_message or None)
        if record.status in _STATUS
        else Status(StatusCode.UNSET),
        start_time=record.start_ns,
        end_time=record.end_ns,
        instrumentation_scope=_SCOPE,
    )


class OtlpSink(OtlpRequestSink[SpanRecord]):
    """Sends spans over OTLP gRPC or HTTP/protobuf, one request of at most ``max_request_bytes`` per call."""

    noun = "spans"

    def __init__(self, settings: OtlpSettings, *, resource: Resource | None = None,
                 max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES) -> None:
        super().__init__(settings, traces_signal(), max_request_bytes=max_request_bytes)
        from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

        self._encode = encode_spans
        self._resource = resource or build_resource()

    def encode(self, records: Sequence[SpanRecord]) -> bytes:
        """The ExportTraceServiceRequest of ``records`` (clamped by clean()), by the SDK's encoder."""
        return self._encode([to_readable_span(r, self._resource) for r in records]).SerializeToString()
