"""The one rule by which the SQLite stores (the daemon's checkpoint, a replay's ledger) judge a database damaged.

A store opens its file with :func:`open_checked`: the table it keeps must have the columns every version of the
store wrote (a table of that name without them is another program's, or another schema), then the store makes or
updates its schema, then every row is read once, so that a damaged page shows at the start rather than at some
later read. An error on the way is *damage* (:func:`damaged`) when SQLite calls the file corrupt or no database
(a truncated file, a garbage header, text), or when a column the store reads is missing; a lock, a full disk, a
read-only file or an I/O error is not: those say nothing of the file, and a later attempt may get past them.
What a store then does with a damaged file is its own: the checkpoint refuses it or sets it aside, a replay's
ledger is rebuilt empty.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

DAMAGE = ("SQLITE_CORRUPT", "SQLITE_NOTADB")  # SQLite's names for a damaged file and for one that is no database
_ANOTHER_SCHEMA = ("no such table", "no such column")


def damaged(exc: sqlite3.Error) -> bool:
    """Does this error, met while opening a store, mean its file is damaged, no database, or of another schema?"""
    name = getattr(exc, "sqlite_errorname", "") or ""
    text = str(exc)
    if text.startswith(_ANOTHER_SCHEMA):
        return name in ("", "SQLITE_ERROR")
    if name:
        return name.startswith(DAMAGE)
    return "malformed" in text or "not a database" in text  # an SQLite that names no error code


def busy(exc: sqlite3.Error) -> bool:
    """Another connection holds the database locked (past the busy timeout)."""
    name = getattr(exc, "sqlite_errorname", "") or ""
    return name.startswith(("SQLITE_BUSY", "SQLITE_LOCKED")) or "locked" in str(exc)


def describe(exc: sqlite3.Error) -> str:
    """The error with SQLite's name for it, for a message: 'database is locked (SQLITE_BUSY)'."""
    name = getattr(exc, "sqlite_errorname", "")
    return f"{exc} ({name})" if name else str(exc)


def open_checked(path: Path, table: str, prepare: Callable[[sqlite3.Connection], None], *, columns: str,
                 first_columns: str | None = None, **connect: Any) -> sqlite3.Connection:
    """A connection to the store at ``path`` (``connect``: sqlite3.connect's keyword arguments), its ``table``
    checked, prepared and read whole as the module docstring says. ``first_columns``: the columns every version
    of the store has (default ``columns``, what it reads). Raises sqlite3.Error, the connection closed:
    :func:`damaged` says whether the file is to blame."""
    db = sqlite3.connect(path, **connect)
    try:
        # Before anything is changed: a table of that name without the store's columns is no store of ours.
        if db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (table,)).fetchone():
            db.execute(f"SELECT {first_columns or columns} FROM {table} LIMIT 0")
        prepare(db)
        db.execute(f"SELECT {columns} FROM {table}").fetchall()  # every page read: damage shows now, not later
    except BaseException:
        db.close()
        raise
    return db
