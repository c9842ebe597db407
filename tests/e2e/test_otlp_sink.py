"""delivery/otlp_spans.py on real sockets: what each backend answer means (retry later, too large, refused for
good), and the daemon against a backend that refuses one span: it is dead-lettered, the rest arrives."""

from __future__ import annotations

import grpc
import pytest

from copilot_otel.config import OtlpSettings
from copilot_otel.delivery.otlp_spans import OtlpSink
from copilot_otel.delivery.sinks import ExportError, RejectedError
from copilot_otel.model.records import SpanRecord
from tests.support.backends import AnsweringGrpc, AnsweringHttp, StrictBackend
from tests.support.daemon import DaemonProcess
from tests.support.events import SessionLog
from tests.support.files import new_session
from tests.support.net import wait_until
from tests.support.otlp_receiver import OtlpReceiver
from tests.support.scrape import fetch
from tests.support.spans import expected_keys, key

SPANS = [SpanRecord(7, n, None, f"span {n}", 1, 10, 20, {"n": n}) for n in range(1, 4)]
RETRY, TOO_LARGE, REFUSED = "retry later", "too large", "refused for good"


def outcome(sink: OtlpSink) -> str | None:
    try:
        sink.export(SPANS)
    except RejectedError as exc:
        return TOO_LARGE if exc.too_large else REFUSED
    except ExportError:
        return RETRY
    finally:
        sink.shutdown()
    return None


@pytest.mark.parametrize("status,expected", [
    (200, None), (400, REFUSED), (422, REFUSED), (413, TOO_LARGE), (429, RETRY), (503, RETRY), (504, RETRY),
    (401, RETRY), (404, RETRY), (500, RETRY),
])
def test_http_answers(status, expected):
    """HTTP 400/422 refuse the spans for good, 413 says too large; 429/5xx, and answers that say the
    destination or the credentials are wrong (401, 404), are tried again later."""
    with AnsweringHttp(status) as backend:
        got = outcome(OtlpSink(OtlpSettings(backend.base, "http/protobuf", timeout=5)))
        assert len(backend.requests) == 1  # one attempt per call: the export queue does the retrying
    assert got == expected


GRPC_GO_TOO_LARGE = "grpc: received message larger than max (5242880 vs. 4194304)"


@pytest.mark.parametrize("code,retry_info,details,expected", [
    (grpc.StatusCode.INVALID_ARGUMENT, False, "", REFUSED),
    (grpc.StatusCode.RESOURCE_EXHAUSTED, False, GRPC_GO_TOO_LARGE, TOO_LARGE),
    (grpc.StatusCode.RESOURCE_EXHAUSTED, False, "Server is at capacity", RETRY),
    (grpc.StatusCode.RESOURCE_EXHAUSTED, True, "", RETRY),
    (grpc.StatusCode.OUT_OF_RANGE, False, "decoded message length too large", TOO_LARGE),
    (grpc.StatusCode.UNAVAILABLE, False, "", RETRY),
    (grpc.StatusCode.UNAUTHENTICATED, False, "", RETRY),
    (grpc.StatusCode.INTERNAL, False, "", RETRY),
])
def test_grpc_answers(code, retry_info, details, expected):
    """INVALID_ARGUMENT refuses for good; RESOURCE_EXHAUSTED is 'too large' only when it says the
    message is larger than the limit, otherwise the backend is overloaded (at capacity, or
    RetryInfo) and it is tried again later, like UNAVAILABLE and the rest."""
    with AnsweringGrpc(code, retry_info=retry_info, details=details) as backend:
        assert outcome(OtlpSink(OtlpSettings(backend.endpoint, "grpc", timeout=5))) == expected


def test_our_byte_budget_is_kept_before_sending():
    """A request over --max-request-bytes is not sent: it is 'too large' at once."""
    with AnsweringHttp(200) as backend:
        sink = OtlpSink(OtlpSettings(backend.base, "http/protobuf"), max_request_bytes=64)
        assert outcome(sink) == TOO_LARGE and backend.requests == []


def test_a_backend_that_refuses_one_span_gets_the_rest(tmp_path):
    """A backend refuses (HTTP 400) every request that holds one bad span: the daemon halves the
    requests until that span is alone, dead-letters it, delivers every other span, and says so."""
    home = tmp_path / "home"
    path = new_session(home, "one-bad-span")
    log = SessionLog("one-bad-span")
    log.start()
    log.user()
    for n in range(40):
        log.tool_turn(("poison-tool" if n == 17 else "bash", f"call-{n}"))
    log.answer()
    log.shutdown()
    path.write_bytes(log.jsonl())
    expected = {k for k in expected_keys([path]) if "poison" not in k[3]}
    with OtlpReceiver() as receiver, StrictBackend(receiver, "poison") as backend:
        env = {"OTEL_EXPORTER_OTLP_ENDPOINT": backend.base, "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"}
        with DaemonProcess(home, tmp_path / "state", env=env, args=("--idle-quiet", "0.3")) as daemon:
            daemon.wait_for_metric("copilot_otel_spans_dead_lettered_total", 1, timeout=60)
            wait_until(lambda: expected <= {key(s) for s in receiver.spans()}, timeout=30, what="the other spans")
            healthz = fetch(daemon.health_url)
        got = {key(s) for s in receiver.spans()}
    assert got == expected and backend.refused >= 2
    dead = (tmp_path / "state" / "dead-letter.jsonl").read_text()
    assert dead.count("\n") == 1 and "execute_tool poison-tool" in dead
    assert "1 span(s) refused by the trace backend" in healthz and "HTTP 400" in healthz
