"""The spans of the sessions someone is looking at, for the web view's waterfall.

The daemon's reader keeps no finished span (they go to the exporter), and its models belong to
its thread. So the view follows a viewed session's log itself: a :class:`SessionTrace` has its
own tail and session model (the same pipeline as replay, with the daemon's content options, so
it shows exactly what the traces hold), keeps the finished spans as encoded JSON, and asks the
model for snapshots of the open ones. Reading a session the first time replays its file (a few
milliseconds for a typical log); later refreshes read only what was appended. A
:class:`TraceCache` keeps a few of them, and those live views follow, under a cap on spans held
in all. An answer holds a :class:`Page` of them: the spans are shared with the trace, and its JSON
is made piece by piece as the client takes it.
"""

from __future__ import annotations

import bisect
import itertools
import secrets
import threading
import time
from collections import Counter, OrderedDict
from collections.abc import Iterator
from pathlib import Path

import orjson
from msgspec import Struct

from ..config import DEFAULT_MAX_LINE_BYTES
from ..logreader import LogReader, quiet
from ..model import attrs as A
from ..model.options import ModelOptions
from ..model.records import STATUS_ERROR, STATUS_OK, SpanRecord

READ_BYTES = 1 << 20  # per read (8 MiB of lines decoded at once held 60 MB more); a refresh reads to the end
MAX_SESSIONS = 8  # traces kept at once besides those a live view follows
MAX_BYTES = 32 << 20  # JSON of the finished spans kept over all traces (~50,000 spans without captured content)
PAGE_SPANS = 2_000  # finished spans in one answer at most (~1.3 MB of JSON); a client asks on from ``next``
PAGE_BYTES = 4 << 20  # and at most this much of their JSON (spans with captured content are larger)
IDLE_TTL = 300.0  # seconds a trace nobody asked for is kept
REREAD_EVERY = 30.0  # seconds between two re-reads of one trace from its start, to give back spans it dropped
_tokens = itertools.count(1)
_PROCESS = secrets.token_hex(4)  # a token names one generation in this process only: a client may outlive it
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
    # orjson's bytes keep the room they grew into (8 KiB for a 650-byte span): the copy is the size it says.
    return memoryview(orjson.dumps(value, default=str)).tobytes()


class Page(Struct, frozen=True):
    """What one answer holds: finished spans from one index on (shared with the trace, not copied) and
    the spans open now. ``head`` is the rest of the answer: token, reset, from, next, more, total,
    dropped, last_event_ms, open."""

    head: dict
    spans: list[bytes]

    @property
    def position(self) -> tuple[str, int]:
        """(token, index) to ask from next time."""
        return self.head["token"], self.head["next"]

    def split(self, max_spans: int = PAGE_SPANS, max_bytes: int = PAGE_BYTES) -> list[Page]:
        """This page as pages of at most ``max_spans`` finished spans and ``max_bytes`` of their JSON (but one
        span at least each; at least one page)."""
        first, total = self.head["from"], len(self.spans)
        starts = _starts(self.spans, max_spans, max_bytes)
        ends = [*starts[1:], total]
        return [Page({**self.head, "reset": self.head["reset"] and i == 0, "from": first + i,
                      "next": first + end, "more": self.head["more"] or end < total}, self.spans[i:end])
                for i, end in zip(starts, ends)]

    def size(self) -> int:
        """Bytes of its JSON."""
        return len(self._head()) + sum(map(len, self.spans)) + max(0, len(self.spans) - 1) + 2

    def pieces(self, chunk: int = 1 << 16) -> Iterator[bytes]:
        """Its JSON object, in pieces of about ``chunk`` bytes, made as they are asked for."""
        yield self._head()
        group: list[bytes] = []
        size = 0
        for i, span in enumerate(self.spans):
            if i:
                group.append(b",")
            group.append(span)
            size += len(span) + 1
            if size >= chunk:
                yield b"".join(group)
                group, size = [], 0
        group.append(b"]}")
        yield b"".join(group)

    def json(self) -> bytes:
        return b"".join(self.pieces())

    def _head(self) -> bytes:
        return _encode(self.head)[:-1] + b',"spans":['


def _starts(spans: list[bytes], max_spans: int, max_bytes: int) -> list[int]:
    """Where each page of ``spans`` begins, pages of at most ``max_spans`` spans and ``max_bytes`` (one span
    at least). Sums and searches in C: a stream's first answer may hold 50,000 spans."""
    max_spans = max(1, max_spans)
    by_count = list(range(0, len(spans), max_spans)) or [0]
    if all(sum(map(len, spans[i:i + max_spans])) <= max_bytes for i in by_count):
        return by_count  # the usual case: spans without captured content are small
    ends = list(itertools.accumulate(map(len, spans)))  # ends[i]: bytes of spans[:i + 1]
    starts, count = [0], len(spans)
    while True:
        first = starts[-1]
        before = ends[first - 1] if first else 0
        fits = bisect.bisect_right(ends, before + max_bytes, first)  # spans[first:fits] fit in max_bytes
        end = min(first + max_spans, max(fits, first + 1))
        if end >= count:
            return starts
        starts.append(end)


class SessionTrace:
    """One viewed session: its own tail and model, the finished spans so far (encoded), the open ones."""

    def __init__(self, path: Path, session_id: str, options: ModelOptions, *,
                 max_line_bytes: int = DEFAULT_MAX_LINE_BYTES) -> None:
        self.path = path
        self.session_id = session_id
        self._options = options
        self._max_line_bytes = max_line_bytes
        self._reader = LogReader(path, options, session_id=session_id, max_line_bytes=max_line_bytes,
                                 summaries=False, metrics=False, warn=quiet)
        self._lock = threading.Lock()
        self.token = ""
        self._reset()
        self.used = time.monotonic()
        self.gone = False
        self.reread_at = float("-inf")  # monotonic time of the last read again from the start
        self.reads = 1  # reads from the start so far

    def _reset(self, *, new_token: bool = True) -> None:
        if new_token:  # the spans start over (a truncated or replaced file): clients start over too
            self.token = f"{_PROCESS}-{next(_tokens)}"
        self._spans: list[bytes] = []
        self.held_bytes = 0  # of the finished spans' JSON held
        self.dropped = 0  # spans dropped from the front to stay under the cap
        self.dropped_bytes = 0
        self.size = 0  # bytes read so far

    @property
    def held(self) -> int:
        """Finished spans held now."""
        return len(self._spans)

    @property
    def total(self) -> int:
        """Finished spans so far, dropped ones included: the index after the last."""
        return self.dropped + len(self._spans)

    def refresh(self) -> None:
        """Read what was appended to the log since the last refresh."""
        with self._lock:
            self._refresh()

    def _refresh(self) -> None:
        while True:
            result, out = self._reader.read(max_bytes=READ_BYTES)
            if result.gone or result.error:
                self.gone = result.gone
                return
            if result.restarted:
                self._reset()
            if not result.items:
                return
            encoded = [_encode(span_json(span)) for span in out.spans]
            self._spans.extend(encoded)
            self.held_bytes += sum(map(len, encoded))
            self.size = self._reader.tail.offset

    def reread(self, *, unless_within: float = 0.0) -> None:
        """Read the log again from its start (unless it was within ``unless_within`` seconds), to hold the spans
        dropped under the cap. The spans come out the same (their ids are the events'), so the token stays,
        unless the file is no longer the one read."""
        with self._lock:
            if time.monotonic() - self.reread_at < unless_within:
                return  # another request did it meanwhile
            self._reader.start_over()
            self._reset(new_token=False)
            self.reread_at = time.monotonic()
            self.reads += 1
            self._refresh()

    def drop_oldest(self, nbytes: int) -> int:
        """Forget the oldest finished spans, ``nbytes`` of their JSON or a little more (the memory cap); the
        bytes freed."""
        with self._lock:
            count = freed = 0
            while count < len(self._spans) and freed < nbytes:
                freed += len(self._spans[count])
                count += 1
            del self._spans[:count]
            self.dropped += count
            self.dropped_bytes += freed
            self.held_bytes -= freed
            return freed

    def page(self, since: int = 0, token: str | None = None, limit: int | None = PAGE_SPANS,
             max_bytes: int | None = PAGE_BYTES) -> Page:
        """The finished spans from index ``since`` (from the first held, if ``token`` is another generation's),
        at most ``limit`` of them and ``max_bytes`` of their JSON (one at least; None: all), and the open spans."""
        with self._lock:
            self.used = time.monotonic()
            reset = token != self.token
            start = self.dropped if reset else max(since, self.dropped)
            end = self.total if limit is None else min(self.total, start + limit)
            finished = self._spans[start - self.dropped:end - self.dropped]
            if max_bytes is not None:
                starts = _starts(finished, len(finished), max_bytes)
                if len(starts) > 1:
                    finished = finished[:starts[1]]
                    end = start + starts[1]
            open_spans = [span_json(s, running=bool(s.attributes.get(A.COPILOT_RUNNING)))
                          for s in self._reader.live_model.open_spans()]
            head = {"token": self.token, "reset": reset, "from": start, "next": end, "more": end < self.total,
                    "total": self.total, "dropped": self.dropped,
                    "last_event_ms": self._reader.live_model.last_event_ns / 1e6,
                    "open": open_spans}
            return Page(head, finished)


class TraceCache:
    """The traces of viewed sessions, with at most ``max_bytes`` of finished spans' JSON in all.

    A trace that a live view follows (``follow``) keeps its tail and model for as long as the view is
    open, so the view is sent only what is new, never the session again. Past ``max_bytes``, the least
    recently viewed traces lose their oldest spans first (a client that asks for them again gets the
    trace read anew from its start, at most every ``reread_every`` seconds, when the trace fits under the
    cap; otherwise they are said to be dropped). Besides the followed ones, at most ``max_sessions`` traces
    are kept, none unviewed for ``idle_ttl`` seconds.
    """

    def __init__(self, options: ModelOptions, *, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
                 max_sessions: int = MAX_SESSIONS, max_bytes: int = MAX_BYTES, idle_ttl: float = IDLE_TTL,
                 reread_every: float = REREAD_EVERY) -> None:
        self.options = options
        self.max_line_bytes = max_line_bytes
        self.max_sessions = max_sessions
        self.max_bytes = max_bytes
        self.idle_ttl = idle_ttl
        self.reread_every = reread_every
        self._traces: OrderedDict[Path, SessionTrace] = OrderedDict()
        self._followed: Counter[Path] = Counter()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._traces)

    def held(self) -> int:
        """Bytes of finished spans' JSON held over all traces."""
        return sum(t.held_bytes for t in list(self._traces.values()))

    def follow(self, path: Path) -> None:
        """A live view follows this session: keep its trace until ``unfollow``."""
        with self._lock:
            self._followed[path] += 1

    def unfollow(self, path: Path) -> None:
        with self._lock:
            self._followed[path] -= 1
            if self._followed[path] <= 0:
                del self._followed[path]

    def trace(self, path: Path, session_id: str, *, since: int = 0, token: str | None = None) -> SessionTrace:
        """The session's trace, read up to the end of its log now (call from a worker thread). A client that
        asks from ``since`` (in ``token``'s generation) for spans dropped under the cap may get them read again."""
        with self._lock:
            trace = self._traces.get(path)
            if trace is None:
                trace = self._traces[path] = SessionTrace(path, session_id, self.options,
                                                          max_line_bytes=self.max_line_bytes)
            self._traces.move_to_end(path)
            trace.used = time.monotonic()
        trace.refresh()
        wanted = since if token == trace.token else 0
        if (wanted < trace.dropped and trace.held_bytes + trace.dropped_bytes <= self.max_bytes
                and time.monotonic() - trace.reread_at >= self.reread_every):
            trace.reread(unless_within=self.reread_every)
        self._trim(keep=trace)
        return trace

    def sweep(self) -> None:
        """Drop the traces nobody asked for within the idle time."""
        self._trim()

    def _trim(self, keep: SessionTrace | None = None) -> None:
        with self._lock:
            cutoff = time.monotonic() - self.idle_ttl
            spare = [t for t in self._traces.values() if t.path not in self._followed]
            over = len(spare) - self.max_sessions
            for trace in spare:  # least recently viewed first
                if trace is not keep and (trace.gone or trace.used < cutoff or over > 0):
                    over -= 1
                    del self._traces[trace.path]
            excess = sum(t.held_bytes for t in self._traces.values()) - self.max_bytes
            for trace in [*(t for t in self._traces.values() if t is not keep), *([keep] if keep else [])]:
                if excess <= 0:
                    break
                excess -= trace.drop_oldest(excess)
