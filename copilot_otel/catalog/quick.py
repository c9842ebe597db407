"""A session log's summary without the session model, for the logs whose every line it knows; None for the rest.

`sessions` and `usage` without state read every log to its end for nothing but its summary. The model builds
spans, attributes and metrics on the way. This reads each file in one block, decodes each line with the model's
own decoder (checking the whole file for NUL bytes and CRs once) and feeds the events to mirror.QuickSession,
which keeps only what the summary holds.

It vouches only for a log of at most MAX_BYTES in the shape every CLI writes (each line ``{"type":"...``,
nothing blank or CR-ended, none too long), read without content capture, whose every event type is one the
mirror handles or one the model skips. Anything else (an abort, a compaction, a notification, the live stream's
events, a type the model learns later, a duplicate id) returns None: the caller reads that log through the
model. Lines that cannot be decoded are counted and named as the model's reader counts and names them.
tests/component/test_quick_summary.py holds the two equal, field by field, on every stored fixture and on
generated logs.
"""

from __future__ import annotations

import os
from pathlib import Path

from ..base.regular_files import open_regular
from ..decode.events import Event
from ..decode.lines import decode_kept, decode_line, is_utf8, skim_at
from ..model.sessions import HANDLED_TYPES, READ_TYPES
from ..model.summary import SessionSummary
from .mirror import MIRRORED, QuickSession

# Types the CLI writes that the model only counts (checked on every stored CLI version). One the model comes to read
# leaves this set by itself (HANDLED_TYPES): its logs then go to the model, until the mirror learns it too.
SKIPPED = frozenset({
    "session.mode_changed", "session.mode_notice_delivered", "subagent.configured", "session.warning",
    "session.info", "hook.start", "hook.end",
}) - HANDLED_TYPES
KNOWN = frozenset(kind.encode() for kind in MIRRORED | SKIPPED)
_HEAD = b'{"type":"'
MAX_BYTES = 32 << 20  # a log held whole, with its lines: a longer one is read through the model


def read_log(path: Path) -> bytes | None:
    """A log's bytes, read in one block (opened as the model's tail opens it); None if it cannot be read, or is
    longer than MAX_BYTES (the model's tail reads it a chunk at a time, in bounded memory)."""
    try:
        fd = open_regular(path)
    except OSError:
        return None
    try:
        with open(fd, "rb", buffering=0) as handle:
            size = os.fstat(fd).st_size
            # As long as it is now: a buffer of MAX_BYTES would be mapped, faulted in and unmapped for every log.
            return handle.read(size) if size <= MAX_BYTES else None
    except OSError:
        return None


def quick_summary(path: Path, session_id: str, max_line_bytes: int) -> tuple[SessionSummary, int,
                                                                             list[tuple[int, str]]] | None:
    """The summary of the log at ``path``, the count of its lines that could not be read and the first of them
    (line number, reason), as the model would give them; None when this cannot vouch for that."""
    data = read_log(path)
    if data is None or b"\r" in data or b"\x00" in data:
        return None  # the model's tail reads CR-ended lines its own way, and rejects lines with NUL bytes
    session = QuickSession(session_id)
    rejected: list[tuple[int, str]] = []
    utf8 = is_utf8(data)  # once for the file: the lines only skimmed are then not decoded one by one
    number = 0
    feed = session.feed
    find = data.find
    startswith = data.startswith
    start = 0
    last = data.rfind(b"\n")  # after it: a partial line the tail holds until it is complete (or nothing)
    try:
        while start <= last:
            end = find(b"\n", start)
            number += 1
            stop = find(b'"', start + 9, end)
            if stop < 0 or data[start + 9:stop] not in KNOWN or not startswith(_HEAD, start) \
                    or end - start > max_line_bytes:
                return None  # blank, another shape, another type, too long: read by the model
            if data[start + 9:stop] in READ_TYPES:
                item = decode_kept(data[start:end], offset=start, line=number)
            else:  # skimmed where it lies; a line skim cannot vouch for is decoded as the model decodes it
                item = skim_at(data, start, end, READ_TYPES, offset=start, line=number, utf8=utf8) or \
                    decode_line(data[start:end], offset=start, line=number, keep=READ_TYPES)
            start = end + 1
            if type(item) is Event:
                feed(item)
            else:
                rejected.append((number, item.reason))
        summary = session.summary()
    except Exception:  # noqa: BLE001 - Unsure, or a value the model fails on too (an infinite token count): its call
        return None
    return summary, len(rejected), rejected
