"""limits.py: what a span may carry once encoded; absurd values are clamped or cut, never a broken request."""

from __future__ import annotations

import math

import orjson
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from copilot_otel.delivery.otlp_spans import to_readable_span
from copilot_otel.model import attrs as A
from copilot_otel.model.records import STATUS_ERROR, SpanEvent, SpanRecord
from copilot_otel.otlp.json_encoder import OtlpJsonEncoder
from copilot_otel.otlp.limits import INT64_MAX, INT64_MIN, MAX_ATTRIBUTE_CHARS, MAX_NAME_CHARS, MAX_TIME_NS, clean
from copilot_otel.otlp.resource import build_resource

SECRET = "ghp_" + "s3cr3t" * 40


def poisoned() -> SpanRecord:
    """A span built from a log that lies about everything."""
    return SpanRecord(
        trace_id=7, span_id=9, parent_span_id=None, name="execute_tool " + SECRET, kind=1,
        start_ns=-5_000_000_000, end_ns=-4_000_000_000,
        attributes={A.GEN_AI_TOOL_NAME: SECRET, A.PROCESS_EXIT_CODE: 10**30, A.GEN_AI_USAGE_INPUT_TOKENS: -(10**25),
                    A.HTTP_RESPONSE_STATUS_CODE: 2**64, "copilot.cost": math.inf, "copilot.note": "n" * 100_000,
                    A.GEN_AI_RESPONSE_FINISH_REASONS: (10**20, "stop")},
        status=STATUS_ERROR, status_message="e" * 10_000,
        events=(SpanEvent("nudge", 10**30, {"n": 10**19}),))


def test_a_clean_record_is_left_as_it_is():
    """Nothing to clamp: the very same object comes back (the fast path)."""
    record = SpanRecord(1, 2, None, "chat gpt-5", 3, 10, 20, {A.GEN_AI_USAGE_INPUT_TOKENS: 12, "x": "y"})
    assert clean(record) is record


def test_times_before_1970_or_past_2262_are_clamped():
    """A start before the epoch becomes the epoch; times past int64 nanoseconds become the last one."""
    early = clean(poisoned())
    assert (early.start_ns, early.end_ns) == (0, 0)
    late = clean(SpanRecord(1, 2, None, "x", 1, 10, 10**25, {}))
    assert (late.start_ns, late.end_ns) == (10, MAX_TIME_NS)
    backwards = clean(SpanRecord(1, 2, None, "x", 1, 50, 20, {}))
    assert backwards.end_ns == backwards.start_ns == 50


def test_integers_are_clamped_to_int64_and_infinities_written_as_text():
    """Exit codes, token counts and status codes outside int64 are clamped; inf is kept as text."""
    attributes = clean(poisoned()).attributes
    assert attributes[A.PROCESS_EXIT_CODE] == INT64_MAX
    assert attributes[A.GEN_AI_USAGE_INPUT_TOKENS] == INT64_MIN
    assert attributes[A.HTTP_RESPONSE_STATUS_CODE] == INT64_MAX
    assert attributes["copilot.cost"] == "inf"
    assert attributes[A.GEN_AI_RESPONSE_FINISH_REASONS] == (INT64_MAX, "stop")


def test_names_and_texts_are_cut():
    """A span name and a name-like attribute stop at MAX_NAME_CHARS, so a secret past them goes nowhere."""
    record = clean(poisoned())
    assert len(record.name) == MAX_NAME_CHARS and len(record.attributes[A.GEN_AI_TOOL_NAME]) == MAX_NAME_CHARS
    assert SECRET not in record.name and SECRET[:100] in record.name
    assert len(record.attributes["copilot.note"]) == MAX_ATTRIBUTE_CHARS
    assert len(record.status_message) < 10_000


def test_both_encoders_accept_a_poisoned_span():
    """The OTLP JSON line parses back with every integer within int64, and the protobuf encoder does not raise."""
    line = OtlpJsonEncoder(build_resource().attributes).encode([poisoned()])
    span = orjson.loads(line)["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    assert int(span["startTimeUnixNano"]) >= 0
    ints = [int(kv["value"]["intValue"]) for kv in span["attributes"] if "intValue" in kv["value"]]
    assert ints and all(INT64_MIN <= value <= INT64_MAX for value in ints)
    payload = encode_spans([to_readable_span(poisoned(), build_resource())]).SerializeToString()
    decoded = ExportTraceServiceRequest.FromString(payload).resource_spans[0].scope_spans[0].spans[0]
    assert decoded.start_time_unix_nano == 0 and len(decoded.name) == MAX_NAME_CHARS
