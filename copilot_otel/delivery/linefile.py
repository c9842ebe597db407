"""An append-only file of whole lines: what a reader finds there is never a torn line.

A write that fails half-way (disk full) is cut back off, and a torn last line left by a crash
(kill -9 in the middle of a write) is cut off when the file is opened again. ``sync`` makes what
was written durable: the export queue calls it before the checkpoint commit that covers it.
"""

from __future__ import annotations

import fcntl
import logging
import os
import threading
from pathlib import Path

from ..base.private_files import open_private

log = logging.getLogger(__name__)

_SCAN = 1 << 16


class FileBusy(OSError):
    """Another open file (another process, as a rule) holds the file's exclusive lock: it writes there."""


class LineFile:
    """Appends whole lines to ``path``: created 0600, or an existing regular file of ours reached without a link
    (private.open_private; else UnsafePath). ``size``: the file's when it was opened. ``exclusive``: hold the
    file's lock (flock) while open, and raise FileBusy if another writer holds it."""

    def __init__(self, path: Path, *, exclusive: bool = False) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self._fd = open_private(self.path, os.O_RDWR | os.O_APPEND)
        self._dirty = False
        try:
            if exclusive:
                try:
                    fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    raise FileBusy(f"another process writes {self.path}") from None
            self._repair()
            self.size = os.fstat(self._fd).st_size
        except OSError:
            os.close(self._fd)
            raise

    def _repair(self) -> None:
        """Cut off a torn last line (one without its newline)."""
        size = os.fstat(self._fd).st_size
        if size == 0 or os.pread(self._fd, 1, size - 1) == b"\n":
            return
        end = size
        while end > 0:
            start = max(0, end - _SCAN)
            block = os.pread(self._fd, end - start, start)
            cut = block.rfind(b"\n")
            if cut >= 0:
                end = start + cut + 1
                break
            end = start
        os.ftruncate(self._fd, end)
        os.fsync(self._fd)
        log.warning("%s ended with a torn line (%d bytes, from an interrupted write): cut it off", self.path,
                    size - end)

    def write(self, data: bytes) -> None:
        """Append ``data`` (whole lines) entirely, or not at all: raise OSError if it could not be written."""
        with self._lock:
            end = os.fstat(self._fd).st_size
            view = memoryview(data)
            try:
                while view:
                    written = os.write(self._fd, view)
                    view = view[written:]
            except OSError:
                try:
                    os.ftruncate(self._fd, end)  # no fragment stays behind for a reader, or for the retry
                except OSError as exc:
                    log.error("cannot cut a partial write off %s: %s", self.path, exc)
                raise
            self._dirty = True

    def stat(self) -> os.stat_result:
        """The open file's status now."""
        with self._lock:
            return os.fstat(self._fd)

    def sync(self) -> None:
        """Make what was written durable (fsync), if anything was written since the last sync."""
        with self._lock:
            if self._dirty:
                os.fsync(self._fd)
                self._dirty = False

    def close(self) -> None:
        """Sync and close."""
        if self._fd < 0:
            return
        try:
            self.sync()
        finally:
            with self._lock:
                os.close(self._fd)
                self._fd = -1
