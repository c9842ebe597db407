"""decode.py: one line in, an Event or a DecodeError with its reason out."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from copilot_otel.decode import lines as decode
from copilot_otel.decode.events import DecodeError, Event
from copilot_otel.decode.lines import decode_line, decode_object, parse_timestamp
from copilot_otel.decode.normalize import parse_version
from tests.support.events import SessionLog, event_line

TS = "2026-12-03T12:01:45.787Z"


def epoch_ns(moment: datetime) -> int:
    return round(moment.timestamp() * 1_000_000) * 1000


def test_the_cli_timestamp_form_to_nanoseconds():
    """The CLI's own form (milliseconds and Z) is read exactly, to the nanosecond."""
    expected = epoch_ns(datetime(2026, 12, 3, 12, 1, 45, 787000, tzinfo=UTC))
    assert parse_timestamp(TS) == expected


@pytest.mark.parametrize("text,moment", [
    ("2026-12-03T13:01:45.787+01:00", datetime(2026, 12, 3, 12, 1, 45, 787000, tzinfo=UTC)),
    ("2026-12-03T12:01:45+00:00", datetime(2026, 12, 3, 12, 1, 45, tzinfo=UTC)),
    ("2026-12-03T12:01:45.123456Z", datetime(2026, 12, 3, 12, 1, 45, 123456, tzinfo=UTC)),
])
def test_other_iso_forms_with_a_zone(text, moment):
    """Any ISO-8601 time with a zone is read, whatever its offset and precision."""
    assert parse_timestamp(text) == epoch_ns(moment)


def test_nine_fraction_digits_keep_their_nanoseconds():
    """A fraction of nine digits is not rounded to microseconds."""
    assert parse_timestamp("2026-12-03T12:01:45.123456789Z") % 1_000_000_000 == 123456789


@pytest.mark.parametrize("value", ["2026-12-03T12:01:45.787", "yesterday", "", 1764700000, None,
                                   "2026-13-03T12:01:45.787Z"])
def test_unusable_timestamps(value):
    """No zone, not a time, not a string, an impossible date: None, never an exception."""
    assert parse_timestamp(value) is None


def test_a_real_line_becomes_an_event_with_its_position():
    """The fields the model keys on are lifted out; data stays whole; offset and line are kept."""
    log = SessionLog("s-1")
    log.start()
    log.user("hi")
    log.subagent_started("call-task", "agent-7")
    raw = log.lines()[2]
    event = decode_line(raw, offset=1234, line=3)
    entry = json.loads(raw)
    assert isinstance(event, Event)
    assert (event.type, event.id, event.parent_id, event.agent_id) == (
        "subagent.started", entry["id"], entry["parentId"], "agent-7")
    assert event.timestamp_ns == log.ns(entry)
    assert dict(event.data) == entry["data"]
    assert (event.offset, event.line, event.ephemeral) == (1234, 3, False)
    assert event.tool_call_id == "call-task"


def test_ephemeral_and_ids_of_the_data():
    """ephemeral: true is kept; interaction and turn ids are read from data (a numeric turn id as text)."""
    event = decode_line(event_line("assistant.turn_start", TS, "e-1", {"interactionId": "i-1", "turnId": 3},
                                   ephemeral=True))
    assert event.ephemeral is True
    assert (event.interaction_id, event.turn_id) == ("i-1", "3")


def test_an_event_without_an_id_is_named_by_its_position():
    """Span ids derive from event ids: a line without one gets one from its byte offset (or line)."""
    line = json.dumps({"type": "session.info", "timestamp": TS, "data": {}}).encode()
    assert decode_line(line, offset=512).id == "@512"
    assert decode_line(line, line=7).id == "@line7"


def test_an_empty_agent_id_is_no_agent():
    """agentId "" is the main agent, as if it were absent."""
    assert decode_line(event_line("assistant.turn_start", TS, "e-1", agentId="")).agent_id is None


@pytest.mark.parametrize("raw,reason", [
    (b"this is not json", decode.NOT_JSON),
    (b'{"type": "assistant.message", "timestamp": "2026-', decode.NOT_JSON),
    (b'{"type": "session.info", "data": {"text": "caf\xe9"}}', decode.INVALID_UTF8),
    (b'["an", "array"]', decode.NOT_OBJECT),
    (b"42", decode.NOT_OBJECT),
    (b"null", decode.NOT_OBJECT),
    (event_line(7, TS, "e-1"), decode.BAD_TYPE),
    (event_line("", TS, "e-1"), decode.BAD_TYPE),
    (json.dumps({"timestamp": TS, "id": "e-1", "data": {}}).encode(), decode.BAD_TYPE),
    (event_line("session.info", "yesterday", "e-1"), decode.BAD_TIMESTAMP),
    (event_line("session.info", TS.rstrip("Z"), "e-1"), decode.BAD_TIMESTAMP),
    (json.dumps({"type": "session.info", "id": "e-1", "data": {}}).encode(), decode.BAD_TIMESTAMP),
    (event_line("session.info", TS, "e-1", [1, 2]), decode.BAD_DATA),
    (json.dumps({"type": "session.info", "id": "e-1", "timestamp": TS}).encode(), decode.BAD_DATA),
    (event_line("session.info", TS, "e-1", {"text": "a\x00b"}).replace(b"\\u0000", b"\x00"), decode.NUL_BYTE),
])
def test_each_reason_a_line_is_rejected(raw, reason):
    """Every kind of unusable line is a DecodeError with its reason, never an exception."""
    result = decode_line(raw, offset=40, line=2)
    assert isinstance(result, DecodeError)
    assert (result.reason, result.offset, result.line) == (reason, 40, 2)
    assert result.detail


def test_a_line_over_the_limit_is_too_long():
    """A line longer than max_bytes is rejected before it is parsed."""
    raw = event_line("session.info", TS, "e-1", {"pad": "x" * 2000})
    assert decode_line(raw, max_bytes=len(raw)).type == "session.info"
    assert decode_line(raw, max_bytes=len(raw) - 1).reason == decode.TOO_LONG


def test_a_timestamp_far_ahead_is_an_event_like_any_other():
    """An event stamped a year ahead of any clock is decoded, with its own timestamp (a clock is wrong, not it)."""
    ahead = "2099-12-03T12:00:00.000Z"
    for event_id, raw in (("e-1", event_line("session.info", ahead, "e-1")),
                          ("e-2", event_line("assistant.turn_start", ahead, "e-2", {"turnId": "0"}))):
        for keep in (None, frozenset()):  # parsed in full, and skimmed
            event = decode_line(raw, keep=keep)
            assert (event.id, event.timestamp_ns) == (event_id, parse_timestamp(ahead))
    assert "future_timestamp" not in decode.REASONS


def test_decode_object_takes_parsed_json():
    """The stream and the SDK hand over parsed objects: the same checks apply."""
    assert decode_object({"type": "session.idle", "timestamp": TS, "data": {}, "id": "e-1"}).type == "session.idle"
    assert decode_object(["not", "an", "object"]).reason == decode.NOT_OBJECT


def test_every_reason_is_a_known_label():
    """The reasons decode gives are the label values copilot_otel_lines_rejected_total is created with."""
    reasons = {value for name, value in vars(decode).items() if name.isupper() and isinstance(value, str)}
    assert reasons == set(decode.REASONS)


# A line read by decode_line (a msgspec decoder into its top-level fields) and the same line read by the
# stdlib's json and handed to decode_object (the SDK's and the stream's path) give the same event.
_JSON = st.recursive(st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats(allow_nan=False,
                     allow_infinity=False) | st.text(max_size=8), lambda children: st.lists(children, max_size=3)
                     | st.dictionaries(st.text(max_size=6), children, max_size=3), max_leaves=8)
_FIELD = st.one_of(_JSON, st.text(max_size=12), st.sampled_from([TS, "2026-12-03T12:01:45.787123Z", "e-1", "main"]))


@given(st.dictionaries(st.sampled_from(["type", "timestamp", "data", "id", "parentId", "agentId", "ephemeral",
                                        "other"]), _FIELD | st.dictionaries(st.text(max_size=4), _JSON, max_size=3),
                       max_size=8), st.lists(st.sampled_from(["type", "timestamp", "data", "id"]), unique=True),
       st.booleans())
@settings(max_examples=200, deadline=None)
def test_a_line_reads_as_the_stdlib_reads_it(changes, missing, spaced):
    """Whatever the top-level fields hold (wrong types, nested values, unknown keys, fields left out), the event
    or the reason is the one decode_object gives for the stdlib's parse of the same line."""
    obj = {"type": "tool.execution_start", "data": {"toolCallId": "c-1", "arguments": {"x": [1]}}, "id": "e-1",
           "timestamp": TS, "parentId": None, **changes}
    for key in missing:
        obj.pop(key, None)
    raw = json.dumps(obj, separators=(", ", ": ") if spaced else (",", ":")).encode()
    assert decode_line(raw, offset=7, line=3) == decode_object(json.loads(raw), offset=7, line=3)


@given(st.datetimes(min_value=datetime(1970, 1, 2), max_value=datetime(2200, 1, 1)), st.sampled_from([0, 3, 6]))
@settings(max_examples=400, deadline=None)
def test_the_fast_timestamp_path_agrees_with_datetime(moment, digits):
    """The CLI's form (read through a cache of whole seconds) gives the nanoseconds datetime gives, at every
    precision the path serves and beside it."""
    text = moment.strftime("%Y-%m-%dT%H:%M:%S") + (f".{moment.microsecond:06d}"[:digits + 1] if digits else "") + "Z"
    expected = datetime.fromisoformat(text.replace("Z", "+00:00"))
    delta = expected - datetime(1970, 1, 1, tzinfo=UTC)
    want = (delta.days * 86_400 + delta.seconds) * 1_000_000_000 + delta.microseconds * 1_000
    assert parse_timestamp(text) == parse_timestamp(text) == want


def _read_by_the_rules(raw: bytes):
    """The rules of a rejected line, read independently: NUL bytes, then UTF-8, then JSON (the stdlib's, with
    the numbers JSON has no value for refused), then what decode_object says of the object."""
    if b"\x00" in raw:
        return decode.NUL_BYTE
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return decode.INVALID_UTF8

    def finite(number: str) -> float:
        value = float(number)
        if value in (float("inf"), float("-inf")):
            raise ValueError(number)
        return value

    try:
        obj = json.loads(text, parse_float=finite, parse_constant=lambda name: finite("inf"))
    except (ValueError, RecursionError):
        return decode.NOT_JSON
    return decode_object(obj, offset=7, line=3)


@given(st.lists(st.tuples(st.integers(0, 400), st.sampled_from([b"\xff", b"\x00", b'"', b",", b"]", b"\xc3", b"\xa9",
                                                                b"5", b"{", b"1e999", b' ', b'"x":1'])), max_size=3))
@settings(max_examples=400, deadline=None)
def test_a_damaged_line_is_rejected_for_the_reason_the_rules_give(damage):
    """Bytes put anywhere in a real-shaped line: the event, or the reason (NUL, UTF-8, JSON, object), is the one
    the rules give, in that order."""
    raw = event_line("tool.execution_start", TS, "e-1", {"toolCallId": "c-1", "arguments": {"x": [1, "é"]}})
    for at, junk in damage:
        at = min(at, len(raw))
        raw = raw[:at] + junk + raw[at:]
    result = decode_line(raw, offset=7, line=3)
    expected = _read_by_the_rules(raw)
    assert (result.reason if isinstance(result, DecodeError) else result) == (
        expected.reason if isinstance(expected, DecodeError) else expected)


def test_an_event_s_repr_leaves_its_payload_out():
    """What a log holds (prompts, tool output) never reaches our own log through an event's repr; the rest does."""
    event = decode_line(event_line("user.message", TS, "e-1", {"content": "the user's secret prompt"}), line=4)
    assert "secret" not in repr(event) and "data" not in repr(event)
    assert repr(event).startswith("Event(type='user.message', timestamp_ns=") and "line=4" in repr(event)


# ------------------------------------------------------------------ a tool's completion, as the CLI shows it

def _completion(data: dict):
    from copilot_otel.decode.payloads import ToolEnd

    line = json.dumps({"type": "tool.execution_complete", "data": {"toolCallId": "c1", **data}, "id": "e1",
                       "timestamp": TS, "parentId": None})
    return ToolEnd.of(decode_line(line.encode()))


@pytest.mark.parametrize("data,exit_code,failed,error_type", [
    # 1.0.85+: shellExecution; the CLI says success true and shows "Failed with exit code 3"
    ({"success": True, "shellExecution": {"exitCode": 3}}, 3, True, "command_nonzero_exit"),
    ({"success": True, "shellExecution": {"exitCode": 0}}, 0, False, None),
    # 1.0.70 and 1.0.92+: the tool's telemetry (a float from 1.0.92) and its category
    ({"success": True, "toolTelemetry": {"properties": {"shell_error_category": "command_nonzero_exit"},
                                         "metrics": {"exit_code": 3.0}}}, 3, True, "command_nonzero_exit"),
    # a command that timed out: no exit code, the category says it
    ({"success": True, "toolTelemetry": {"properties": {"shell_error_category": "command_timeout"}}}, None, True,
     "command_timeout"),
    # 1.0.24-1.0.70: only the marker the CLI appends to the result
    ({"success": True, "result": {"content": "exit\n<exited with exit code 3>"}}, 3, True, "command_nonzero_exit"),
    ({"success": True, "result": {"content": "<shellId: 1 completed with exit code 3>"}}, 3, True,
     "command_nonzero_exit"),
    ({"success": True, "result": {"content": "still-fine\n<exited with exit code 0>"}}, 0, False, None),
    # a command's own output that looks like the marker, not at the end: no exit code
    ({"success": True, "result": {"content": "<exited with exit code 3>\nmore output"}}, None, False, None),
    # a content block of the result
    ({"success": True, "result": {"content": "", "contents": [{"type": "shell_exit", "shellId": "0",
                                                                "exitCode": 2}]}}, 2, True, "command_nonzero_exit"),
    # the CLI's own failure: its error code, whatever the exit code
    ({"success": False, "error": {"message": "Path does not exist", "code": "failure"}}, None, True, "failure"),
    ({"success": False, "error": {"message": "denied"}}, None, True, "tool_error"),
    # nonsense where the exit code goes: none
    ({"success": True, "shellExecution": {"exitCode": True}}, None, False, None),
])
def test_a_tool_fails_as_the_cli_shows_it(data, exit_code, failed, error_type):
    """A completion fails when the CLI says so (success false) or when its command exited non-zero or timed out
    (success true in the log, "Failed with exit code N" on the CLI's screen), wherever that CLI version keeps
    the exit code; the CLI's own flag is kept as it is."""
    view = _completion(data)
    assert (view.exit_code, view.failed) == (exit_code, failed)
    assert view.success is data["success"]
    if failed:
        assert view.failure_type == error_type


@pytest.mark.parametrize("text,version", [("1.0.24", (1, 0, 24)), ("1.0.24-3", (1, 0, 24)), ("0.0.400", (0, 0, 400)),
                                          ("\u00b9", None), ("1.0.\u00b9", None), ("1.\u0661.2", None), ("1..2", None),
                                          ("", None), ("v1.0", None), (1.0, None), (None, None)])
def test_a_version_is_ascii_digits_between_dots(text, version):
    """copilotVersion is read as a version only when it is ASCII digits between dots: a superscript digit (which
    str.isdigit() takes and int() refuses; test_schema drew a session.start with '\u00b9', and the model failed on it)
    or another script's digit is no version, as a word is."""
    assert parse_version(text) == version
