"""The decoder's fast path (decode.skim) reads a line exactly as a full parse would, but for the payload.

Lines of types the session model never reads (the system prompt is most of a log's bytes) are
skimmed: type, id, timestamp and agent are taken from both ends of the line. Whatever the line,
the result must equal a full parse's (an Event with the same type, id, timestamp, agent and
position; or a DecodeError with the same reason): only the unread payload may differ.
"""

from __future__ import annotations

from pathlib import Path

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from copilot_otel.decode.events import DecodeError, Event
from copilot_otel.decode.lines import _UTF8_BLOCK, NO_DATA, decode_line, is_utf8, skim, skim_at
from copilot_otel.model.options import ModelOptions
from copilot_otel.model.sessions import CONTENT_TYPES, HANDLED_TYPES, READ_TYPES, read_types

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
REAL_LINES = [line for path in sorted(FIXTURES.rglob("events.jsonl")) for line in path.read_bytes().splitlines()
              if line]


def same_reading(raw: bytes) -> None:
    full = decode_line(raw, offset=5, line=2)
    fast = decode_line(raw, offset=5, line=2, keep=READ_TYPES)
    if isinstance(full, DecodeError):
        assert isinstance(fast, DecodeError) and fast.reason == full.reason, (raw[:120], full, fast)
        return
    assert isinstance(fast, Event), (raw[:120], fast)
    assert (fast.type, fast.id, fast.timestamp_ns, fast.agent_id, fast.offset, fast.line) == \
        (full.type, full.id, full.timestamp_ns, full.agent_id, full.offset, full.line)
    assert fast.data == full.data or (fast.data is NO_DATA and fast.type not in HANDLED_TYPES - CONTENT_TYPES)


def test_real_lines_read_the_same_and_the_system_prompt_is_skimmed():
    """Every line the real CLI wrote reads the same both ways; system.message lines take the fast path, unless
    content capture is on (the system prompt is then exported)."""
    for raw in REAL_LINES:
        same_reading(raw)
    prompts = [raw for raw in REAL_LINES if raw.startswith(b'{"type":"system.message"')]
    assert prompts and all(decode_line(raw, keep=READ_TYPES).data is NO_DATA for raw in prompts)
    assert read_types(ModelOptions()) is READ_TYPES
    keep = read_types(ModelOptions(capture_content=True))
    assert all(decode_line(raw, keep=keep).data == orjson.loads(raw)["data"] for raw in prompts)


def test_lines_of_read_types_are_parsed_in_full():
    """A type the model reads always gets its whole payload."""
    for raw in REAL_LINES:
        event = decode_line(raw, keep=READ_TYPES)
        if event.type in HANDLED_TYPES - CONTENT_TYPES:
            assert event.data == orjson.loads(raw)["data"]


@settings(max_examples=300, deadline=None)
@given(raw=st.sampled_from(REAL_LINES), cut=st.integers(min_value=0, max_value=1 << 20))
def test_truncated_lines_are_rejected_as_a_full_parse_rejects_them(raw, cut):
    """A line cut anywhere (a torn write) is the same error both ways, never a skimmed event."""
    same_reading(raw[: cut % len(raw)])


@settings(max_examples=200, deadline=None)
@given(raw=st.sampled_from(REAL_LINES), data=st.data())
def test_unusual_key_order_reads_the_same(raw, data):
    """The same object with its keys in another order reads the same (it is parsed in full)."""
    obj = orjson.loads(raw)
    keys = data.draw(st.permutations(list(obj)))
    same_reading(orjson.dumps({key: obj[key] for key in keys}))


@settings(max_examples=200, deadline=None)
@given(text=st.text(max_size=40), kind=st.sampled_from(["system.message", "session.info", "tool.execution_start"]))
def test_type_words_inside_strings_do_not_fool_it(text, kind):
    """"type", "id" and "timestamp" written inside strings (or as the data's own keys) change nothing."""
    obj = {"type": kind, "data": {"content": f'"type":"x","id":"y",{text}', "type": "user.message",
                                  "id": "inner", "timestamp": "1999-01-01T00:00:00.000Z"},
           "id": "outer", "timestamp": "2026-12-03T12:00:00.000Z", "parentId": None}
    same_reading(orjson.dumps(obj))
    same_reading(orjson.dumps({"data": obj["data"], **{k: v for k, v in obj.items() if k != "data"}}))


def test_bad_bytes_in_a_skimmable_line_are_still_bad():
    """NUL bytes, invalid UTF-8 and a bad timestamp in a system.message line are rejected as in a full parse."""
    raw = next(line for line in REAL_LINES if line.startswith(b'{"type":"system.message"'))
    for bad in (raw.replace(b"system prompt", b"system\x00prompt", 1), raw.replace(b"system prompt",
                                                                                   b"system\xffprompt", 1),
                raw.replace(b'"timestamp":"2', b'"timestamp":"x', 1)):
        assert bad != raw
        same_reading(bad)
        assert isinstance(decode_line(bad, keep=READ_TYPES), DecodeError)


def test_an_escaped_type_reads_as_json_does():
    """A type written with a JSON escape (\\u002e for '.') is the type JSON says, not its raw bytes."""
    raw = next(line for line in REAL_LINES if line.startswith(b'{"type":"system.message"'))
    same_reading(raw.replace(b'system.message', b'system\\u002emessage', 1))


@settings(max_examples=300, deadline=None)
@given(agent=st.text(max_size=30), where=st.sampled_from(["before_id", "after_parent", "none"]),
       event_id=st.text(min_size=1, max_size=400), parent=st.one_of(st.none(), st.text(max_size=40)),
       pad=st.text(max_size=500))
def test_the_tail_and_its_agent_id_read_as_a_full_parse_does(agent, where, event_id, parent, pad):
    """The tail is matched from its last ',"id":"': an agent id before the id or after the parent, quotes and
    escapes in any value, ids long enough to leave the tail's window: the same event (or error) both ways."""
    head = b'{"type":"system.message","data":' + orjson.dumps({"content": pad})
    agent_part = b',"agentId":' + orjson.dumps(agent)
    tail = (b',"id":' + orjson.dumps(event_id) + b',"timestamp":"2026-12-03T12:00:00.000Z","parentId":'
            + orjson.dumps(parent))
    raw = head + (agent_part if where == "before_id" else b"") + tail + (agent_part if where == "after_parent"
                                                                         else b"") + b"}"
    same_reading(raw)


@settings(max_examples=300, deadline=None)
@given(raw=st.sampled_from(REAL_LINES), before=st.sampled_from(REAL_LINES), after=st.sampled_from(REAL_LINES),
       cut=st.integers(min_value=0, max_value=1 << 20), checked=st.booleans())
def test_a_line_skimmed_where_it_lies_reads_as_the_line_alone(raw, before, after, cut, checked):
    """skim_at of a line among others in one buffer (a whole log held in memory), whole or torn, with the
    buffer's UTF-8 checked once or the line's own: the same event at the same place, or None, as skim of the
    line alone."""
    line = raw[:cut % (len(raw) + 1)]
    buf = before + b"\n" + line + b"\n" + after
    start = len(before) + 1
    alone = skim(line, READ_TYPES, offset=start, line=2)
    utf8 = checked and is_utf8(buf)
    assert skim_at(buf, start, start + len(line), READ_TYPES, offset=start, line=2, utf8=utf8) == alone


def _decodes(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


_PIECES = st.one_of(st.text(alphabet=st.characters(max_codepoint=127), max_size=3 * _UTF8_BLOCK).map(str.encode),
                    st.text(min_size=1, max_size=3).map(lambda text: text.encode("utf-8", "surrogatepass")),
                    st.binary(min_size=1, max_size=3))


@settings(max_examples=300, deadline=None)
@given(pieces=st.lists(_PIECES, max_size=8))
def test_is_utf8_says_what_decoding_says(pieces):
    """ASCII runs of any length, characters of every width (surrogates too) and stray bytes: is_utf8 says what
    a strict decode says."""
    data = b"".join(pieces)
    assert is_utf8(data) is _decodes(data)


def test_is_utf8_reads_characters_across_its_blocks():
    """A character that straddles the end of a block, whole or cut, and a cut one at the very end."""
    for char in ("é", "→", "😀"):
        encoded = char.encode()
        for at in range(_UTF8_BLOCK - 4, _UTF8_BLOCK + 1):
            whole = b"a" * at + encoded + b"b" * 5
            assert is_utf8(whole)
            assert not is_utf8(b"a" * at + encoded[:-1] + b"b" * 5)
            assert not is_utf8(b"a" * at + encoded[:-1])
    assert not is_utf8(b"a" * _UTF8_BLOCK + b"\xed\xa0\x80")  # a surrogate, written as UTF-8
