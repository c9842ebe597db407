"""Session folders and their logs on disk, as the Copilot CLI writes them."""

from __future__ import annotations

import os
from pathlib import Path

SESSION_STATE = "session-state"
EVENTS_FILE = "events.jsonl"


def new_session(home: Path, name: str) -> Path:
    """A session folder held by a live process, as the CLI does it (the holder is this test); its log's path."""
    folder = Path(home) / SESSION_STATE / name
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"inuse.{os.getpid()}.lock").write_text(str(os.getpid()))
    return folder / EVENTS_FILE


def append(path: Path, data: bytes) -> None:
    """Append bytes to a file, as the CLI appends events."""
    with open(path, "ab") as handle:
        handle.write(data)


def ended_session(home: Path, session_id: str, **start) -> Path:
    """A finished session's log (``start`` fields, one question and its answer, shutdown) under ``home``."""
    from tests.support.events import SessionLog

    log = SessionLog(session_id)
    log.start(**start)
    log.user()
    log.answer()
    log.shutdown()
    folder = Path(home) / SESSION_STATE / session_id
    folder.mkdir(parents=True)
    (folder / EVENTS_FILE).write_bytes(log.jsonl())
    return folder / EVENTS_FILE
