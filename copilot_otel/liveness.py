"""Is a session's CLI process alive? Read from its ``inuse.<pid>.lock`` files."""

from __future__ import annotations

import os
from pathlib import Path

LOCK_PREFIX = "inuse."
LOCK_SUFFIX = ".lock"


def pid_alive(pid: int) -> bool:
    """True if a process with this pid exists (signal 0 probes without touching it)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, owned by someone else
    return True


def lock_pids(session_dir: Path) -> list[int]:
    """The pids named by the session's lock files (from the file name, else its text)."""
    pids = []
    try:
        names = os.listdir(session_dir)
    except OSError:
        return pids
    for name in names:
        if name.startswith(LOCK_PREFIX) and name.endswith(LOCK_SUFFIX):
            middle = name[len(LOCK_PREFIX):-len(LOCK_SUFFIX)]
            if middle.isdigit():
                pids.append(int(middle))
    return pids


def session_alive(session_dir: Path) -> bool:
    """True while some process that holds the session is running."""
    return any(pid_alive(pid) for pid in lock_pids(session_dir))
