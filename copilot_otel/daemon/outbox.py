"""What a pass of the daemon's reader read, held until it is handed to the export queues: the metric updates, the
spans in order, then the checkpoint positions (each behind its own spans, as the exporter needs).

At start-up thousands of logs bring a few spans each; a metrics update, an export, a durable write and a checkpoint
commit per log cost more than reading it (issue 25): so they are counted and handed over once a batch of spans waits
and at the end of the pass.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable

from ..metrics.registry import Metrics
from ..model.logs import LogRecord
from ..model.pipeline import Outputs
from ..model.records import SpanRecord
from ..state.checkpoint import Checkpoint, CheckpointError, FilePosition
from .exports import ExportSide

log = logging.getLogger("copilot_otel.daemon.daemon")  # its lines read as the daemon's, as before

# Seconds between two snapshots of the metric totals committed with the checkpoint (metrics/totals.py): one costs a
# collect of the session metrics (8 ms with 10 tools, 76 ms with 100, on a loaded 2-core machine); positions read in
# between wait for the next one (a restart then re-reads up to this much).
TOTALS_EVERY = 1.0


class Outbox:
    """Counts what the reader read and hands its spans, log records and positions to the export queues."""

    def __init__(self, exports: ExportSide, checkpoint: Checkpoint, metrics: Metrics, *,
                 stopping: Callable[[], bool]) -> None:
        self.exports = exports
        self.checkpoint = checkpoint
        self.metrics = metrics
        self.stopping = stopping
        self._outputs: list[Outputs] = []
        self.spans: list[SpanRecord] = []
        self._logs: list[LogRecord] = []
        self._markers: dict[str, FilePosition] = {}
        # Logs a --backfill began to send (their history), or that began a new generation: their rows are committed
        # before any span of theirs is queued, so that a run after this one goes on with them (Follower.commit_now).
        self._first_rows: dict[str, FilePosition] = {}
        self._counted = False  # metric updates applied since the last totals were queued
        self._next_totals = 0.0  # monotonic time the next totals may be taken

    @property
    def waiting(self) -> int:
        """Spans queued for export, here and in the export queue."""
        return self.exports.queue.depth + len(self.spans)

    def first_row(self, position: FilePosition) -> None:
        """A backfill or a new generation began: its position is committed before its spans are queued."""
        self._first_rows[position.path] = position

    def outputs(self, out: Outputs) -> None:
        """Queue what a read produced: its metric updates and its spans."""
        self._outputs.append(out)
        if out.logs and self.exports.log_queue is not None:
            self._logs.extend(out.logs)
        self.queue_spans(out.spans)

    def queue_spans(self, spans: list[SpanRecord]) -> None:
        """Queue spans for export (sent at the end of the pass, or once a batch is waiting)."""
        self.spans.extend(spans)
        queue = self.exports.queue
        if len(self.spans) >= min(queue.batch, queue.max_spans):
            self.send()

    def marker(self, position: FilePosition) -> None:
        """Queue a checkpoint position, committed once everything queued before it is exported."""
        self._markers[position.path] = position

    def send(self, *, final: bool = False) -> None:
        """Count the metrics of what was queued, then hand its spans and positions to the exporter: the positions
        with the metric totals that cover them, taken at most every TOTALS_EVERY seconds (and at the ``final`` one),
        the positions read meanwhile held back until then."""
        self._commit_first_rows()
        self._count()
        hold, totals = self._totals(final)
        markers = {} if hold else self._markers
        if self.spans or markers or self._logs:
            positions: Iterable[FilePosition] = markers.values()
            exports = self.exports
            if exports.shared is not None and exports.log_queue is not None:  # both queues carry the same positions
                positions, totals = exports.shared.number(positions, totals)
                exports.log_queue.put(self._logs, positions, totals=totals, should_stop=self.stopping)
                self._logs = []
            # Emptied once queued: the export queue gauge (queue and outbox) never reads 0 while spans wait.
            exports.queue.put(self.spans, positions, totals=totals, should_stop=self.stopping)
            self.spans = []
            if not hold:
                self._markers = {}

    def _commit_first_rows(self) -> None:
        if self._first_rows:
            try:
                self.checkpoint.commit(list(self._first_rows.values()))
                self._first_rows = {}
            except CheckpointError as exc:  # the disk is full, say: said, and tried again before the next spans
                log.warning("%s", exc)

    def _count(self) -> None:
        if self._outputs:
            outputs, self._outputs = self._outputs, []
            self._counted = True
            try:
                self.metrics.apply_all(outputs)
            except Exception:  # a metric bug must not stop the reader
                log.exception("cannot count the metrics of what was read from %d log(s)", len(outputs))

    def _totals(self, final: bool) -> tuple[bool, bytes | None]:
        """(hold the positions back, the totals to commit with them)."""
        if self._markers and self._counted:
            now = time.monotonic()
            if final or now >= self._next_totals:
                # The totals now are those of everything read up to the positions queued below: committed with them.
                totals, self._counted, self._next_totals = self.metrics.totals(), False, now + TOTALS_EVERY
                return False, totals
            return True, None  # a position is committed only with totals that cover it
        return False, None
