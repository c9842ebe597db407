"""One-shot export: session folders, events.jsonl files, a whole COPILOT_HOME (shared by worker
processes when it holds many sessions), or a stream."""

from __future__ import annotations

import logging
import os
import stat
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Iterator

import orjson

from .decode import INTERNAL_ERROR, decode_line
from .events import DecodeError, Event
from .records import MetricUpdate, SpanRecord
from .sessions import ANOMALIES, SessionModel
from .tail import FUTURE_TOLERANCE_S, read_all
from .traces import FileSink, OtlpJsonEncoder, SpanSink
from .workers import MAX_WORKERS, WorkerPool, available_cpus

log = logging.getLogger(__name__)

EVENTS_FILE = "events.jsonl"
SESSION_STATE = "session-state"
BATCH = 512
# Files per unit of work, in one process or spread over several; a request never holds spans of
# two shards, so the output is the same whatever the number of workers.
SHARD_FILES = 64
PARALLEL_MIN_FILES = 2 * SHARD_FILES  # fewer files replay in this process: starting workers costs more


class SourceError(ValueError):
    """A path given to replay or inspect that is not a session log."""


@dataclass
class ReplayStats:
    """What one replay read, rejected and exported."""

    files: int = 0
    events: int = 0
    spans: int = 0
    rejected: Counter = field(default_factory=Counter)
    metrics: list[MetricUpdate] | None = field(default_factory=list)  # None: the model makes none

    def add(self, other: ReplayStats) -> None:
        """Fold in the figures of another part of the same replay."""
        self.files += other.files
        self.events += other.events
        self.spans += other.spans
        self.rejected.update(other.rejected)
        if self.metrics is not None and other.metrics:
            self.metrics.extend(other.metrics)


def session_id_of(path: Path) -> str:
    """A session's id: the name of the folder that holds its events.jsonl."""
    return path.parent.name if path.name == EVENTS_FILE else path.stem


def find_event_files(path: Path) -> list[Path]:
    """Expand one argument (COPILOT_HOME, session-state, a session folder, a file) to event logs."""
    return _find(path, resolved=False)


def resolve(paths: Iterable[Path]) -> list[Path]:
    """All event logs named by the arguments, each once, in order."""
    seen: dict[Path, None] = {}
    for path in paths:
        for found in _find(Path(path).expanduser(), resolved=True):
            seen.setdefault(found, None)
    return list(seen)


def _find(path: Path, *, resolved: bool) -> list[Path]:
    """find_event_files; with ``resolved``, each as ``Path.resolve()`` makes it."""
    if not path.exists():
        raise SourceError(f"{path}: no such file or directory")
    for candidate in (path, path / EVENTS_FILE):
        if candidate.is_file():
            return [candidate.resolve() if resolved else candidate]
    root = path / SESSION_STATE if (path / SESSION_STATE).is_dir() else path
    sessions = _session_folders(root)
    if not sessions:
        raise SourceError(f"{path}: no {EVENTS_FILE} found (expected COPILOT_HOME, its {SESSION_STATE}/, "
                          f"a session folder or an {EVENTS_FILE})")
    if not resolved:
        return [root / name / EVENTS_FILE for name, _plain in sessions]
    # Resolving each of thousands of files walks the same folders again: resolve their root once.
    base = root.resolve()
    return [base / name / EVENTS_FILE if plain else (root / name / EVENTS_FILE).resolve() for name, plain in sessions]


def _session_folders(root: Path) -> list[tuple[str, bool]]:
    """(name, plain) of each folder in ``root`` that holds an events.jsonl file, by name;
    ``plain``: neither the folder nor that file is a symlink."""
    found = []
    try:
        with os.scandir(root) as entries:
            for entry in entries:
                candidate = os.path.join(entry.path, EVENTS_FILE)
                try:
                    mode = os.lstat(candidate).st_mode
                except OSError:  # not a folder, no events.jsonl, unreadable
                    continue
                if stat.S_ISREG(mode):
                    found.append((entry.name, not entry.is_symlink()))
                elif stat.S_ISLNK(mode) and os.path.isfile(candidate):
                    found.append((entry.name, False))
    except OSError:
        return []
    return sorted(found)


def log_rejected(source: str, error: DecodeError) -> None:
    """Say which line of which file was skipped, and why."""
    log.warning("%s:%d: skipped line (%s): %s", source, error.line, error.reason, error.detail)


def anomaly(update: MetricUpdate, event: Event) -> str | None:
    """What to say about an event the model counted but could not use (None: an ordinary update)."""
    if update.name == "rejected":
        return f"skipped line ({dict(update.labels)['reason']}): event id {event.id} seen before"
    if update.name == "out_of_order":
        return f"{event.type} out of order: it ends something that is not open; counted, not exported"
    return None


def model_outputs(session_id: str, items: Iterable[Event | DecodeError], stats: ReplayStats, *, source: str,
                  **model_options) -> Iterator[SpanRecord]:
    """Feed decoded lines to a fresh model; yield its spans; keep its metric updates in ``stats``
    (with ``stats.metrics`` None the model makes none but those that report a bad event)."""
    kept = stats.metrics
    model = SessionModel(session_id, metrics=kept is not None, **model_options)
    events = 0
    try:
        for item in items:
            if isinstance(item, DecodeError):
                stats.rejected[item.reason] += 1
                log_rejected(source, item)
                continue
            events += 1
            try:
                outputs = model.feed(item)
            except Exception:  # a model bug must cost one event, never the export
                log.exception("%s:%d: could not apply %s", source, item.line, item.type)
                stats.rejected[INTERNAL_ERROR] += 1
                continue
            for out in outputs:
                if isinstance(out, SpanRecord):
                    yield out
                    continue
                if out.name in ANOMALIES:
                    log.warning("%s:%d: %s", source, item.line, anomaly(out, item))
                    if out.name == "rejected":
                        stats.rejected[dict(out.labels)["reason"]] += 1
                        continue
                if kept is not None:
                    kept.append(out)
        for out in model.finish():
            if isinstance(out, SpanRecord):
                yield out
            elif kept is not None:
                kept.append(out)
    finally:  # counted here, once, rather than per event
        stats.events += events


@dataclass
class ShardResult:
    """One shard's figures and spans: batches of records, or those batches encoded as request lines."""

    stats: ReplayStats
    batches: list[list[SpanRecord]]
    encoded: bytes = b""

    def export(self, sink: SpanSink) -> None:
        """Hand the spans to the sink (raises ExportError)."""
        if self.encoded:
            sink.write_encoded(self.encoded)
        for batch in self.batches:
            sink.export(batch)


@dataclass(frozen=True)
class ShardJob:
    """How to replay a shard of files; plain data, so that a worker process can be handed it."""

    model_options: dict
    max_line_bytes: int
    encoder: OtlpJsonEncoder | None  # None: the spans stay records, for a sink that encodes them itself
    keep_metrics: bool

    def __call__(self, files: list[Path], on_file: Callable[[Path], None] | None = None) -> ShardResult:
        """Decode and model each file; the spans in batches of at most BATCH, encoded if asked."""
        stats = ReplayStats(metrics=[] if self.keep_metrics else None)
        spans: list[SpanRecord] = []
        for path in files:
            items = read_all(path, max_line_bytes=self.max_line_bytes)
            spans.extend(model_outputs(session_id_of(path), items, stats, source=str(path), **self.model_options))
            stats.files += 1
            if on_file is not None:
                on_file(path)
        stats.spans = len(spans)
        batches = [spans[i:i + BATCH] for i in range(0, len(spans), BATCH)]
        if self.encoder is not None:
            return ShardResult(stats, [], b"".join(self.encoder.encode(batch) for batch in batches))
        return ShardResult(stats, batches)


def default_workers(files: int) -> int:
    """Processes for a replay of this many files: one per CPU when there are many, else 1."""
    if files < PARALLEL_MIN_FILES:
        return 1
    return max(1, min(available_cpus(), MAX_WORKERS))


def replay_files(files: list[Path], sink: SpanSink, *, on_file: Callable[[Path], None] | None = None,
                 max_line_bytes: int = 16 * 1024 * 1024, workers: int | None = None, keep_metrics: bool = False,
                 shard_files: int = SHARD_FILES, **model_options) -> ReplayStats:
    """Export every file's spans through ``sink``, in file order; raise ExportError if delivery fails.

    ``workers`` processes share the work (None: :func:`default_workers`); the spans, their order
    and the requests are the same for any number. ``keep_metrics``: keep the model's metric
    updates in ``stats.metrics`` (else the model makes none). Raises WorkerError if a worker died.
    """
    encoder = sink.encoder if isinstance(sink, FileSink) else None
    job = ShardJob(dict(model_options), max_line_bytes, encoder, keep_metrics)
    shards = [files[i:i + shard_files] for i in range(0, len(files), shard_files)]
    count = min(default_workers(len(files)) if workers is None else workers, len(shards))
    stats = ReplayStats(metrics=[] if keep_metrics else None)
    if count <= 1:
        for shard in shards:
            result = job(shard, on_file)
            result.export(sink)
            stats.add(result.stats)
        return stats
    with WorkerPool(count) as pool:
        log.debug("replaying %d files in %d worker processes (%s)", len(files), count, pool.start_method)
        for shard, result in zip(shards, pool.map(job, shards)):
            result.export(sink)
            stats.add(result.stats)
            if on_file is not None:
                for path in shard:
                    on_file(path)
    return stats


def stream_session_id(lines: list[bytes]) -> str:
    """The session id of a `copilot -p --output-format json` stream: its final `result` line says it."""
    for raw in reversed(lines):
        if b'"sessionId"' in raw:
            try:
                obj = orjson.loads(raw)
            except orjson.JSONDecodeError:
                continue
            if isinstance(obj, dict) and isinstance(obj.get("sessionId"), str):
                return obj["sessionId"]
    return "stdin"


RESULT_LINE = b'{"type":"result"'


def replay_stream(data: bytes, sink: SpanSink, *, max_line_bytes: int = 16 * 1024 * 1024,
                  **model_options) -> ReplayStats:
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
    spans = list(model_outputs(session_id, items, stats, source="<stdin>", live_idle=True, **model_options))
    for batch in (spans[i:i + BATCH] for i in range(0, len(spans), BATCH)):
        sink.export(batch)
        stats.spans += len(batch)
    stats.files = 1
    return stats
