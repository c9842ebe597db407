"""Where session logs are: expand COPILOT_HOME, session-state/, a session folder or a file to event logs."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable
from pathlib import Path

EVENTS_FILE = "events.jsonl"
SESSION_STATE = "session-state"


class SourceError(ValueError):
    """A path given to replay or inspect that is not a session log, or cannot be read."""


class UnreadableLog(SourceError):
    """A session log that exists but cannot be read (permissions, I/O); the message names it and why."""

    def __init__(self, path: Path, reason: str) -> None:
        super().__init__(f"{path}: cannot read it ({reason})")
        self.path = path
        self.reason = reason


def session_id_of(path: Path) -> str:
    """A session's id: the name of the folder that holds its events.jsonl. A name that is not UTF-8 (the CLI
    names folders by UUID; another program may not) has its stray bytes written as ``\\xff``: an id is text
    that every encoder (orjson, OTLP, the web view) takes."""
    name = path.parent.name if path.name == EVENTS_FILE else path.stem
    try:
        name.encode()
    except UnicodeEncodeError:  # os.fsdecode kept the stray bytes as lone surrogates
        return os.fsencode(name).decode(errors="backslashreplace")
    return name


_BYTES = "bytes:"  # no absolute path starts so


def path_text(path: str) -> str:
    """A path as text SQLite and JSON take: itself, or, if it is not UTF-8, ``bytes:`` and its bytes in hex."""
    try:
        path.encode()
    except UnicodeEncodeError:
        return _BYTES + os.fsencode(path).hex()
    return path


def path_from_text(text: str) -> str:
    """The path :func:`path_text` wrote (anything else: the text itself)."""
    if text.startswith(_BYTES):
        try:
            return os.fsdecode(bytes.fromhex(text[len(_BYTES):]))
        except ValueError:
            pass
    return text


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


def list_sessions(root: Path) -> list[Path]:
    """The events.jsonl of each session folder in ``root`` (a session-state folder), by name;
    raises SourceError naming the folder and the reason when it cannot be listed."""
    return [root.joinpath(name, EVENTS_FILE) for name, _plain in _session_folders(root)]


def _kind(path: Path) -> int | None:
    """The file type bits of ``path`` (following symlinks), None if it does not exist; a SourceError
    naming it and the reason when it cannot be looked at (a folder on its way that we may not enter)."""
    try:
        return stat.S_IFMT(os.stat(path).st_mode)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        raise SourceError(f"{path}: cannot read it ({exc.strerror or exc})") from None


_KIND_NAMES = {stat.S_IFCHR: "character device", stat.S_IFBLK: "block device", stat.S_IFIFO: "FIFO",
               stat.S_IFSOCK: "socket"}


def _find(path: Path, *, resolved: bool) -> list[Path]:
    """find_event_files; with ``resolved``, each as ``Path.resolve()`` makes it."""
    kind = _kind(path)
    if kind is None:
        raise SourceError(f"{path}: no such file or directory")
    if kind == stat.S_IFDIR and not os.access(path, os.R_OK | os.X_OK):
        raise SourceError(f"{path}: cannot read it (permission denied)")
    if kind not in (stat.S_IFDIR, stat.S_IFREG):
        raise SourceError(f"{path}: a {_KIND_NAMES.get(kind, 'special file')}, not COPILOT_HOME, a session folder or "
                          f"an {EVENTS_FILE}")
    for candidate in (path, path / EVENTS_FILE):
        if _kind(candidate) == stat.S_IFREG:
            return [candidate.resolve() if resolved else candidate]
    root = path / SESSION_STATE if _kind(path / SESSION_STATE) == stat.S_IFDIR else path
    sessions = _session_folders(root)
    if not sessions:
        raise SourceError(f"{path}: no {EVENTS_FILE} found (expected COPILOT_HOME, its {SESSION_STATE}/, "
                          f"a session folder or an {EVENTS_FILE})")
    if not resolved:
        return [root.joinpath(name, EVENTS_FILE) for name, _plain in sessions]
    # Resolving each of thousands of files walks the same folders again: resolve their root once. One joinpath
    # a file, not two `/`: each makes and parses a new Path.
    base = root.resolve()
    return [base.joinpath(name, EVENTS_FILE) if plain else root.joinpath(name, EVENTS_FILE).resolve()
            for name, plain in sessions]


def _session_folders(root: Path) -> list[tuple[str, bool]]:
    """(name, plain) of each folder in ``root`` that holds an events.jsonl file of the user's, by name;
    ``plain``: neither the folder nor that file is a symlink. Refused, each said once (source/trust.py): a folder
    or log of another user, a link that leads out of ``root``; left out: another name of a log listed already
    (a symlinked alias, a bind mount, a hard link)."""
    found = []
    try:
        with os.scandir(root) as entries:
            for entry in entries:
                candidate = os.path.join(entry.path, EVENTS_FILE)
                try:
                    st = os.lstat(candidate)
                    link = stat.S_ISLNK(st.st_mode)
                    if link:
                        st = os.stat(candidate)
                    folder = entry.stat()  # a symlinked folder's target
                except OSError:  # not a folder, no events.jsonl, unreadable
                    continue
                if stat.S_ISREG(st.st_mode):
                    found.append((entry.name, not (link or entry.is_symlink()), folder, st))
    except OSError as exc:
        raise SourceError(f"{root}: cannot read it ({exc.strerror or exc})") from None
    return _the_users(root, found)


def _the_users(root: Path, found: list) -> list[tuple[str, bool]]:
    """Of (name, plain, folder stat, log stat): the user's sessions, each real file once, by name."""
    from . import trust  # here: what lists no folder (replay of a file, --json of the cache) imports no pwd, grp

    real_root: str | None = None
    kept: dict[tuple[int, int], str] = {}
    out = []
    for name, plain, folder, st in sorted(found, key=lambda item: (not item[1], item[0])):  # plain ones first
        log = os.path.join(root, name, EVENTS_FILE)
        if not plain:
            real_root = real_root or os.path.realpath(root)
            if trust.leaves(log, real_root):
                trust.say_once(log, trust.leads_outside(log, root))
                continue
        why = trust.stranger(log, folder, st)
        if why is not None:
            trust.say_once(log, why)
            continue
        if kept.setdefault((st.st_dev, st.st_ino), name) != name:
            continue  # another name of a log kept: the same session, once
        out.append((name, plain))
    return sorted(out)


LATEST = "latest"


def find_session(root: Path, text: str) -> Path:
    """The events.jsonl under ``root`` (a session-state folder) that ``text`` names: a session id, a
    prefix of exactly one, or ``latest`` (the session whose last event is the newest: the one `sessions` lists
    first, whatever the files' times say after a copy). Raises SourceError
    saying what did not match (and, for a prefix of several, which)."""
    if _kind(root) is None:
        raise SourceError(f"{text}: not a session id under {root} (no such folder), nor a session folder or "
                          "events.jsonl")
    folders = [name for name, _plain in _session_folders(root)]
    if text == LATEST:
        if not folders:
            raise SourceError(f"no session under {root}")
        return max((root / name / EVENTS_FILE for name in folders),
                   key=lambda path: (last_event_ns(path), _mtime(path)))
    if text in folders:
        return root / text / EVENTS_FILE
    matches = [name for name in folders if name.startswith(text)] if text else []
    if len(matches) == 1:
        return root / matches[0] / EVENTS_FILE
    if not matches:
        raise SourceError(f"{text}: not a session id under {root}, nor a session folder or events.jsonl")
    shown = ", ".join(sorted(matches)[:5]) + (f" and {len(matches) - 5} more" if len(matches) > 5 else "")
    raise SourceError(f"{text}: {len(matches)} sessions start with it ({shown}); give more of the id")


TAIL_BYTES = 64 << 10  # where a log's last event is looked for


def last_event_ns(path: Path) -> int:
    """The timestamp of the last event in the log's last TAIL_BYTES (nanoseconds), 0 if none is found there."""
    import orjson

    from ..decode.lines import parse_timestamp

    try:
        with open(path, "rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            handle.seek(max(0, size - TAIL_BYTES))
            tail = handle.read(TAIL_BYTES)
    except OSError:
        return 0
    for line in reversed(tail.split(b"\n")):
        try:
            event = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue  # a partial line, the cut-off first one, or a malformed one
        stamp = parse_timestamp(event.get("timestamp")) if isinstance(event, dict) else None
        if stamp is not None:
            return stamp
    return 0


def _mtime(path: Path) -> int:
    try:
        return os.stat(path).st_mtime_ns
    except OSError:
        return 0
