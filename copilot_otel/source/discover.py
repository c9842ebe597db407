"""Finds session logs that changed: one recursive watchdog watch, backed by a look and a periodic rescan.

The watcher makes changes visible within milliseconds; the rescan (a stat of every log) makes a
missed inotify event, an exhausted watch limit or a network filesystem cost a delay, never data.
With 100,000 folders a rescan takes seconds, so while the watcher works it is spaced out to
minutes. What must not wait that long is looked at every few seconds, cheaply: the names in
session-state (listed only when the folder changed), and the logs of folders found since start
and of live sessions, the ones being written (a folder beyond the inotify watch limit is not
watched, yet its session is new or live). All of them feed one set of "look at this path" hints
that the daemon drains.
"""

from __future__ import annotations

import errno
import logging
import os
import threading
import time
import warnings
from collections.abc import Callable, Iterable
from pathlib import Path

from watchdog.events import (
    DirCreatedEvent,
    DirDeletedEvent,
    DirMovedEvent,
    FileCreatedEvent,
    FileDeletedEvent,
    FileModifiedEvent,
    FileMovedEvent,
    FileSystemEvent,
    FileSystemEventHandler,
)
from watchdog.observers import Observer
from watchdog.observers.api import BaseObserver

from ..base.logs import ReportedOnce
from . import trust
from .liveness import LOCK_PREFIX, LOCK_SUFFIX
from .workspace import FILE_NAME as NAME_FILE

log = logging.getLogger(__name__)

EVENTS_FILE = "events.jsonl"
# While the watcher is on, the rescan is only its back-up: space rescans so that they take at
# most 1/RESCAN_BUDGET of a core (10,000 folders: about 80 ms a rescan, one every 16 s).
RESCAN_BUDGET = 200
# The look (new folder names, the logs of new and live sessions): every LOOK_EVERY seconds, spaced so that it takes
# at most 1/LOOK_BUDGET of a core. A folder found after start is looked at for YOUNG seconds, or while it is live.
LOOK_EVERY = 2.0
LOOK_BUDGET = 20
YOUNG = 600.0
# Only changes to the tree. Without a filter inotify also reports every open and close, and
# reading a log would report it changed: the daemon would re-read every file forever.
WATCHED_EVENTS = [FileCreatedEvent, FileModifiedEvent, FileDeletedEvent, FileMovedEvent,
                  DirCreatedEvent, DirDeletedEvent, DirMovedEvent]


class Tree:
    """COPILOT_HOME/session-state as the daemon reads it: the logs in it now, and whether a path lies inside it."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self._root_text = str(self.root)
        self.real = self.root.resolve()

    def logs(self) -> set[Path]:
        """The session logs there now (none, said once, when the folder cannot be listed)."""
        try:
            return set(self.root.glob(f"*/{EVENTS_FILE}"))
        except OSError as exc:  # an unreadable COPILOT_HOME is waited for, not a reason to stop
            log.warning("cannot list %s (%s)", self.root, exc.strerror or exc)
            return set()

    def inside(self, path: Path) -> bool:
        """False (said once) for a log that resolves outside the tree."""
        text = os.fspath(path)  # strings: a Path's parent is a new Path
        folder = os.path.dirname(text)
        try:
            if (os.path.dirname(folder) or ".") == self._root_text \
                    and not (os.path.islink(folder) or os.path.islink(text)):
                inside = True  # a plain file in a plain folder of the root (the usual case: 2 lstat, not 8)
            else:
                inside = path.resolve().is_relative_to(self.real)
        except OSError:
            inside = False
        if not inside:
            trust.say_once(path, trust.leads_outside(path, self.root))
        return inside


class _Handler(FileSystemEventHandler):
    def __init__(self, discoverer: Discoverer) -> None:
        self._discoverer = discoverer

    def on_any_event(self, event: FileSystemEvent) -> None:
        for raw in (event.src_path, getattr(event, "dest_path", "")):
            if raw:
                self._discoverer.hint(Path(os.fsdecode(raw)), is_directory=event.is_directory)


class Discoverer:
    """Watches ``root`` (COPILOT_HOME/session-state) and says which logs and folders changed."""

    def __init__(self, root: Path, *, poll: bool = False, rescan_interval: float = 10.0,
                 clock=time.monotonic, live: Callable[[], Iterable[Path]] = tuple) -> None:
        self.root = Path(root)
        self._live = live  # the logs of the sessions now live (looked at closely)
        self.poll = poll
        self.rescan_interval = rescan_interval
        self._clock = clock
        self._cond = threading.Condition()
        self._woken = False  # wake() was called: the next wait() returns at once
        self._files: set[Path] = set()
        self._lock_dirs: set[Path] = set()
        self._known: dict[str, tuple[int, int]] = {}  # events file -> (inode, size) at the last rescan
        self._observer: BaseObserver | None = None
        self._next_rescan = 0.0
        self._scan_seconds = 0.0  # how long the last walk over the folders took
        self._next_look = 0.0
        self._listed_at: tuple[int, int] | None = None  # (inode, mtime in ns) of the root when it was last listed
        self._young: dict[str, float] = {}  # the log of a folder found after start -> when it was found
        self.looks = 0
        self._warned_missing = False
        self._reported = ReportedOnce()
        self.rescans = 0
        self._problem: str | None = None  # what keeps it from seeing sessions, for an operator to fix
        self._watch_error: str | None = None
        self._waiting: str | None = None  # the folder it waits for: no Copilot CLI has written one yet

    def problem(self) -> str | None:
        """Why sessions cannot be seen now (an unreadable folder, a watch that failed), or None."""
        return self._problem or self._watch_error

    def waiting(self) -> str | None:
        """'waiting for <folder>' while COPILOT_HOME (or its session-state) does not exist yet: normal on a machine
        where the Copilot CLI never ran, nothing to fix; None once it exists."""
        return self._waiting

    def _set_problem(self, message: str | None) -> None:
        self._problem = message

    # ---------------------------------------------------------------- hints

    def hint(self, path: Path, *, is_directory: bool = False) -> None:
        """Note a changed path from the watcher (or a test)."""
        name = path.name
        with self._cond:
            if name == EVENTS_FILE:
                self._files.add(path)
            elif (name.startswith(LOCK_PREFIX) and name.endswith(LOCK_SUFFIX)) or name == NAME_FILE:
                self._lock_dirs.add(path.parent)  # its locks, or its name (workspace.yaml), changed
            elif is_directory and path.parent == self.root:
                # A new session folder: its log may be written before the watch on it exists.
                self._files.add(path / EVENTS_FILE)
                self._lock_dirs.add(path)
            else:
                return
            self._cond.notify()

    def wait(self, timeout: float) -> tuple[set[Path], set[Path]]:
        """Block up to ``timeout`` for hints; return (changed event files, folders whose locks or name changed)."""
        now = self._clock()
        if now >= self._next_rescan:
            self.rescan()
        elif now >= self._next_look:
            self.look()
        with self._cond:
            if not self._files and not self._lock_dirs and not self._woken:
                due = min(self._next_rescan, self._next_look)
                self._cond.wait(min(timeout, max(0.0, due - self._clock())))
            self._woken = False
            files, dirs = self._files, self._lock_dirs
            self._files, self._lock_dirs = set(), set()
        return files, dirs

    # ---------------------------------------------------------------- look

    def look(self) -> None:
        """Hint the folders new since the last listing, and the logs of new and live sessions that changed."""
        started = self._clock()
        work_started = time.monotonic()
        self.looks += 1
        try:
            self._look(started)
        finally:
            spent = time.monotonic() - work_started
            self._next_look = started + max(LOOK_EVERY, spent * LOOK_BUDGET)

    def _look(self, now: float) -> None:
        try:
            st = os.stat(self.root)
            stamp = (st.st_ino, st.st_mtime_ns)
            # A folder made in the same clock tick as the last listing leaves the stamp as it was: list again while
            # the stamp is that recent.
            if stamp != self._listed_at or time.time_ns() - st.st_mtime_ns < 2_000_000_000:
                self._listed_at = stamp
                known, young, root = self._known, self._young, os.fspath(self.root)
                for name in os.listdir(root):  # a name whose log no rescan has seen (the rescan lists what is there)
                    path = os.path.join(root, name, EVENTS_FILE)
                    if path not in known and path not in young:
                        young[path] = now
        except OSError:
            return  # the rescan says why, once
        for path, found in list(self._young.items()):
            if now - found > YOUNG:
                del self._young[path]
        closely = set(self._young)
        closely.update(map(os.fspath, self._live()))
        changed = []
        known = self._known
        for path in closely:
            try:
                st = os.stat(path, follow_symlinks=False)
            except OSError:  # not written yet, or gone (the rescan and the watcher say so)
                continue
            key = (st.st_ino, st.st_size)
            if known.get(path) != key:
                known[path] = key
                changed.append(path)
        if changed:
            with self._cond:
                self._files.update(map(Path, changed))
                self._cond.notify()

    # ---------------------------------------------------------------- rescan

    def rescan(self) -> None:
        """Stat every session log; hint those that are new, grew, shrank, changed inode or vanished."""
        started = self._clock()
        interval = self.rescan_interval if self.rescan_interval > 0 else 3600.0
        self._next_rescan = started + interval
        self.rescans += 1
        self._scan_seconds = 0.0
        self._rescan()
        if self._observer is not None:
            self._next_rescan = started + max(interval, self._scan_seconds * RESCAN_BUDGET)

    def _list_root(self) -> list[os.DirEntry] | None:
        """The session folders, or None (and the problem set, said once) when the root cannot be listed."""
        try:
            with os.scandir(self.root) as listing:
                entries = list(listing)
        except OSError as exc:
            if exc.errno in (errno.ENOENT, errno.ENOTDIR):
                self._missing()
            else:
                message = f"cannot read {self.root}: {exc.strerror or exc}"
                self._set_problem(message)
                self._reported.report(self.root, f"{message}; will retry")
            return None
        self._set_problem(None)
        self._waiting = None
        self._reported.recovered(self.root)
        if self._warned_missing:
            log.info("%s appeared; following it", self.root)
            self._warned_missing = False
        return entries

    def _missing(self) -> None:
        """No session-state folder: normal before the CLI's first session (COPILOT_HOME may not exist yet either:
        a daemon installed on every machine, most of them never used), unless COPILOT_HOME cannot be read."""
        if not self._warned_missing:
            log.warning("%s does not exist yet; waiting for the Copilot CLI to create it", self.root)
            self._warned_missing = True
        home = self.root.parent
        try:
            os.stat(home)
        except (FileNotFoundError, NotADirectoryError):
            self._set_problem(None)
            self._waiting = (f"waiting for {home}: no Copilot CLI has run here yet "
                             "(or COPILOT_HOME names another folder)")
        except OSError as exc:
            self._set_problem(f"cannot read {home}: {exc.strerror or exc}")
        else:
            self._set_problem(None)
            self._waiting = f"waiting for {self.root}: no Copilot CLI session yet"

    def _rescan(self) -> None:
        scan_started = time.monotonic()
        entries = self._list_root()
        if entries is None:
            return
        if self._observer is None and not self.poll:
            self._start_observer()
        # Plain strings while walking: a Path is built only for what changed (10,000 folders, every 10 s).
        seen: dict[str, tuple[int, int]] = {}
        changed: list[str] = []
        known = self._known
        suffix = os.sep + EVENTS_FILE
        for entry in entries:
            path = entry.path + suffix
            try:
                st = os.stat(path, follow_symlinks=False)
            except FileNotFoundError:
                continue
            except OSError as exc:
                self._reported.report(Path(path), f"cannot look at {path}: {exc.strerror or exc}; will retry")
                continue
            if self._reported.paths:
                self._reported.recovered(Path(path))
            key = (st.st_ino, st.st_size)
            seen[path] = key
            if known.get(path) != key:
                changed.append(path)
        changed.extend(p for p in known if p not in seen)
        self._known = seen
        self._scan_seconds = time.monotonic() - scan_started
        if changed:
            with self._cond:
                self._files.update(map(Path, changed))
                self._cond.notify()

    # ---------------------------------------------------------------- lifecycle

    def _start_observer(self) -> None:
        # watchdog's inotify observer warns (a RuntimeWarning of kilobytes, on stderr) when a folder is
        # re-created under a recursive watch; the watch is renewed all the same, so the warning says nothing.
        warnings.filterwarnings("ignore", category=RuntimeWarning, module=r"watchdog\.observers\.")
        observer = Observer()
        try:
            observer.schedule(_Handler(self), str(self.root), recursive=True, event_filter=WATCHED_EVENTS)
            observer.start()
        except OSError as exc:
            # inotify watch limit, unsupported filesystem...: rescans alone still find everything, late.
            _close_quietly(observer)
            error = (f"cannot watch {self.root} ({exc.strerror or exc}); changes are found only by rescans "
                     f"every {self.rescan_interval:.0f} s: raise fs.inotify.max_user_watches, or run with --poll")
            if error != self._watch_error:
                log.warning("%s", error)
            self._watch_error = error
            self._observer = None
            return
        if self._watch_error is not None:
            log.info("watching %s again", self.root)
            self._watch_error = None
        self._observer = observer

    def start(self) -> None:
        """Start watching (or, when the root does not exist yet, wait for it)."""
        self.rescan()

    def wake(self) -> None:
        """End the current ``wait()`` now, or the next one if none is under way (the daemon was asked to stop)."""
        with self._cond:
            self._woken = True
            self._cond.notify_all()

    def stop(self) -> None:
        """Stop the watcher thread."""
        observer, self._observer = self._observer, None
        if observer is not None:
            observer.stop()
            observer.join(timeout=5)
        with self._cond:
            self._cond.notify_all()



def _close_quietly(observer) -> None:
    """Release what an observer that failed to start holds (watchdog's inotify reader thread among it)."""
    try:
        observer.stop()
        if observer.is_alive():
            observer.join(timeout=5)
    except Exception:  # noqa: BLE001 - it never started properly: nothing more to release
        pass
    for emitter in list(getattr(observer, "emitters", ())):
        emitter.stop()
