"""OTLP over gRPC or HTTP/protobuf: one request per call, and what the backend's answer means.

The spans are encoded by the OpenTelemetry SDK's own encoder (``encode_spans``); the request is
sent here rather than through the SDK's exporters because the export queue must know *why* a
request failed, and those exporters only log it and return FAILURE (the HTTP status and gRPC
code stay inside them), retry on their own for up to their whole timeout, and measure a
request's size only after deciding to send it. Following the OTLP specification:

- retried later (ExportError): no connection, timeouts, HTTP 429/502/503/504, gRPC
  UNAVAILABLE, CANCELLED, DEADLINE_EXCEEDED, ABORTED, OUT_OF_RANGE, DATA_LOSS, and
  RESOURCE_EXHAUSTED that carries RetryInfo or does not say the message is too large (the
  backend is overloaded: Arize Phoenix answers "Server is at capacity" without RetryInfo);
- too large (RejectedError, too_large): over our byte budget before sending, HTTP 413, gRPC
  RESOURCE_EXHAUSTED without RetryInfo saying the message is larger than the limit (what
  grpc-go, hence the Collector, answers: "received message larger than max"), and OUT_OF_RANGE
  saying the message is too large (what Rust's tonic answers);
- rejected for good (RejectedError): HTTP 400 and 422, gRPC INVALID_ARGUMENT: these spans can
  never be accepted, they go to the dead-letter file;
- anything else (401, 403, 404, 500, UNAUTHENTICATED, UNIMPLEMENTED...) says the destination
  or its credentials are wrong, not the data: retried with backoff (ExportError), the
  checkpoint waits, so fixing the setting loses nothing.
"""

from __future__ import annotations

import gzip
import logging
import os
import re
from typing import Sequence
from urllib.parse import urlparse

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event as OTelEvent
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import Link, SpanContext, SpanKind, Status, StatusCode, TraceFlags

from . import __version__
from .config import DEFAULT_MAX_REQUEST_BYTES, ENV_OTLP_TRACES_ENDPOINT, OtlpSettings
from .limits import clean
from .otlp_json import SCOPE_NAME
from .records import KIND_CLIENT, STATUS_ERROR, STATUS_OK, SpanRecord
from .sinks import ExportError, RejectedError, build_resource

log = logging.getLogger(__name__)

USER_AGENT = f"copilot-otel/{__version__}"
EXPORT_METHOD = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
_SCOPE = InstrumentationScope(SCOPE_NAME, __version__)
_KINDS = {KIND_CLIENT: SpanKind.CLIENT}
_STATUS = {STATUS_OK: StatusCode.OK, STATUS_ERROR: StatusCode.ERROR}
HTTP_RETRY = frozenset({429, 502, 503, 504})
HTTP_TOO_LARGE = frozenset({413})
HTTP_REJECTED = frozenset({400, 422})
_TOO_LARGE = re.compile(r"too large|larger than", re.IGNORECASE)


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
        links=[Link(SpanContext(trace_id, span_id, is_remote=False, trace_flags=flags)) for trace_id, span_id in record.links],
        kind=_KINDS.get(record.kind, SpanKind.INTERNAL),
        status=Status(_STATUS[record.status], record.status_message or None)
        if record.status in _STATUS
        else Status(StatusCode.UNSET),
        start_time=record.start_ns,
        end_time=record.end_ns,
        instrumentation_scope=_SCOPE,
    )


def _read(path) -> bytes | None:
    if path is None:
        return None
    with open(path, "rb") as handle:
        return handle.read()


class _Grpc:
    """TraceService/Export on one channel; the request goes as the bytes already encoded."""

    def __init__(self, settings: OtlpSettings, endpoint: str) -> None:
        import grpc
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

        self._grpc = grpc
        parsed = urlparse(endpoint)
        target = parsed.netloc or endpoint
        insecure = settings.insecure if settings.insecure is not None else parsed.scheme == "http"
        if parsed.scheme == "https":
            insecure = False
        options = [("grpc.primary_user_agent", USER_AGENT),
                   # reconnect soon after an outage (gRPC's own backoff grows to two minutes)
                   ("grpc.initial_reconnect_backoff_ms", 500), ("grpc.max_reconnect_backoff_ms", 5000)]
        compression = grpc.Compression.Gzip if settings.compression == "gzip" else grpc.Compression.NoCompression
        if insecure:
            self._channel = grpc.insecure_channel(target, options=options, compression=compression)
        else:
            credentials = grpc.ssl_channel_credentials(_read(settings.certificate), _read(settings.client_key),
                                                       _read(settings.client_certificate))
            self._channel = grpc.secure_channel(target, credentials, options=options, compression=compression)
        self._call = self._channel.unary_unary(EXPORT_METHOD, request_serializer=None,
                                               response_deserializer=ExportTraceServiceResponse.FromString)
        self._metadata = tuple((key.lower(), value) for key, value in settings.headers)
        self._timeout = settings.timeout

    def send(self, payload: bytes, description: str) -> int:
        """Send one request; return the spans the backend says it rejected (partial success)."""
        grpc = self._grpc
        try:
            response = self._call(payload, metadata=self._metadata, timeout=self._timeout)
        except grpc.RpcError as exc:
            code = exc.code() if callable(getattr(exc, "code", None)) else None
            details = exc.details() if callable(getattr(exc, "details", None)) else ""
            what = f"OTLP export to {description} failed: {getattr(code, 'name', code)} {details or ''}".rstrip()
            if code == grpc.StatusCode.INVALID_ARGUMENT:
                raise RejectedError(what) from None
            too_large = code in (grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.OUT_OF_RANGE) \
                and _TOO_LARGE.search(details or "") and not _has_retry_info(exc)
            if too_large:
                raise RejectedError(what, too_large=True) from None
            raise ExportError(what) from None
        return response.partial_success.rejected_spans

    def close(self) -> None:
        self._channel.close()


def _has_retry_info(exc) -> bool:
    try:
        return any(key == "google.rpc.retryinfo-bin" for key, _value in exc.trailing_metadata() or ())
    except Exception:  # no trailing metadata on this error
        return False


class _Http:
    """POST /v1/traces with a requests session (keep-alive, proxies from the environment)."""

    def __init__(self, settings: OtlpSettings, endpoint: str) -> None:
        import requests
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

        self._requests = requests
        self._response_type = ExportTraceServiceResponse
        self._endpoint = endpoint
        self._session = requests.Session()
        self._session.headers.update({"Content-Type": "application/x-protobuf", "User-Agent": USER_AGENT,
                                      **dict(settings.headers)})
        self._gzip = settings.compression == "gzip"
        if self._gzip:
            self._session.headers["Content-Encoding"] = "gzip"
        self._session.verify = str(settings.certificate) if settings.certificate else True
        if settings.client_certificate and settings.client_key:
            self._session.cert = (str(settings.client_certificate), str(settings.client_key))
        elif settings.client_certificate:
            self._session.cert = str(settings.client_certificate)
        self._timeout = settings.timeout

    def send(self, payload: bytes, description: str) -> int:
        """Send one request; return the spans the backend says it rejected (partial success)."""
        body = gzip.compress(payload, compresslevel=6) if self._gzip else payload
        try:
            response = self._session.post(self._endpoint, data=body, timeout=self._timeout)
        except self._requests.RequestException as exc:
            raise ExportError(f"OTLP export to {description} failed: {type(exc).__name__}") from None
        status = response.status_code
        if 200 <= status < 300:
            try:
                return self._response_type.FromString(response.content).partial_success.rejected_spans
            except Exception:  # an empty or non-protobuf body: accepted all the same
                return 0
        what = f"OTLP export to {description} failed: HTTP {status} {response.reason or ''}".rstrip()
        if status in HTTP_TOO_LARGE:
            raise RejectedError(what, too_large=True)
        if status in HTTP_REJECTED:
            raise RejectedError(what)
        raise ExportError(what)

    def close(self) -> None:
        self._session.close()


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
        endpoint = settings.endpoint
        if settings.protocol == "grpc":
            self._transport: _Grpc | _Http = _Grpc(settings, endpoint)
        else:
            # The generic endpoint is a base URL; the signal-specific one is used as given.
            if not os.environ.get(ENV_OTLP_TRACES_ENDPOINT):
                endpoint = endpoint.rstrip("/") + "/v1/traces"
            self._transport = _Http(settings, endpoint)
        self.description = f"{endpoint} ({settings.protocol})"

    def export(self, records: Sequence[SpanRecord]) -> None:
        """Send one request; raise ExportError (retry later) or RejectedError (never accepted as it is)."""
        if not records:
            return
        try:
            payload = self._encode([to_readable_span(r, self._resource) for r in records]).SerializeToString()
        except Exception as exc:  # what clean() let through and protobuf refuses: this request can never go
            raise RejectedError(f"cannot encode {len(records)} span(s) for OTLP: {exc}") from None
        if len(payload) > self.max_request_bytes:
            raise RejectedError(f"a request of {len(payload)} bytes is over the {self.max_request_bytes}-byte "
                                "budget (--max-request-bytes)", too_large=True)
        rejected = self._transport.send(payload, self.description)
        if rejected:
            log.warning("%s accepted a request but dropped %d of its %d spans", self.description, rejected,
                        len(records))

    def sync(self) -> None:
        """Nothing is buffered here."""

    def shutdown(self) -> None:
        """Close the channel or session."""
        self._transport.close()
