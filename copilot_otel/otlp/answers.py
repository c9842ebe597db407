"""What an OTLP backend's answer means: a delivery (and what it dropped anyway), a failure to retry, a
request too large, or spans refused for good. Pure: an answer in, a Receipt out or an error raised.

Following the OTLP specification (opentelemetry-proto, docs/specification.md), a delivery is a 2xx
whose body is the signal's Export<Signal>ServiceResponse in the request's encoding (binary protobuf,
``Content-Type: application/x-protobuf``, parameters such as charset ignored); an empty body is the
empty message (what the Collector, Rotel and Arize Phoenix answer), so it is one with no
Content-Type too. One exception, for a backend in real use: Langfuse answers protobuf requests with
a JSON object (``{}``, ``{"message":"OK"}`` or its queue job); a JSON object that decodes as the
response (OTLP/JSON: unknown members ignored) and carries no ``error``/``errors`` member counts. Any
other 2xx (an HTML page, ``{"error":"quota exceeded"}``, bytes that are not the message, a body of
another type) is no delivery: an ExportError saying what came back, retried like an outage.

Failures, by HTTP status or gRPC code:

- retried later (ExportError): no connection, no answer within the OTLP timeout, HTTP 429/502/503/
  504, gRPC UNAVAILABLE, CANCELLED, DEADLINE_EXCEEDED, ABORTED, OUT_OF_RANGE, DATA_LOSS, and
  RESOURCE_EXHAUSTED that carries RetryInfo or does not say the message is too large (the backend
  is overloaded: Arize Phoenix answers "Server is at capacity" without RetryInfo);
- too large (RejectedError, too_large): HTTP 413, gRPC RESOURCE_EXHAUSTED without RetryInfo saying
  the message is larger than the limit (grpc-go, hence the Collector: "received message larger than
  max"), and OUT_OF_RANGE saying the message is too large (Rust's tonic);
- refused for good (RejectedError): HTTP 400 and 422, gRPC INVALID_ARGUMENT: dead-lettered;
- anything else (3xx, 401, 403, 404, 500, UNAUTHENTICATED, UNIMPLEMENTED...) says the destination or
  its credentials are wrong, not the data: retried with backoff (ExportError), so that fixing the
  setting loses nothing.
"""

from __future__ import annotations

import re
from typing import Any

import orjson
from google.protobuf import json_format
from google.protobuf.message import DecodeError
from msgspec import Struct

from .contract import ExportError, Receipt, RejectedError

PROTOBUF = "application/x-protobuf"
PROTOBUF_TYPES = frozenset({PROTOBUF, "application/protobuf"})  # the second: RFC 9331's name for it
JSON = "application/json"
MAX_ANSWER_BYTES = 1 << 20  # more than this is no OTLP answer, and is not read further
HTTP_RETRYABLE = frozenset({429, 502, 503, 504})  # the OTLP specification's retryable statuses
GRPC_RETRYABLE = frozenset({"CANCELLED", "DEADLINE_EXCEEDED", "RESOURCE_EXHAUSTED", "ABORTED", "OUT_OF_RANGE",
                            "UNAVAILABLE", "DATA_LOSS"})  # likewise (RESOURCE_EXHAUSTED: a too-large one is refused)
HTTP_TOO_LARGE = frozenset({413})
HTTP_REJECTED = frozenset({400, 422})
QUOTED_CHARS = 200
_TOO_LARGE = re.compile(r"too large|larger than", re.IGNORECASE)
NOT_OTLP = "not_otlp"  # the reason of a 2xx answer that is no OTLP response
# gRPC's status codes other than OK: a failure's reason is its name in lower case (a metric label; a closed set).
GRPC_CODES = frozenset(("CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND", "ALREADY_EXISTS",
                        "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION", "ABORTED", "OUT_OF_RANGE",
                        "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS", "UNAUTHENTICATED"))


class Signal(Struct, frozen=True):
    """One OTLP signal: where its requests go and what its backend answers."""

    name: str  # traces, metrics
    path: str  # added to a base endpoint (OTEL_EXPORTER_OTLP_ENDPOINT) for OTLP/HTTP
    method: str  # the gRPC method
    response: Any  # the Export<Signal>ServiceResponse message class
    rejected_field: str  # of its partial_success
    items: str  # what it carries, for messages
    endpoint_variable: str  # the signal's own endpoint variable, named in hints


class HttpAnswer(Struct, frozen=True):
    """What came back from one OTLP/HTTP request (``body`` cut at MAX_ANSWER_BYTES, then ``truncated``)."""

    status: int
    reason: str = ""
    content_type: str = ""
    body: bytes = b""
    location: str = ""
    truncated: bool = False
    retry_after: str = ""  # the Retry-After header, as sent


def quote(text: str, limit: int = QUOTED_CHARS) -> str:
    """Text a backend sent, made safe for a log line, /healthz or a terminal: one line of printable
    characters (controls and escapes become spaces), at most ``limit`` characters."""
    cleaned = " ".join("".join(c if c.isprintable() else " " for c in text).split())
    return cleaned if len(cleaned) <= limit else cleaned[:limit - 1] + "…"


def media_type(content_type: str) -> str:
    """'application/x-protobuf' of 'Application/X-Protobuf; charset=utf-8'."""
    return content_type.split(";", 1)[0].strip().lower()


def http_answer(answer: HttpAnswer, signal: Signal, where: str) -> Receipt:
    """The meaning of an OTLP/HTTP answer: a Receipt for a delivery, else ExportError or RejectedError."""
    failed = f"OTLP export to {where} failed"
    if 200 <= answer.status < 300:
        return _success(answer, signal, failed)
    what = f"{failed}: HTTP {answer.status} {quote(answer.reason)}".rstrip()
    said = _backend_message(answer)
    if said:
        what += f": {said}"
    status = answer.status
    reason = f"http_{status}" if 100 <= status <= 599 else "http_other"
    if status in HTTP_TOO_LARGE:
        raise RejectedError(what, too_large=True, reason=reason)
    if status in HTTP_REJECTED:
        raise RejectedError(what, reason=reason)
    if 300 <= status < 400:
        to = f" to {quote(answer.location)}" if answer.location else ""
        raise ExportError(f"{what} (redirected{to}; OTLP requests are not redirected): is "
                          f"{signal.endpoint_variable} right?", retryable=False, reason=reason)
    if status in (404, 405):
        raise ExportError(f"{what}: is {signal.endpoint_variable} right?", retryable=False, reason=reason)
    if status in (401, 403):
        raise ExportError(f"{what}: are the credentials in OTEL_EXPORTER_OTLP_HEADERS right?", retryable=False,
                          reason=reason)
    if status in HTTP_RETRYABLE:
        from .retry import retry_after_seconds

        raise ExportError(what, retry_after=retry_after_seconds(answer.retry_after) if answer.retry_after else None,
                          reason=reason)
    raise ExportError(what, retryable=False, reason=reason)


def _success(answer: HttpAnswer, signal: Signal, failed: str) -> Receipt:
    """A 2xx: a delivery if the body is the signal's response, else ExportError saying what it was."""
    kind = media_type(answer.content_type)
    name = signal.response.DESCRIPTOR.name
    head = f"{failed}: the endpoint answered {answer.status}"
    hint = f"is {signal.endpoint_variable} right?"
    if answer.truncated:
        raise ExportError(f"{head} with more than {MAX_ANSWER_BYTES} bytes of {kind or 'untyped data'}, "
                          f"not an OTLP response: {hint}", reason=NOT_OTLP)
    if not answer.body and (not kind or kind in PROTOBUF_TYPES):
        return Receipt()  # the empty message, in binary protobuf
    if kind in PROTOBUF_TYPES:
        try:
            response = signal.response.FromString(answer.body)
        except DecodeError:
            raise ExportError(f"{head} with {len(answer.body)} bytes of {kind} that are not an {name}: "
                              f"{hint}", reason=NOT_OTLP) from None
        return receipt_of(response, signal)
    if kind == JSON:
        return receipt_of(_json_response(answer.body, signal, head, hint), signal)
    shown = kind or "a body but no Content-Type"
    raise ExportError(f"{head} with {shown}, not an OTLP response: {hint}", reason=NOT_OTLP)


def _json_response(body: bytes, signal: Signal, head: str, hint: str) -> Any:
    """The response a JSON object stands for (Langfuse answers so); ExportError if it is none, or says it failed."""
    try:
        obj = orjson.loads(body)
    except orjson.JSONDecodeError:
        obj = None
    if not isinstance(obj, dict):
        raise ExportError(f"{head} with application/json that is no JSON object, not an OTLP response: {hint}",
                          reason=NOT_OTLP)
    if obj.get("error") or obj.get("errors"):
        raise ExportError(f"{head} with a JSON error, not an OTLP response: "
                          f"{quote(body.decode('utf-8', 'replace'))}", reason=NOT_OTLP)
    try:
        return json_format.ParseDict(obj, signal.response(), ignore_unknown_fields=True)
    except (json_format.ParseError, ValueError, TypeError):
        raise ExportError(f"{head} with JSON that is not an {signal.response.DESCRIPTOR.name}: {hint}",
                          reason=NOT_OTLP) from None


def receipt_of(response: Any, signal: Signal) -> Receipt:
    """What a response's partial_success says: items dropped, and the backend's message."""
    partial = response.partial_success
    return Receipt(max(0, int(getattr(partial, signal.rejected_field))), quote(partial.error_message))


def _backend_message(answer: HttpAnswer) -> str:
    """What a failure's body says, when it says it in words: a google.rpc.Status (the OTLP way), JSON or text."""
    kind = media_type(answer.content_type)
    if not answer.body or answer.truncated:
        return ""
    if kind in PROTOBUF_TYPES:
        try:
            from google.rpc.status_pb2 import Status

            return quote(Status.FromString(answer.body).message)
        except (ImportError, DecodeError):
            return ""
    if kind == JSON or kind.startswith("text/plain"):
        return quote(answer.body.decode("utf-8", "replace"))
    return ""  # an HTML page, or bytes: nothing to read out


# ---------------------------------------------------------------- gRPC

def grpc_error(code_name: str, details: str, *, retry_info: bool, where: str, timeout: float,
               retry_after: float | None = None) -> ExportError:
    """The meaning of a failed gRPC call: RejectedError (too large, or refused for good), else ExportError
    (``retry_after``: the delay its RetryInfo asked for)."""
    details = quote(details or "")
    what = f"OTLP export to {where} failed: {code_name} {details}".rstrip() + _grpc_hint(code_name, details, timeout)
    reason = code_name.lower() if code_name in GRPC_CODES else "error"
    if code_name == "INVALID_ARGUMENT":
        return RejectedError(what, reason=reason)
    too_large = code_name in ("RESOURCE_EXHAUSTED", "OUT_OF_RANGE") and _TOO_LARGE.search(details) and not retry_info
    if too_large:
        return RejectedError(what, too_large=True, reason=reason)
    return ExportError(what, retryable=code_name in GRPC_RETRYABLE, retry_after=retry_after, reason=reason)


def _grpc_hint(code_name: str, details: str, timeout: float) -> str:
    """What a gRPC failure most likely means, when its details say so."""
    if code_name == "DEADLINE_EXCEEDED":
        return f" (no answer within the OTLP timeout of {timeout:g} s, OTEL_EXPORTER_OTLP_TIMEOUT)"
    if code_name != "UNAVAILABLE":
        return ""
    lowered = details.lower()
    if "http1" in lowered or "http/2" in lowered:
        return (" (the endpoint does not speak gRPC: for OTLP/HTTP, usually port 4318, set "
                "OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf)")
    if "certificate" in lowered:
        return " (its TLS certificate is not trusted: OTEL_EXPORTER_OTLP_CERTIFICATE names the CA to trust)"
    if "handshake" in lowered or "ssl" in lowered:
        return (" (TLS mismatch: https:// speaks TLS, http:// plaintext; does the endpoint's scheme, or "
                "OTEL_EXPORTER_OTLP_INSECURE, match the server?)")
    if "socket closed" in lowered:
        return " (the server closed the connection: a TLS server reached with http://?)"
    if "connection refused" in lowered:
        return " (nothing listens there: is the collector running, on that port?)"
    if "resolving" in lowered or "lookup" in lowered:
        return " (the host name does not resolve: is OTEL_EXPORTER_OTLP_ENDPOINT right?)"
    return ""

