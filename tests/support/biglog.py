"""Long session logs made from a real one: its interactions repeated, each copy with ids of its own.

A real CLI log's ``session.start`` comes once; everything after it is repeated until the log
reaches the size asked for. In each copy every uuid (event, parent, interaction, agent ids) and
every tool call id gets a suffix of its own, and every timestamp moves on by the copy's length,
so the result reads as one long session that a real CLI could have written: same event shapes,
same line sizes, ids that never repeat, time that never goes back. The copies are laid out in the
past, ending where the real log ends.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

_TOKEN = re.compile(rb'[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|"call_[A-Za-z0-9_.-]+"')
_TIME = re.compile(rb'"timestamp":"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3})Z"')
_FORMAT = "%Y-%m-%dT%H:%M:%S.%f"


def _parse(stamp: bytes) -> datetime:
    return datetime.strptime(stamp.decode(), _FORMAT).replace(tzinfo=UTC)


def _moved(match: re.Match, shift: timedelta) -> bytes:
    return b'"timestamp":"' + (_parse(match.group(1)) + shift).strftime(_FORMAT)[:-3].encode() + b'Z"'


def grow(events: bytes, target_bytes: int) -> bytes:
    """A log of at least ``target_bytes``: ``events``' first line, then its other lines again and again."""
    lines = events.splitlines(keepends=True)
    head, body = lines[0], b"".join(lines[1:])
    stamps = [_parse(m.group(1)) for m in _TIME.finditer(body)]
    span = (max(stamps) - min(stamps) + timedelta(seconds=1)) if stamps else timedelta(seconds=1)
    copies = max(1, -(-(target_bytes - len(head)) // max(1, len(body))))
    out = [_TIME.sub(lambda m: _moved(m, -span * copies), head)]
    size = len(out[0])
    copy = 0
    while size < target_bytes:
        copy += 1
        suffix = f"-{copy}".encode()
        shift = span * (copy - 1 - copies)

        def token(match: re.Match, suffix: bytes = suffix) -> bytes:
            text = match.group()
            return text[:-1] + suffix + b'"' if text.startswith(b'"') else text + suffix

        def moved(match: re.Match, shift: timedelta = shift) -> bytes:
            return _moved(match, shift)

        chunk = _TIME.sub(moved, _TOKEN.sub(token, body))
        out.append(chunk)
        size += len(chunk)
    return b"".join(out)


def another_copy(events: bytes, tag: str, end: datetime) -> bytes:
    """One more copy of ``events``' lines after its first, as a live session appends it: its ids end
    with ``-tag``, its last timestamp is ``end`` and the others keep their distance from it."""
    body = b"".join(events.splitlines(keepends=True)[1:])
    stamps = [_parse(m.group(1)) for m in _TIME.finditer(body)]
    shift = end - max(stamps) if stamps else timedelta(0)
    suffix = f"-{tag}".encode()

    def token(match: re.Match) -> bytes:
        text = match.group()
        return text[:-1] + suffix + b'"' if text.startswith(b'"') else text + suffix

    return _TIME.sub(lambda m: _moved(m, shift), _TOKEN.sub(token, body))
