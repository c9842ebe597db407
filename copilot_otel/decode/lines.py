"""Pure decoding: the bytes of one line -> an :class:`Event` or a :class:`DecodeError`."""

from __future__ import annotations

import codecs
import re
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from functools import lru_cache
from types import MappingProxyType
from typing import Any

import msgspec
import orjson
from msgspec.structs import replace

from .events import DecodeError, Event

# Reasons a line is rejected: the label values of copilot_otel_lines_rejected_total.
NOT_JSON = "not_json"
INVALID_UTF8 = "invalid_utf8"
NOT_OBJECT = "not_object"
BAD_TYPE = "bad_type"
BAD_TIMESTAMP = "bad_timestamp"
BAD_DATA = "bad_data"
TOO_LONG = "too_long"
NUL_BYTE = "nul_byte"
DUPLICATE_ID = "duplicate_id"
INTERNAL_ERROR = "internal_error"  # an event the session model could not apply (a bug of ours)
# An event stamped ahead of the machine's clock is no reason: it is kept (a clock is wrong, not the event).
REASONS = (NOT_JSON, INVALID_UTF8, NOT_OBJECT, BAD_TYPE, BAD_TIMESTAMP, BAD_DATA, TOO_LONG, NUL_BYTE, DUPLICATE_ID,
           INTERNAL_ERROR)

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@lru_cache(maxsize=4096)
def _whole_seconds(prefix: str) -> int:
    """Epoch seconds of a 'YYYY-MM-DDTHH:MM:SS' prefix read as UTC (cached: events share seconds)."""
    return int((datetime.fromisoformat(prefix).replace(tzinfo=UTC) - _EPOCH).total_seconds())


def parse_timestamp(value: object) -> int | None:
    """ISO-8601 with a time zone -> nanoseconds since the epoch; None when unusable."""
    if not isinstance(value, str) or len(value) < 20:
        return None
    try:
        # Fast path for the CLI's own form: 2026-12-02T18:15:16.733Z
        if value[-1] == "Z" and value[19] == "." and value[10] == "T":
            fraction = value[20:-1]
            if fraction.isdigit() and len(fraction) <= 9:
                return _whole_seconds(value[:19]) * 1_000_000_000 + int(fraction.ljust(9, "0"))
        parsed = datetime.fromisoformat(value)
    except ValueError:
        return None
    if parsed.tzinfo is None:
        return None
    delta = parsed - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000_000 + delta.microseconds * 1_000


def decode_object(obj: object, *, offset: int = -1, line: int = 0) -> Event | DecodeError:
    """Validate an already-parsed JSON value as an event."""
    if not isinstance(obj, dict):
        return DecodeError(NOT_OBJECT, f"a JSON {type(obj).__name__}, not an object", offset, line)
    get = obj.get
    return _event(get("type"), get("timestamp"), get("data"), get("id"), get("parentId"), get("agentId"),
                  get("ephemeral"), offset, line)


def _event(event_type: Any, stamp: Any, data: Any, event_id: Any, parent_id: Any, agent_id: Any, ephemeral: Any,
           offset: int, line: int) -> Event | DecodeError:
    """A line's top-level values, however they were read, checked into an event or the reason they are none."""
    if not isinstance(event_type, str) or not event_type:
        return DecodeError(BAD_TYPE, "missing or non-string 'type'", offset, line)
    timestamp = parse_timestamp(stamp)
    if timestamp is None:
        return DecodeError(BAD_TIMESTAMP, f"{event_type}: missing or unusable 'timestamp' (ISO-8601 with zone)",
                           offset, line)
    if not isinstance(data, dict):
        what = "missing" if data is None else "not an object"
        return DecodeError(BAD_DATA, f"{event_type}: 'data' is {what}", offset, line)
    if not isinstance(event_id, str) or not event_id:
        # An id is what span ids are derived from; fall back to where the line sits.
        event_id = f"@{offset}" if offset >= 0 else f"@line{line}"
    return Event(event_type, timestamp, event_id, data, parent_id if isinstance(parent_id, str) else None,
                 agent_id if isinstance(agent_id, str) and agent_id else None, ephemeral is True, offset, line)


class _Line(msgspec.Struct, gc=False, forbid_unknown_fields=True):
    """A line's top-level fields, as they are: decode_line checks each. A line with another key takes the full
    parse (msgspec would skip its value unread, invalid UTF-8 and all): the CLI writes none."""

    type: Any = None
    timestamp: Any = None
    data: Any = None
    id: Any = None
    parentId: Any = None  # noqa: N815 (the CLI's names)
    agentId: Any = None  # noqa: N815
    ephemeral: Any = None


_decode_head = msgspec.json.Decoder(_Line).decode


# The CLI writes every line as
# {"type":"T","data":{...}[,"agentId":"A"],"id":"I","timestamp":"S","parentId":P[,"agentId":"A"]}.
_HEAD = b'{"type":"'
_DATA = b'","data":{'
_ID = b',"id":"'
_TAIL = re.compile(rb',"id":"([^"\\]+)","timestamp":"([^"\\]+)",'
                   rb'"parentId":(?:null|"[^"\\]*")(?:,"agentId":"([^"\\]*)")?}\Z')
_AGENT = b',"agentId":"'
_ESCAPED = b"\\"  # _agent_before's answer for an agent id written with an escape
_TAIL_WINDOW = 400  # the tail's most bytes (ids are uuids, the timestamp is short)
NO_DATA: Mapping[str, Any] = MappingProxyType({})  # the data of an event whose payload nothing reads


def type_set(types: Iterable[str]) -> frozenset[bytes]:
    """The ``keep`` argument of decode_line and skim: event types as the bytes a line holds."""
    return frozenset(kind.encode() for kind in types)


def skim(raw: bytes, keep: frozenset[bytes], *, offset: int = -1, line: int = 0) -> Event | None:
    """A line of a type not in ``keep``, in the CLI's own shape: its event without parsing the payload.

    Most of a log's bytes are in lines nothing reads (the system prompt). Such a line is checked at
    both ends (the type first, then data, id, timestamp and parent last, as the CLI writes them),
    for NUL bytes and for UTF-8, not parsed in full. None means: parse it in full (another type,
    another shape, a bad tail or timestamp: the full parse then says exactly what is wrong).
    """
    stop = raw.find(b'"', 9)
    if stop < 0 or raw[9:stop] in keep or not raw.startswith(_HEAD):
        return None  # as skim_at answers, without its call: most lines a reader decodes are of a type it keeps
    return skim_at(raw, 0, len(raw), keep, offset=offset, line=line)


def skim_at(buf: bytes, start: int, end: int, keep: frozenset[bytes], *, offset: int = -1, line: int = 0,
            utf8: bool = False) -> Event | None:
    """skim of the line ``buf[start:end]``, read where it lies (a reader that holds a whole file copies no line
    it only skims). ``utf8``: the caller has checked that ``buf`` is UTF-8 (:func:`is_utf8`)."""
    if not buf.startswith(_HEAD, start, end):
        return None
    stop = buf.find(b'"', start + 9, end)
    if stop < 0:
        return None
    kind_bytes = buf[start + 9:stop]
    if kind_bytes in keep or not buf.startswith(_DATA, stop, end) or b"\\" in kind_bytes:
        return None  # a type with an escape in it is parsed in full, to read it as JSON does
    kind = kind_bytes.decode("utf-8", "replace")
    window = max(start, end - _TAIL_WINDOW)
    # The tail is matched where it starts: at the last ',"id":"' (none of its values holds a quote), not searched
    # for at each of the window's 400 positions.
    at = buf.rfind(_ID, window, end)
    tail = _TAIL.match(buf, at, end) if at >= 0 else None
    if tail is None or buf.find(b"\x00", start, end) >= 0 or not kind:
        return None
    if not utf8:
        raw = buf if start == 0 and end == len(buf) else buf[start:end]
        if not raw.isascii():  # ASCII is UTF-8; only other text is decoded to check it
            try:
                raw.decode("utf-8")
            except UnicodeDecodeError:
                return None
    timestamp = parse_timestamp(tail.group(2).decode())
    if timestamp is None:
        return None
    agent = _agent_before(buf, at, window) or tail.group(3)
    if agent is _ESCAPED:
        return None
    return Event(kind, timestamp, tail.group(1).decode(), NO_DATA, None, agent.decode() if agent else None, False,
                 offset, line)


_UTF8_BLOCK = 4096


def is_utf8(data: bytes) -> bool:
    """Is ``data`` UTF-8, as ``data.decode("utf-8")`` would say, without decoding its ASCII blocks: text with a
    few other characters (a prompt's dash or arrow) is checked at the cost of its ASCII test (decoding it whole
    builds a string of four bytes a character)."""
    if data.isascii():
        return True
    decoder = None
    for at in range(0, len(data), _UTF8_BLOCK):
        block = data[at:at + _UTF8_BLOCK]
        if decoder is None:
            if block.isascii():
                continue
            decoder = codecs.getincrementaldecoder("utf-8")()
        try:
            decoder.decode(block)
        except UnicodeDecodeError:
            return False
        if not decoder.getstate()[0]:  # no character left open across the block's end
            decoder = None
    if decoder is not None:
        try:
            decoder.decode(b"", True)  # a character cut off at the end
        except UnicodeDecodeError:
            return False
    return True


def _agent_before(raw: bytes, at: int, window: int) -> bytes | None:
    """The agent id of a ',"agentId":"A"' that ends just before ``at`` and starts within the window, if any;
    _ESCAPED when an escape lies between (the line is then parsed in full, to read it as JSON does)."""
    if raw[at - 1:at] != b'"':
        return None
    start = raw.rfind(_AGENT, window, at)
    if start < 0:
        return None
    value = raw[start + len(_AGENT):at - 1]
    if b"\\" in value:
        return _ESCAPED  # an escaped quote may end the id anywhere: let JSON say
    return None if b'"' in value else value


MAX_DEPTH = 256  # nesting a line is read to; what lies deeper is read as CUT (the model reads a few levels)
CUT = b'"..."'  # as captured content nested too deep is cut (model/spanattrs.py)
# A JSON string (with its escapes) or a bracket: what a scan for nesting must tell apart.
_TOKENS = re.compile(rb'"(?:[^"\\]|\\.)*"|[\[\]{}]', re.S)


def _shallow(raw: bytes, offset: int, line: int) -> Event | None:
    """The event of a line nested deeper than a parser goes, with every value below MAX_DEPTH read as "..."
    (marked ``cut``), or None if it is not JSON all the same."""
    parts: list[bytes] = []
    depth, start, kept = 0, -1, 0
    for token in _TOKENS.finditer(raw):
        char = token.group()[:1]
        if char == b'"':
            continue
        if char in b"[{":
            depth += 1
            if depth == MAX_DEPTH + 1:
                start = token.start()
        else:
            if depth == MAX_DEPTH + 1:
                parts += (raw[kept:start], CUT)
                kept = token.end()
            depth -= 1
    try:
        obj = orjson.loads(b"".join((*parts, raw[kept:])))
    except orjson.JSONDecodeError:
        return None
    event = decode_object(obj, offset=offset, line=line)
    return replace(event, cut=True) if type(event) is Event else None


def decode_kept(raw: bytes, *, offset: int = -1, line: int = 0) -> Event | DecodeError:
    """decode_line of a line its caller has checked: of a type in ``keep``, within the length limit, without NUL
    bytes. The same answer, without those checks (a reader that checked a whole file at once)."""
    try:
        head = _decode_head(raw)
    except (msgspec.DecodeError, RecursionError):
        return decode_line(raw, offset=offset, line=line)
    return _event(head.type, head.timestamp, head.data, head.id, head.parentId, head.agentId, head.ephemeral, offset,
                  line)


def decode_line(raw: bytes, *, offset: int = -1, line: int = 0, max_bytes: int = 0,
                keep: frozenset[bytes] | None = None) -> Event | DecodeError:
    """Decode one line (without its newline) into an event, or say why it is unusable.

    ``keep``: the event types whose payload is read (:func:`type_set`); a line of any other type in the
    CLI's shape is only skimmed (:func:`skim`). None: parse every line in full.
    """
    if max_bytes and len(raw) > max_bytes:
        return DecodeError(TOO_LONG, f"line of {len(raw)} bytes exceeds the {max_bytes}-byte limit", offset, line)
    if keep is not None:
        skimmed = skim(raw, keep, offset=offset, line=line)
        if skimmed is not None:
            return skimmed
    if b"\x00" in raw:
        return DecodeError(NUL_BYTE, "line contains NUL bytes", offset, line)
    try:
        head = _decode_head(raw)
    except (msgspec.DecodeError, RecursionError):  # ValidationError included
        # Not the CLI's shape: no object, another key, a number out of range, nesting deeper than msgspec goes
        # (Python's recursion limit): read as ever, by orjson (1,024 levels) and decode_object.
        try:
            obj = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            try:
                raw.decode("utf-8")
            except UnicodeDecodeError:
                return DecodeError(INVALID_UTF8, "line is not valid UTF-8", offset, line)
            if "depth" in str(exc):  # nested past what orjson reads: keep the line, its deep values as "..."
                return _shallow(raw, offset, line) or DecodeError(NOT_JSON, f"not JSON: {exc}", offset, line)
            return DecodeError(NOT_JSON, f"not JSON: {exc}", offset, line)
        return decode_object(obj, offset=offset, line=line)
    return _event(head.type, head.timestamp, head.data, head.id, head.parentId, head.agentId, head.ephemeral, offset,
                  line)
