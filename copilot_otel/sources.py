"""Where session logs are: expand COPILOT_HOME, session-state/, a session folder or a file to event logs."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Iterable

EVENTS_FILE = "events.jsonl"
SESSION_STATE = "session-state"


class SourceError(ValueError):
    """A path given to replay or inspect that is not a session log."""


def session_id_of(path: Path) -> str:
    """A session's id: the name of the folder that holds its events.jsonl."""
    return path.parent.name if path.name == EVENTS_FILE else path.stem


def find_event_files(path: Path) -> list[Path]:
    """Expand one argument (COPILOT_HOME, session-state, a session folder, a file) to event logs."""
    return _find(path, resolved=False)


def resolve(paths: Iterable[Path]) -> list[Path]:
    """All event logs named by the arguments, each once, in order."""
    seen: dict[Path, None] = {}
    for path in paths:
        for found in _find(Path(path).expanduser(), resolved=True):
            seen.setdefault(found, None)
    return list(seen)


def _find(path: Path, *, resolved: bool) -> list[Path]:
    """find_event_files; with ``resolved``, each as ``Path.resolve()`` makes it."""
    if not path.exists():
        raise SourceError(f"{path}: no such file or directory")
    for candidate in (path, path / EVENTS_FILE):
        if candidate.is_file():
            return [candidate.resolve() if resolved else candidate]
    root = path / SESSION_STATE if (path / SESSION_STATE).is_dir() else path
    sessions = _session_folders(root)
    if not sessions:
        raise SourceError(f"{path}: no {EVENTS_FILE} found (expected COPILOT_HOME, its {SESSION_STATE}/, "
                          f"a session folder or an {EVENTS_FILE})")
    if not resolved:
        return [root / name / EVENTS_FILE for name, _plain in sessions]
    # Resolving each of thousands of files walks the same folders again: resolve their root once.
    base = root.resolve()
    return [base / name / EVENTS_FILE if plain else (root / name / EVENTS_FILE).resolve() for name, plain in sessions]


def _session_folders(root: Path) -> list[tuple[str, bool]]:
    """(name, plain) of each folder in ``root`` that holds an events.jsonl file, by name;
    ``plain``: neither the folder nor that file is a symlink."""
    found = []
    try:
        with os.scandir(root) as entries:
            for entry in entries:
                candidate = os.path.join(entry.path, EVENTS_FILE)
                try:
                    mode = os.lstat(candidate).st_mode
                except OSError:  # not a folder, no events.jsonl, unreadable
                    continue
                if stat.S_ISREG(mode):
                    found.append((entry.name, not entry.is_symlink()))
                elif stat.S_ISLNK(mode) and os.path.isfile(candidate):
                    found.append((entry.name, False))
    except OSError:
        return []
    return sorted(found)
