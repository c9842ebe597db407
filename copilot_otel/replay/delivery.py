"""How a replay sends its batches.

:class:`RetryingSender` is the plain way (a failing request retried for the OTLP timeout, as the SDK's
exporters do). :class:`ReplaySender` is `copilot-otel replay`'s: at most ``rate`` spans a second,
waiting out a backend that refuses or throttles (gRPC RESOURCE_EXHAUSTED or UNAVAILABLE, HTTP
429 or 503, or down) with backoff, and recording each delivery in the ledger so that a re-run
continues after it. A batch that could not be delivered for ``give_up_after`` seconds in a row,
counted from the start of its first failed attempt, ends the replay (:class:`GaveUp`): as each
attempt ends within the OTLP timeout, that is at most one timeout late. What was delivered before
stays recorded. Both set aside spans the backend refuses for good (the dead-letter file) instead
of retrying them, and count spans it accepted and dropped all the same (OTLP partial success).
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable

from ..config import DEFAULT_GIVE_UP_AFTER
from ..delivery.queue import send_in_parts
from ..model.logs import LogRecord
from ..model.records import SpanRecord
from ..otlp.contract import EncodingSink, ExportError, Receipt, RecordSink, SpanSink
from ..otlp.retry import Backoff, RetryPolicy, retry_wait_reason
from .batches import Batch, ReplayStats
from .ledger import Ledger

log = logging.getLogger(__name__)

WARNINGS = 3  # refused batches that get a log line each; the summary counts the rest


SendBatch = Callable[[Batch, SpanSink, ReplayStats], None]  # sends one batch of a replay


class RetryingSender:
    """The parent's side of a replay: hands batches to the sink, sets refused spans aside, and retries
    a failing request for up to ``retry_for`` seconds (as the OTel SDK's exporters do) before giving up.
    Used as a ``SendBatch``."""

    def __init__(self, refused: Callable[[list[SpanRecord], str], None] | None, retry_for: float = 0.0,
                 retry: RetryPolicy = RetryPolicy()) -> None:
        self.refused = refused
        self.retry_for = retry_for
        self.retry = retry

    def __call__(self, batch: Batch, sink: SpanSink, stats: ReplayStats) -> None:
        """Deliver one batch (raises ExportError once retrying for ``retry_for`` seconds did not help)."""
        if batch.encoded:
            assert isinstance(sink, EncodingSink)  # replay_files encodes batches only for such a sink
            sink.write_encoded(batch.encoded)
        elif batch.records:
            self.export(sink, batch.records, stats)

    def export(self, sink: SpanSink, records: list[SpanRecord], stats: ReplayStats) -> None:
        failing_since: float | None = None
        attempt_started = time.monotonic()
        backoff = Backoff(self.retry)

        def progress(_part: list[SpanRecord], error: Exception | None) -> bool:
            nonlocal failing_since, attempt_started
            now = time.monotonic()
            if error is None:
                failing_since, attempt_started = None, now
                backoff.reset()
                return True
            failing_since = attempt_started if failing_since is None else failing_since
            if not isinstance(error, ExportError):
                raise error
            wait = backoff.next(error)
            if now - failing_since + wait > self.retry_for:
                raise error
            log.warning("%s; %s", error, retry_wait_reason(error, wait))
            time.sleep(wait)
            attempt_started = time.monotonic()
            return True

        send_in_parts(sink, records, reject=refuser(self.refused, stats), progress=progress, dropped=counter(stats))


def refuser(refused: Callable[[list[SpanRecord], str], None] | None,
            stats: ReplayStats) -> Callable[[list[SpanRecord], str], bool]:
    """``export.send_in_parts``'s ``reject``: spans refused for good go to ``refused`` (counted), else an
    ExportError."""

    def reject(spans: list[SpanRecord], reason: str) -> bool:
        if refused is None:
            raise ExportError(f"{len(spans)} span(s) refused: {reason}")
        refused(spans, reason)
        stats.refused += len(spans)
        return True

    return reject


def counter(stats: ReplayStats) -> Callable[[list[SpanRecord], Receipt], None]:
    """``export.send_in_parts``'s ``dropped``: count spans the backend accepted and dropped, and keep its message."""

    def dropped(_part: list[SpanRecord], receipt: Receipt) -> None:
        if receipt.rejected:
            stats.dropped += receipt.rejected
            stats.drop_message = receipt.message or stats.drop_message

    return dropped


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


class ReplaySender:
    """Sends batches: rate-limited, retried through refusals until ``give_up_after``, recorded in ``ledger``;
    spans refused for good go to ``refused`` (the dead-letter file). A ``SendBatch``."""

    def __init__(self, *, ledger: Ledger | None = None, identities: dict[str, str] | None = None,
                 sent: dict[str, int] | None = None, rate: float = 0.0,
                 give_up_after: float = DEFAULT_GIVE_UP_AFTER,
                 refused: Callable[[list[SpanRecord], str], None] | None = None,
                 on_delivered: Callable[[Batch], None] = lambda b: None,
                 on_waiting: Callable[[str, float], None] = lambda reason, seconds: None,
                 retry: RetryPolicy = RetryPolicy(), draw: Callable[[], float] | None = None,
                 clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep) -> None:
        self.ledger = ledger
        self.identities = identities or {}
        self.sent = dict(sent or {})  # log -> spans delivered, counting those of earlier runs
        self.limit = RateLimit(rate, clock=clock, sleep=sleep)
        self.give_up_after = give_up_after
        self.refused = refused
        self.on_delivered, self.on_waiting = on_delivered, on_waiting
        self._clock, self._sleep = clock, sleep
        self.retry = retry
        self._draw = draw if draw is not None else random.random  # the jitter's draws
        self.spans = 0  # delivered by this run
        self.retries = 0
        self.done: set[str] = set()
        self.refusals = 0  # batches the backend refused at least once

    def __call__(self, batch: Batch, sink: SpanSink, stats: ReplayStats) -> None:
        """Deliver one batch (or raise GaveUp), then record it."""
        self.limit.take(batch.spans)
        waits = _Waits(self)
        if batch.encoded:
            assert isinstance(sink, EncodingSink)  # replay_files encodes batches only for such a sink
            encoding = sink
            while not _attempt(lambda: encoding.write_encoded(batch.encoded), waits):
                pass
        elif batch.records:
            send_in_parts(sink, batch.records, reject=refuser(self.refused, stats), progress=waits.progress,
                    dropped=counter(stats))
        self.spans += batch.spans
        rows = []
        content = dict(batch.content)
        for path, count, last in batch.parts:
            self.sent[path] = self.sent.get(path, 0) + count
            if last:
                self.done.add(path)
            rows.append((path, content.get(path) or self.identities.get(path, ""), self.sent[path], last))
        if self.ledger is not None:
            self.ledger.record(rows)
        self.on_delivered(batch)


def _attempt(action: Callable[[], None], waits: _Waits) -> bool:
    """Run ``action``; False (after waiting) if it failed in a way worth another try."""
    try:
        action()
    except ExportError as exc:
        return waits.progress([], exc) and False
    return True


class _Waits:
    """One batch's failures: waits as the retry policy says (never past ``give_up_after``), GaveUp past it (counted
    from the start of the first failed attempt, so that the time that attempt took counts)."""

    def __init__(self, delivery: ReplaySender) -> None:
        self.delivery = delivery
        self.backoff = Backoff(delivery.retry, draw=delivery._draw)
        self.failing_since: float | None = None
        self.attempt_started = delivery._clock()

    def progress(self, _part: list[SpanRecord], error: Exception | None) -> bool:
        """``export.send_in_parts``'s ``progress``: True to try again after waiting, or raise GaveUp."""
        delivery = self.delivery
        now = delivery._clock()
        if error is None:
            self.failing_since, self.attempt_started = None, now
            self.backoff.reset()
            return True
        if not isinstance(error, ExportError):
            raise error  # a sink bug, not the backend
        first = self.failing_since is None
        if self.failing_since is None:
            self.failing_since = self.attempt_started
            delivery.refusals += 1
        failing_for = now - self.failing_since
        if failing_for >= delivery.give_up_after:
            raise GaveUp(f"{error} (for {failing_for:.0f} s)") from error
        wait = min(self.backoff.next(error), delivery.give_up_after - failing_for)
        if first and delivery.refusals <= WARNINGS:
            log.warning("%s; %s (giving up after %.0f s of refusals)%s", error, retry_wait_reason(error, wait),
                        delivery.give_up_after,
                        "; further refusals are counted, not logged" if delivery.refusals == WARNINGS else "")
        delivery.retries += 1
        delivery.on_waiting(str(error), wait)
        delivery._sleep(wait)
        self.attempt_started = delivery._clock()
        return True


class LogSender:
    """A replay's log records out through ``sink`` (OTEL_LOGS_EXPORTER=otlp): a failing request is retried with
    backoff for up to ``give_up_after`` seconds, then the replay stops (:class:`GaveUp`); records the backend
    refuses for good or accepts and drops are counted in ``lost`` (no file keeps them) and said."""

    def __init__(self, sink: RecordSink[LogRecord], give_up_after: float, retry: RetryPolicy = RetryPolicy()) -> None:
        self.sink = sink
        self.give_up_after = give_up_after
        self.retry = retry
        self.sent = 0
        self.lost = 0
        self.reason = ""  # why the last ones were lost

    def __call__(self, records: list[LogRecord]) -> None:
        """Deliver ``records`` (raises GaveUp once retrying for ``give_up_after`` seconds did not help)."""
        failing_since: float | None = None
        backoff = Backoff(self.retry)

        def progress(part: list[LogRecord], error: Exception | None) -> bool:
            nonlocal failing_since
            now = time.monotonic()
            if error is None:
                self.sent += len(part)
                failing_since = None
                backoff.reset()
                return True
            if not isinstance(error, ExportError):
                raise error
            failing_since = now if failing_since is None else failing_since
            wait = backoff.next(error)
            if now - failing_since + wait > self.give_up_after:
                raise GaveUp(f"the logs backend did not take {len(part)} log record(s): {error}")
            log.warning("%s; %s", error, retry_wait_reason(error, wait))
            time.sleep(wait)
            return True

        def reject(part: list[LogRecord], reason: str) -> bool:
            self.lost += len(part)
            self.reason = reason
            log.warning("the logs backend refused %d log record(s) for good: %s", len(part), reason)
            return True

        def dropped(_part: list[LogRecord], receipt: Receipt) -> None:
            if receipt.rejected:
                self.lost += receipt.rejected
                self.reason = receipt.message or "accepted and dropped (OTLP partial success)"

        send_in_parts(self.sink, records, reject=reject, progress=progress, dropped=dropped)
