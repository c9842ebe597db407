"""What a replay has delivered so far, so that a re-run after an interruption sends nothing twice.

One SQLite file per replay (same paths, same destination, same content settings: same file),
in the state folder under ``replay/``. Each session log has a row: its identity and how many of
its spans were delivered, in the order the replay makes them (always the same for the same log).
A row is written in the same step as the delivery it records is confirmed; a log that changed
since is replayed from its first span. The file is removed once everything was delivered: the
next replay of the same logs sends them again. A trace file's ledger is the file's (whatever the logs) and is
kept: a trace file keeps what it was given, so a repeated replay into it adds nothing (replay/job.py).

A log is known by its content, as the daemon knows it (identity.py): the CRC-32 of the bytes the
replay had read when it made the spans a row counts (computed while reading them), so that the
same bytes copied over it (rsync, a restore) are not sent again. A row of a log read to its end
also holds its size: a log that grew since is replayed from its first span, as the spans its end
closed as incomplete may now end otherwise. A log that could not be hashed (a sparse hole was
skipped) is known by its inode, size and modification time.

A replay holds its ledger's lock file (``<name>.lock``, its pid inside) while it runs: a second
replay of the same logs to the same destination is refused at once, naming the first. A damaged
ledger (not a database, truncated, another schema) is rebuilt empty, with a warning: the logs it
recorded are sent again, with the same trace and span ids (README.md, "The trace"), which a backend
that keys spans by id keeps once; a trace file gets their lines twice.
"""

from __future__ import annotations

import logging
import os
import sqlite3
from collections.abc import Iterable
from pathlib import Path

from msgspec import Struct

from ..base import pidlock
from ..base.hashes import blake2b
from ..base.private_files import open_private, private_dir, touch_private
from ..base.regular_files import open_regular
from ..base.sqlitestore import busy, damaged, open_checked
from ..source.identity import prefix_crc
from ..source.sources import path_from_text, path_text

log = logging.getLogger(__name__)

SCHEMA = """
CREATE TABLE IF NOT EXISTS logs (
    path TEXT PRIMARY KEY,
    identity TEXT NOT NULL,
    sent INTEGER NOT NULL,
    done INTEGER NOT NULL
)
"""
BUSY_TIMEOUT = 1.0  # seconds to wait for a database lock held by a program other than a replay
_COLUMNS = "path, identity, sent, done"


class LedgerBusy(RuntimeError):
    """Another replay of the same logs to the same destination is running (or another program holds the ledger)."""


CONTENT = "crc32:"  # the prefix of a content identity


def identity_of(path: Path) -> str:
    """What makes a log the same log when its content was not hashed: inode, size and modification time
    ('' if unreadable)."""
    try:
        st = os.stat(path)
    except OSError:
        return ""
    return f"{st.st_ino}:{st.st_size}:{st.st_mtime_ns}"


def content_identity(length: int, crc: int, *, whole: bool) -> str:
    """The log whose first ``length`` bytes have CRC-32 ``crc`` (``whole``: and no more bytes)."""
    return f"{CONTENT}{length}:{crc:08x}" + (":whole" if whole else "")


def same_log(recorded: str, path: Path) -> bool:
    """Is the log at ``path`` the one a row's ``recorded`` identity names? (A content identity reads the file.)"""
    if not recorded.startswith(CONTENT):
        return recorded == identity_of(path)
    length = int(recorded[len(CONTENT):].split(":")[0])
    try:
        with os.fdopen(open_regular(path), "rb") as handle:
            if recorded.endswith(":whole") and os.fstat(handle.fileno()).st_size != length:
                return False
            found = prefix_crc(handle, length)  # None: fewer bytes than that
    except OSError:
        return False
    return found is not None and recorded == content_identity(length, found[0], whole=recorded.endswith(":whole"))


def _prepare(db: sqlite3.Connection) -> None:
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=NORMAL")
    db.execute(SCHEMA)


class Progress(Struct, frozen=True):
    """How far one log got: spans delivered, and whether that was all of them."""

    identity: str
    sent: int = 0
    done: bool = False


class Ledger:
    """The delivery record of one replay (one destination, one set of logs); ``restart``: an empty one. Raises
    LedgerBusy when another replay holds it, sqlite3.Error or OSError when it cannot be kept."""

    def __init__(self, path: Path, *, restart: bool = False) -> None:
        self.path = Path(path)
        private_dir(self.path.parent)
        self.lock_path = self.path.with_suffix(".lock")
        self._lock_fd = self._lock()
        try:
            if restart:  # --restart: forget what an interrupted replay delivered
                self._remove_files()
            self._db = self._open()
        except BaseException:
            os.close(self._lock_fd)
            raise

    def _lock(self) -> int:
        """Take the lock file (the same inode as its path: a finished replay removes it), write our pid in it."""
        while True:
            fd = open_private(self.lock_path, os.O_RDWR)
            try:
                pidlock.lock(fd)
            except pidlock.Held as held:
                raise LedgerBusy(f"another replay of the same sessions to the same destination is running "
                                 f"(pid {held.pid}, {self.lock_path}); wait for it to finish, or stop it") from None
            try:
                same = os.fstat(fd).st_ino == os.stat(self.lock_path).st_ino
            except FileNotFoundError:
                same = False
            if same:
                pidlock.say_holder(fd)
                return fd
            os.close(fd)  # removed by the replay that held it, between our open and our lock: again

    def _open(self) -> sqlite3.Connection:
        try:
            return self._connect()
        except sqlite3.Error as exc:
            if busy(exc):
                raise LedgerBusy(f"the replay's record {self.path} is locked by another program ({exc}); "
                                 "close it and run again") from None
            if not damaged(exc):  # base/sqlitestore's rule, the checkpoint's too
                raise
            log.warning("the replay's record %s is damaged (%s): rebuilt empty; the sessions it had delivered are "
                        "sent again, with the same span ids", self.path, exc)
            self._remove_files()
            return self._connect()

    def _connect(self) -> sqlite3.Connection:
        touch_private(self.path)  # SQLite gives its -wal and -shm files the database's mode
        return open_checked(self.path, "logs", _prepare, columns=_COLUMNS, isolation_level=None, timeout=BUSY_TIMEOUT)

    def _remove_files(self) -> None:
        for suffix in ("", "-wal", "-shm"):
            Path(str(self.path) + suffix).unlink(missing_ok=True)

    @staticmethod
    def path_for(state_dir: Path, destination: str, files: Iterable[Path], settings: str = "") -> Path:
        """The ledger of a replay of ``files`` to ``destination`` with these content ``settings``."""
        digest = blake2b(digest_size=12)
        for part in (destination, settings, *sorted(map(str, files))):
            digest.update(part.encode("utf-8", "surrogatepass") + b"\0")
        return Path(state_dir) / "replay" / f"{digest.hexdigest()}.sqlite"

    def load(self) -> dict[str, Progress]:
        """Every log's progress, by path."""
        rows = self._db.execute(f"SELECT {_COLUMNS} FROM logs").fetchall()
        return {path_from_text(path): Progress(identity, sent, bool(done)) for path, identity, sent, done in rows}

    def record(self, rows: Iterable[tuple[str, str, int, bool]]) -> None:
        """(path, identity, spans sent so far, done) of the logs a delivered batch held, in one transaction."""
        self._db.execute("BEGIN")
        try:
            self._db.executemany("INSERT INTO logs VALUES (?,?,?,?) ON CONFLICT(path) DO UPDATE SET "
                                 "identity=excluded.identity, sent=excluded.sent, done=excluded.done",
                                 [(path_text(p), i, s, int(d)) for p, i, s, d in rows])
            self._db.execute("COMMIT")
        except BaseException:
            if self._db.in_transaction:  # a Ctrl-C may land before BEGIN took: nothing to roll back then
                self._db.execute("ROLLBACK")
            raise

    def close(self, *, remove: bool = False) -> None:
        """Close it and let another replay take it; ``remove``: everything was delivered, so the record (and its
        lock file) is no longer needed."""
        self._db.close()
        if remove:
            self._remove_files()
            self.lock_path.unlink(missing_ok=True)  # while still locked: a replay waiting retries on a new file
        os.close(self._lock_fd)
