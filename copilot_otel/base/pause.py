"""A /metrics render runs alone: the reader stops at its next line or event while one renders (issue 25).

The reader, the exporter and the renders share the GIL. While a session floods the reader with
events, a render that had to take turns with it took ten times its own time (p99 over a second).
The reader's loops and the exporter test ``PAUSE.renders`` once per line, event, metric update or
batch: an attribute test while no render runs, a wait while one does. The waits end when the
renders have run for MAX_WAIT, so that a render that hangs cannot stop the reader.

The /metrics handler holds the pause from the moment it has the request until the body is in its
hands, so that the event loop that hands the render to a worker thread and takes the body back
does not take turns with the reader either (each turn cost a GIL hand-off, 1-15 ms on a busy
machine).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

MAX_WAIT = 1.0  # how long the renders may hold the reader, s, from the first of them


class ReaderPause:
    """Counts the renders running; the reader waits at a checkpoint until there are none."""

    def __init__(self) -> None:
        self.renders = 0
        self._since = 0.0  # when the renders running now began (monotonic)
        self._none = threading.Condition()

    @contextmanager
    def rendering(self) -> Iterator[None]:
        """While this runs, the reader waits at its next checkpoint."""
        with self._none:
            if not self.renders:
                self._since = time.monotonic()
            self.renders += 1
        try:
            yield
        finally:
            with self._none:
                self.renders -= 1
                if not self.renders:
                    self._none.notify_all()

    def wait(self) -> None:
        """Block until no render runs, or the renders have held the reader for MAX_WAIT."""
        with self._none:
            self._none.wait_for(lambda: not self.renders, max(0.0, self._since + MAX_WAIT - time.monotonic()))


PAUSE = ReaderPause()
