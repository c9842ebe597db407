"""What a replay has delivered so far, so that a re-run after an interruption sends nothing twice.

One SQLite file per replay (same paths, same destination, same content settings: same file),
in the state folder under ``replay/``. Each session log has a row: its identity and how many of
its spans were delivered, in the order the replay makes them (always the same for the same log).
A row is written in the same step as the delivery it records is confirmed; a log that changed
since is replayed from its first span. The file is removed once everything was delivered: the
next replay of the same logs sends them again.

A log is known by its content, as the daemon knows it (identity.py): the CRC-32 of the bytes the
replay had read when it made the spans a row counts (computed while reading them), so that the
same bytes copied over it (rsync, a restore) are not sent again. A row of a log read to its end
also holds its size: a log that grew since is replayed from its first span, as the spans its end
closed as incomplete may now end otherwise. A log that could not be hashed (a sparse hole was
skipped) is known by its inode, size and modification time.
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from .private import private_dir, touch_private

SCHEMA = """
CREATE TABLE IF NOT EXISTS logs (
    path TEXT PRIMARY KEY,
    identity TEXT NOT NULL,
    sent INTEGER NOT NULL,
    done INTEGER NOT NULL
)
"""


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
    crc = 0
    try:
        with open(path, "rb") as handle:
            if recorded.endswith(":whole") and os.fstat(handle.fileno()).st_size != length:
                return False
            left = length
            while left > 0 and (chunk := handle.read(min(left, 1 << 20))):
                crc = zlib.crc32(chunk, crc)
                left -= len(chunk)
    except OSError:
        return False
    return left == 0 and recorded == content_identity(length, crc, whole=recorded.endswith(":whole"))


@dataclass(frozen=True, slots=True)
class Progress:
    """How far one log got: spans delivered, and whether that was all of them."""

    identity: str
    sent: int = 0
    done: bool = False


class Ledger:
    """The delivery record of one replay (one destination, one set of logs)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        private_dir(self.path.parent)
        touch_private(self.path)
        self._db = sqlite3.connect(self.path, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute(SCHEMA)

    @staticmethod
    def path_for(state_dir: Path, destination: str, files: Iterable[Path], settings: str = "") -> Path:
        """The ledger of a replay of ``files`` to ``destination`` with these content ``settings``."""
        digest = hashlib.blake2b(digest_size=12)
        for part in (destination, settings, *sorted(map(str, files))):
            digest.update(part.encode("utf-8", "surrogatepass") + b"\0")
        return Path(state_dir) / "replay" / f"{digest.hexdigest()}.sqlite"

    def load(self) -> dict[str, Progress]:
        """Every log's progress, by path."""
        rows = self._db.execute("SELECT path, identity, sent, done FROM logs").fetchall()
        return {path: Progress(identity, sent, bool(done)) for path, identity, sent, done in rows}

    def record(self, rows: Iterable[tuple[str, str, int, bool]]) -> None:
        """(path, identity, spans sent so far, done) of the logs a delivered batch held, in one transaction."""
        self._db.execute("BEGIN")
        try:
            self._db.executemany("INSERT INTO logs VALUES (?,?,?,?) ON CONFLICT(path) DO UPDATE SET "
                                 "identity=excluded.identity, sent=excluded.sent, done=excluded.done",
                                 [(p, i, s, int(d)) for p, i, s, d in rows])
            self._db.execute("COMMIT")
        except BaseException:
            self._db.execute("ROLLBACK")
            raise

    def close(self, *, remove: bool = False) -> None:
        """Close it; ``remove``: everything was delivered, so the record is no longer needed."""
        self._db.close()
        if remove:
            for suffix in ("", "-wal", "-shm"):
                Path(str(self.path) + suffix).unlink(missing_ok=True)
