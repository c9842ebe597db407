"""Follows one events.jsonl: offset, identity, partial lines, truncation, replacement, deletion.

A :class:`FileTail` opens the file only while it reads, so thousands of idle sessions
hold no file descriptors. Each ``read`` returns the complete lines appended since the
last one, decoded, up to about a byte budget; a partial last line waits for its newline.
Every open refuses what is not a regular file (a FIFO would block the reader), and, for
the daemon, a symlink or a path that leads out of the watched tree.
"""

from __future__ import annotations

import errno
import hashlib
import os
import stat
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Collection

from .decode import TOO_LONG, decode_line
from .events import DecodeError, Event
from .sources import UnreadableLog

CHUNK = 1 << 20
FINGERPRINT_BYTES = 256
# Events stamped further ahead of our clock than this are not believed.
FUTURE_TOLERANCE_S = 3600.0
_OPEN_FLAGS = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)


@dataclass(frozen=True, slots=True)
class FileIdentity:
    """What makes a file the same file: device, inode and a hash of its first bytes."""

    device: int
    inode: int
    fingerprint: str  # hex digest of the first FINGERPRINT_BYTES bytes ('' while shorter)
    fingerprint_len: int


@dataclass(slots=True)
class ReadResult:
    """What one read produced, and whether the file restarted (a new generation)."""

    items: list[Event | DecodeError]
    restarted: str | None = None  # 'truncated' or 'replaced' when reading began again at 0
    gone: bool = False
    error: str | None = None  # the file exists but cannot be read (permissions, I/O, not a regular file)
    more: bool = False  # the read stopped at its byte budget: there may be more to read now


class Refused(OSError):
    """The path is not something we read: not a regular file, or outside the watched tree."""


class FileTail:
    """Reads the complete new lines of one file, remembering where it stopped.

    ``within``: the real path of the tree the file must stay inside (checked on every open,
    and symlinks are refused); None reads any regular file (replay, inspect).
    """

    def __init__(self, path: Path, *, offset: int = 0, line: int = 0, identity: FileIdentity | None = None,
                 max_line_bytes: int = 16 * 1024 * 1024, clock: Callable[[], float] = time.time,
                 keep: Collection[str] | None = None, within: Path | None = None) -> None:
        self.path = Path(path)
        self.clock = clock
        self.offset = offset  # end of the last complete line handed out
        self.line = line  # number of complete lines handed out
        self.identity = identity
        self.max_line_bytes = max_line_bytes
        self.keep = keep  # event types whose payload is read (decode.skim); None: every line in full
        self.within = str(within) if within is not None else None
        # An over-long line still being skipped: how far it has been scanned (it starts at ``offset``).
        self.scanned: int | None = None

    def _same_file(self, handle, st: os.stat_result) -> str | None:
        """None if this is the file we were reading; else why it is not."""
        ident = self.identity
        if ident is None:
            return None
        if (st.st_dev, st.st_ino) != (ident.device, ident.inode):
            return "replaced"
        if st.st_size < self.offset:
            return "truncated"
        if ident.fingerprint_len:
            head = handle.read(ident.fingerprint_len)
            handle.seek(0)
            if len(head) < ident.fingerprint_len or hashlib.blake2b(head, digest_size=8).hexdigest() != ident.fingerprint:
                return "truncated"
        return None

    def _open(self):
        """The file, opened without blocking or following a final symlink (daemon), and checked."""
        flags = _OPEN_FLAGS | (os.O_NOFOLLOW if self.within is not None else 0)
        try:
            fd = os.open(self.path, flags)
        except OSError as exc:
            if exc.errno == errno.ELOOP and self.within is not None:
                raise Refused(errno.ELOOP, "is a symbolic link; not following it") from None
            raise
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise Refused(errno.EINVAL, "is not a regular file; not reading it")
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
        restarted = self._same_file(handle, st)
        if restarted:
            self.offset = 0
            self.line = 0
        if restarted or (self.scanned is not None and st.st_size < self.scanned):
            self.scanned = None
        if self.identity is None or restarted or self.identity.fingerprint_len < min(FINGERPRINT_BYTES, st.st_size):
            head = handle.read(FINGERPRINT_BYTES)
            self.identity = FileIdentity(st.st_dev, st.st_ino, hashlib.blake2b(head, digest_size=8).hexdigest(),
                                         len(head))
        if st.st_size <= max(self.offset, self.scanned or 0):
            return ReadResult([], restarted)
        items, more = self._read_lines(handle, max_bytes)
        return ReadResult(items, restarted, more=more)

    def _read_lines(self, handle, max_bytes: int) -> tuple[list[Event | DecodeError], bool]:
        items: list[Event | DecodeError] = []
        limit = self.max_line_bytes
        keep = self.keep
        not_after = int((self.clock() + FUTURE_TOLERANCE_S) * 1e9)
        start = offset = self.offset  # where the line being read starts
        number = self.line
        pending = b""  # the start of that line, read without its newline so far
        skipping = self.scanned is not None  # inside a line already known to be too long
        skipped = 0
        position = offset
        if skipping:
            position = _next_data(handle.fileno(), self.scanned)  # holes hold no newline: jump over them
            skipped = position - offset
        handle.seek(position)
        consumed = 0
        more = False
        while True:
            # Stop between lines once the budget is spent; a line not yet too long is finished first
            # when it is the read's first, so that every read makes progress.
            if consumed >= max_bytes and (skipping or not pending or offset > start):
                more = True
                break
            chunk = handle.read(CHUNK)
            if not chunk:
                break
            consumed += len(chunk)
            pieces = chunk.split(b"\n")
            rest = pieces.pop()  # after the chunk's last newline: the start of the next line
            for piece in pieces:
                number += 1
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
                    if raw.strip():
                        items.append(decode_line(raw, offset=offset, line=number, max_bytes=limit, keep=keep,
                                                 not_after_ns=not_after))
                offset += size + 1
            if skipping:
                skipped += len(rest)
            elif len(pending) + len(rest) > limit:
                skipping, skipped, pending = True, len(pending) + len(rest), b""
            else:
                pending += rest
        # Only complete lines count: a partial last line is read again, whole, next time; an over-long
        # one is not: how far it was scanned is kept.
        self.offset, self.line = offset, number
        self.scanned = offset + skipped if skipping else None
        return items, more


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
             keep: Collection[str] | None = None) -> list[Event | DecodeError]:
    """Every complete line of a file, decoded (a partial last line is left out); raises UnreadableLog
    (naming the file and the reason) when it is gone or cannot be read."""
    result = FileTail(path, max_line_bytes=max_line_bytes, keep=keep).read(max_bytes=sys.maxsize)
    if result.gone or result.error:
        raise UnreadableLog(Path(path), "no such file" if result.gone else result.error)
    return result.items
