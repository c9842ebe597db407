"""The SQLite checkpoint: per file, its identity and how far its spans were exported.

Two positions are kept per file. ``offset``/``line`` is the end of the last line whose
spans are all exported: metrics and spans from events before it are never emitted
again. ``resume_offset``/``resume_line`` is where reading restarts after a restart:
the first event of the interaction still running then, so its open spans are rebuilt
from their real start events. Rows are committed only after the export succeeded.

With each position goes what makes the log the same log (identity.py): the id of its first
event and a CRC-32 of its bytes up to ``offset``, so that a log copied over itself, moved to
another folder or edited while the daemon was stopped is recognised at the next start; and
the session id its spans were made under, which a log moved to another folder keeps.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
import time
from pathlib import Path

from msgspec import Struct

from ..base import pidlock
from ..base.parsing import ConfigError
from ..base.private_files import open_private, private_dir, state_folder, touch_private
from ..base.sqlitestore import damaged, describe, open_checked
from ..base.strictmodes import UnsafePath, state_refusal
from ..source.identity import FileIdentity
from ..source.sources import path_from_text, path_text

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
    updated REAL NOT NULL,
    generation INTEGER NOT NULL DEFAULT 0,
    crc INTEGER,
    first_id TEXT NOT NULL DEFAULT '',
    session_id TEXT NOT NULL DEFAULT '',
    history_line INTEGER NOT NULL DEFAULT 0
)
"""
# Facts about the checkpoint itself: first_start, when it was made (Unix time; 0 for one an older version made).
META_SCHEMA = "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value REAL NOT NULL)"
# The session metrics' totals as of the positions committed with them (metrics/totals.py): one row.
TOTALS_SCHEMA = "CREATE TABLE IF NOT EXISTS totals (id INTEGER PRIMARY KEY CHECK (id = 0), data BLOB NOT NULL)"
# Columns added since the first schema, and how to add each to an older checkpoint.
_ADDED = {
    "generation": "generation INTEGER NOT NULL DEFAULT 0",
    "crc": "crc INTEGER",
    "first_id": "first_id TEXT NOT NULL DEFAULT ''",
    "session_id": "session_id TEXT NOT NULL DEFAULT ''",
    "history_line": "history_line INTEGER NOT NULL DEFAULT 0",
}
_FIRST_COLUMNS = "path, device, inode, fingerprint, fingerprint_len, offset, line, resume_offset, resume_line, updated"
_COLUMNS = f"{_FIRST_COLUMNS}, generation, crc, first_id, session_id, history_line"


class CheckpointError(RuntimeError):
    """The checkpoint cannot be used now (locked, disk full, I/O error): the message says which."""


class FilePosition(Struct, frozen=True):
    """A committed position in one file."""

    path: str
    identity: FileIdentity
    offset: int
    line: int
    resume_offset: int
    resume_line: int
    generation: int = 0  # how many times the file was truncated or replaced under the daemon
    crc: int | None = None  # CRC-32 of the log's bytes before ``offset`` (None: not known)
    session_id: str = ""  # the session id its spans are made under, when not its folder's name (a moved log)
    moved_from: tuple[str, ...] = ()  # paths the log was followed at before: their rows go in the same commit
    # The lines up to this one were left out as history, never delivered (0: none). Kept until --backfill sends
    # them; while it does, the row resumes before it (resume_line < history_line) and lines in (history_line, line]
    # are the ones delivered before: whatever the next start's flags, it goes on sending the history.
    history_line: int = 0

    @property
    def backfilling(self) -> bool:
        """Is a --backfill sending this log's history (read on from ``resume_line`` up to ``history_line``)?"""
        return self.history_line > 0 and self.resume_line < self.history_line


class Checkpoint:
    """A small store of file positions, safe against a kill -9 at any moment."""

    def __init__(self, path: Path, *, busy_timeout: float = 5.0, start_afresh: bool = True) -> None:
        self.path = Path(path)
        self.busy_timeout = busy_timeout  # how long a statement waits for a lock another process holds
        # A damaged checkpoint: set aside and start empty, or (False) refuse, saying what to do.
        self.start_afresh = start_afresh
        self._lock = threading.Lock()
        self._db = self._open()

    def _open(self) -> sqlite3.Connection:
        private_dir(self.path.parent)
        try:
            touch_private(self.path)  # SQLite gives its -wal and -shm files the database's mode
        except OSError as exc:  # a folder in the way, a link, someone else's file
            raise CheckpointError(f"cannot open the checkpoint {self.path}: {exc.strerror or exc}") from None
        try:
            return self._connect()
        except sqlite3.Error as exc:  # damaged by base/sqlitestore's rule (the replay's ledger judges by it too)
            if not damaged(exc):
                raise CheckpointError(f"cannot open the checkpoint {self.path}: {describe(exc)}") from None
            if not self.start_afresh:
                raise CheckpointError(
                    f"the checkpoint {self.path} is damaged ({exc}): what was exported is unknown. To export every "
                    "session again from its start (the same span ids; its metrics counted again), move it aside with "
                    "its -wal and -shm files and start with --backfill; to skip the history in the files, start with "
                    "--from-end") from None
            broken = self.path.with_name(f"{self.path.name}.corrupt-{int(time.time())}")
            log.warning("checkpoint %s is unreadable (%s); moved it to %s and starting afresh",
                        self.path, exc, broken)
            for suffix in ("", "-wal", "-shm"):
                source = Path(str(self.path) + suffix)
                if source.exists():
                    source.replace(Path(str(broken) + suffix))
            touch_private(self.path)
        try:
            return self._connect()
        except sqlite3.Error as exc:
            raise CheckpointError(f"cannot create the checkpoint {self.path}: {describe(exc)}") from None

    def _connect(self) -> sqlite3.Connection:
        return open_checked(self.path, "files", _prepare, columns=_COLUMNS, first_columns=_FIRST_COLUMNS,
                            check_same_thread=False, isolation_level=None, timeout=self.busy_timeout)

    def load(self) -> dict[str, FilePosition]:
        """Every committed position, by path."""
        with self._lock:
            rows = self._db.execute(
                "SELECT path, device, inode, fingerprint, fingerprint_len, offset, line, resume_offset, resume_line, "
                "generation, crc, first_id, session_id, history_line FROM files").fetchall()
        positions = (FilePosition(path_from_text(row[0]), FileIdentity(row[1], row[2], row[3], row[4], row[11]),
                                  row[5], row[6], row[7], row[8], row[9], row[10], row[12], history_line=row[13])
                     for row in rows)
        return {position.path: position for position in positions}

    @property
    def first_start(self) -> float:
        """When this checkpoint was made: the state folder's first start (Unix time; 0: before it was kept)."""
        with self._lock:
            row = self._db.execute("SELECT value FROM meta WHERE key = 'first_start'").fetchone()
        return float(row[0]) if row else 0.0

    def load_totals(self) -> bytes | None:
        """The metric totals committed last (with the positions they match), or None."""
        with self._lock:
            row = self._db.execute("SELECT data FROM totals WHERE id = 0").fetchone()
        return bytes(row[0]) if row else None

    def commit(self, positions: list[FilePosition], totals: bytes | None = None) -> None:
        """Store these positions, and the metric totals that match them (None: unchanged), in one transaction;
        raise CheckpointError (nothing stored) if it failed."""
        if not positions and totals is None:
            return
        now = time.time()
        rows = [(path_text(p.path), p.identity.device, p.identity.inode, p.identity.fingerprint,
                 p.identity.fingerprint_len, p.offset, p.line, p.resume_offset, p.resume_line, now, p.generation, p.crc,
                 p.identity.first_id, p.session_id, p.history_line) for p in positions]
        moved = [(path_text(old),) for p in positions for old in p.moved_from if old != p.path]
        with self._lock:
            try:
                self._db.execute("BEGIN")
                self._db.executemany(
                    f"INSERT INTO files ({_COLUMNS}) VALUES ({', '.join('?' * 15)}) ON CONFLICT(path) DO UPDATE "
                    "SET device=excluded.device, inode=excluded.inode, fingerprint=excluded.fingerprint, "
                    "fingerprint_len=excluded.fingerprint_len, offset=excluded.offset, line=excluded.line, "
                    "resume_offset=excluded.resume_offset, resume_line=excluded.resume_line, updated=excluded.updated, "
                    "generation=excluded.generation, crc=excluded.crc, first_id=excluded.first_id, "
                    "session_id=excluded.session_id, history_line=excluded.history_line "
                    # a position queued before a new generation's own row was committed is not that log any more
                    "WHERE excluded.generation >= files.generation", rows)
                if moved:
                    self._db.executemany("DELETE FROM files WHERE path = ?", moved)
                if totals is not None:
                    self._db.execute("INSERT OR REPLACE INTO totals (id, data) VALUES (0, ?)", (totals,))
                self._db.execute("COMMIT")
            except sqlite3.Error as exc:
                self._rollback()
                raise CheckpointError(f"cannot commit to the checkpoint {self.path}: {describe(exc)}") from None
            except BaseException:
                self._rollback()
                raise

    def _rollback(self) -> None:
        # SQLite may have rolled back already (a full disk does): rolling back again would hide the error.
        if self._db.in_transaction:
            try:
                self._db.execute("ROLLBACK")
            except sqlite3.Error as exc:
                log.debug("rollback of the checkpoint failed too: %s", exc)

    def forget(self, path: str) -> None:
        """Drop a file that no longer exists (a failure is logged: the row is dropped at a later forget)."""
        with self._lock:
            try:
                self._db.execute("DELETE FROM files WHERE path = ?", (path_text(path),))
            except sqlite3.Error as exc:
                log.warning("cannot drop %s from the checkpoint %s: %s", path, self.path, describe(exc))

    def close(self) -> None:
        """Close the database."""
        with self._lock:
            self._db.close()


def _prepare(db: sqlite3.Connection) -> None:
    """WAL, and the schema made, or brought up to date from an older version's."""
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=NORMAL")
    older = db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'files'").fetchone()
    db.execute(SCHEMA)
    db.execute(TOTALS_SCHEMA)
    db.execute(META_SCHEMA)
    # A new checkpoint starts now; one an older version made has been following since before (unknown: 0).
    db.execute("INSERT OR IGNORE INTO meta (key, value) VALUES ('first_start', ?)", (0.0 if older else time.time(),))
    columns = {row[1] for row in db.execute("PRAGMA table_info(files)")}
    for name, definition in _ADDED.items():  # a checkpoint written by an older version
        if name not in columns:
            db.execute(f"ALTER TABLE files ADD COLUMN {definition}")


def _busy(state_dir: Path, pid: str) -> CheckpointError:
    return CheckpointError(f"another copilot-otel daemon (pid {pid}) is using the state directory {state_dir}; "
                           "stop it, or give this one its own --state-dir")


class StateLock:
    """An exclusive lock on a state directory, held while a daemon runs: two daemons on one checkpoint
    would export everything twice. Released when the process ends, however it ends."""

    NAME = "daemon.lock"

    def __init__(self, state_dir: Path, *, strict: bool = True) -> None:
        self.path = Path(state_dir) / self.NAME
        self.strict = strict  # refuse a state folder another user could change (strictmodes.py)
        self._fd: int | None = None
        self._folder = -1  # the state folder, locked (pidlock.lock_folder)

    def acquire(self) -> None:
        """Check the state directory is writable and safe (creating it), then take the lock; raise ConfigError
        for a directory that cannot be written or another user could change, CheckpointError naming the
        daemon that holds it."""
        state_dir = self.path.parent
        try:
            state_folder(state_dir, strict=self.strict)
            fd = open_private(self.path, os.O_RDWR)
        except UnsafePath as exc:
            raise ConfigError(state_refusal(state_dir, exc)) from None
        except OSError as exc:
            raise ConfigError(f"state directory {state_dir} is not writable ({exc.strerror or exc}); "
                              "choose another with --state-dir or COPILOT_OTEL_STATE_DIR") from None
        # The folder's own lock first: the file can be deleted under a running daemon, the folder cannot. Then the
        # file's: what an older version holds, and where the holder's pid is written.
        try:
            folder = pidlock.lock_folder(state_dir)
        except pidlock.Held as held:
            pid = held.pid if held.pid != "?" else os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
            os.close(fd)
            raise _busy(state_dir, pid) from None
        except BaseException:
            os.close(fd)
            raise
        try:
            pidlock.lock(fd)  # closes fd if it raises
        except BaseException as exc:
            os.close(folder)
            if isinstance(exc, pidlock.Held):
                raise _busy(state_dir, exc.pid) from None
            raise
        pidlock.say_holder(fd)
        self._fd, self._folder = fd, folder

    def release(self) -> None:
        """Let another daemon start."""
        if self._fd is not None:
            os.close(self._fd)
            os.close(self._folder)
            self._fd = None
