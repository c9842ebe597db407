"""Which logs the daemon reads as the user's (source/trust.py): only the user's sessions, each real file once.

It keeps the logs refused now, and why; which path follows each file (device and inode as one int); and the file
checked of each log others could swap (its folder or session-state open to them), checked again whenever another
file is read there.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

from ..metrics.registry import Metrics
from ..source import trust
from ..source.tail import FileTail

log = logging.getLogger("copilot_otel.daemon.daemon")  # its lines read as the daemon's, as before

LOOK_EVERY = 1.0  # seconds between two looks at session-state's own stat


def file_key(device: int, inode: int) -> int:
    """A file's device and inode as one int (a key that costs less than a tuple, per followed log)."""
    return device << 64 | inode


def _same_file(path: Path, file: int) -> bool:
    """Is ``path`` (links followed) the file ``file`` (file_key) now?"""
    try:
        st = os.stat(path)
    except OSError:
        return False
    return file_key(st.st_dev, st.st_ino) == file


def _tail_key(tail: FileTail) -> int | None:
    ident = tail.identity
    return None if ident is None else file_key(ident.device, ident.inode)


class Admission:
    """Admits the logs under session-state that are the user's, once per real file; counts and says the rest."""

    def __init__(self, root: Path, root_real: Path, metrics: Metrics, *, open_said: bool) -> None:
        self.root = root
        self.root_real = root_real
        self.metrics = metrics
        self._refused: dict[Path, str] = {}
        self._files: dict[int, Path] = {}
        self._exposed: dict[Path, int] = {}
        self._root_looked: tuple[float, os.stat_result | None] = (-LOOK_EVERY, None)
        self._open_said = open_said  # session-state open to others: said (once it exists)
        self.say_open()

    def say_open(self) -> None:
        """Say once, as ssh says it of a group-writable ~/.ssh, that session-state is open to other users (at start,
        or when it appears)."""
        if self._open_said or not os.path.isdir(self.root):
            return
        self._open_said = True
        if (problem := trust.open_to_others(self.root)) is not None:
            log.warning("%s", problem)

    def admit(self, path: Path, st: os.stat_result) -> bool:
        """Is a log seen here first one of the user's sessions, and not another name of a followed one? Said and
        counted once when not (source/trust.py). Raises OSError when its folder cannot be looked at."""
        if not self._open_said:
            self.say_open()
        folder = os.stat(path.parent)
        why = trust.stranger(path, folder, st)
        if why is not None:
            return self.refuse(path, trust.OWNER, why)
        file = file_key(st.st_dev, st.st_ino)
        real = trust.alias_of(path, str(self.root_real)) if path.parent.is_symlink() or path.is_symlink() else None
        other = self.root / real / trust.EVENTS_FILE if real is not None else self._files.get(file)
        if other is not None and other != path and (real is not None or _same_file(other, file)):
            return self.refuse(path, trust.ALIAS, f"{path} is another name of {other}: read there, once")
        self._refused.pop(path, None)
        self._files[file] = path
        if trust.exposed(folder, self._root_stat()):
            self._exposed[path] = file
        return True

    def refuse(self, path: Path, reason: str, message: str | None) -> bool:
        """Count (and say, unless ``message`` is None) once that ``path`` is not read as the user's; False."""
        if self._refused.get(path) != reason:
            self._refused[path] = reason
            self.metrics.logs_refused.labels(reason).inc()
            if message is not None:
                trust.say_once(path, message, level=logging.INFO if reason == trust.ALIAS else logging.WARNING)
        return False

    def still_owned(self, path: Path, tail: FileTail) -> bool:
        """After a read of a log others could swap (its folder or session-state open to them): is the file just
        read still the user's? If not, or if it cannot be told (swapped again meanwhile), it is refused (counted,
        said) and False: the caller drops it."""
        ident = tail.identity
        checked = self._exposed.get(path)
        if checked is None or ident is None or checked == file_key(ident.device, ident.inode):
            return True
        try:
            folder, st = os.stat(path.parent), os.stat(path)
            why = trust.stranger(path, folder, st) if (st.st_dev, st.st_ino) == (ident.device, ident.inode) \
                else f"not reading {path} as your session: it was replaced again while it was read"
        except OSError as exc:
            why = f"not reading {path} as your session: it cannot be looked at again ({exc.strerror or exc})"
        if why is None:
            self._exposed[path] = file_key(ident.device, ident.inode)
            self._files[self._exposed[path]] = path
            return True
        self.refuse(path, trust.OWNER, why)
        return False

    def moved(self, old: Path, path: Path, tail: FileTail) -> None:
        """The log at ``old`` is followed at ``path`` now (its folder was renamed)."""
        if old in self._exposed:
            self._exposed[path] = self._exposed.pop(old)
        file = _tail_key(tail)
        if file is not None:
            self._files[file] = path

    def disown(self, path: Path, tail: FileTail | None) -> None:
        """Forget which file ``path`` followed."""
        files = [self._exposed.pop(path, None)]
        if tail is not None:
            files.append(_tail_key(tail))
        for file in files:
            if file is not None and self._files.get(file) == path:
                del self._files[file]

    def _root_stat(self) -> os.stat_result | None:
        """session-state's stat, looked at once a second at most (thousands of logs are admitted at start)."""
        looked, st = self._root_looked
        now = time.monotonic()
        if now - looked >= LOOK_EVERY:
            try:
                st = os.stat(self.root)
            except OSError:
                st = None
            self._root_looked = (now, st)
        return st
