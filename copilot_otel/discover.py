"""Finds session logs that changed: one recursive watchdog watch, backed by a periodic rescan.

The watcher makes changes visible within milliseconds; the rescan makes a missed
inotify event, an exhausted watch limit or a network filesystem cost a delay, never
data. Both feed one set of "look at this path" hints that the daemon drains.
"""

from __future__ import annotations

import logging
import os
import threading
import time
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

from .liveness import LOCK_PREFIX, LOCK_SUFFIX
from .logs import ReportedOnce

log = logging.getLogger(__name__)

EVENTS_FILE = "events.jsonl"
# While the watcher is on, the rescan is only its back-up: space rescans so that they take at
# most 1/RESCAN_BUDGET of a core (10,000 folders: about 80 ms a rescan, one every 16 s).
RESCAN_BUDGET = 200
# Only changes to the tree. Without a filter inotify also reports every open and close, and
# reading a log would report it changed: the daemon would re-read every file forever.
WATCHED_EVENTS = [FileCreatedEvent, FileModifiedEvent, FileDeletedEvent, FileMovedEvent,
                  DirCreatedEvent, DirDeletedEvent, DirMovedEvent]


class _Handler(FileSystemEventHandler):
    def __init__(self, discoverer: "Discoverer") -> None:
        self._discoverer = discoverer

    def on_any_event(self, event: FileSystemEvent) -> None:
        for raw in (event.src_path, getattr(event, "dest_path", "")):
            if raw:
                self._discoverer.hint(Path(os.fsdecode(raw)), is_directory=event.is_directory)


class Discoverer:
    """Watches ``root`` (COPILOT_HOME/session-state) and says which logs and folders changed."""

    def __init__(self, root: Path, *, poll: bool = False, rescan_interval: float = 10.0,
                 clock=time.monotonic) -> None:
        self.root = Path(root)
        self.poll = poll
        self.rescan_interval = rescan_interval
        self._clock = clock
        self._cond = threading.Condition()
        self._files: set[Path] = set()
        self._lock_dirs: set[Path] = set()
        self._known: dict[str, tuple[int, int]] = {}  # events file -> (inode, size) at the last rescan
        self._observer = None
        self._next_rescan = 0.0
        self._scan_seconds = 0.0  # how long the last walk over the folders took
        self._warned_missing = False
        self._reported = ReportedOnce()
        self.rescans = 0

    # ---------------------------------------------------------------- hints

    def hint(self, path: Path, *, is_directory: bool = False) -> None:
        """Note a changed path from the watcher (or a test)."""
        name = path.name
        with self._cond:
            if name == EVENTS_FILE:
                self._files.add(path)
            elif name.startswith(LOCK_PREFIX) and name.endswith(LOCK_SUFFIX):
                self._lock_dirs.add(path.parent)
            elif is_directory and path.parent == self.root:
                # A new session folder: its log may be written before the watch on it exists.
                self._files.add(path / EVENTS_FILE)
                self._lock_dirs.add(path)
            else:
                return
            self._cond.notify()

    def wait(self, timeout: float) -> tuple[set[Path], set[Path]]:
        """Block up to ``timeout`` for hints; return (changed event files, folders whose locks changed)."""
        if self._clock() >= self._next_rescan:
            self.rescan()
        with self._cond:
            if not self._files and not self._lock_dirs:
                self._cond.wait(min(timeout, max(0.0, self._next_rescan - self._clock())))
            files, dirs = self._files, self._lock_dirs
            self._files, self._lock_dirs = set(), set()
        return files, dirs

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

    def _rescan(self) -> None:
        try:
            present = self.root.is_dir()
        except OSError as exc:  # COPILOT_HOME lost its search bit, say: said once, retried
            self._reported.report(self.root, f"cannot look at {self.root}: {exc.strerror or exc}; will retry")
            return
        if not present:
            if not self._warned_missing:
                log.warning("%s does not exist yet; waiting for the Copilot CLI to create it", self.root)
                self._warned_missing = True
            return
        if self._warned_missing:
            log.info("%s appeared; following it", self.root)
            self._warned_missing = False
        if self._observer is None and not self.poll:
            self._start_observer()
        # Plain strings while walking: a Path is built only for what changed (10,000 folders, every 10 s).
        seen: dict[str, tuple[int, int]] = {}
        changed: list[str] = []
        known = self._known
        scan_started = time.monotonic()
        try:
            entries = list(os.scandir(self.root))
        except OSError as exc:
            self._reported.report(self.root, f"cannot list {self.root}: {exc.strerror or exc}; will retry")
            return
        self._reported.recovered(self.root)
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
        observer = Observer()
        try:
            observer.schedule(_Handler(self), str(self.root), recursive=True, event_filter=WATCHED_EVENTS)
            observer.start()
        except OSError as exc:
            # inotify watch limit, unsupported filesystem...: rescans alone still find everything.
            log.warning("file watching unavailable on %s (%s); relying on rescans every %.0f s",
                        self.root, exc, self.rescan_interval)
            observer = None
        self._observer = observer

    def start(self) -> None:
        """Start watching (or, when the root does not exist yet, wait for it)."""
        self.rescan()

    def stop(self) -> None:
        """Stop the watcher thread."""
        observer, self._observer = self._observer, None
        if observer is not None:
            observer.stop()
            observer.join(timeout=5)
        with self._cond:
            self._cond.notify_all()

