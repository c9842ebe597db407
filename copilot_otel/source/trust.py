"""Which session logs are the user's: a session folder and its log owned by the user (or root), each real file
once, never through a link that leaves session-state.

The Copilot CLI makes each session's folder 0700 and its log 0600, as the user who runs it: a folder or a log
another user owns was not written by this user's CLI. Where session-state is open to others (a shared group, a
``chmod -R g+w ~``, a cache restored 0777, a sticky 1777 folder), another user can plant a session there claiming
any usage in any repository; it is refused, said once with its path and its owner, and never exported, counted or
listed as the user's. The daemon, ``sessions``, ``usage``, ``inspect``, ``view`` and a replay of a folder all read
session-state through this rule (a log named by its own path on the command line is read whoever owns it: it was
asked for).

A session is its log's real file: an alias (``ln -s <id> current``), a bind mount or a hard link of a log already
read is the same session, read once, under the folder that holds the file itself.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from ..base.strictmodes import UnsafePath, check_folder, owner_name, writable_by_others
from ..vocab import REFUSED_ALIAS, REFUSED_OUTSIDE, REFUSED_OWNER

EVENTS_FILE = "events.jsonl"

# Why a log is not read as the user's (copilot_otel_logs_refused_total{reason}).
OWNER, OUTSIDE, ALIAS = REFUSED_OWNER, REFUSED_OUTSIDE, REFUSED_ALIAS

log = logging.getLogger(__name__)


def trusted(uid: int) -> bool:
    """A uid whose files may be the user's sessions: the user's own (this process's effective uid), or root's."""
    return uid == os.geteuid() or uid == 0


def stranger(events: str | os.PathLike, folder: os.stat_result, file: os.stat_result) -> str | None:
    """Why the session whose log is ``events`` (its folder's and its own stat, links followed) is not the user's,
    in words naming the log, the path another user owns and that user; None when both are the user's or root's."""
    text = os.fspath(events)
    for path, st in ((os.path.dirname(text), folder), (text, file)):
        if not trusted(st.st_uid):
            return f"not reading {text} as your session: {path} belongs to {owner_name(st.st_uid)}, not to you"
    return None


_said: set[str] = set()


def say_once(path: str | os.PathLike, message: str, *, level: int = logging.WARNING) -> None:
    """Log ``message`` about ``path`` unless a refusal of it was said in this process already (the daemon, and the
    listings its web view and socket answer from, say each one once)."""
    key = os.fspath(path)
    if key not in _said:
        _said.add(key)
        log.log(level, "%s", message)


def exposed(folder: os.stat_result, root: os.stat_result | None) -> bool:
    """Could another user put a file of theirs where the log of a session in ``folder`` is: the folder, or
    session-state (``root``'s stat; None: it cannot be looked at, so it is not known to be closed), writable by
    others (sticky or not)."""
    return root is None or writable_by_others(folder) or writable_by_others(root)


def alias_of(events: str | os.PathLike, real_root: str) -> str | None:
    """The name of the session folder in session-state (``real_root``: its real path) whose log ``events`` is
    reached through a link (``ln -s <id> current``); None for a log that is no such alias."""
    text = os.fspath(events)
    real = os.path.realpath(text)
    folder, name = os.path.split(real)
    if name != EVENTS_FILE or os.path.dirname(folder) != real_root:
        return None
    other = os.path.basename(folder)
    return None if other == os.path.basename(os.path.dirname(text)) else other


def leaves(events: str | os.PathLike, real_root: str) -> bool:
    """Does the log ``events``, its links followed, lie outside session-state (``real_root``: its real path)?"""
    real = os.path.realpath(events)
    return not real.startswith(real_root.rstrip(os.sep) + os.sep)


def leads_outside(events: str | os.PathLike, root: str | os.PathLike) -> str:
    """What is said of a log that leads out of session-state."""
    return f"{events} leads outside {root}; not following it"


def open_to_others(root: Path) -> str | None:
    """What makes session-state (``root``) a place other users could plant sessions in, as ssh says it of a
    group-writable ~/.ssh: it, or a folder above it, is theirs or writable by them; None if it is not, or does
    not exist yet."""
    try:
        check_folder(root, own=True)
    except UnsafePath as exc:
        return f"{exc}: other users could plant sessions in {root} (they are refused, one warning each)"
    except OSError:
        return None
    return None
