"""Which logs the daemon leaves out as history unless --backfill: a log this state folder never saw whose last
event is older than its first start, and that was not written since (a restored home's, or the machine's before
copilot-otel); with --from-end, the logs there at the first start."""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

log = logging.getLogger("copilot_otel.daemon.daemon")  # its lines read as the daemon's, as before


class History:
    """The history rule for logs seen here first, and the count of those it left out (said once per pass)."""

    def __init__(self, *, first_start: float, started: float, skip: set[Path]) -> None:
        self.before_ns = int(first_start * 1e9)
        self.started = started  # a log last written before this is history: its events were not seen arriving
        self.skip = skip
        self.skipped = 0
        self._said = 0

    def of(self, path: Path, st: os.stat_result) -> dict:
        """The history arguments of Follower.start for the log ``path`` whose stat is ``st``."""
        # History is what was written before the first start: a log written to since (its file's time says so) is
        # followed whatever its events' timestamps say (a CLI whose clock is behind ours, or in 2001).
        return {"skip_history": path in self.skip, "history": st.st_mtime < self.started,
                "history_before_ns": self.before_ns if st.st_mtime_ns < self.before_ns else 0}

    def say(self) -> None:
        """Say how many logs were left out as history since it was last said."""
        if self.skipped != self._said:
            log.info("%d log(s) whose last event is older than this state folder's first start (%s), and not "
                     "written since, left out as history; --backfill exports them", self.skipped - self._said,
                     time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(self.before_ns / 1e9)))
            self._said = self.skipped
