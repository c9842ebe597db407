"""Plain output records of the session model: finished spans, metric updates, anomalies, steps."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from msgspec import Struct, field
from msgspec.structs import replace

from ..base.hashes import blake2b
from ..vocab import DUPLICATE_ID, OUT_OF_RANGE, Metric

if TYPE_CHECKING:  # genai.py makes MetricUpdates: imported for the checker only
    from .genai import GenAi

# OTel span kinds, as their OTLP enum values.
KIND_INTERNAL = 1
KIND_CLIENT = 3

STATUS_UNSET = 0
STATUS_OK = 1
STATUS_ERROR = 2


class SpanEvent(Struct, frozen=True):
    """A timestamped annotation on a span (e.g. an autopilot nudge)."""

    name: str
    time_ns: int
    attributes: Mapping[str, Any] = field(default_factory=dict)


class SpanRecord(Struct, frozen=True):
    """One finished span, ready to be encoded for any exporter."""

    trace_id: int
    span_id: int
    parent_span_id: int | None
    name: str
    kind: int
    start_ns: int
    end_ns: int
    attributes: Mapping[str, Any]
    status: int = STATUS_UNSET
    status_message: str = ""
    events: tuple[SpanEvent, ...] = ()
    links: tuple[tuple[int, int], ...] = ()  # (trace id, span id) of related spans in other traces


# What one metric update may add: int64's range, as the docs promise for every integer. A value beyond it (a
# 400-digit token count) cannot even be made a float; one just below it keeps a counter finite for 2^970 updates.
INT64_LIMIT = float((1 << 63) - 1)


def clamped_value(value: Any) -> float | None:
    """None when ``value`` is within int64's range (a metric update may carry it as it is), else what it is
    counted as: 0 for NaN, +-INT64_LIMIT for the rest (a 400-digit integer, infinity)."""
    if -INT64_LIMIT <= value <= INT64_LIMIT:
        return None
    if value != value:
        return 0.0
    return INT64_LIMIT if value > 0 else -INT64_LIMIT


def shown(value: Any) -> str:
    """A number for a log line: a 400-digit one shortened."""
    if isinstance(value, int) and value.bit_length() > 3000:  # str() of a huge int is slow (and refused past 4300)
        return f"an integer of {value.bit_length()} bits"
    text = str(value)
    return text if len(text) <= 40 else f"{text[:20]}... ({len(text)} digits)"


class MetricUpdate(Struct, frozen=True):
    """Add ``value`` to a counter, or observe it in a histogram (``metric`` says which).

    ``labels`` are the label values in the order metrics/registry.py declares the metric's labels; ``exemplar`` is the
    (trace id, span id) of the span it measures, which the exposition links the series to.
    """

    metric: Metric | GenAi  # GenAi: an instrument of the OTLP push alone
    labels: tuple[str, ...] = ()
    value: float = 1.0
    exemplar: tuple[int, int] | None = None


class Anomaly(Struct, frozen=True):
    """An event the model counted but could not use: a duplicate id, or an end whose start is not open."""

    kind: str  # vocab.DUPLICATE_ID, vocab.OUT_OF_ORDER or vocab.OUT_OF_RANGE (then event_type: the metric, event_id:
    # the value, shortened)
    event_type: str
    event_id: str

    def describe(self) -> str:
        """One sentence for the log line that names the file and line."""
        if self.kind == DUPLICATE_ID:
            return f"skipped line ({DUPLICATE_ID}): event id {self.event_id} seen before"
        if self.kind == OUT_OF_RANGE:
            return f"{self.event_type}: {self.event_id} is beyond int64; clamped ({OUT_OF_RANGE})"
        return f"{self.event_type} out of order: it ends something that is not open; counted, not exported"


class Step(Struct, frozen=True):
    """What applying one event (or finishing a session) produced."""

    spans: tuple[SpanRecord, ...] = ()
    metrics: tuple[MetricUpdate, ...] = ()
    anomalies: tuple[Anomaly, ...] = ()
    logs: tuple[Any, ...] = ()  # logs.LogRecord, made only when ModelOptions.logs is on


EMPTY_STEP = Step()


def _digest_int(text: str, size: int) -> int:
    value = int.from_bytes(blake2b(text.encode("utf-8", "surrogatepass"), digest_size=size).digest(), "big")
    return value or 1  # an all-zero id is invalid in OTel


def trace_id_for(session_id: str, interaction_id: str) -> int:
    """Deterministic 128-bit trace id of one interaction."""
    return _digest_int(f"trace\x00{session_id}\x00{interaction_id}", 16)


def span_id_for(session_id: str, event_id: str) -> int:
    """Deterministic 64-bit span id from the session and the span's first event."""
    return _digest_int(f"span\x00{session_id}\x00{event_id}", 8)


def _salt(value: int, generation: int, size: int) -> int:
    digest = blake2b(value.to_bytes(size, "big") + generation.to_bytes(8, "big"), digest_size=size).digest()
    return int.from_bytes(digest, "big") or 1


def salted_ids(trace_id: int, span_id: int, generation: int) -> tuple[int, int]:
    """(trace id, span id) as ``salted`` gives them to a span of file generation ``generation`` (0 stays 0: none)."""
    if not generation:
        return trace_id, span_id
    return (_salt(trace_id, generation, 16) if trace_id else 0), (_salt(span_id, generation, 8) if span_id else 0)


def salted(record: SpanRecord, generation: int) -> SpanRecord:
    """The record with the ids of file generation ``generation`` (0: the record itself).

    A log truncated or replaced under the daemon starts a new generation: its spans get ids of
    their own, so that no id is ever exported twice with different content.
    """
    if not generation:
        return record
    return replace(
        record, trace_id=_salt(record.trace_id, generation, 16), span_id=_salt(record.span_id, generation, 8),
        parent_span_id=None if record.parent_span_id is None else _salt(record.parent_span_id, generation, 8),
        links=tuple((_salt(t, generation, 16), _salt(s, generation, 8)) for t, s in record.links))
