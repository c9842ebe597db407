"""The export queue: spans out to the sink with retry and backoff, then the checkpoint commit.

Spans and checkpoint markers share one FIFO, so a marker is committed only once every span
queued before it was delivered. The queue holds at most ``max_spans`` spans: past that,
:meth:`put` blocks and the reader stops reading ahead instead of dropping anything.
Markers are coalesced, one per file between two puts of spans, so they stay bounded too.

A batch holds at most ``batch`` spans, however many one put brought. A request the sink finds
too large, or that the destination refuses for good, is halved until it passes or the refused
spans are found; those go to the dead-letter file and the queue moves on. What was written is made durable
(``sink.sync``) before the checkpoint commit that covers it. Spans a backend accepted and dropped all the same
(OTLP partial success) are counted and said: it does not say which, so there is nothing to set aside or send again.

At stop, the queue flushes for a while, then abandons the request in flight (``sink.abort``, when the
sink has one): the checkpoint stays behind what the backend confirmed.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from typing import Generic, Protocol, TypeVar, cast

from msgspec import Struct, field

from ..base.pause import PAUSE
from ..base.redact import redact
from ..model.records import SpanRecord
from ..otlp.contract import ExportError, Receipt, RecordSink, RejectedError
from ..otlp.retry import Backoff, RetryPolicy, retry_wait_reason
from ..state.checkpoint import FilePosition
from .deadletter import DeadLetter

R = TypeVar("R")  # what a queue carries: SpanRecord, or model.logs.LogRecord

log = logging.getLogger(__name__)

COMMIT_RETRY = 1.0  # seconds between attempts to commit positions a failed commit left behind
JOIN_AFTER_ABORT = 5.0  # seconds for the exporter thread to end once its request in flight was abandoned


class Committer(Protocol):
    """Where delivered positions are committed: the Checkpoint, or one lane of a shared one (state/lanes.py)."""

    def commit(self, positions: list[FilePosition], totals: bytes | None = None) -> None: ...


class _Segment(Struct, Generic[R]):
    """Spans in order, then the positions that may be committed once they are delivered."""

    spans: list[R] = field(default_factory=list)
    markers: dict[str, FilePosition] = field(default_factory=dict)
    totals: bytes | None = None  # the metric totals as of these markers (committed with them)


class ExportQueue(Generic[R]):
    """A stoppable exporter thread fed by the reader (of spans, or of log records)."""

    def __init__(self, sink: RecordSink[R], checkpoint: Committer | None, *, max_spans: int = 20_000,
                 batch: int = 512, retry: RetryPolicy = RetryPolicy(),
                 dead_letter: DeadLetter | None = None,
                 on_exported: Callable[[int], None] = lambda n: None,
                 on_failed: Callable[[int], None] = lambda n: None,
                 on_commit: Callable[[], None] = lambda: None,
                 on_dead_lettered: Callable[[int], None] = lambda n: None,
                 on_backend_dropped: Callable[[int], None] = lambda n: None,
                 signal: str = "trace", item: str = "span") -> None:
        self.sink = sink
        self.signal, self.item = signal, item  # what it exports, for what it says: trace/span, log/log record
        self.checkpoint = checkpoint
        self.max_spans = max_spans
        self.batch = batch
        self.retry = retry
        self.dead_letter = dead_letter
        self._on_exported, self._on_failed, self._on_commit = on_exported, on_failed, on_commit
        self._on_dead_lettered, self._on_backend_dropped = on_dead_lettered, on_backend_dropped
        self._segments: deque[_Segment[R]] = deque()
        self._queued_spans = 0
        self._uncommitted: dict[str, FilePosition] = {}  # positions a failed commit left behind
        self._uncommitted_totals: bytes | None = None  # and the totals that go with them
        self._next_commit_retry = 0.0
        self._cond = threading.Condition()
        self._stopping = False
        self._busy = False
        self._thread = threading.Thread(target=self._run, name="copilot-otel-export", daemon=True)
        self.healthy = True
        self.blocked = False  # a producer waits for room (back-pressure): it is paused, not hung
        self.commit_error: str | None = None  # why the checkpoint cannot be committed now
        self.dropped = 0  # refused spans that could not be kept (no dead-letter file)
        self.last_error: str | None = None  # why the last attempt failed, while failing
        self.backend_dropped = 0  # spans the backend accepted and dropped (OTLP partial success)
        self.backend_message: str | None = None  # what it said of the last ones

    @property
    def depth(self) -> int:
        """Spans waiting for export."""
        return self._queued_spans

    @property
    def markers(self) -> int:
        """Checkpoint positions waiting behind spans (at most one per file between two puts of spans)."""
        with self._cond:
            return sum(len(segment.markers) for segment in self._segments)

    def notes(self) -> list[str]:
        """What /healthz should say about the export: failing, paused, spans refused, commits failing."""
        notes = []
        if self.blocked or not self.healthy:
            paused = "; reading paused" if self.blocked else ""
            notes.append(f"{self.signal} export failing, {self.depth} {self.item}s and {self.markers} checkpoint "
                         f"position(s) queued{paused}" + (f"; last: {self.last_error}" if self.last_error else ""))
        if self.dead_letter is not None and self.dead_letter.spans:
            notes.append(f"{self.dead_letter.spans} span(s) refused by the trace backend, kept in "
                         f"{self.dead_letter.path}; last: {self.dead_letter.last_reason}")
        if self.backend_dropped:
            notes.append(f"{self.backend_dropped} {self.item}(s) accepted and dropped by the {self.signal} backend "
                         "(OTLP partial success; it does not say which); last: "
                         f"{self.backend_message or 'no reason given'}")
        if self.commit_error:
            notes.append(f"checkpoint not committed: {self.commit_error}")
        return notes

    def start(self) -> None:
        """Start the exporter thread."""
        self._thread.start()

    def _append(self, spans: list[R]) -> None:
        last = self._segments[-1] if self._segments else None
        if last is not None and not last.markers:
            last.spans.extend(spans)
        else:
            self._segments.append(_Segment(list(spans)))
        self._queued_spans += len(spans)

    def put(self, spans: list[R], markers: Iterable[FilePosition] = (), *, totals: bytes | None = None,
            should_stop: Callable[[], bool] = lambda: False) -> None:
        """Queue spans (blocking while the queue is full, unless stopping), then checkpoint positions, each
        committed once every span queued before it is delivered (a position replaces an earlier one of the same
        file that waits behind the same spans): one wake-up of the exporter for both. ``totals``: the metric
        totals that match these positions, committed in the same transaction."""
        with self._cond:
            if spans:
                while self._queued_spans >= self.max_spans and not self._stopping and not should_stop():
                    self.blocked = True
                    self._cond.wait(0.2)
                self.blocked = False
                self._append(spans)
            for position in markers:
                self._mark(position)
            if totals is not None:
                if not self._segments:
                    self._segments.append(_Segment())
                self._segments[-1].totals = totals
            self._cond.notify_all()

    def offer_spans(self, spans: list[R]) -> int:
        """Queue spans without ever blocking the caller; return how many were dropped (queue full)."""
        if not spans:
            return 0
        with self._cond:
            if self._queued_spans >= self.max_spans:
                return len(spans)
            self._append(spans)
            self._cond.notify_all()
        return 0

    def _mark(self, position: FilePosition) -> None:
        if not self._segments:
            self._segments.append(_Segment())
        self._segments[-1].markers[position.path] = position

    def flush(self, timeout: float, *, while_failing: bool = True) -> bool:
        """Wait until everything queued so far is exported and committed (without ``while_failing``, give up
        as soon as the last attempt failed: a backend that is down will not take the rest in time)."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._segments or self._busy:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or not (while_failing or self.healthy):
                    return False
                self._cond.wait(min(remaining, 0.1))
        return True

    def stop(self, timeout: float = 5.0) -> bool:
        """Flush for up to ``timeout`` seconds (not at all while the export is failing), then stop, abandoning a
        request still in flight (its spans stay behind the checkpoint); True if nothing was left behind."""
        flushed = self.flush(timeout, while_failing=False)
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        abort = getattr(self.sink, "abort", None)
        deadline = time.monotonic() + JOIN_AFTER_ABORT
        while self._thread.is_alive() and time.monotonic() < deadline:
            if abort is not None:  # again each turn: a request may have started after the last one
                abort()
            self._thread.join(timeout=0.05)
        return flushed

    def _take(self) -> tuple[list[R], dict[str, FilePosition], bytes | None] | None:
        with self._cond:
            while not self._segments and not self._stopping:
                if (self._uncommitted or self._uncommitted_totals is not None) \
                        and time.monotonic() >= self._next_commit_retry:
                    self._busy = True
                    return [], {}, None
                self._cond.wait(0.5)
            if not self._segments:
                return None
            spans: list[R] = []
            markers: dict[str, FilePosition] = {}
            totals = None
            while self._segments and len(spans) < self.batch:
                segment = self._segments[0]
                room = self.batch - len(spans)
                if len(segment.spans) > room:  # a long put is taken a batch at a time
                    spans.extend(segment.spans[:room])
                    del segment.spans[:room]
                    break
                spans.extend(segment.spans)
                markers.update(segment.markers)
                totals = segment.totals if segment.totals is not None else totals
                self._segments.popleft()
            self._busy = True
            return spans, markers, totals

    def _run(self) -> None:
        while True:
            taken = self._take()
            if taken is None:
                return
            spans, markers, totals = taken
            if PAUSE.renders:  # a /metrics render runs: let it run alone (pause.py)
                PAUSE.wait()
            done = False
            try:
                if spans and not self._deliver(spans):
                    return  # stopping while the backend is down: the checkpoint stays behind
                self._commit(markers, totals)
                done = True
            finally:
                with self._cond:
                    if done or not spans:
                        self._queued_spans -= len(spans)
                    # else: left behind, and still counted in ``depth`` (what a stop says was not exported)
                    self._busy = False
                    self._cond.notify_all()

    def _deliver(self, spans: list[R]) -> bool:
        """Deliver ``spans`` in order, retrying with backoff; False if stopped first."""
        backoff = Backoff(self.retry)

        def failed(part: list[R], exc: Exception | None) -> bool:
            if exc is None:  # a part was delivered
                if not self.healthy:
                    log.info("%s export to %s recovered", self.signal, self.sink.description)
                self.healthy, self.last_error = True, None
                self._on_exported(len(part))
                backoff.reset()
                return True
            if self._stopping:
                return False  # abandoned at stop (or failed meanwhile): the checkpoint stays behind it
            wait = backoff.next(exc)
            if not isinstance(exc, RejectedError):
                self.healthy = False
                self.last_error = redact(str(exc)) or type(exc).__name__
                self._on_failed(len(part))
                if isinstance(exc, ExportError):
                    log.warning("%s; %s", exc, retry_wait_reason(exc, wait))
                else:
                    log.error("span sink %s failed unexpectedly; retrying in %.1f s", self.sink.description,
                              wait, exc_info=exc)
            return self._wait_to_retry(wait)

        return send_in_parts(self.sink, spans, reject=self._reject, progress=failed, dropped=self._dropped)

    def _dropped(self, _part: list[R], receipt: Receipt) -> None:
        """Count spans the backend accepted and dropped (the sink logged them)."""
        if receipt.rejected:
            self.backend_dropped += receipt.rejected
            self.backend_message = receipt.message or None
            self._on_backend_dropped(receipt.rejected)

    def _reject(self, spans: list[R], reason: str) -> bool:
        """Set refused spans aside; False if they could not be kept (retried later: nothing is lost)."""
        if self.dead_letter is None:
            log.error("%d %s(s) refused for good and dropped: %s", len(spans), self.item, reason)
            self.dropped += len(spans)
        else:
            try:
                self.dead_letter.add(cast(list[SpanRecord], spans), reason)  # only a span queue is given one
            except OSError as exc:
                log.warning("cannot keep %d refused span(s) in %s (%s); retrying", len(spans),
                            self.dead_letter.path, exc.strerror or exc)
                return False
        self._on_dead_lettered(len(spans))
        return True

    def _wait_to_retry(self, seconds: float) -> bool:
        """Sleep before a retry; False once stop() was called (before or during the sleep)."""
        deadline = time.monotonic() + seconds
        with self._cond:  # the reader's puts wake this too: only a stop or the deadline ends the wait
            while not self._stopping and (remaining := deadline - time.monotonic()) > 0:
                self._cond.wait(remaining)
            return not self._stopping

    def _commit(self, markers: dict[str, FilePosition], totals: bytes | None = None) -> None:
        """Make the delivered spans durable, then commit the positions behind them (and any left behind) with the
        metric totals that match them."""
        self._uncommitted.update(markers)
        if totals is not None:
            self._uncommitted_totals = totals
        if not self._uncommitted and self._uncommitted_totals is None:
            return
        if self.checkpoint is None:
            self._uncommitted.clear()
            self._uncommitted_totals = None
            return
        try:
            self.sink.sync()
            self.checkpoint.commit(list(self._uncommitted.values()), self._uncommitted_totals)
        except Exception as exc:  # noqa: BLE001 - a sync or commit that failed in any way is retried later
            self._next_commit_retry = time.monotonic() + COMMIT_RETRY
            reason = str(exc) or type(exc).__name__
            if reason != self.commit_error:
                log.warning("checkpoint not committed (%s); will retry: the positions are kept", reason)
            self.commit_error = reason
            return
        self._uncommitted.clear()
        self._uncommitted_totals = None
        if self.commit_error is not None:
            log.info("checkpoint commits work again")
            self.commit_error = None
        self._on_commit()


def send_in_parts(sink: RecordSink[R], spans: list[R], *, reject: Callable[[list[R], str], bool],
                  progress: Callable[[list[R], Exception | None], bool],
                  dropped: Callable[[list[R], Receipt], None] | None = None) -> bool:
    """Send ``spans`` through ``sink`` in order, as many requests as it takes.

    A request the sink finds too large, or refuses for good, is halved until it fits or until the
    refused spans are found one by one: those go to ``reject``, which returns False if it could
    not keep them (they are tried again), and the other spans of the request are delivered. After each part,
    ``progress(part, None)``; after a failure, ``progress(part, error)``, which returns False to give up (then so
    does this) or True to try that part again. A part delivered with a Receipt that says something goes to
    ``dropped`` first.
    """
    parts = deque([spans])
    while parts:
        part = parts[0]
        try:
            receipt = sink.export(part)
        except RejectedError as exc:
            if len(part) > 1:
                log.debug("%s; sending its %d spans in two halves", exc, len(part))
                half = len(part) // 2
                parts.popleft()
                parts.extendleft((part[half:], part[:half]))
                continue
            if reject(part, str(exc)):
                parts.popleft()
            elif not progress(part, exc):
                return False
            continue
        except Exception as exc:  # noqa: BLE001 - ExportError, or a sink bug: neither may kill the caller
            if not progress(part, exc):
                return False
            continue
        parts.popleft()
        if dropped is not None and receipt is not None and (receipt.rejected or receipt.message):
            dropped(part, receipt)
        if not progress(part, None):
            return False
    return True
