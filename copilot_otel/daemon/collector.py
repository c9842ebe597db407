"""The cyclic garbage collector waits while the reader reads (issue 25).

A session that floods its log keeps the reader busy with reads of up to 4 MB, whose events, and the
spans queued behind them, are 100,000-200,000 objects alive at any moment. Each automatic collection
walked them all (20-150 ms, 1.5-2 s of a 9 s flood of 100,000 tool calls), holding every thread, a
/metrics scrape included; and it found almost nothing: the reader's objects die by reference count.
So the collector is off while the reader reads (a pass over changed files, and every pass after it
while a backlog lasts), and on between passes, when what a read made is gone; during a long backlog
the reader collects once every MAX_DEFERRAL, so that cycles cannot pile up without bound.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable

MAX_DEFERRAL = 30.0  # s the collector may stay off, from when a backlog began or from the last collection


class DeferredCollection:
    """Turns the process's cyclic garbage collector off while the reader reads, on when it rests."""

    def __init__(self, *, max_deferral: float = MAX_DEFERRAL, clock: Callable[[], float] = time.monotonic) -> None:
        self.max_deferral = max_deferral
        self._clock = clock
        self._since: float | None = None  # when the collector was last turned off or run (None: not ours to run)

    @property
    def deferred(self) -> bool:
        """Is the collector off, by us?"""
        return self._since is not None

    def reading(self, busy: bool) -> None:
        """Before a pass that reads (``busy``), and after each pass: ``busy`` if more waits to be read at once."""
        if not busy:
            self.resume()
            return
        now = self._clock()
        if self._since is None:
            if not gc.isenabled():
                return  # someone else turned it off: not ours to turn on
            gc.disable()
            self._since = now
        elif now - self._since >= self.max_deferral:
            gc.collect()
            self._since = now

    def resume(self) -> None:
        """The collector on again, if we turned it off."""
        if self._since is not None:
            self._since = None
            gc.enable()


class ReaderCollection:
    """The collector of a process whose daemon reader owns it: what start-up built, and once the history is read
    its objects, live as long as the process, so they are frozen out of the collector's reach (keeping full
    collections, 100-400 ms with 10,000 sessions, off scrapes); while the reader reads, collections wait."""

    def __init__(self, deferred: DeferredCollection | None = None) -> None:
        self.deferred = deferred or DeferredCollection()
        self._history = True  # the history is not read yet

    def start(self) -> None:
        """Before the first read: freeze what start-up built."""
        gc.collect()
        gc.freeze()

    def reading(self, busy: bool) -> None:
        """Before a pass that reads (``busy``): collections wait."""
        self.deferred.reading(busy)

    def rested(self, *, more: bool, read: bool) -> None:
        """After a pass: ``more`` waits to be read at once; the first pass that ``read`` nothing freezes the history."""
        self.deferred.reading(more)
        if self._history and not read:
            self._history = False
            gc.collect()
            gc.freeze()

    def stop(self) -> None:
        """The collector on again, if it waited."""
        self.deferred.resume()
