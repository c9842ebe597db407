"""Logging that a flood of bad input cannot turn into a flood of log lines."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path

log = logging.getLogger("copilot_otel")


class RateLimitedLog:
    """At most ``burst`` warnings per ``window`` seconds; the rest are summarised (as ``what``)."""

    def __init__(self, logger: logging.Logger, *, burst: int = 20, window: float = 60.0,
                 clock: Callable[[], float] = time.monotonic, what: str = "skipped line(s)") -> None:
        self._log, self._burst, self._window, self._clock, self._what = logger, burst, window, clock, what
        self._start = clock()
        self._count = 0
        self._suppressed = 0

    def warning(self, message: str, *args) -> None:
        """Log, unless this window's budget is spent."""
        now = self._clock()
        if now - self._start >= self._window:
            if self._suppressed:
                self._log.warning("%d more %s not logged in the last %.0f s", self._suppressed, self._what,
                                  self._window)
            self._start, self._count, self._suppressed = now, 0, 0
        if self._count < self._burst:
            self._count += 1
            self._log.warning(message, *args)
        else:
            self._suppressed += 1


class ReportedOnce:
    """Paths with a problem (unreadable, say): each warned about once, until it recovers."""

    def __init__(self, logger: logging.Logger = log) -> None:
        self._log = logger
        self.paths: set[Path] = set()

    def report(self, path: Path, message: str) -> None:
        """Warn, unless this path was already reported and has not recovered since."""
        if path not in self.paths:
            self.paths.add(path)
            self._log.warning("%s", message)

    def recovered(self, path: Path) -> None:
        """The path works again: say so, if it had been reported."""
        if path in self.paths:
            self.paths.discard(path)
            self._log.info("%s is readable again", path)
