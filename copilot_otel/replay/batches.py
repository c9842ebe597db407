"""What the parts of a replay hand each other: a :class:`Batch` of spans to send, and :class:`ReplayStats`."""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

from msgspec import Struct, field

from ..model.records import MetricUpdate, SpanRecord

if TYPE_CHECKING:
    from ..model.logs import LogRecord
    from ..model.pipeline import Outputs


class Batch(Struct, frozen=True):
    """One batch's spans (as records, or encoded as request lines by a worker), and whose they are: (log,
    its spans in this batch, whether this batch ends the log) for each log, in order. A log whose spans
    all went in earlier batches ends in a part of 0 spans."""

    records: list[SpanRecord]
    encoded: bytes
    parts: tuple[tuple[str, int, bool], ...]
    content: tuple[tuple[str, str], ...] = ()  # (log, the content its spans so far were made from): ledger.py

    @property
    def spans(self) -> int:
        return sum(count for _path, count, _last in self.parts)



class ReplayStats(Struct):
    """What one replay read, rejected and exported."""

    files: int = 0
    events: int = 0
    spans: int = 0
    refused: int = 0  # spans the backend refused for good (kept in the dead-letter file, if any)
    dropped: int = 0  # spans the backend accepted and dropped all the same (OTLP partial success)
    drop_message: str = ""  # what it said of them, last
    rejected: Counter = field(default_factory=Counter)
    out_of_order: Counter = field(default_factory=Counter)
    clamped: Counter = field(default_factory=Counter)  # reason -> values clamped or cut to be usable
    metrics: list[MetricUpdate] | None = field(default_factory=list)  # None: the model makes none
    logs: list[LogRecord] | None = None  # the log records made, until sent (None: none are made)

    def add(self, other: ReplayStats) -> None:
        """Fold in the figures of another part of the same replay."""
        self.files += other.files
        self.events += other.events
        self.spans += other.spans
        self.refused += other.refused
        self.dropped += other.dropped
        self.drop_message = other.drop_message or self.drop_message
        self.rejected.update(other.rejected)
        self.out_of_order.update(other.out_of_order)
        self.clamped.update(other.clamped)
        if self.metrics is not None and other.metrics:
            self.metrics.extend(other.metrics)
        if self.logs is not None and other.logs:
            self.logs.extend(other.logs)

    def fold(self, out: Outputs) -> None:
        """Count what one session's drive produced (its spans are the caller's)."""
        self.events += sum(out.events.values())
        self.rejected.update(out.rejected)
        self.out_of_order.update(out.out_of_order)
        self.clamped.update(out.clamped)
        if self.metrics is not None:
            self.metrics.extend(out.metrics)
        if self.logs is not None:
            self.logs.extend(out.logs)

    def take_logs(self) -> list[LogRecord]:
        """The log records made since the last take (none when none are made)."""
        if not self.logs:
            return []
        logs, self.logs = self.logs, []
        return logs
