"""retry.py: one policy for every OTLP export: full jitter, the backend's own delay honoured up to a cap,
misconfiguration asked about slowly; and 50 exporters that lost the same gateway come back spread out."""

from __future__ import annotations

import email.utils
import logging
import re
import statistics

import pytest
from hypothesis import given
from hypothesis import strategies as st

from copilot_otel.delivery.otlp_spans import OtlpSink
from copilot_otel.delivery.queue import ExportQueue
from copilot_otel.model.records import SpanRecord
from copilot_otel.otlp.answers import HttpAnswer, Signal, grpc_error, http_answer
from copilot_otel.otlp.contract import ExportError
from copilot_otel.otlp.retry import Backoff, RetryPolicy, retry_after_seconds, retry_info_seconds
from copilot_otel.otlp.settings import OtlpSettings
from tests.support.net import wait_until
from tests.support.otlp_receiver import OtlpReceiver
from tests.support.throttling_receiver import ThrottlingGate

SIGNAL = Signal("traces", "v1/traces", "/x", None, "rejected_spans", "spans", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")


@given(failures=st.integers(1, 200), draw=st.floats(0, 1, exclude_max=True))
def test_a_retryable_failure_waits_a_full_jitter_draw_below_the_growing_ceiling(failures, draw):
    """The n-th failure in a row waits draw * min(maximum, initial * 2^(n-1)): anywhere from 0 to the ceiling."""
    policy = RetryPolicy(initial=0.5, maximum=30.0)
    ceiling = min(30.0, 0.5 * 2 ** (failures - 1))
    assert policy.delay(failures, ExportError("down"), lambda: draw) == pytest.approx(ceiling * draw)


def test_the_backends_delay_is_honoured_as_given_up_to_the_cap():
    """A Retry-After / RetryInfo delay is waited exactly (no jitter), at most max_hint."""
    policy = RetryPolicy(max_hint=300.0)
    assert policy.delay(1, ExportError("429", retry_after=7.0), lambda: 0.0) == 7.0
    assert policy.delay(9, ExportError("429", retry_after=999999.0), lambda: 0.0) == 300.0
    assert policy.delay(1, ExportError("429", retry_after=-5.0), lambda: 0.5) == 0.0


def test_a_misconfigured_destination_is_asked_again_slowly_not_dropped():
    """401/404/UNIMPLEMENTED are not retryable by the specification: the policy waits half to all of the longest
    backoff from the first failure on (the spans stay behind the checkpoint; fixing the setting loses nothing)."""
    policy = RetryPolicy(initial=0.5, maximum=30.0)
    error = ExportError("404", retryable=False)
    assert [policy.delay(1, error, lambda d=d: d) for d in (0.0, 0.999)] == [15.0, pytest.approx(29.985)]


def test_the_answers_say_which_failures_the_specification_retries():
    """HTTP 429/502/503/504 and gRPC UNAVAILABLE, RESOURCE_EXHAUSTED... are retryable; 404, 401, 500 and
    UNIMPLEMENTED are not; a Retry-After header and a RetryInfo delay travel with the error."""
    def answer(status, retry_after=""):
        with pytest.raises(ExportError) as raised:
            http_answer(HttpAnswer(status, retry_after=retry_after), SIGNAL, "x")
        return raised.value

    assert all(answer(s).retryable for s in (429, 502, 503, 504))
    assert not any(answer(s).retryable for s in (401, 403, 404, 500, 501))
    assert answer(429, "12").retry_after == 12.0 and answer(503).retry_after is None
    assert answer(404, "12").retry_after is None  # only a retryable status' delay counts
    retryable = {c: grpc_error(c, "", retry_info=False, where="x", timeout=1).retryable
                 for c in ("UNAVAILABLE", "RESOURCE_EXHAUSTED", "DEADLINE_EXCEEDED", "UNIMPLEMENTED",
                           "UNAUTHENTICATED", "PERMISSION_DENIED")}
    assert retryable == {"UNAVAILABLE": True, "RESOURCE_EXHAUSTED": True, "DEADLINE_EXCEEDED": True,
                         "UNIMPLEMENTED": False, "UNAUTHENTICATED": False, "PERMISSION_DENIED": False}
    assert grpc_error("RESOURCE_EXHAUSTED", "", retry_info=True, retry_after=2.5, where="x",
                      timeout=1).retry_after == 2.5


def test_retry_after_reads_seconds_and_http_dates_and_ignores_lies():
    """RFC 9110: delay-seconds or an IMF-fixdate (a date in the past is 0); anything else is no delay."""
    now = 1_800_000_000.0
    assert retry_after_seconds("120", now=lambda: now) == 120.0
    assert retry_after_seconds(email.utils.formatdate(now + 30, usegmt=True), now=lambda: now) == pytest.approx(30)
    assert retry_after_seconds(email.utils.formatdate(now - 30, usegmt=True), now=lambda: now) == 0.0
    for lie in ("", "soon", "-5", "1e9", "Mon, 99 Foo 2026", "999999999999999999999999"):
        value = retry_after_seconds(lie, now=lambda: now)
        assert value is None or 0 <= value <= 10**9, (lie, value)


def test_retry_info_decodes_from_the_trailing_metadata():
    from google.rpc.error_details_pb2 import RetryInfo

    info = RetryInfo()
    info.retry_delay.FromNanoseconds(2_500_000_000)
    assert retry_info_seconds((("other", b"x"), ("google.rpc.retryinfo-bin", info.SerializeToString()))) == 2.5
    assert retry_info_seconds((("google.rpc.retryinfo-bin", b"\xff\xff not a message"),)) is None
    assert retry_info_seconds(()) is None


def test_a_success_starts_the_backoff_over():
    backoff = Backoff(RetryPolicy(initial=1.0, maximum=8.0), draw=lambda: 0.999999)
    assert [round(backoff.next(ExportError("x"))) for _ in range(5)] == [1, 2, 4, 8, 8]
    backoff.reset()
    assert round(backoff.next(ExportError("x"))) == 1


def _span(n: int) -> SpanRecord:
    return SpanRecord(trace_id=n + 1, span_id=n + 1, parent_span_id=None, name="s", kind=1, start_ns=1, end_ns=2,
                      attributes={})


def first_waits(records: list[logging.LogRecord]) -> dict[int, float]:
    """Each export queue's thread -> the wait its first failure said ("retrying in 0.9 s")."""
    first: dict[int, float] = {}
    for record in list(records):  # a copy: the queues' threads append meanwhile
        said = re.search(r"retrying in ([0-9.]+) s", record.getMessage())
        if said is not None and record.thread is not None:
            first.setdefault(record.thread, float(said.group(1)))
    return first


def test_fifty_exporters_that_lost_the_same_gateway_do_not_come_back_in_step(caplog):
    """50 export queues (each its own OTLP/HTTP sink, as 50 daemons have) hit one gateway that refuses everything:
    each waits its own full-jitter draw over the first backoff before it comes back, so their first retries are
    spread over it, not bunched at one instant. The draws are read where each queue says them ("retrying in
    0.9 s"): the times the retries reach the gate also carry the machine's scheduling, which on a loaded machine
    bunches threads that were due apart."""
    policy = RetryPolicy(initial=1.0, maximum=30.0)
    caplog.set_level(logging.WARNING, logger="copilot_otel.delivery.queue")
    with OtlpReceiver() as receiver, ThrottlingGate(receiver, http_status=503, retry_after=None) as gate:
        gate.refuse_for(3600)
        settings = OtlpSettings(endpoint=gate.http_base, protocol="http/protobuf", timeout=5.0)
        queues = [ExportQueue(OtlpSink(settings), None, retry=policy) for _ in range(50)]
        try:
            for queue in queues:
                queue.start()
            for n, queue in enumerate(queues):
                queue.put([_span(n)])
            # 100 attempts, and a wait said by each of the 50 (a queue slow to fail first can be the last to say
            # its wait while the quick ones are already retrying)
            wait_until(lambda: len(gate.policy.attempts) >= 100 and len(first_waits(caplog.records)) == 50,
                       timeout=60, what="every queue's first failure said and retried",
                       seen=lambda: (len(gate.policy.attempts), len(first_waits(caplog.records))))
        finally:
            for queue in queues:
                queue.stop(timeout=0.1)
                queue.sink.shutdown()
    waits = list(first_waits(caplog.records).values())
    assert len(waits) == 50 and all(0 <= w <= 1.0 for w in waits)
    # In step (a fixed backoff) the 50 waits would be one value. Full jitter over [0, 1 s) draws them apart: they
    # cover most of it (a range under 0.5 s: about 1 in 10^13), no 0.1 s slot holds 20 of them (the log says a
    # wait to 0.1 s), and they deviate as a uniform draw does (0.29 s).
    assert max(waits) - min(waits) > 0.5, sorted(waits)
    slots = [round(w * 10) for w in waits]
    assert max(slots.count(s) for s in set(slots)) < 20, sorted(waits)
    assert statistics.pstdev(waits) > 0.15, sorted(waits)


@pytest.mark.parametrize("retry_after,expected", [("1", lambda w, interval: w == 1.0),
                                                  ("999999", lambda w, interval: w == 300.0),
                                                  (None, lambda w, interval: 0 <= w <= 0.5)])
def test_a_refused_metrics_push_is_retried_as_the_policy_says(retry_after, expected):
    """The OTLP metrics push follows the same policy: refused with Retry-After 1 s, the next push goes in 1 s, not at
    the next interval; 999999 s is capped at 300 s (a longer wait than the interval, as the backend asked); with no
    delay given, a jittered first backoff (below 0.5 s); once a push goes through, the interval again."""
    from prometheus_client import CollectorRegistry
    from prometheus_client import Counter as PromCounter

    from copilot_otel.metrics.otlp_push import MetricsPusher, make_exporter
    from copilot_otel.otlp.resource import build_resource

    registry = CollectorRegistry()
    PromCounter("copilot_turns", "turns", registry=registry).inc()
    with OtlpReceiver() as receiver, ThrottlingGate(receiver, http_status=429, retry_after=retry_after) as gate:
        gate.refuse_for(3600)
        settings = OtlpSettings(endpoint=gate.http_base, protocol="http/protobuf", timeout=5.0)
        pusher = MetricsPusher(registry, make_exporter(settings), build_resource(), interval=60.0)
        try:
            delivered = pusher.push(timeout=5)
            wait = pusher.next_wait(delivered)
            assert not delivered and expected(wait, 60.0), wait
            gate.open()
            delivered = pusher.push(timeout=5)
        finally:
            pusher.exporter.shutdown()
    assert gate.refused == 1
    assert delivered and pusher.next_wait(delivered) == 60.0, pusher.exporter.last_error
