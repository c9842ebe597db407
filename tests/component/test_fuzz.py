"""Fuzzing the pure core with Hypothesis: random bytes and mutated real CLI event lines.

decode_line must turn any bytes into an Event or a DecodeError with a known reason, and a
SessionModel fed any sequence of decoded events (duplicated, reordered, dropped, retyped,
re-keyed, corrupted) must never raise and, after finish(), leave no span open: every span
it started is emitted with end >= start, every parent is an emitted span of the same trace,
and the model is idle.
"""

from __future__ import annotations

import math
from collections import Counter
from datetime import timedelta, timezone
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

from copilot_otel.config import ModelOptions
from copilot_otel.decode.events import DecodeError, Event
from copilot_otel.decode.lines import REASONS, decode_line
from copilot_otel.metrics.genai import INSTRUMENTS
from copilot_otel.model.records import MetricUpdate, SpanRecord, span_id_for
from copilot_otel.model.sessions import HANDLED_TYPES, SessionModel
from copilot_otel.vocab import IDLE, Metric

HISTOGRAMS = (Metric.TURN_DURATION, Metric.TOOL_DURATION, Metric.LLM_CALL_DURATION)

FUZZ = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
SESSION_ID = "fuzz-session"

# Start <-> end event types, for the "swap" mutation.
SWAPS = {
    "assistant.turn_start": "assistant.turn_end",
    "tool.execution_start": "tool.execution_complete",
    "subagent.started": "subagent.completed",
    "permission.requested": "permission.completed",
    "session.start": "session.shutdown",
    "user.message": "session.task_complete",
}
SWAPS.update({end: start for start, end in list(SWAPS.items())})
SWAPS["subagent.failed"] = "subagent.started"
EVENT_TYPES = sorted(set(SWAPS) | set(HANDLED_TYPES) | {"session.info", "system.message"})
# Fields the model keys on, re-pointed at a tiny pool of values so that events collide.
KEYS = (("id",), ("agentId",), ("parentId",), ("data", "toolCallId"), ("data", "interactionId"),
        ("data", "parentToolCallId"), ("data", "turnId"), ("data", "requestId"))
POOL = st.sampled_from(["a", "b", "c", "", 0])
NUMBERS = (st.sampled_from([0, -1, 1, -(2**63), 2**63 - 1, 2**64 - 1, 0.5, -0.5, 1e18, 1e303, -1e303, 1.7e308])
           | st.integers(-(2**63), 2**64 - 1) | st.floats(allow_nan=False, allow_infinity=False))

JSON_LEAVES = (st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1)
               | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=12))
JSON_VALUES = st.recursive(JSON_LEAVES, lambda inner: st.lists(inner, max_size=3)
                           | st.dictionaries(st.text(max_size=6), inner, max_size=3), max_leaves=6)
ZONES = st.builds(lambda minutes: timezone(timedelta(minutes=minutes)), st.integers(-23 * 60 - 59, 23 * 60 + 59))
TIMESTAMPS = st.one_of(
    st.sampled_from(["", "garbage", "2026-01-01T00:00:00.000", "2026-01-01T00:00:00", "2026-01-01",
                     "2026-13-45T99:99:99.999Z", "0000-01-01T00:00:00.000Z", "0001-01-01T00:00:00.000+14:00",
                     "9999-12-31T23:59:59.999-14:00", "2026-01-01T00:00:00.0000000000001Z",
                     "2026-01-01T00:00:00.²Z", "2026-01-01T00:00:00.٣Z", "2026-01-01 00:00:00.000Z",
                     "2026-01-01T00:00:00.000+00:00", "1970-01-01T00:00:00Z"]),
    st.datetimes().map(lambda d: d.isoformat()),  # no zone
    st.datetimes(timezones=ZONES).map(lambda d: d.isoformat()),
    st.text(max_size=30),
    st.integers(),
    st.floats(allow_nan=False, allow_infinity=False),
    st.none(),
)
JUNK = st.sampled_from([b"\x00", b"\xff", b"\xc3", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\xef\xbb\xbf", b'"',
                        b"{", b"}", b",", b"\\", b"\\u0000", b"\\ud800", b"\r", b" ", b"1e999", b"[" * 1100])


class Logs(dict):
    """Scenario -> the lines of its event log; a short repr keeps falsifying examples readable."""

    def __repr__(self) -> str:
        return f"<{len(self)} real event logs>"


STORED = Path(__file__).resolve().parents[1] / "fixtures"


def _stored_logs() -> dict[str, Path]:
    """Every session log the real CLI wrote into the stored fixtures (tests/fixtures/cli/<version>/<scenario>,
    tests/fixtures/situations/<name>), by "<folder>/<session id>"; no CLI runs here."""
    logs = sorted(STORED.glob("cli/*/*/session-state/*/events.jsonl")) + sorted(
        STORED.glob("situations/*/session-state/*/events.jsonl"))
    return {f"{p.parents[3].name}/{p.parents[2].name}/{p.parent.name[:8]}": p for p in logs}


LOGS = _stored_logs()
SCENARIOS = tuple(LOGS)


@pytest.fixture(scope="module")
def real_logs() -> Logs:
    """The lines of every stored real CLI session log, in a stable order."""
    return Logs({name: [line for line in path.read_bytes().split(b"\n") if line] for name, path in LOGS.items()})


@pytest.fixture(scope="module")
def model_logs(real_logs) -> Logs:
    """The same logs without the lines the session model ignores, their bulky bookkeeping fields and
    long strings, so that a falsifying example stays readable."""
    return Logs({scenario: [orjson.dumps(_shorten(orjson.loads(line))) for line in log
                            if orjson.loads(line)["type"] in HANDLED_TYPES]
                 for scenario, log in real_logs.items()})


BULKY = {"toolTelemetry", "accountingSnapshot", "providerModelMetrics", "modelMetrics", "agentMetrics", "codeChanges",
         "usageAccountingWatermarks", "accounting", "shellToolInfo", "metadata", "supportedNativeDocumentMimeTypes",
         "transformedContent"}


def _shorten(value: Any) -> Any:
    if isinstance(value, str):
        return value[:40]
    if isinstance(value, dict):
        return {key: _shorten(inner) for key, inner in value.items() if key not in BULKY}
    if isinstance(value, list):
        return [_shorten(inner) for inner in value]
    return value


# ---------------------------------------------------------------- mutations


def _leaf_paths(value: Any, path: tuple = ()) -> list[tuple]:
    paths = [path]
    if isinstance(value, dict):
        for key, inner in value.items():
            paths.extend(_leaf_paths(inner, (*path, key)))
    elif isinstance(value, list):
        for index, inner in enumerate(value):
            paths.extend(_leaf_paths(inner, (*path, index)))
    return paths


def _get(obj: Any, path: tuple) -> Any:
    for key in path:
        obj = obj[key]
    return obj


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _set(obj: Any, path: tuple, value: Any) -> Any:
    if not path:
        return value
    *head, last = path
    target = obj
    for key in head:
        target = target[key] if isinstance(target, (dict, list)) else None
        if target is None:
            return obj
    if isinstance(target, dict) or (isinstance(target, list) and isinstance(last, int) and last < len(target)):
        target[last] = value
    return obj


def mutate_object(draw, obj: dict) -> Any:
    """One structural change to a parsed event: retype, re-key, drop or replace a field."""
    kind = draw(st.sampled_from(["type", "data", "timestamp", "drop", "value", "number", "rekey", "swap"]))
    if kind == "type":
        obj["type"] = draw(st.sampled_from(EVENT_TYPES) | JSON_LEAVES | st.lists(st.integers(), max_size=2))
    elif kind == "data":
        obj["data"] = draw(st.lists(JSON_LEAVES, max_size=2) | JSON_LEAVES)
    elif kind == "timestamp":
        obj["timestamp"] = draw(TIMESTAMPS)
    elif kind == "drop":
        paths = [p for p in _leaf_paths(obj) if p]
        if paths:
            *head, last = draw(st.sampled_from(paths))
            parent = obj
            for key in head:
                parent = parent[key]
            del parent[last]
    elif kind == "value":
        obj = _set(obj, draw(st.sampled_from(_leaf_paths(obj))), draw(JSON_VALUES))
    elif kind == "number":
        paths = [p for p in _leaf_paths(obj) if _is_number(_get(obj, p))]
        if paths:
            obj = _set(obj, draw(st.sampled_from(paths)), draw(NUMBERS))
    elif kind == "rekey":
        path = draw(st.sampled_from(KEYS))
        if path[0] == "data" and not isinstance(obj.get("data"), dict):
            obj["data"] = {}
        obj = _set(obj, path, draw(POOL))
    elif kind == "swap" and obj.get("type") in SWAPS:
        obj["type"] = SWAPS[obj["type"]]
    return obj


def mutate_line(draw, line: bytes) -> bytes:
    """One change to the bytes of a line, or to the event it holds."""
    kind = draw(st.sampled_from(["flip", "truncate", "insert", "object", "object"]))
    if kind == "flip" and line:
        at = draw(st.integers(0, len(line) - 1))
        return line[:at] + bytes([line[at] ^ draw(st.integers(1, 255))]) + line[at + 1:]
    if kind == "truncate":
        return line[: draw(st.integers(0, len(line)))]
    if kind == "insert":
        at = draw(st.integers(0, len(line)))
        return line[:at] + draw(JUNK) + line[at:]
    try:
        obj = orjson.loads(line)
    except orjson.JSONDecodeError:
        return line
    if not isinstance(obj, dict):
        return line
    try:
        return orjson.dumps(mutate_object(draw, obj))
    except TypeError:
        return line


def mutate_log(draw, lines: list[bytes]) -> list[bytes]:
    """A few changes to a whole log: lines duplicated, reordered, dropped or mutated."""
    lines = list(lines)
    for _ in range(draw(st.integers(0, 12))):
        if not lines:
            break
        kind = draw(st.sampled_from(["duplicate", "swap", "move", "drop", "line", "line", "line"]))
        i = draw(st.integers(0, len(lines) - 1))
        j = draw(st.integers(0, len(lines) - 1))
        if kind == "duplicate":
            lines.insert(j, lines[i])
        elif kind == "swap":
            lines[i], lines[j] = lines[j], lines[i]
        elif kind == "move":
            lines.insert(j, lines.pop(i))
        elif kind == "drop":
            del lines[i]
        else:
            lines[i] = mutate_line(draw, lines[i])
    return lines


def check_decoded(item: Event | DecodeError) -> None:
    """An Event with well-typed fields, or a DecodeError with a known reason."""
    if isinstance(item, DecodeError):
        assert item.reason in REASONS, item
        return
    assert isinstance(item, Event), item
    assert isinstance(item.type, str) and item.type
    assert isinstance(item.timestamp_ns, int)
    assert isinstance(item.id, str) and item.id
    assert isinstance(item.data, dict)
    assert item.parent_id is None or isinstance(item.parent_id, str)
    assert item.agent_id is None or (isinstance(item.agent_id, str) and item.agent_id)


def decode_log(lines: list[bytes]) -> list[Event]:
    events = []
    offset = 0
    for number, raw in enumerate(lines, 1):
        item = decode_line(raw, offset=offset, line=number, max_bytes=1 << 20)
        check_decoded(item)
        if isinstance(item, Event):
            events.append(item)
        offset += len(raw) + 1
    return events


def describe(event: Event) -> str:
    """One short line per event for a falsifying example: type, id, agent and the keys the model uses."""
    keys = {key: event.data[key] for key in ("interactionId", "turnId", "toolCallId", "parentToolCallId", "requestId")
            if key in event.data}
    return f"{event.type} id={event.id[:8]} agent={(event.agent_id or '-')[:8]} {keys}"


def run_model(events: list[Event], capture_content: bool = False,
              live_idle: bool = False) -> tuple[SessionModel, list[SpanRecord], list[MetricUpdate]]:
    model = SessionModel(SESSION_ID, ModelOptions(capture_content=capture_content), live_idle=live_idle)
    spans: list[SpanRecord] = []
    metrics: list[MetricUpdate] = []
    for step in [model.feed(event) for event in events] + [model.finish()]:
        spans.extend(step.spans)
        metrics.extend(step.metrics)
    return model, spans, metrics


def check_no_span_left_open(model: SessionModel, events: list[Event], spans: list[SpanRecord]) -> None:
    assert model.state == IDLE
    emitted = {(span.trace_id, span.span_id) for span in spans}
    emitted_ids = {span.span_id for span in spans}
    ids = Counter(event.id for event in events)
    if len(ids) == len(events):  # (an event repeated may repeat its span)
        assert len(emitted_ids) == len(spans), "two spans share a span id"
    for span in spans:
        assert span.end_ns >= span.start_ns, span
        assert span.parent_span_id != span.span_id, f"{span.name} is its own parent"
        if span.parent_span_id is not None:
            assert (span.trace_id, span.parent_span_id) in emitted, f"parent of {span.name} never emitted"
    for event in events:  # each of these opens a span (unless its id was seen before); it must be emitted
        opens = event.type == "assistant.turn_start" or (
            event.type in ("tool.execution_start", "subagent.started") and event.tool_call_id is not None)
        if opens and ids[event.id] == 1:
            assert span_id_for(SESSION_ID, event.id) in emitted_ids, f"span of {event.type} {event.id} never ended"


# ---------------------------------------------------------------- decode_line


@FUZZ
@given(raw=st.binary(max_size=300) | st.text(alphabet='{}[]":,0123456789.eE-+ \\tfnrulsaTZ\x00é', max_size=80)
       .map(lambda s: s.encode("utf-8", "surrogatepass")), max_bytes=st.sampled_from([0, 1, 64, 1 << 20]))
def test_decode_line_accepts_any_bytes(raw, max_bytes):
    """Random bytes become an Event or a DecodeError with a known reason; nothing raises."""
    check_decoded(decode_line(raw, offset=7, line=3, max_bytes=max_bytes))


@FUZZ
@given(data=st.data())
def test_decode_line_accepts_mutated_real_lines(real_logs, data):
    """Real lines with flipped bytes, truncation, NULs, invalid UTF-8 or retyped fields never raise."""
    line = data.draw(st.sampled_from(real_logs[data.draw(st.sampled_from(SCENARIOS))]))
    for _ in range(data.draw(st.integers(1, 4))):
        line = mutate_line(data.draw, line)
    check_decoded(decode_line(line, offset=0, line=1, max_bytes=1 << 20))


def test_real_lines_decode_as_events(real_logs):
    """The unmutated corpus decodes without a single rejection (so the fuzz starts from valid input)."""
    for log in real_logs.values():
        assert all(isinstance(decode_line(line), Event) for line in log)


# ---------------------------------------------------------------- the session model


@FUZZ
@given(data=st.data(), capture=st.booleans(), live_idle=st.booleans())
def test_session_model_closes_every_span_of_mutated_logs(model_logs, data, capture, live_idle):
    """Any decoded sequence (mutated real logs) is absorbed without an exception; after finish()
    every span started was emitted, ends no earlier than it starts, has an emitted parent of its
    own trace, and the model is idle."""
    lines = mutate_log(data.draw, model_logs[data.draw(st.sampled_from(SCENARIOS))])
    events = decode_log(lines)
    note("events fed: " + "".join(f"\n  {describe(event)}" for event in events))
    model, spans, _metrics = run_model(events, capture_content=capture, live_idle=live_idle)
    check_no_span_left_open(model, events, spans)


@FUZZ
@given(data=st.data())
def test_session_model_metric_updates_are_applicable(model_logs, data):
    """Metric updates from any input can be applied to Prometheus: finite values, no negative counter steps."""
    events = decode_log(mutate_log(data.draw, model_logs[data.draw(st.sampled_from(SCENARIOS))]))
    _model, _spans, metrics = run_model(events)
    for update in metrics:
        assert math.isfinite(update.value), update
        assert update.metric in HISTOGRAMS or update.value >= 0, update


# ---------------------------------------------------------------- minimal reproducers of what the fuzz found


def _event(event_type: str, event_id: str, data: dict, agent_id: str | None = None) -> Event:
    obj = {"type": event_type, "id": event_id, "timestamp": "2026-01-01T00:00:00.000Z", "data": data}
    if agent_id is not None:
        obj["agentId"] = agent_id
    event = decode_line(orjson.dumps(obj))
    assert isinstance(event, Event)
    return event


def _prompt() -> Event:
    return _event("user.message", "m", {"interactionId": "i", "content": "hi"})


def test_usage_record_with_huge_duration_does_not_raise():
    """A usage record whose duration overflows when turned into nanoseconds is absorbed, not an OverflowError."""
    events = [_prompt(), _event("session.usage_record", "u1", {"usage": {"duration": 1e303}})]
    model, spans, _metrics = run_model(events)
    check_no_span_left_open(model, events, spans)


def test_interaction_opened_implicitly_has_a_span_id_of_its_own():
    """A log read from mid-way (first event a turn_start) gets an interaction root whose id is not the turn's."""
    events = [_event("assistant.turn_start", "t1", {"turnId": "0", "interactionId": "i"})]
    model, spans, _metrics = run_model(events)
    check_no_span_left_open(model, events, spans)


def test_tool_started_twice_under_one_call_id_ends_both_spans():
    """A second tool.execution_start for an open toolCallId does not drop the first span."""
    events = [_prompt(), _event("assistant.turn_start", "t1", {"turnId": "0"}),
              _event("tool.execution_start", "a", {"toolCallId": "c", "toolName": "bash"}),
              _event("tool.execution_start", "b", {"toolCallId": "c", "toolName": "bash"})]
    model, spans, _metrics = run_model(events)
    check_no_span_left_open(model, events, spans)


def test_subagent_started_twice_under_one_call_id_ends_both_spans():
    """A second subagent.started for an open toolCallId does not drop the first sub-agent span,
    under which the sub-agent's turn already hangs."""
    events = [_prompt(), _event("subagent.started", "s1", {"toolCallId": "c", "agentName": "x"}, agent_id="x"),
              _event("assistant.turn_start", "t1", {"turnId": "0"}, agent_id="x"),
              _event("subagent.started", "s2", {"toolCallId": "c", "agentName": "y"}, agent_id="y")]
    model, spans, _metrics = run_model(events)
    check_no_span_left_open(model, events, spans)


def test_negative_token_count_is_not_a_negative_counter_step():
    """A usage record with a negative token count does not ask Prometheus to decrement a counter."""
    events = [_prompt(), _event("session.usage_record", "u1", {"usage": {"inputTokens": -1}})]
    _model, _spans, metrics = run_model(events)
    histograms = set(HISTOGRAMS) | {key for key, spec in INSTRUMENTS.items() if spec.bounds is not None}
    assert all(update.metric in histograms or update.value >= 0 for update in metrics), metrics
