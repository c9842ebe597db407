"""otlp/answers.py, pure: what each OTLP answer means (the same answers over real sockets:
tests/component/test_backend_answers.py)."""

from __future__ import annotations

import pytest
from google.rpc.status_pb2 import Status

from copilot_otel.delivery.otlp_spans import traces_signal
from copilot_otel.delivery.sinks import ExportError, Receipt, RejectedError
from copilot_otel.metrics.otlp_push import metrics_signal
from copilot_otel.otlp.answers import MAX_ANSWER_BYTES, HttpAnswer, grpc_error, http_answer, quote
from tests.support.liars import partial_success

TRACES = traces_signal()


def meaning(answer: HttpAnswer, signal=TRACES) -> Receipt | str:
    try:
        return http_answer(answer, signal, "there")
    except RejectedError as exc:
        return f"{'too large' if exc.too_large else 'refused'}: {exc}"
    except ExportError as exc:
        return f"retry: {exc}"


@pytest.mark.parametrize("answer,expected", [
    (HttpAnswer(200, "OK", "Application/X-Protobuf; charset=utf-8", partial_success(3, "old")), Receipt(3, "old")),
    (HttpAnswer(200, "OK", "application/protobuf", b""), Receipt()),
    (HttpAnswer(204, "No Content", "", b""), Receipt()),
    (HttpAnswer(200, "OK", "application/json", b'{"partialSuccess":{"rejectedSpans":"2","errorMessage":"x"}}'),
     Receipt(2, "x")),
    (HttpAnswer(200, "OK", "application/x-protobuf", partial_success(0, "slow down\x1b[2J")), Receipt(0,
                                                                                                      "slow down [2J")),
])
def test_deliveries(answer, expected):
    """Protobuf whatever its parameters or spelling, an empty body, OTLP/JSON: deliveries, partial success read
    (a backend's message made safe to print)."""
    assert meaning(answer) == expected


@pytest.mark.parametrize("answer,says", [
    (HttpAnswer(200, "OK", "application/json", b"null"), "application/json that is no JSON object"),
    (HttpAnswer(200, "OK", "application/json", b'{"errors":[{"detail":"bad key"}]}'), "with a JSON error"),
    (HttpAnswer(200, "OK", "application/json", b'{"partialSuccess":5}'),
     "JSON that is not an ExportTraceServiceResponse"),
    (HttpAnswer(200, "OK", "", b"OK"), "with a body but no Content-Type, not an OTLP response"),
    (HttpAnswer(200, "OK", "text/html", b""), "with text/html, not an OTLP response"),
    (HttpAnswer(200, "OK", "application/x-protobuf", b"\0" * MAX_ANSWER_BYTES, truncated=True),
     f"with more than {MAX_ANSWER_BYTES} bytes of application/x-protobuf"),
    (HttpAnswer(503, "Service Unavailable", "application/x-protobuf",
                Status(message="at capacity").SerializeToString()),
     "HTTP 503 Service Unavailable: at capacity"),
    (HttpAnswer(401, "Unauthorized", "text/html", b"<h1>no</h1>"),
     "HTTP 401 Unauthorized: are the credentials in OTEL_EXPORTER_OTLP_HEADERS right?"),
])
def test_failures_to_retry(answer, says):
    """What is no OTLP answer, and error statuses, are failures to retry that say what came back."""
    got = meaning(answer)
    assert isinstance(got, str) and got.startswith("retry: OTLP export to there failed") and says in got, got


def test_too_large_and_refused():
    assert meaning(HttpAnswer(413, "Content Too Large")).startswith("too large: ")
    assert meaning(HttpAnswer(400, "Bad Request", "text/plain", b"bad span")).startswith("refused: ")


def test_a_metrics_answer_is_read_as_one():
    """For metrics the response is ExportMetricsServiceResponse, and its own rejected field counts."""
    from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceResponse

    response = ExportMetricsServiceResponse()
    response.partial_success.rejected_data_points = 4
    answer = HttpAnswer(200, "OK", "application/x-protobuf", response.SerializeToString())
    assert meaning(answer, metrics_signal()) == Receipt(4, "")


@pytest.mark.parametrize("code,details,retry_info,kind,hint", [
    ("DEADLINE_EXCEEDED", "Deadline Exceeded", False, ExportError, "no answer within the OTLP timeout of 3 s"),
    ("UNAVAILABLE", "Trying to connect an http1.x server (HTTP status 404)", False, ExportError, "does not speak gRPC"),
    ("UNAVAILABLE", "SSL_ERROR_SSL: CERTIFICATE_VERIFY_FAILED: self signed certificate", False, ExportError,
     "OTEL_EXPORTER_OTLP_CERTIFICATE"),
    ("UNAVAILABLE", "failed to connect to all addresses; last error: UNKNOWN: ipv4:127.0.0.1:1: Failed to connect to "
     "remote host: Connection refused", False, ExportError, "(nothing listens there: is the collector running"),
    ("UNAVAILABLE", "errors resolving no-such-host.invalid:4317: [field:hostname lookup error:address lookup failed "
     "for no-such-host.invalid:4317: Domain name not found]", False, ExportError, "(the host name does not resolve"),
    ("RESOURCE_EXHAUSTED", "received message larger than max", True, ExportError, ""),
    ("RESOURCE_EXHAUSTED", "received message larger than max", False, RejectedError, ""),
    ("INVALID_ARGUMENT", "bad", False, RejectedError, ""),
])
def test_grpc_errors(code, details, retry_info, kind, hint):
    error = grpc_error(code, details, retry_info=retry_info, where="there", timeout=3)
    assert type(error) is kind and hint in str(error)


def test_quote_keeps_one_short_printable_line():
    assert quote("a\nb\tc\x07\u202e d", limit=200) == "a b c d"
    assert quote("x" * 300, limit=10) == "x" * 9 + "…"
