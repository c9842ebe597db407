"""otlp/json_encoder.py: the encoder writes, piece by piece, what orjson writes for the request as one object."""

from __future__ import annotations

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from copilot_otel.model.records import SpanEvent, SpanRecord
from copilot_otel.otlp.json_encoder import SCOPE_NAME, SCOPE_VERSION, OtlpJsonEncoder, _any_value
from copilot_otel.otlp.limits import clean

_SCALAR = (st.text(max_size=6) | st.integers(-2**70, 2**70) | st.floats() | st.booleans()
           | st.sampled_from([1e16, 1e-7, 1.5e300, -0.0, 100.0]))
_VALUE = _SCALAR | st.tuples(_SCALAR, _SCALAR) | st.lists(_SCALAR, max_size=3)
_ATTRIBUTES = st.dictionaries(st.sampled_from(["gen_ai.usage.input_tokens", "a", "b", "é", "k\n"]), _VALUE, max_size=5)


def _pairs(attributes) -> list[dict]:
    return [{"key": key, "value": _any_value(value)} for key, value in attributes.items()]


def _plain(record: SpanRecord) -> dict:
    """The span as a plain OTLP JSON object, in the encoder's field order."""
    span = {"traceId": f"{record.trace_id:032x}", "spanId": f"{record.span_id:016x}", "name": record.name,
            "kind": record.kind, "startTimeUnixNano": str(record.start_ns), "endTimeUnixNano": str(record.end_ns),
            "attributes": _pairs(record.attributes),
            "status": {"code": record.status, **({"message": record.status_message} if record.status_message else {})}}
    if record.parent_span_id is not None:
        span["parentSpanId"] = f"{record.parent_span_id:016x}"
    if record.links:
        span["links"] = [{"traceId": f"{t:032x}", "spanId": f"{s:016x}"} for t, s in record.links]
    if record.events:
        span["events"] = [{"timeUnixNano": str(e.time_ns), "name": e.name, "attributes": _pairs(e.attributes)}
                          for e in record.events]
    return span


_RECORDS = st.builds(
    SpanRecord, st.integers(1, 2**128 - 1), st.integers(1, 2**64 - 1), st.none() | st.integers(1, 2**64 - 1),
    st.text(max_size=8), st.sampled_from([1, 3]), st.integers(0, 2**62), st.integers(0, 2**62), _ATTRIBUTES,
    st.sampled_from([0, 1, 2]), st.text(max_size=4),
    st.lists(st.builds(SpanEvent, st.text(max_size=4), st.integers(0, 2**62), _ATTRIBUTES), max_size=2).map(tuple),
    st.lists(st.tuples(st.integers(1, 2**128 - 1), st.integers(1, 2**64 - 1)), max_size=2).map(tuple))


@given(st.lists(_RECORDS, min_size=1, max_size=3), _ATTRIBUTES.filter(lambda a: all(type(v) is str
                                                                                    for v in a.values())))
@settings(max_examples=150, deadline=None)
def test_a_request_is_byte_for_byte_what_orjson_writes(records, resource):
    """Ints, floats (every exponent form), bools, arrays and strings, span events and links: each request line
    is orjson's encoding of the same request as one object, encoded twice over the encoder's caches."""
    encoder = OtlpJsonEncoder(resource)
    plain = {"resourceSpans": [{"resource": {"attributes": _pairs(resource)}, "scopeSpans": [
        {"scope": {"name": SCOPE_NAME, "version": SCOPE_VERSION}, "spans": [_plain(clean(r)) for r in records]}]}]}
    expected = orjson.dumps(plain) + b"\n"
    assert encoder.encode(records) == encoder.encode(records) == expected
