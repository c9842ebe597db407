"""The order the daemon's reader reads changed logs in, pass after pass: a round robin with a backlog.

Each changed file gets one read of at most follow.READ_BYTES per pass, so a session that writes fast (or a flood)
delays the others by one read, not by its backlog. New hints first, then the backlog; a pass stops after
PASS_SECONDS, so a new session waits one pass at most.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection
from pathlib import Path

TICK = 0.2  # seconds between housekeeping passes (idle confirmation, liveness)
# A pass reads for about this long at most, then the rest waits in the backlog: new hints (a new session) are
# taken up within a pass even while thousands of logs are read at start.
PASS_SECONDS = 0.5


class Rounds:
    """The backlog (files read up to their byte budget with more waiting, or not reached within a pass's time:
    read again next round, in this order, after what is new) and one pass's reads."""

    def __init__(self) -> None:
        self.backlog: dict[Path, None] = {}
        self.held = False  # the last pass left the backlog for the exporter to catch up

    def __contains__(self, path: Path) -> bool:
        return path in self.backlog

    def wait(self) -> float:
        """How long the next pass may wait for a change: not at all while a backlog can be read."""
        return 0.0 if self.backlog and not self.held else TICK

    def more(self, path: Path) -> None:
        """``path`` has more waiting: read it again next round."""
        self.backlog[path] = None

    def drop(self, path: Path) -> None:
        """``path`` is not read any more."""
        self.backlog.pop(path, None)

    def moved(self, old: Path, path: Path) -> None:
        """The log at ``old`` is followed at ``path`` now: its place in the backlog goes with it."""
        if self.backlog.pop(old, False) is None:
            self.backlog[path] = None

    def take(self, files: set[Path], followed: Collection[Path]) -> tuple[list[Path], int]:
        """This pass's reads, the backlog emptied into them: (paths in order, how many of them are new hints)."""
        backlog, self.backlog = self.backlog, {}
        # Paths not followed yet first: a log moved from a followed path is taken up there before the old
        # path is found gone (and its session ended).
        # parts: Path's order, compared in C. A hinted path waiting in the backlog is taken up front too.
        queue = sorted(files, key=lambda p: (p in followed, p.parts))
        fresh = len(queue)
        queue += [p for p in backlog if p not in files] if files else backlog
        return queue, fresh

    def read(self, queue: list[Path], fresh: int, read: Callable[[Path], None], *, behind: Callable[[], bool],
             stopping: Callable[[], bool]) -> None:
        """``read`` the paths of ``queue`` for PASS_SECONDS at most; the backlog waits while the exporter is
        ``behind`` (new hints do not). What is not reached is read first in the next pass."""
        deadline = time.monotonic() + PASS_SECONDS
        done = 0
        self.held = False
        for path in queue:
            if stopping() or (done and time.monotonic() >= deadline):
                break
            if done >= fresh and behind():
                self.held = True  # the exporter is behind: the backlog waits, new hints do not
                break
            done += 1
            read(path)
        if done < len(queue):  # not reached this pass: first in the next, before those read once already
            self.backlog = dict.fromkeys(queue[done:]) | self.backlog
