"""The spans of the sessions someone is looking at, for the web view's waterfall.

The daemon's reader keeps no finished span (they go to the exporter), and its models belong to
its thread. So the view follows a viewed session's log itself: a :class:`SessionTrace` has its
own tail and session model (the same pipeline as replay, with the daemon's content options, so
it shows exactly what the traces hold), keeps the finished spans as encoded JSON, and asks the
model for snapshots of the open ones. Reading a session the first time replays its file (a few
milliseconds for a typical log); later refreshes read only what was appended. A
:class:`TraceCache` keeps a few of them, least recently viewed dropped first, under a cap on
spans held in all.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections import OrderedDict
from pathlib import Path

import orjson

from . import attrs as A
from .config import DEFAULT_MAX_LINE_BYTES, ModelOptions
from .pipeline import Outputs, drive
from .records import STATUS_ERROR, STATUS_OK, SpanRecord
from .sessions import SessionModel
from .tail import FileTail

READ_BYTES = 8 << 20  # per read; a refresh reads until the end of the file
MAX_SESSIONS = 8  # traces kept at once
MAX_SPANS = 20_000  # finished spans kept over all traces (oldest dropped first): ~10 MB of JSON
IDLE_TTL = 300.0  # seconds a trace nobody asked for is kept
_tokens = itertools.count(1)
_STATUS = {STATUS_ERROR: "error", STATUS_OK: "ok"}


def span_json(span: SpanRecord, *, running: bool = False) -> dict:
    """A span as the page reads it: hex ids, times in ms since the epoch, attributes as exported."""
    attributes = {k: v for k, v in span.attributes.items() if k != A.COPILOT_RUNNING}
    return {
        "id": f"{span.span_id:016x}", "parent": f"{span.parent_span_id:016x}" if span.parent_span_id else None,
        "trace": f"{span.trace_id:032x}", "name": span.name, "start_ms": span.start_ns / 1e6,
        "end_ms": span.end_ns / 1e6, "status": _STATUS.get(span.status, "unset"), "message": span.status_message,
        "attrs": attributes, "running": running,
        "events": [{"name": e.name, "t_ms": e.time_ns / 1e6, "attrs": dict(e.attributes)} for e in span.events],
    }


def _encode(value) -> bytes:
    return orjson.dumps(value, default=str)


class SessionTrace:
    """One viewed session: its own tail and model, the finished spans so far (encoded), the open ones."""

    def __init__(self, path: Path, session_id: str, options: ModelOptions, *,
                 max_line_bytes: int = DEFAULT_MAX_LINE_BYTES) -> None:
        self.path = path
        self.session_id = session_id
        self._options = options
        self._tail = FileTail(path, max_line_bytes=max_line_bytes)
        self._lock = threading.Lock()
        self._reset()
        self.used = time.monotonic()
        self.gone = False

    def _reset(self) -> None:
        self.token = f"t{next(_tokens)}"  # changes when the spans start over (a truncated or replaced file)
        self._model = SessionModel(self.session_id, self._options, summaries=False, metrics=False)
        self._spans: list[bytes] = []
        self.dropped = 0  # spans dropped from the front to stay under the cap
        self.size = 0  # bytes read so far

    @property
    def held(self) -> int:
        """Finished spans held now."""
        return len(self._spans)

    def refresh(self) -> None:
        """Read what was appended to the log since the last refresh."""
        with self._lock:
            while True:
                result = self._tail.read(max_bytes=READ_BYTES)
                if result.gone or result.error:
                    self.gone = result.gone
                    return
                if result.restarted:
                    self._reset()
                if not result.items:
                    return
                out = drive(self._model, result.items, Outputs(), source=str(self.path), warn=lambda *a: None)
                self._spans.extend(_encode(span_json(span)) for span in out.spans)
                self.size = self._tail.offset

    def drop_oldest(self, count: int) -> None:
        """Forget the ``count`` oldest finished spans (the memory cap)."""
        with self._lock:
            count = min(count, len(self._spans))
            del self._spans[:count]
            self.dropped += count

    def snapshot(self, since: int = 0, token: str | None = None) -> tuple[bytes, tuple[str, int]]:
        """JSON of the finished spans from index ``since`` (all, if ``token`` is another generation's)
        and of the open spans now; and (token, index) to ask from next time."""
        with self._lock:
            self.used = time.monotonic()
            reset = token != self.token
            start = self.dropped if reset else max(since, self.dropped)
            finished = self._spans[start - self.dropped:]
            open_spans = [span_json(s, running=bool(s.attributes.get(A.COPILOT_RUNNING)))
                          for s in self._model.open_spans()]
            end = self.dropped + len(self._spans)
            head = {"token": self.token, "reset": reset, "from": start, "next": end, "dropped": self.dropped,
                    "last_event_ms": self._model.last_event_ns / 1e6, "open": open_spans}
            body = _encode(head)[:-1] + b',"spans":[' + b",".join(finished) + b"]}"
            return body, (self.token, end)


class TraceCache:
    """The traces of recently viewed sessions: at most ``max_sessions``, ``max_spans`` finished spans in all."""

    def __init__(self, options: ModelOptions, *, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
                 max_sessions: int = MAX_SESSIONS, max_spans: int = MAX_SPANS, idle_ttl: float = IDLE_TTL) -> None:
        self.options = options
        self.max_line_bytes = max_line_bytes
        self.max_sessions = max_sessions
        self.max_spans = max_spans
        self.idle_ttl = idle_ttl
        self._traces: OrderedDict[Path, SessionTrace] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._traces)

    def trace(self, path: Path, session_id: str) -> SessionTrace:
        """The session's trace, read up to the end of its log now (call from a worker thread)."""
        with self._lock:
            trace = self._traces.get(path)
            if trace is None:
                trace = self._traces[path] = SessionTrace(path, session_id, self.options,
                                                          max_line_bytes=self.max_line_bytes)
            self._traces.move_to_end(path)
            trace.used = time.monotonic()
        trace.refresh()
        self._trim(keep=trace)
        return trace

    def sweep(self) -> None:
        """Drop the traces nobody asked for within the idle time."""
        self._trim()

    def _trim(self, keep: SessionTrace | None = None) -> None:
        with self._lock:
            cutoff = time.monotonic() - self.idle_ttl
            for path, trace in list(self._traces.items()):
                if trace is not keep and (trace.used < cutoff or trace.gone or len(self._traces) > self.max_sessions):
                    del self._traces[path]
            held = sum(t.held for t in self._traces.values())
            for trace in list(self._traces.values()):  # whole traces, least recently viewed first
                if held <= self.max_spans:
                    break
                if trace is not keep:
                    held -= trace.held
                    del self._traces[trace.path]
            if held > self.max_spans and keep is not None:
                keep.drop_oldest(held - self.max_spans)  # the viewed one alone is too big: its oldest spans go
