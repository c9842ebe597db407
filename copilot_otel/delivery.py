"""How a replay sends its batches: at most ``rate`` spans a second, waiting out a backend that
refuses or throttles (gRPC RESOURCE_EXHAUSTED or UNAVAILABLE, HTTP 429 or 503, or down) with
backoff, and recording each delivery in the ledger so that a re-run continues after it.

A batch that could not be delivered for ``give_up_after`` seconds in a row ends the replay
(:class:`GaveUp`); what was delivered before stays recorded.
"""

from __future__ import annotations

import logging
import time
from typing import Callable

from .config import DEFAULT_GIVE_UP_AFTER
from .ledger import Ledger
from .replay import Batch
from .sinks import ExportError, SpanSink

log = logging.getLogger(__name__)

INITIAL_BACKOFF = 0.5
MAX_BACKOFF = 30.0
WARNINGS = 3  # refused batches that get a log line each; the summary counts the rest


class GaveUp(RuntimeError):
    """A batch could not be delivered for ``give_up_after`` seconds; the message says the last reason."""


class RateLimit:
    """A token bucket: at most ``rate`` spans a second on average, a second's worth at once."""

    def __init__(self, rate: float, *, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.rate = rate
        self._clock, self._sleep = clock, sleep
        self._tokens = rate
        self._last = clock()

    def take(self, spans: int) -> None:
        """Wait until ``spans`` may go."""
        if self.rate <= 0 or spans <= 0:
            return
        now = self._clock()
        self._tokens = min(max(self.rate, spans), self._tokens + (now - self._last) * self.rate)
        self._last = now
        if self._tokens < spans:
            self._sleep((spans - self._tokens) / self.rate)
            self._last = self._clock()
            self._tokens = spans
        self._tokens -= spans


class Delivery:
    """Sends batches: rate-limited, retried through refusals until ``give_up_after``, recorded in ``ledger``."""

    def __init__(self, *, ledger: Ledger | None = None, identities: dict[str, str] | None = None,
                 sent: dict[str, int] | None = None, rate: float = 0.0,
                 give_up_after: float = DEFAULT_GIVE_UP_AFTER, on_delivered: Callable[[Batch], None] = lambda b: None,
                 on_waiting: Callable[[str, float], None] = lambda reason, seconds: None,
                 clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep) -> None:
        self.ledger = ledger
        self.identities = identities or {}
        self.sent = dict(sent or {})  # log -> spans delivered, counting those of earlier runs
        self.limit = RateLimit(rate, clock=clock, sleep=sleep)
        self.give_up_after = give_up_after
        self.on_delivered, self.on_waiting = on_delivered, on_waiting
        self._clock, self._sleep = clock, sleep
        self.spans = 0  # delivered by this run
        self.retries = 0
        self.done: set[str] = set()
        self.refusals = 0  # batches the backend refused at least once

    def __call__(self, batch: Batch, sink: SpanSink) -> None:
        """Deliver one batch (or raise GaveUp), then record it."""
        self.limit.take(batch.spans)
        self._send(batch, sink)
        self.spans += batch.spans
        rows = []
        for path, count, last in batch.parts:
            self.sent[path] = self.sent.get(path, 0) + count
            if last:
                self.done.add(path)
            rows.append((path, self.identities.get(path, ""), self.sent[path], last))
        if self.ledger is not None:
            self.ledger.record(rows)
        self.on_delivered(batch)

    def _send(self, batch: Batch, sink: SpanSink) -> None:
        backoff = INITIAL_BACKOFF
        failing_since = None
        while True:
            try:
                batch.export(sink)
                if failing_since is not None:
                    log.debug("the trace backend accepted the batch after %.1f s", self._clock() - failing_since)
                return
            except ExportError as exc:
                now = self._clock()
                if failing_since is None:
                    failing_since = now
                    self.refusals += 1
                    if self.refusals <= WARNINGS:
                        log.warning("%s; waiting and retrying (giving up after %.0f s of refusals)%s", exc,
                                    self.give_up_after,
                                    "; further refusals are counted, not logged" if self.refusals == WARNINGS else "")
                if now - failing_since >= self.give_up_after:
                    raise GaveUp(f"{exc} (for {now - failing_since:.0f} s)") from exc
                wait = min(backoff, self.give_up_after - (now - failing_since))
                self.retries += 1
                self.on_waiting(str(exc), wait)
                self._sleep(wait)
                backoff = min(backoff * 2, MAX_BACKOFF)
