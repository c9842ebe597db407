"""One-shot export: session logs (shared by worker processes when there are many), or a stream."""

from __future__ import annotations

import logging
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import orjson

from .config import DEFAULT_MAX_LINE_BYTES, ModelOptions
from .decode import decode_line
from .events import DecodeError, Event
from .otlp_json import OtlpJsonEncoder
from .pipeline import Outputs, drive, finish
from .records import MetricUpdate, SpanRecord
from .sessions import READ_TYPES, SessionModel
from .sinks import FileSink, SpanSink
from .sources import (EVENTS_FILE, SESSION_STATE, SourceError, UnreadableLog, find_event_files, resolve,
                      session_id_of)
from .tail import FUTURE_TOLERANCE_S, read_all
from .workers import MAX_WORKERS, WorkerPool, available_cpus

log = logging.getLogger(__name__)

__all__ = ["EVENTS_FILE", "SESSION_STATE", "SourceError", "find_event_files", "resolve", "session_id_of",
           "Batch", "ReplayStats", "replay_files", "replay_stream", "replay_session"]

BATCH = 512
# Files per unit of work, in one process or spread over several; a request never holds spans of
# two shards, so the output is the same whatever the number of workers.
SHARD_FILES = 64
PARALLEL_MIN_FILES = 2 * SHARD_FILES  # fewer files replay in this process: starting workers costs more


@dataclass
class ReplayStats:
    """What one replay read, rejected and exported."""

    files: int = 0
    events: int = 0
    spans: int = 0
    rejected: Counter = field(default_factory=Counter)
    out_of_order: Counter = field(default_factory=Counter)
    metrics: list[MetricUpdate] | None = field(default_factory=list)  # None: the model makes none

    def add(self, other: ReplayStats) -> None:
        """Fold in the figures of another part of the same replay."""
        self.files += other.files
        self.events += other.events
        self.spans += other.spans
        self.rejected.update(other.rejected)
        self.out_of_order.update(other.out_of_order)
        if self.metrics is not None and other.metrics:
            self.metrics.extend(other.metrics)

    def fold(self, out: Outputs) -> None:
        """Count what one session's drive produced (its spans are the caller's)."""
        self.events += sum(out.events.values())
        self.rejected.update(out.rejected)
        self.out_of_order.update(out.out_of_order)
        if self.metrics is not None:
            self.metrics.extend(out.metrics)


def replay_session(session_id: str, items: list[Event | DecodeError], stats: ReplayStats, *, source: str,
                   options: ModelOptions = ModelOptions(), live_idle: bool = False) -> list[SpanRecord]:
    """Every span of one whole session log (what is left open at its end closed as incomplete)."""
    model = SessionModel(session_id, options, live_idle=live_idle, metrics=stats.metrics is not None)
    out = finish(model, drive(model, items, Outputs(), source=source))
    stats.fold(out)
    return out.spans


@dataclass(frozen=True, slots=True)
class Batch:
    """One request's spans (as records, or encoded as a request line), and whose they are: (log, its spans
    in this batch, whether this batch holds the log's last span) for each log, in order."""

    records: list[SpanRecord]
    encoded: bytes
    parts: tuple[tuple[str, int, bool], ...]

    @property
    def spans(self) -> int:
        return sum(count for _path, count, _last in self.parts)

    def export(self, sink: SpanSink) -> None:
        """Hand the spans to the sink (raises ExportError); a batch of no span sends nothing."""
        if self.encoded:
            sink.write_encoded(self.encoded)
        elif self.records:
            sink.export(self.records)


@dataclass
class ShardResult:
    """One shard's figures, its batches, and the logs it could not read (path, reason)."""

    stats: ReplayStats
    batches: list[Batch]
    unreadable: list[tuple[str, str]] = field(default_factory=list)


def _deliver_plainly(batch: Batch, sink: SpanSink) -> None:
    batch.export(sink)


@dataclass(frozen=True)
class ShardJob:
    """How to replay a shard of files; plain data, so that a worker process can be handed it."""

    options: ModelOptions
    max_line_bytes: int
    encoder: OtlpJsonEncoder | None  # None: the spans stay records, for a sink that encodes them itself
    keep_metrics: bool
    batch: int = BATCH

    def __call__(self, files: list[Path | tuple[Path, int]],
                 on_file: Callable[[Path], None] | None = None) -> ShardResult:
        """Decode and model each file (leaving out the first ``skip`` spans of a ``(path, skip)``: a
        replay that resumes); the spans in batches of at most ``self.batch``, encoded if asked."""
        stats = ReplayStats(metrics=[] if self.keep_metrics else None)
        result = ShardResult(stats, [])
        spans: list[SpanRecord] = []
        parts: list[list] = []  # [path, spans in the current batch, last piece of the log]
        for item in files:
            path, skip = item if isinstance(item, tuple) else (item, 0)
            try:
                items = read_all(path, max_line_bytes=self.max_line_bytes, keep=READ_TYPES)
            except UnreadableLog as exc:
                result.unreadable.append((str(path), exc.reason))
                continue
            mine = replay_session(session_id_of(path), items, stats, source=str(path), options=self.options)[skip:]
            stats.files += 1
            stats.spans += len(mine)
            while True:
                room = self.batch - len(spans)
                taken, mine = mine[:room], mine[room:]
                spans.extend(taken)
                parts.append([str(path), len(taken), not mine])
                if len(spans) < self.batch:
                    break
                result.batches.append(self._batch(spans, parts))
                spans, parts = [], []
                if not mine:
                    break
            if on_file is not None:
                on_file(path)
        if parts:
            result.batches.append(self._batch(spans, parts))
        return result

    def _batch(self, spans: list[SpanRecord], parts: list[list]) -> Batch:
        parts = tuple((path, count, last) for path, count, last in parts)
        if self.encoder is not None and spans:
            return Batch([], self.encoder.encode(spans), parts)
        return Batch(spans, b"", parts)


def default_workers(files: int) -> int:
    """Processes for a replay of this many files: one per CPU when there are many, else 1."""
    if files < PARALLEL_MIN_FILES:
        return 1
    return max(1, min(available_cpus(), MAX_WORKERS))


def replay_files(files: list[Path | tuple[Path, int]], sink: SpanSink, *, options: ModelOptions = ModelOptions(),
                 on_file: Callable[[Path], None] | None = None, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
                 workers: int | None = None, keep_metrics: bool = False, shard_files: int = SHARD_FILES,
                 batch: int = BATCH, deliver: Callable[[Batch, SpanSink], None] = _deliver_plainly,
                 unreadable: list[tuple[str, str]] | None = None) -> ReplayStats:
    """Export every file's spans through ``sink``, in file order; raise ExportError if delivery fails.

    A ``(path, skip)`` item leaves out the path's first ``skip`` spans. ``workers`` processes share
    the work (None: :func:`default_workers`); the spans, their order and the requests are the same
    for any number. ``deliver(batch, sink)`` sends each batch (default: once, raising what the sink
    raises). ``keep_metrics``: keep the model's metric updates in ``stats.metrics`` (else the model
    makes none). Logs that cannot be read are left out, and added to ``unreadable`` (logged without one).
    Raises WorkerError if a worker died.
    """
    encoder = sink.encoder if isinstance(sink, FileSink) else None
    job = ShardJob(options, max_line_bytes, encoder, keep_metrics, batch)
    shards = [files[i:i + shard_files] for i in range(0, len(files), shard_files)]
    count = min(default_workers(len(files)) if workers is None else workers, len(shards))
    stats = ReplayStats(metrics=[] if keep_metrics else None)

    def take(result: ShardResult) -> None:
        for one in result.batches:
            deliver(one, sink)
        stats.add(result.stats)
        if unreadable is not None:
            unreadable.extend(result.unreadable)
        else:
            for path, reason in result.unreadable:
                log.warning("%s: cannot read it (%s); left out", path, reason)

    if count <= 1:
        for shard in shards:
            take(job(shard, on_file))
        return stats
    with WorkerPool(count) as pool:
        log.debug("replaying %d files in %d worker processes (%s)", len(files), count, pool.start_method)
        for shard, result in zip(shards, pool.map(job, shards)):
            take(result)
            if on_file is not None:
                for item in shard:
                    on_file(item[0] if isinstance(item, tuple) else item)
    return stats


def stream_session_id(lines: list[bytes]) -> str:
    """The session id of a `copilot -p --output-format json` stream.

    Its final `result` line says it; a run cut off before that line still names it in a sub-agent's
    prompt (``source: "agent-<sessionId>"``); failing both, an id made from the stream's first event.
    """
    first_id = None
    for raw in reversed(lines):
        if b'"sessionId"' in raw or b'"agent-' in raw:
            try:
                obj = orjson.loads(raw)
            except orjson.JSONDecodeError:
                continue
            if not isinstance(obj, dict):
                continue
            if isinstance(obj.get("sessionId"), str):
                return obj["sessionId"]
            data = obj.get("data")
            source = data.get("source") if isinstance(data, dict) else None
            if isinstance(source, str) and source.startswith("agent-") and len(source) > len("agent-"):
                return source[len("agent-"):]
    for raw in lines:
        try:
            obj = orjson.loads(raw)
        except orjson.JSONDecodeError:
            continue
        if isinstance(obj, dict) and isinstance(obj.get("id"), str):
            first_id = obj["id"]
            break
    return f"stdin-{first_id}" if first_id else "stdin"


RESULT_LINE = b'{"type":"result"'


def replay_stream(data: bytes, sink: SpanSink, *, options: ModelOptions = ModelOptions(),
                  max_line_bytes: int = DEFAULT_MAX_LINE_BYTES) -> ReplayStats:
    """Export a headless run's live event stream (stdin); its ephemeral idle events end each loop."""
    lines = data.splitlines()
    session_id = stream_session_id(lines)
    items: list[Event | DecodeError] = []
    offset = 0
    not_after = int((time.time() + FUTURE_TOLERANCE_S) * 1e9)
    for number, raw in enumerate(lines, start=1):
        # The last line, {"type":"result",...}, sums up the run: it is not an event.
        if raw.strip() and not raw.startswith(RESULT_LINE):
            items.append(decode_line(raw.rstrip(b"\r"), offset=offset, line=number, max_bytes=max_line_bytes,
                                     not_after_ns=not_after))
        offset += len(raw) + 1
    stats = ReplayStats()
    spans = replay_session(session_id, items, stats, source="<stdin>", options=options, live_idle=True)
    for batch in (spans[i:i + BATCH] for i in range(0, len(spans), BATCH)):
        sink.export(batch)
        stats.spans += len(batch)
    stats.files = 1
    return stats
