"""What a replay has delivered so far, so that a re-run after an interruption sends nothing twice.

One SQLite file per replay (same paths, same destination, same content settings: same file),
in the state folder under ``replay/``. Each session log has a row: its identity (inode, size,
modification time) and how many of its spans were delivered, in the order the replay makes
them (always the same for the same log). A row is written in the same step as the delivery
it records is confirmed; a log that changed since is replayed from its first span. The file
is removed once everything was delivered: the next replay of the same logs sends them again.
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
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


def identity_of(path: Path) -> str:
    """What makes a log the same log for a replay: inode, size and modification time ('' if unreadable)."""
    try:
        st = os.stat(path)
    except OSError:
        return ""
    return f"{st.st_ino}:{st.st_size}:{st.st_mtime_ns}"


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
