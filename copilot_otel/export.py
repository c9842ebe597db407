"""The export queue: spans out to the sink with retry and backoff, then the checkpoint commit.

Spans and checkpoint markers share one FIFO, so a marker is committed only once
every span queued before it was delivered. The queue holds at most
``max_spans``: past that, :meth:`put_spans` blocks and the reader stops reading
ahead instead of dropping anything.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from typing import Callable

from .checkpoint import Checkpoint, FilePosition
from .records import SpanRecord
from .sinks import ExportError, SpanSink

log = logging.getLogger(__name__)


class ExportQueue:
    """A stoppable exporter thread fed by the reader."""

    def __init__(self, sink: SpanSink, checkpoint: Checkpoint | None, *, max_spans: int = 20_000,
                 batch: int = 512, initial_backoff: float = 0.5, max_backoff: float = 30.0,
                 on_exported: Callable[[int], None] = lambda n: None,
                 on_failed: Callable[[int], None] = lambda n: None,
                 on_commit: Callable[[], None] = lambda: None) -> None:
        self.sink = sink
        self.checkpoint = checkpoint
        self.max_spans = max_spans
        self.batch = batch
        self.initial_backoff = initial_backoff
        self.max_backoff = max_backoff
        self._on_exported, self._on_failed, self._on_commit = on_exported, on_failed, on_commit
        self._items: deque = deque()
        self._queued_spans = 0
        self._cond = threading.Condition()
        self._stopping = False
        self._busy = False
        self._thread = threading.Thread(target=self._run, name="copilot-otel-export", daemon=True)
        self.healthy = True
        self.blocked = False  # a producer waits for room (back-pressure): it is paused, not hung

    @property
    def depth(self) -> int:
        """Spans waiting for export."""
        return self._queued_spans

    def start(self) -> None:
        """Start the exporter thread."""
        self._thread.start()

    def put_spans(self, spans: list[SpanRecord], *, should_stop: Callable[[], bool] = lambda: False) -> None:
        """Queue spans; block while the queue is full (unless stopping)."""
        if not spans:
            return
        with self._cond:
            while self._queued_spans >= self.max_spans and not self._stopping and not should_stop():
                self.blocked = True
                self._cond.wait(0.2)
            self.blocked = False
            self._items.append(spans)
            self._queued_spans += len(spans)
            self._cond.notify_all()

    def offer_spans(self, spans: list[SpanRecord]) -> int:
        """Queue spans without ever blocking the caller; return how many were dropped (queue full)."""
        if not spans:
            return 0
        with self._cond:
            if self._queued_spans >= self.max_spans:
                return len(spans)
            self._items.append(spans)
            self._queued_spans += len(spans)
            self._cond.notify_all()
        return 0

    def put_marker(self, position: FilePosition) -> None:
        """Queue a checkpoint position, committed after every span queued before it."""
        with self._cond:
            self._items.append(position)
            self._cond.notify_all()

    def flush(self, timeout: float) -> bool:
        """Wait until everything queued so far is exported and committed."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._items or self._busy:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._cond.wait(min(remaining, 0.1))
        return True

    def stop(self, timeout: float = 5.0) -> bool:
        """Flush for up to ``timeout`` seconds, then stop; True if nothing was left behind."""
        flushed = self.flush(timeout)
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        if self._thread.is_alive():
            self._thread.join(timeout=self.max_backoff + 1)
        return flushed

    def _take(self) -> tuple[list[SpanRecord], list[FilePosition]] | None:
        with self._cond:
            while not self._items and not self._stopping:
                self._cond.wait(0.5)
            if not self._items:
                return None
            spans: list[SpanRecord] = []
            markers: list[FilePosition] = []
            while self._items and len(spans) < self.batch:
                item = self._items[0]
                if isinstance(item, list):
                    spans.extend(item)
                else:
                    markers.append(item)
                self._items.popleft()
            self._busy = True
            return spans, markers

    def _run(self) -> None:
        while True:
            taken = self._take()
            if taken is None:
                return
            spans, markers = taken
            try:
                if not self._deliver(spans):
                    return  # stopping while the backend is down: the checkpoint stays behind
                self._commit(markers)
            finally:
                with self._cond:
                    self._queued_spans -= len(spans)
                    self._busy = False
                    self._cond.notify_all()

    def _deliver(self, spans: list[SpanRecord]) -> bool:
        backoff = self.initial_backoff
        while spans:
            try:
                self.sink.export(spans)
            except ExportError as exc:
                self.healthy = False
                self._on_failed(len(spans))
                log.warning("%s; retrying in %.1f s", exc, backoff)
                if not self._wait_to_retry(backoff):
                    return False
                backoff = min(backoff * 2, self.max_backoff)
                continue
            except Exception:  # a sink bug must not kill the exporter thread
                log.exception("span sink %s failed unexpectedly", self.sink.description)
                self._on_failed(len(spans))
                if not self._wait_to_retry(backoff):
                    return False
                backoff = min(backoff * 2, self.max_backoff)
                continue
            if not self.healthy:
                log.info("trace export to %s recovered", self.sink.description)
            self.healthy = True
            self._on_exported(len(spans))
            break
        return True

    def _wait_to_retry(self, seconds: float) -> bool:
        """Sleep before a retry; False once stop() was called (before or during the sleep)."""
        with self._cond:
            if not self._stopping:
                self._cond.wait(seconds)
            return not self._stopping

    def _commit(self, markers: list[FilePosition]) -> None:
        if not markers or self.checkpoint is None:
            return
        latest = {m.path: m for m in markers}
        try:
            self.checkpoint.commit(list(latest.values()))
            self._on_commit()
        except Exception:
            log.exception("checkpoint commit failed; positions will be committed with the next batch")
