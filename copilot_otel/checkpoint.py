"""The SQLite checkpoint: per file, its identity and how far its spans were exported.

Two positions are kept per file. ``offset``/``line`` is the end of the last line whose
spans are all exported: metrics and spans from events before it are never emitted
again. ``resume_offset``/``resume_line`` is where reading restarts after a restart:
the first event of the interaction still running then, so its open spans are rebuilt
from their real start events. Rows are committed only after the export succeeded.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from .private import private_dir, touch_private
from .tail import FileIdentity

log = logging.getLogger(__name__)

SCHEMA = """
CREATE TABLE IF NOT EXISTS files (
    path TEXT PRIMARY KEY,
    device INTEGER NOT NULL,
    inode INTEGER NOT NULL,
    fingerprint TEXT NOT NULL,
    fingerprint_len INTEGER NOT NULL,
    offset INTEGER NOT NULL,
    line INTEGER NOT NULL,
    resume_offset INTEGER NOT NULL,
    resume_line INTEGER NOT NULL,
    updated REAL NOT NULL
)
"""


@dataclass(frozen=True, slots=True)
class FilePosition:
    """A committed position in one file."""

    path: str
    identity: FileIdentity
    offset: int
    line: int
    resume_offset: int
    resume_line: int


class Checkpoint:
    """A small store of file positions, safe against a kill -9 at any moment."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self._db = self._open()

    def _open(self) -> sqlite3.Connection:
        private_dir(self.path.parent)
        touch_private(self.path)  # SQLite gives its -wal and -shm files the database's mode
        try:
            db = self._connect()
            db.execute("SELECT count(*) FROM files").fetchone()
            return db
        except sqlite3.DatabaseError as exc:
            # A corrupt checkpoint costs a re-read from the start, never the daemon.
            broken = self.path.with_name(f"{self.path.name}.corrupt-{int(time.time())}")
            log.warning("checkpoint %s is unreadable (%s); moved it to %s and starting afresh",
                        self.path, exc, broken)
            for suffix in ("", "-wal", "-shm"):
                source = Path(str(self.path) + suffix)
                if source.exists():
                    source.replace(Path(str(broken) + suffix))
            touch_private(self.path)
            return self._connect()

    def _connect(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")
        db.execute(SCHEMA)
        return db

    def load(self) -> dict[str, FilePosition]:
        """Every committed position, by path."""
        with self._lock:
            rows = self._db.execute(
                "SELECT path, device, inode, fingerprint, fingerprint_len, offset, line, resume_offset, resume_line "
                "FROM files").fetchall()
        return {
            row[0]: FilePosition(row[0], FileIdentity(row[1], row[2], row[3], row[4]), row[5], row[6], row[7], row[8])
            for row in rows
        }

    def commit(self, positions: list[FilePosition]) -> None:
        """Store these positions in one transaction."""
        if not positions:
            return
        now = time.time()
        with self._lock:
            self._db.execute("BEGIN")
            try:
                self._db.executemany(
                    "INSERT INTO files VALUES (?,?,?,?,?,?,?,?,?,?) ON CONFLICT(path) DO UPDATE SET "
                    "device=excluded.device, inode=excluded.inode, fingerprint=excluded.fingerprint, "
                    "fingerprint_len=excluded.fingerprint_len, offset=excluded.offset, line=excluded.line, "
                    "resume_offset=excluded.resume_offset, resume_line=excluded.resume_line, updated=excluded.updated",
                    [(p.path, p.identity.device, p.identity.inode, p.identity.fingerprint, p.identity.fingerprint_len,
                      p.offset, p.line, p.resume_offset, p.resume_line, now) for p in positions],
                )
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise

    def forget(self, path: str) -> None:
        """Drop a file that no longer exists."""
        with self._lock:
            self._db.execute("DELETE FROM files WHERE path = ?", (path,))

    def close(self) -> None:
        """Close the database."""
        with self._lock:
            self._db.close()
