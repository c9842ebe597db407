"""The one loop that feeds a session model, used by every front end (daemon, replay, inspect, SDK).

``drive`` applies decoded lines to a model and gathers what comes out into :class:`Outputs`:
spans, metric updates, and what was wrong with the input (rejected lines by reason, ends
out of order by event type), each bad line logged with its source and line number. It
holds the one guard that turns a bug of the model into a skipped event, never a crash.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Protocol

from msgspec import Struct, field

from ..decode.events import DecodeError, Event
from ..decode.lines import INTERNAL_ERROR, MAX_DEPTH
from ..vocab import DUPLICATE_ID, END_INCOMPLETE, OUT_OF_RANGE, TOO_DEEP
from .logs import LogRecord
from .records import EMPTY_STEP, MetricUpdate, SpanRecord, Step
from .sessions import SessionModel

log = logging.getLogger(__name__)

Warn = Callable[..., None]  # logging.Logger.warning's signature


class Pause(Protocol):
    """Where a reader gives way to another thread (the daemon's: base.pause.PAUSE, while a /metrics render runs)."""

    @property
    def renders(self) -> int: ...  # how many renders run now: the reader waits while any does

    def wait(self) -> None: ...


class Outputs(Struct):
    """What driving a model produced since the caller last took it."""

    spans: list[SpanRecord] = field(default_factory=list)
    metrics: list[MetricUpdate] = field(default_factory=list)
    logs: list[LogRecord] = field(default_factory=list)  # made only when the model's options ask for them
    rejected: dict[str, int] = field(default_factory=dict)  # reason -> lines skipped
    out_of_order: dict[str, int] = field(default_factory=dict)  # event type -> ends of something not open
    events: dict[str, int] = field(default_factory=dict)  # event type -> events applied
    newest_ns: int = 0  # timestamp of the newest event applied
    ahead: int = 0  # events stamped more than an hour ahead of the reader's clock (kept: a clock is wrong)
    clamped: dict[str, int] = field(default_factory=dict)  # reason -> values clamped or cut to be usable
    # how (truncated, replaced, edited) -> logs that started a new generation: bytes already read changed
    restarts: dict[str, int] = field(default_factory=dict)

    def add(self, step: Step) -> None:
        """Fold in one step's spans and metric updates (its anomalies are counted by ``drive``)."""
        if step is not EMPTY_STEP:
            self.spans.extend(step.spans)
            self.metrics.extend(step.metrics)
            self.logs.extend(step.logs)


def drive(model: SessionModel, items: Iterable[Event | DecodeError], out: Outputs, *, source: str,
          warn: Warn = log.warning, floor: int = -1, pause: Pause | None = None) -> Outputs:
    """Apply every decoded line to ``model``, gathering into ``out``; return ``out``.

    ``pause``: where to give way to another thread between lines (the daemon hands in base.pause.PAUSE).
    ``floor``: lines before this byte offset were delivered before (a restart, a rebuilt
    model); they are applied, to rebuild what is open, but neither counted nor exported again.
    """
    rejected = out.rejected
    events = out.events
    feed = model.feed
    for item in items:
        if pause is not None and pause.renders:  # a /metrics render runs: let it run alone (base/pause.py)
            pause.wait()
        if type(item) is DecodeError:
            if item.offset >= floor:
                rejected[item.reason] = rejected.get(item.reason, 0) + 1
                warn("%s:%d: skipped line (%s): %s", source, item.line, item.reason, item.detail)
            continue
        try:
            step = feed(item)
        except Exception:  # a model bug must cost one event, never the daemon or the export
            log.exception("%s:%d: could not apply %s", source, item.line, item.type)
            rejected[INTERNAL_ERROR] = rejected.get(INTERNAL_ERROR, 0) + 1
            continue
        if item.offset < floor:
            continue
        if item.cut:  # kept, its deepest values read as "..." (decode/lines.py)
            out.clamped[TOO_DEEP] = out.clamped.get(TOO_DEEP, 0) + 1
            warn("%s:%d: %s nested deeper than %d levels: kept, what lies deeper read as \"...\" (%s)", source,
                 item.line, item.type, MAX_DEPTH, TOO_DEEP)
        kind = item.type
        events[kind] = events.get(kind, 0) + 1
        if item.timestamp_ns > out.newest_ns:
            out.newest_ns = item.timestamp_ns
        if step is EMPTY_STEP:
            continue
        out.spans.extend(step.spans)
        out.metrics.extend(step.metrics)
        if step.logs:
            out.logs.extend(step.logs)
        for anomaly in step.anomalies:
            warn("%s:%d: %s", source, item.line, anomaly.describe())
            if anomaly.kind == DUPLICATE_ID:
                rejected[DUPLICATE_ID] = rejected.get(DUPLICATE_ID, 0) + 1
            elif anomaly.kind == OUT_OF_RANGE:
                out.clamped[OUT_OF_RANGE] = out.clamped.get(OUT_OF_RANGE, 0) + 1
            else:
                out.out_of_order[anomaly.event_type] = out.out_of_order.get(anomaly.event_type, 0) + 1
    return out


def finish(model: SessionModel, out: Outputs, reason: str = END_INCOMPLETE) -> Outputs:
    """The session is over: close what is still open into ``out``."""
    out.add(model.finish(reason))
    return out
