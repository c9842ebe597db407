"""Follows one events.jsonl: offset, identity, partial lines, truncation, replacement, deletion.

A :class:`FileTail` opens the file only while it reads, so thousands of idle sessions
hold no file descriptors. Each ``read`` returns the complete lines appended since the
last one, decoded, up to about a byte budget; a partial last line waits for its newline.
Every open refuses what is not a regular file (a FIFO would block the reader), and, for
the daemon, a symlink or a path that leads out of the watched tree. Each open also checks
that the file still holds what was read (identity.py): a copy of the same bytes reads on, an
edit of lines already read or another log is read again from the start. The same file, grown,
is checked by the bytes just before the position (identity.WINDOW_BYTES): a log rewritten in
place past the position between two reads is found there.
"""

from __future__ import annotations

import errno
import os
import re
import sys
from pathlib import Path

from msgspec import Struct
from msgspec.structs import replace

from ..base.hashes import crc32
from ..base.pause import PAUSE
from ..base.regular_files import open_regular
from ..decode.events import DecodeError, Event
from ..decode.lines import TOO_LONG, decode_line
from .identity import (
    COPIED,
    EDITED,
    FINGERPRINT_BYTES,
    HEAD_BYTES,
    REPLACED,
    TRUNCATED,
    WINDOW_BYTES,
    FileIdentity,
    count_lines,
    fingerprint,
    first_event_id,
    prefix_crc,
    same_origin,
    window_crc,
)
from .sources import UnreadableLog

__all__ = ["CHUNK", "FileIdentity", "FileTail", "ReadResult", "Refused", "read_all"]

CHUNK = 1 << 20
# A run of blank (or whitespace-only) lines: skipped in one regex match and one count, not a line at a time.
_BLANK_RUN = re.compile(rb"[ \t\r\f\v\n]*\n")  # one class repeated (a C loop), back to its last newline
_SPACE = b" \t\r\f\v\n"


class ReadResult(Struct):
    """What one read produced, and whether the file restarted (a new generation) or changed under us."""

    items: list[Event | DecodeError]
    # 'truncated' or 'replaced': reading began again at 0, a new generation; 'edited': the same log (its first
    # event) with lines already read changed, read again from 0.
    restarted: str | None = None
    copied: bool = False  # another file, with the bytes already read: read on from the same position
    lines: int = 0  # 'edited': the complete lines the file holds now
    gone: bool = False
    error: str | None = None  # the file exists but cannot be read (permissions, I/O, not a regular file)
    more: bool = False  # the read stopped at its byte budget: there may be more to read now

    @property
    def failure(self) -> str | None:
        """Why the file could not be read ("no such file", or the error), or None when it was read."""
        return "no such file" if self.gone else self.error


class Refused(OSError):
    """The path is not something we read: not a regular file, or outside the watched tree."""


class FileTail:
    """Reads the complete new lines of one file, remembering where it stopped.

    ``within``: the real path of the tree the file must stay inside (checked on every open,
    and symlinks are refused); None reads any regular file (replay, inspect).
    """

    def __init__(self, path: Path, *, offset: int = 0, line: int = 0, identity: FileIdentity | None = None,
                 crc: int | None = None, max_line_bytes: int = 16 * 1024 * 1024,
                 keep: frozenset[bytes] | None = None, within: Path | None = None) -> None:
        self.path = path if isinstance(path, Path) else Path(path)  # a Path is kept, not parsed again
        self.offset = offset  # end of the last complete line handed out
        self.line = line  # number of complete lines handed out
        self.identity = identity
        # CRC-32 of the bytes before ``offset`` (None: not known, e.g. a sparse hole was skipped).
        self.crc: int | None = 0 if offset == 0 else crc
        # (end, CRC-32 of bytes [0, end)) to check at the next open: a position restored from a checkpoint.
        # A CRC of None there is computed from the file as it is, and believed.
        self.expect: tuple[int, int | None] | None = None if offset == 0 or crc is not None else (offset, None)
        self.max_line_bytes = max_line_bytes
        self.keep = keep  # event types whose payload is read (decode.skim); None: every line in full
        self.within = str(within) if within is not None else None
        # An over-long line still being skipped: how far it has been scanned (it starts at ``offset``), and the
        # CRC-32 of the bytes up to there.
        self.scanned: int | None = None
        self._scanned_crc: int | None = None
        self.size = 0  # the file's size at the last read
        # (start, end, CRC-32 of bytes [start, end)) of the window before the position, as the last read left it.
        self.window: tuple[int, int, int] | None = None
        self._before: tuple[int, bytes] | None = None  # the window's bytes, checked at this open

    def resume(self, offset: int, line: int, identity: FileIdentity, *, end: int, crc: int | None) -> None:
        """Read on from ``offset``/``line`` of the log ``identity`` names, whose bytes [0, ``end``) had CRC-32
        ``crc`` (checked at the next open, whatever file is then at the path; None: believed)."""
        self.offset, self.line, self.identity = offset, line, identity
        self.crc, self.expect, self.scanned, self.window = None, (end, crc), None, None

    def newest_event_ns(self) -> int | None:
        """When the last event among the file's last MiB of complete lines happened (None: no event there, or
        the file cannot be read now)."""
        try:
            handle = self._open()
        except OSError:
            return None
        with handle:
            end = _last_newline_end(handle, os.fstat(handle.fileno()).st_size)
            start = max(0, end - CHUNK)
            handle.seek(start)
            lines = handle.read(end - start).split(b"\n")
        for raw in reversed(lines[1:] if start else lines):  # the first piece may be the end of a longer line
            event = decode_line(raw) if raw.strip() else None
            if isinstance(event, Event):
                return event.timestamp_ns
        return None

    def skip_history(self) -> None:
        """Begin after the file's last complete line, as if everything before it had been read (--from-end)."""
        try:
            handle = self._open()
        except OSError:
            return  # read from the start when it can be read
        with handle:
            st = os.fstat(handle.fileno())
            end = _last_newline_end(handle, st.st_size)
            found = prefix_crc(handle, end)
            if found is None:
                return
            head = handle.read(HEAD_BYTES)
        self.offset, self.line, self.crc, self.expect, self.scanned = end, found[2], found[0], None, None
        self.window = None
        self.identity = FileIdentity(st.st_dev, st.st_ino, fingerprint(head), min(len(head), FINGERPRINT_BYTES),
                                     first_event_id(head))

    def identify(self) -> bool:
        """Know the file as it is now (its identity) while nothing of it is read, so that a position at its start
        can be committed; False if it cannot be read now."""
        try:
            handle = self._open()
        except OSError:
            return False
        with handle:
            st = os.fstat(handle.fileno())
            head = handle.read(HEAD_BYTES)
        self.identity = FileIdentity(st.st_dev, st.st_ino, fingerprint(head), min(len(head), FINGERPRINT_BYTES),
                                     first_event_id(head))
        return True

    def first_id(self) -> str:
        """The id of the file's first event as it is now ('' when there is none, or it cannot be read)."""
        try:
            with self._open() as handle:
                head = handle.read(4096)  # a real first line (session.start) is about 500 bytes
                if b"\n" not in head:
                    head += handle.read(HEAD_BYTES - len(head))
                return first_event_id(head)
        except OSError:
            return ""

    def rewind(self) -> None:
        """Read the file again from its first line."""
        self.offset = self.line = 0
        self.crc, self.expect, self.scanned, self.window = 0, None, None, None

    def _same_file(self, handle, st: os.stat_result) -> str | None:
        """None if this is the file and the bytes we were reading; else what it is (identity's verdicts)."""
        ident = self.identity
        expect, self.expect = self.expect, None
        if ident is None:
            return None
        end, crc = expect if expect is not None else (self.offset, self.crc)
        if (st.st_dev, st.st_ino) == (ident.device, ident.inode):
            if st.st_size < end:
                return TRUNCATED
            if ident.fingerprint_len:
                head = handle.read(ident.fingerprint_len)
                handle.seek(0)
                if len(head) < ident.fingerprint_len or fingerprint(head) != ident.fingerprint:
                    return TRUNCATED
            if expect is None:  # the same file, grown: only the bytes just before the position are read again
                if not self._window_changed(handle):
                    return None
                head = handle.read(HEAD_BYTES)
                handle.seek(0)
                return EDITED if same_origin(head, ident) else TRUNCATED  # rewritten in place past the position
        else:
            head = handle.read(HEAD_BYTES)
            handle.seek(0)
            if not same_origin(head, ident):
                return REPLACED
            if crc is None:
                return EDITED  # another file whose bytes cannot be compared: nothing delivered is counted again
        found = prefix_crc(handle, end, self.offset) if end <= st.st_size else None
        if found is None or (crc is not None and found[0] != crc):
            return EDITED
        self.crc = found[1]
        return COPIED if (st.st_dev, st.st_ino) != (ident.device, ident.inode) else None

    def _window_changed(self, handle) -> bool:
        """Do the bytes before the position differ from what the last read left there?"""
        window = self.window
        if window is None or window[1] != self.offset:
            return False  # nothing read since the position was set: the next read notes the window
        start, end, crc = window
        data = os.pread(handle.fileno(), end - start, start)
        if crc32(data) != crc:
            return True
        self._before = (start, data)  # what the read goes on from: its window is made of the bytes it saw
        return False

    def _note_window(self, handle) -> None:
        """Remember the bytes before the position as they are now, for the next read to check."""
        self._before = None
        if self.offset and (self.window is None or self.window[1] != self.offset):
            start, crc = window_crc(handle.fileno(), self.offset)
            self.window = (start, self.offset, crc)

    def _open(self):
        """The file, opened without blocking or following a final symlink (daemon), and checked."""
        try:
            fd = open_regular(self.path, follow=self.within is None)
        except OSError as exc:
            if exc.errno == errno.ELOOP and self.within is not None:
                raise Refused(errno.ELOOP, "is a symbolic link; not following it") from None
            raise
        try:
            if self.within is not None and not _inside(fd, self.path, self.within):
                raise Refused(errno.EXDEV, f"leads outside {self.within}; not following it")
            return open(fd, "rb", buffering=0)
        except BaseException:
            os.close(fd)
            raise

    def read(self, *, max_bytes: int = 64 * CHUNK) -> ReadResult:
        """Decode the complete lines appended since the last read (up to about ``max_bytes``)."""
        try:
            handle = self._open()
        except (FileNotFoundError, NotADirectoryError):
            return ReadResult([], gone=True)
        except OSError as exc:
            return ReadResult([], error=exc.strerror or str(exc))
        try:
            with handle:
                return self._read_open(handle, max_bytes)
        except OSError as exc:
            return ReadResult([], error=exc.strerror or str(exc))

    def _read_open(self, handle, max_bytes: int) -> ReadResult:
        st = os.fstat(handle.fileno())
        self.size = st.st_size
        verdict = self._same_file(handle, st)
        copied = verdict == COPIED
        restarted = None if copied else verdict
        lines = count_lines(handle) if restarted == EDITED else 0
        if restarted:
            self.rewind()
        if self.scanned is not None and st.st_size < self.scanned:
            self.scanned = None
        ident = self.identity
        if ident is None or restarted or ident.fingerprint_len < min(FINGERPRINT_BYTES, st.st_size):
            head = handle.read(FINGERPRINT_BYTES)
            handle.seek(0)
            known = ident.first_id if ident is not None and not restarted else ""
            self.identity = FileIdentity(st.st_dev, st.st_ino, fingerprint(head), len(head), known)
        elif copied:
            self.identity = replace(ident, device=st.st_dev, inode=st.st_ino)
        if st.st_size <= max(self.offset, self.scanned or 0):
            self._note_window(handle)
            return ReadResult([], restarted, copied, lines)
        first = self.line == 0
        items, more = self._read_lines(handle, max_bytes)
        self._note_window(handle)
        if first and self.line:  # the first line is complete: the log's first event names it
            event = items[0] if items else None
            first_id = event.id if type(event) is Event and event.line == 1 and not event.id.startswith("@") else ""
            assert self.identity is not None  # set above, at the first read
            self.identity = replace(self.identity, first_id=first_id)
        return ReadResult(items, restarted, copied, lines, more=more)

    def _read_lines(self, handle, max_bytes: int) -> tuple[list[Event | DecodeError], bool]:
        lines, position = self._lines_from(handle)
        before, self._before = self._before, None
        # The bytes this read saw, from the checked window on: the next window is made of them, not read again after
        # (a rewrite in between would then go unseen).
        fits = before is not None and before[0] + len(before[1]) == position
        recent = _Recent(*before) if fits and before is not None else _Recent(position)
        start = lines.offset  # where the read's first line starts
        consumed = 0
        more = False
        while True:
            # Stop between lines once the budget is spent; a line not yet too long is finished first
            # when it is the read's first, so that every read makes progress.
            if consumed >= max_bytes and (lines.skipping or not lines.pending or lines.offset > start):
                more = True
                break
            chunk = handle.read(CHUNK)
            if not chunk:
                break
            consumed += len(chunk)
            lines.sum(chunk)
            begin = lines.split(chunk)
            recent.add(chunk, lines.offset - WINDOW_BYTES)
            lines.carry(chunk[begin:])  # after the chunk's last newline: the start of the next line
        self._lines_read(lines, recent)
        return lines.items, more

    def _lines_from(self, handle) -> tuple[_Lines, int]:
        """A read's state at the position, and where in the file it goes on (past a hole an over-long line holds)."""
        lines = _Lines(self.max_line_bytes, self.keep, self.offset, self.line, self.crc)
        position = self.offset
        if self.scanned is not None:  # inside a line already known to be too long
            position = _next_data(handle.fileno(), self.scanned)  # holes hold no newline: jump over them
            lines.skipping, lines.skipped = True, position - self.offset
            lines.running = self._scanned_crc if position == self.scanned else None
        handle.seek(position)
        return lines, position

    def _lines_read(self, lines: _Lines, recent: _Recent) -> None:
        """Keep where a read stopped. Only complete lines count: a partial last line is read again, whole, next
        time; an over-long one is not: how far it was scanned is kept."""
        offset = lines.offset
        self.offset, self.line, self.crc = offset, lines.number, lines.line_crc
        if offset and (self.window is None or self.window[1] != offset):
            found = recent.window(offset)
            self.window = None if found is None else (found[0], offset, found[1])
        self.scanned = offset + lines.skipped if lines.skipping else None
        self._scanned_crc = lines.running if lines.skipping else None


class _Lines:
    """One read's lines, decoded chunk after chunk: where the line being read starts, its number, its start read
    so far, and the CRC-32s of the bytes before it and of every byte read."""

    __slots__ = ("items", "keep", "limit", "line_crc", "number", "offset", "pending", "running", "skipped",
                 "skipping")

    def __init__(self, limit: int, keep: frozenset[bytes] | None, offset: int, number: int, crc: int | None) -> None:
        self.items: list[Event | DecodeError] = []
        self.limit, self.keep = limit, keep
        self.offset = offset  # where the line being read starts
        self.number = number
        self.pending = b""  # the start of that line, read without its newline so far
        self.skipping = False  # inside a line already known to be too long
        self.skipped = 0
        self.line_crc = crc  # CRC-32 of the bytes before ``offset``
        self.running = crc  # ... and of every byte read so far (None once a hole was jumped over)

    def sum(self, chunk: bytes) -> None:
        """Continue the CRC-32s over the next chunk read."""
        newline = chunk.rfind(b"\n")
        if self.running is None:
            self.line_crc = None if newline >= 0 else self.line_crc
        elif newline >= 0:
            self.line_crc = crc32(memoryview(chunk)[:newline + 1], self.running)
            self.running = crc32(memoryview(chunk)[newline + 1:], self.line_crc)
        else:
            self.running = crc32(chunk, self.running)

    def split(self, chunk: bytes) -> int:
        """Decode the lines that end in ``chunk`` (the first one begun in chunks before); where the last ends."""
        items, limit, keep = self.items, self.limit, self.keep
        offset, number, pending, skipping, skipped = self.offset, self.number, self.pending, self.skipping, self.skipped
        # One find (memchr) per line: bytes.split tests every byte in a loop, 5 instructions a byte (issue 25).
        find = chunk.find
        pause = PAUSE
        begin = 0
        while (end := find(b"\n", begin)) >= 0:
            if not pending and not skipping and (end == begin or chunk[begin] in _SPACE):
                run = _BLANK_RUN.match(chunk, begin)
                if run is not None:  # blank lines: numbered, never decoded, skipped all at once
                    number += chunk.count(b"\n", begin, run.end())
                    offset += run.end() - begin
                    begin = run.end()
                    continue
            piece = chunk[begin:end]
            begin = end + 1
            number += 1
            if pause.renders:  # a /metrics render runs: let it run alone (pause.py)
                pause.wait()
            if skipping:
                size = skipped + len(piece)
                items.append(DecodeError(TOO_LONG, f"line of {size} bytes exceeds the {limit}-byte limit",
                                         offset, number))
                skipping, skipped = False, 0
            else:
                raw = pending + piece if pending else piece
                pending = b""
                size = len(raw)
                if raw.endswith(b"\r"):
                    raw = raw[:-1]
                if raw and not raw.isspace():  # not strip(): that copies the line
                    items.append(decode_line(raw, offset=offset, line=number, max_bytes=limit, keep=keep))
            offset += size + 1
        self.offset, self.number, self.pending, self.skipping, self.skipped = offset, number, pending, skipping, skipped
        return begin

    def carry(self, rest: bytes) -> None:
        """Keep the start of the next line (``rest``), or how long it is once it is too long."""
        if self.skipping:
            self.skipped += len(rest)
        elif len(self.pending) + len(rest) > self.limit:
            self.skipping, self.skipped, self.pending = True, len(self.pending) + len(rest), b""
        else:
            self.pending += rest


class _Recent:
    """The bytes one read saw lately, from the window before the position on (bounded: a long line is not kept)."""

    __slots__ = ("parts", "size", "start")

    def __init__(self, start: int, first: bytes = b"") -> None:
        self.start, self.parts, self.size = start, [first] if first else [], len(first)

    def add(self, chunk: bytes, keep_from: int) -> None:
        """Add the next bytes read; forget those before ``keep_from`` (and the oldest past a bound)."""
        self.parts.append(chunk)
        self.size += len(chunk)
        while self.parts and (self.start + len(self.parts[0]) <= keep_from or self.size > WINDOW_BYTES + 2 * CHUNK):
            first = self.parts.pop(0)
            self.start += len(first)
            self.size -= len(first)

    def window(self, end: int) -> tuple[int, int] | None:
        """(start, CRC-32) of the window before ``end``, if every byte of it was seen; else None."""
        start = max(0, end - WINDOW_BYTES)
        if start < self.start or end > self.start + self.size:
            return None
        crc, at = 0, self.start  # chained over the parts' slices: nothing copied
        for part in self.parts:
            low, high = max(start, at), min(end, at + len(part))
            if low < high:
                crc = crc32(memoryview(part)[low - at:high - at], crc)
            at += len(part)
        return start, crc


def _last_newline_end(handle, size: int) -> int:
    """Offset just past the last newline of an open file (where its complete lines end)."""
    end = size
    while end > 0:
        start = max(0, end - CHUNK)
        handle.seek(start)
        index = handle.read(end - start).rfind(b"\n")
        if index >= 0:
            return start + index + 1
        end = start
    return 0


def _next_data(fd: int, position: int) -> int:
    """The first offset at or after ``position`` that may hold data: a sparse file's holes hold no newline."""
    try:
        return os.lseek(fd, position, os.SEEK_DATA)
    except AttributeError:  # no SEEK_DATA on this platform
        return position
    except OSError as exc:
        if exc.errno == errno.ENXIO:  # nothing but a hole from here to the end
            return max(position, os.fstat(fd).st_size)
        return position


def _inside(fd: int, path: Path, root: str) -> bool:
    """Does the open file (as the kernel resolved it) lie under ``root``?"""
    try:
        real = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:  # no /proc: resolve the name instead
        real = os.path.realpath(path)
    real = real.removesuffix(" (deleted)")
    return real == root or real.startswith(root.rstrip(os.sep) + os.sep)


def read_all(path: Path, *, max_line_bytes: int = 16 * 1024 * 1024,
             keep: frozenset[bytes] | None = None) -> list[Event | DecodeError]:
    """Every complete line of a file, decoded (a partial last line is left out); raises UnreadableLog
    (naming the file and the reason) when it is gone or cannot be read."""
    result = FileTail(path, max_line_bytes=max_line_bytes, keep=keep).read(max_bytes=sys.maxsize)
    if result.failure:
        raise UnreadableLog(Path(path), result.failure)
    return result.items
