"""OTLP over gRPC or HTTP/protobuf: spans out, one request per call, and what the backend's answer means.

The spans are encoded by the OpenTelemetry SDK's own encoder (``encode_spans``); the request is
sent by otlp/transport.py rather than by the SDK's exporters because the export queue must know
*why* a request failed (those exporters only log it and return FAILURE), they retry on their own
for up to their whole timeout, they measure a request's size only after deciding to send it, they
count any 2xx (even a 3xx) as a delivery, and their HTTP timeout applies to each socket operation,
not to the request. What each answer means: otlp/answers.py.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event as OTelEvent
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import Link, SpanContext, SpanKind, Status, StatusCode, TraceFlags

from ..version import __version__
from ..otlp.limits import DEFAULT_MAX_REQUEST_BYTES
from ..otlp.settings import ENV_OTLP_TRACES_ENDPOINT, OtlpSettings
from ..otlp.limits import clean
from ..base.logs import RateLimitedLog
from ..otlp.answers import Signal
from ..otlp.json_encoder import SCOPE_NAME
from ..otlp.transport import make_transport
from ..model.records import KIND_CLIENT, STATUS_ERROR, STATUS_OK, SpanRecord
from ..otlp.resource import build_resource
from ..otlp.contract import Receipt, RejectedError

log = logging.getLogger(__name__)

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


class OtlpSink:
    """Sends spans over OTLP gRPC or HTTP/protobuf, one request of at most ``max_request_bytes`` per call."""

    def __init__(self, settings: OtlpSettings, *, resource: Resource | None = None,
                 max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES) -> None:
        if not settings.endpoint:
            raise ValueError("OtlpSink needs an endpoint")
        from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

        self._encode = encode_spans
        self._resource = resource or build_resource()
        self.max_request_bytes = max_request_bytes
        self._transport = make_transport(settings, traces_signal())
        self.description = self._transport.description
        self._said = RateLimitedLog(log, burst=5, what="partial successes")

    def export(self, records: Sequence[SpanRecord]) -> Receipt:
        """Send one request; what the backend dropped of it (a Receipt), or raise ExportError (retry later) or
        RejectedError (never accepted as it is)."""
        if not records:
            return Receipt()
        try:
            payload = self._encode([to_readable_span(r, self._resource) for r in records]).SerializeToString()
        except Exception as exc:  # noqa: BLE001 - what clean() let through and protobuf refuses: it can never go
            raise RejectedError(f"cannot encode {len(records)} span(s) for OTLP: {exc}") from None
        if len(payload) > self.max_request_bytes:
            raise RejectedError(f"a request of {len(payload)} bytes is over the {self.max_request_bytes}-byte "
                                "budget (--max-request-bytes)", too_large=True)
        receipt = self._transport.send(payload)
        if receipt.rejected:
            self._said.warning("%s accepted a request but dropped %d of its %d spans (it does not say which): %s",
                               self.description, receipt.rejected, len(records), receipt.message or "no reason given")
        elif receipt.message:
            self._said.warning("%s accepted a request with a warning: %s", self.description, receipt.message)
        return receipt

    def abort(self) -> None:
        """End the request in flight now (it fails with an ExportError)."""
        self._transport.abort()

    def sync(self) -> None:
        """Nothing is buffered here."""

    def shutdown(self) -> None:
        """Close the channel or session (a request in flight is abandoned)."""
        self._transport.close()
