"""Issue 21, items 5 and 6, at the sink: a 2xx is a delivery only when it is an OTLP answer, and one
deadline (the OTLP timeout) bounds each whole request. Real sockets: small lying servers on loopback
(tests/support/liars.py), gRPC servers, and the real receiver (Rotel) for the answers that must pass."""

from __future__ import annotations

import threading
import time

import grpc
import pytest
from opentelemetry.sdk.metrics.export import MetricExportResult

from copilot_otel.config import OtlpSettings
from copilot_otel.delivery.otlp_logs import OtlpLogSink
from copilot_otel.delivery.otlp_spans import OtlpSink
from copilot_otel.delivery.sinks import ExportError, Receipt, RejectedError
from copilot_otel.metrics.otlp_push import OtlpMetricExporter, metrics_data
from copilot_otel.metrics.registry import Metrics
from copilot_otel.model.logs import LogRecord
from copilot_otel.model.records import SpanRecord
from copilot_otel.otlp.resource import build_resource
from tests.support.backends import AnsweringGrpc, HangingGrpc
from tests.support.liars import LIES, ODD_BUT_TRUE, Answer, LyingBackend, Silent, partial_success
from tests.support.otlp_receiver import OtlpReceiver
from tests.support.tls import self_signed

SPANS = [SpanRecord(7, n, None, f"span {n}", 1, 10, 20, {"n": n}) for n in range(1, 4)]
SLACK = 1.5  # seconds a failure may come after its deadline on a busy machine
# The OTLP timeout of the requests held past it: the time is what these tests measure, so it is short; a trickling
# backend sends a byte every TRICKLE s, so every read gets an answer well within it and only a deadline on the
# whole request ends one.
DEADLINE = 0.5
TRICKLE = 0.1


def http(base: str, timeout: float = 5, **settings) -> OtlpSink:
    return OtlpSink(OtlpSettings(base, "http/protobuf", timeout=timeout, **settings))


def export(sink: OtlpSink) -> Receipt | Exception:
    """What one export of SPANS came to: its receipt, or the error it raised (the sink is shut down)."""
    try:
        return sink.export(SPANS)
    except ExportError as exc:
        return exc
    finally:
        sink.shutdown()


# ------------------------------------------------------------------------ item 5: what a 2xx is

SAYS = {  # what the error says, for each lie
    "html": "the endpoint answered 200 with text/html, not an OTLP response: is OTEL_EXPORTER_OTLP_ENDPOINT right?",
    "json_error": 'the endpoint answered 200 with a JSON error, not an OTLP response: {"error":"quota exceeded"}',
    "random_bytes": "the endpoint answered 200 with 340 bytes of application/x-protobuf that are not an "
                    "ExportTraceServiceResponse: is OTEL_EXPORTER_OTLP_ENDPOINT right?",
    "wrong_type": "the endpoint answered 200 with text/plain, not an OTLP response",
    "redirect": "HTTP 302 Found (redirected to http://portal.invalid/login; OTLP requests are not redirected): is "
                "OTEL_EXPORTER_OTLP_ENDPOINT right?",
}


@pytest.mark.parametrize("lie", sorted(LIES))
def test_a_2xx_that_is_no_otlp_answer_is_a_failure_to_retry(lie):
    """An HTML page, a JSON error, random bytes labelled protobuf, a valid response labelled text/plain, a
    redirect to a portal: each is an ExportError (tried again later, never counted as delivered) saying
    what came back."""
    with LyingBackend(LIES[lie]) as backend:
        got = export(http(backend.base))
        assert backend.requests == 1
    assert isinstance(got, ExportError) and not isinstance(got, RejectedError), got
    assert SAYS[lie] in str(got) and str(got).startswith(f"OTLP export to {backend.traces_url} (http/protobuf)")


@pytest.mark.parametrize("answer", sorted(ODD_BUT_TRUE))
def test_answers_real_backends_give_are_deliveries(answer):
    """An empty body without Content-Type, protobuf with a charset, and Langfuse's JSON objects (its source
    answers protobuf requests so; a fake here, Langfuse needs Postgres, ClickHouse, Redis and S3) are
    deliveries with nothing dropped."""
    with LyingBackend(ODD_BUT_TRUE[answer]) as backend:
        assert export(http(backend.base)) == Receipt()


@pytest.mark.parametrize("protocol", ["grpc", "http/protobuf"])
def test_the_real_receiver_answers_a_delivery(protocol):
    """Rotel (a real Collector-like receiver) answers 200 application/x-protobuf with an empty body over
    HTTP, as the Collector and Arize Phoenix do, and an empty response over gRPC: both are deliveries."""
    with OtlpReceiver() as receiver:
        endpoint = receiver.grpc_endpoint if protocol == "grpc" else receiver.http_base
        assert export(OtlpSink(OtlpSettings(endpoint, protocol, timeout=5))) == Receipt()
        assert len(receiver.wait_for_spans(3, timeout=10)) == 3


def test_a_partial_success_is_a_delivery_of_the_rest_with_the_count_and_the_message():
    """The backend forwards the request to Rotel, then says it dropped 2 spans: the export returns that
    receipt (no retry: the specification forbids one), and the spans it kept arrived."""
    with OtlpReceiver() as receiver, LyingBackend(None, receiver=receiver,
                                                  partial=(2, "2 spans older than the retention")) as backend:
        got = export(http(backend.base))
        assert backend.requests == 1 and len(receiver.wait_for_spans(3, timeout=10)) == 3
    assert got == Receipt(2, "2 spans older than the retention")


@pytest.mark.parametrize("signal", ["spans", "log records"])
def test_both_sinks_say_what_an_accepted_request_dropped_and_its_warning(signal, caplog):
    """A partial success is a delivery that each sink (spans, log records) says with its count and that the
    backend does not say which; a warning on an accepted request is said too."""
    records = SPANS if signal == "spans" else [LogRecord(1_000_000_000 + n, "copilot.test", 9, {"n": n})
                                               for n in range(3)]
    got = []
    for rejected, message in ((2, "too old"), (0, "slow down")):
        with LyingBackend(Answer(200, "application/x-protobuf", partial_success(rejected, message))) as backend:
            settings = OtlpSettings(backend.base, "http/protobuf", timeout=5)
            sink = OtlpSink(settings) if signal == "spans" else OtlpLogSink(settings, resource={})
            try:
                got.append(sink.export(records))
            finally:
                sink.shutdown()
    assert got == [Receipt(2, "too old"), Receipt(0, "slow down")]
    said = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert any(f"dropped 2 of its 3 {signal} (it does not say which): too old" in line for line in said), said
    assert any("accepted a request with a warning: slow down" in line for line in said), said


def test_an_error_body_is_quoted_safely():
    """A failure's text body is shown on one line, its escape sequences and newlines made spaces, cut short."""
    body = b"quota \x1b[31mexceeded\x1b[0m\nfor tenant " + b"x" * 500
    with LyingBackend(Answer(503, "text/plain", body)) as backend:
        got = str(export(http(backend.base)))
    assert "HTTP 503 Service Unavailable: quota [31mexceeded [0m for tenant xxx" in got
    assert "\x1b" not in got and "\n" not in got and got.endswith("…") and len(got) < 400


def test_https_with_the_configured_certificate_and_without(tmp_path):
    """Over HTTPS the backend's certificate is checked: trusted through OTEL_EXPORTER_OTLP_CERTIFICATE it is
    a delivery; not trusted, a failure saying so."""
    cert, key = self_signed(tmp_path)
    with LyingBackend(Answer(200), tls=(cert, key)) as backend:
        trusted = export(http(backend.base, certificate=cert))
        untrusted = export(http(backend.base))
    assert trusted == Receipt()
    assert isinstance(untrusted, ExportError) and "certificate verify failed" in str(untrusted)


# ------------------------------------------------------------------------ item 6: one deadline per request

@pytest.mark.parametrize("backend_kind", ["trickle", "silent"])
def test_a_trickling_or_silent_http_backend_fails_within_the_timeout(backend_kind):
    """A backend that sends its headers and then one byte every TRICKLE s, or accepts and never answers: the
    request fails once the OTLP timeout (DEADLINE) is over, whatever reads or writes were still coming."""
    trickle = Answer(200, "application/x-protobuf", b"\0" * 60, trickle=TRICKLE)
    with (LyingBackend(trickle) if backend_kind == "trickle" else Silent()) as backend:
        started = time.monotonic()
        got = export(http(backend.base, timeout=DEADLINE))
        took = time.monotonic() - started
    assert isinstance(got, ExportError) and f"no answer within the OTLP timeout of {DEADLINE:g} s" in str(got)
    assert DEADLINE <= took < DEADLINE + SLACK, took


def test_grpc_timeout_is_a_deadline_on_the_whole_call():
    """A gRPC server that takes the call and never answers: DEADLINE_EXCEEDED once the OTLP timeout (DEADLINE) is
    over, said as such; so is a socket that accepts and never speaks HTTP/2."""
    with HangingGrpc() as hanging, Silent() as silent:
        for endpoint in (hanging.endpoint, silent.base):
            started = time.monotonic()
            got = export(OtlpSink(OtlpSettings(endpoint, "grpc", timeout=DEADLINE)))
            took = time.monotonic() - started
            assert isinstance(got, ExportError) and "DEADLINE_EXCEEDED" in str(got), got
            assert f"no answer within the OTLP timeout of {DEADLINE:g} s" in str(got)
            assert DEADLINE <= took < DEADLINE + SLACK, took
        assert hanging.calls == 1


@pytest.mark.parametrize("protocol", ["grpc", "http/protobuf"])
def test_abort_ends_a_request_in_flight_at_once(protocol):
    """A request held by a silent backend with a 60 s timeout: abort() from another thread ends it within a
    fraction of a second, as an ExportError (nothing counted as delivered)."""
    with Silent() as silent:
        sink = OtlpSink(OtlpSettings(silent.base, protocol, timeout=60))
        threading.Timer(0.5, sink.abort).start()
        started = time.monotonic()
        got = export(sink)
        took = time.monotonic() - started
    assert isinstance(got, ExportError) and "abandoned" in str(got), got
    assert took < 0.5 + SLACK, took


# ------------------------------------------------------------------------ gRPC to what is not gRPC

def test_grpc_to_an_http1_server_says_it_is_not_grpc():
    """OTEL_EXPORTER_OTLP_PROTOCOL=grpc against an HTTP/1 server (an OTLP/HTTP port, a web page): a failure
    to retry that says the endpoint does not speak gRPC."""
    with LyingBackend(LIES["html"]) as backend:
        got = export(OtlpSink(OtlpSettings(backend.base, "grpc", timeout=5)))
    assert isinstance(got, ExportError) and "UNAVAILABLE" in str(got)
    assert "the endpoint does not speak gRPC" in str(got) and "OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf" in str(got)


def test_grpc_tls_mismatches_say_so(tmp_path):
    """https:// to a plaintext gRPC server, and http:// to a TLS one: failures to retry that name TLS."""
    cert, key = self_signed(tmp_path)
    with AnsweringGrpc(grpc.StatusCode.OK) as plain, AnsweringGrpc(grpc.StatusCode.OK, tls=(cert, key)) as tls:
        to_plain = export(OtlpSink(OtlpSettings(f"https://127.0.0.1:{plain.port}", "grpc", timeout=5)))
        to_tls = export(OtlpSink(OtlpSettings(f"http://127.0.0.1:{tls.port}", "grpc", timeout=5)))
    assert isinstance(to_plain, ExportError) and "TLS mismatch" in str(to_plain), to_plain
    assert isinstance(to_tls, ExportError) and "a TLS server reached with http://" in str(to_tls), to_tls


# ------------------------------------------------------------------------ the metrics push

def push(exporter: OtlpMetricExporter) -> MetricExportResult:
    try:
        return exporter.export(metrics_data(Metrics(process=False).registry, build_resource(), 1, 2))
    finally:
        exporter.shutdown()


def test_the_metrics_push_judges_answers_and_keeps_its_deadline():
    """The OTLP metrics push fails on an HTML 200 (saying so), fails within its timeout (DEADLINE) against a
    trickling backend, and succeeds against Rotel."""
    trickle = Answer(200, "application/x-protobuf", b"\0" * 60, trickle=TRICKLE)
    with LyingBackend(LIES["html"]) as html, LyingBackend(trickle) as slow, OtlpReceiver() as receiver:
        lied_to = OtlpMetricExporter(OtlpSettings(html.base, "http/protobuf", timeout=5))
        assert push(lied_to) is MetricExportResult.FAILURE
        assert "answered 200 with text/html" in lied_to.last_error and "/v1/metrics" in lied_to.last_error
        held = OtlpMetricExporter(OtlpSettings(slow.base, "http/protobuf", timeout=DEADLINE))
        started = time.monotonic()
        assert push(held) is MetricExportResult.FAILURE and time.monotonic() - started < DEADLINE + SLACK
        assert f"no answer within the OTLP timeout of {DEADLINE:g} s" in held.last_error
        for protocol, endpoint in (("http/protobuf", receiver.http_base), ("grpc", receiver.grpc_endpoint)):
            assert push(OtlpMetricExporter(OtlpSettings(endpoint, protocol, timeout=5))) is MetricExportResult.SUCCESS
        receiver.wait_for_metric("copilot_otel_build_info", timeout=10)

