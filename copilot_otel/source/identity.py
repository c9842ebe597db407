"""What makes a session log the same log, whatever file holds it.

A log is known by its content, not by its inode: the id of its first event (a real log's
``session.start``) says which log it is, and a CRC-32 of its bytes up to the read position says
whether what was read is still there. A copy moved over the log (what rsync or a restore does),
a renamed folder, or a restart after either, is the same log and reading goes on where it
stopped; a file that begins with another first event is another log. The CRC is continued over
the bytes the tailer reads anyway, so it costs no extra pass while nothing changes.
"""

from __future__ import annotations

import os

import orjson
from msgspec import Struct

from ..base.hashes import blake2b, crc32

FINGERPRINT_BYTES = 256
# The bytes just before the read position that every read checks are still there, while the file stays the same
# inode: a log rewritten in place (truncated and written again past the position between two reads) almost always
# moves or changes them. A log shorter than this is checked whole at every read.
WINDOW_BYTES = 64 * 1024
HEAD_BYTES = 64 * 1024  # a first line longer than this names no log (its fingerprint does)
SCAN_CHUNK = 1 << 20

# How a file found at a log's path relates to what was read from it (FileTail's verdicts).
COPIED = "copied"  # another file, the same bytes up to the read position: reading goes on
EDITED = "edited"  # the same log (same first event), but lines already read changed: rewritten
TRUNCATED = "truncated"  # the same file cut back, or rewritten in place with other first bytes
REPLACED = "replaced"  # another file holding another log


class FileIdentity(Struct, frozen=True):
    """Which file and which log: device and inode, a hash of its first bytes, and its first event's id."""

    device: int
    inode: int
    fingerprint: str  # hex digest of the first FINGERPRINT_BYTES bytes ('' while shorter)
    fingerprint_len: int
    first_id: str = ""  # the id of the event on its first line ('' while unknown)


def fingerprint(head: bytes) -> str:
    """The hash of a file's first bytes that FileIdentity keeps."""
    return blake2b(head[:FINGERPRINT_BYTES], digest_size=8).hexdigest()


def first_event_id(head: bytes) -> str:
    """The id of the event on the first line of ``head`` ('' if that line is incomplete, blank or no event)."""
    end = head.find(b"\n")
    if end < 0:
        return ""
    try:
        obj = orjson.loads(head[:end])
    except orjson.JSONDecodeError:
        return ""
    event_id = obj.get("id") if isinstance(obj, dict) else None
    return event_id if isinstance(event_id, str) else ""


def same_origin(head: bytes, known: FileIdentity) -> bool:
    """Does a file beginning with ``head`` hold the log ``known`` names (its first event, else its first bytes)?"""
    if known.first_id:
        return first_event_id(head) == known.first_id
    return len(head) >= known.fingerprint_len and fingerprint(head[:known.fingerprint_len]) == known.fingerprint


def prefix_crc(handle, end: int, at: int | None = None) -> tuple[int, int, int] | None:
    """(CRC-32 of bytes [0, end), CRC-32 of bytes [0, at), newlines before ``end``) of an open file, read
    from its start; None if it holds fewer than ``end`` bytes. ``at`` (<= end) defaults to ``end``."""
    at = end if at is None else at
    handle.seek(0)
    crc = crc_at = lines = 0
    position = 0
    while position < end:
        chunk = handle.read(min(SCAN_CHUNK, end - position))
        if not chunk:
            handle.seek(0)
            return None
        if position <= at < position + len(chunk):
            crc_at = crc32(memoryview(chunk)[:at - position], crc)
        crc = crc32(chunk, crc)
        lines += chunk.count(b"\n")
        position += len(chunk)
    handle.seek(0)
    return crc, (crc if at >= end else crc_at), lines


def count_lines(handle) -> int:
    """The complete lines (newlines) of an open file, read from its start."""
    handle.seek(0)
    lines = 0
    while chunk := handle.read(SCAN_CHUNK):
        lines += chunk.count(b"\n")
    handle.seek(0)
    return lines


def window_crc(fd: int, end: int) -> tuple[int, int]:
    """(where the window before ``end`` starts, CRC-32 of its bytes as the file holds them now)."""
    start = max(0, end - WINDOW_BYTES)
    return start, crc32(os.pread(fd, end - start, start))
