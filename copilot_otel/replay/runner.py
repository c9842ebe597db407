"""One-shot export: session logs (shared by worker processes when there are many), or a stream.

Each log is read a few megabytes at a time and its spans leave in batches as they are made, so
memory does not grow with the size of a log. Work is cut into shards (at most SHARD_FILES files
or SHARD_BYTES of logs); a request never holds spans of two shards, so the output is the same
whatever the number of workers. A worker returns a whole shard's output: a file larger than a
shard is streamed by the parent instead, in its turn.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import orjson
from msgspec import Struct, field

from ..base.workers import MAX_WORKERS, WorkerPool, available_cpus
from ..config import DEFAULT_MAX_LINE_BYTES, DEFAULT_MAX_REQUEST_BYTES
from ..decode.events import DecodeError, Event
from ..decode.lines import decode_line
from ..logreader import LogReader
from ..model.logs import LogRecord
from ..model.options import ModelOptions
from ..model.pipeline import Outputs, drive, finish
from ..model.records import SpanRecord
from ..model.sessions import SessionModel
from ..otlp.contract import EncodingSink, SpanSink
from ..otlp.json_encoder import OtlpJsonEncoder
from ..source.sources import EVENTS_FILE, SESSION_STATE, SourceError, find_event_files, resolve, session_id_of
from .batches import Batch, ReplayStats
from .delivery import RetryingSender, SendBatch
from .ledger import content_identity

log = logging.getLogger(__name__)

__all__ = [
    "EVENTS_FILE",
    "SESSION_STATE",
    "Batch",
    "ReplayStats",
    "SourceError",
    "find_event_files",
    "replay_files",
    "replay_session",
    "replay_stream",
    "resolve",
    "session_id_of",
]

BATCH = 512
# Files per unit of work, in one process or spread over several; a request never holds spans of
# two shards, so the output is the same whatever the number of workers.
SHARD_FILES = 64
SHARD_BYTES = 32 << 20  # nor more than this much of logs (a larger file is a shard of its own)
READ_BYTES = 4 << 20  # what is read of a log at a time
PARALLEL_MIN_FILES = 2 * SHARD_FILES  # fewer files replay in this process: starting workers costs more


def replay_session(session_id: str, items: list[Event | DecodeError], stats: ReplayStats, *, source: str,
                   options: ModelOptions = ModelOptions(), live_idle: bool = False) -> list[SpanRecord]:
    """Every span of one whole session log (what is left open at its end closed as incomplete)."""
    model = SessionModel(session_id, options, live_idle=live_idle, metrics=stats.metrics is not None)
    out = finish(model, drive(model, items, Outputs(), source=source))
    stats.fold(out)
    return out.spans


class ShardResult(Struct):
    """One shard's figures, its batches and the logs it could not read (path, reason).

    ``in_parent``: the worker left this shard (one large file) for the parent to stream.
    """

    stats: ReplayStats
    batches: list[Batch]
    unreadable: list[tuple[str, str]] = field(default_factory=list)
    in_parent: bool = False


Item = Path | tuple[Path, int]  # a log, or (a log, how many of its first spans to leave out: sent before)


def _path_skip(item: Item) -> tuple[Path, int]:
    return item if isinstance(item, tuple) else (item, 0)


@dataclass(eq=False)
class _Owner:
    """A log whose spans are pending in a shard's batches: how many are pending, whether all are made, and its
    content identity (for the ledger)."""

    log: str
    pending: int = 0
    made: bool = False
    content: str = ""


class Shard(Struct, frozen=True):
    """Files replayed together; ``in_parent``: one file too large to hand back from a worker whole."""

    files: list[Item]
    in_parent: bool = False


class ShardJob(Struct, frozen=True):
    """How to replay a shard of files; plain data, so that a worker process can be handed it."""

    options: ModelOptions
    max_line_bytes: int
    encoder: OtlpJsonEncoder | None  # None: the spans stay records, for a sink that encodes them itself
    keep_metrics: bool
    max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES
    batch: int = BATCH

    def __call__(self, shard: Shard) -> ShardResult:
        """In a worker: decode and model each file; the spans in batches, encoded if asked."""
        stats = ReplayStats(metrics=[] if self.keep_metrics else None, logs=[] if self.options.logs else None)
        if shard.in_parent:
            return ShardResult(stats, [], in_parent=True)
        result = ShardResult(stats, [])
        for batch in self.batches(shard.files, stats, unreadable=result.unreadable):
            if self.encoder is not None and batch.records:
                encoded = b"".join(self.encoder.encode_within(batch.records, self.max_request_bytes))
                batch = Batch([], encoded, batch.parts, batch.content)
            result.batches.append(batch)
        return result

    def batches(self, files: list[Item], stats: ReplayStats, on_file: Callable[[Path], None] | None = None, *,
                unreadable: list[tuple[str, str]] | None = None) -> Iterator[Batch]:
        """The shard's spans in batches of ``self.batch`` (the last may be shorter), as they are made, each
        with the logs it holds spans of. A log that cannot be read makes no span and is named in
        ``unreadable`` (logged without one); it ends in no batch."""
        pending: list[SpanRecord] = []
        owners: list[_Owner] = []  # the logs of ``pending``
        for item in files:
            path, skip = _path_skip(item)
            owner = _Owner(str(path))
            owners.append(owner)
            failed: list[tuple[str, str]] = []
            for spans in self._file_spans(path, skip, stats, failed, owner):
                pending.extend(spans)
                owner.pending += len(spans)
                while len(pending) >= self.batch:
                    yield self._cut(pending, owners, self.batch, stats)
            if failed:
                owners.remove(owner)
                if unreadable is None:
                    log.warning("cannot read %s: %s", *failed[0])
                else:
                    unreadable.extend(failed)
            else:
                owner.made = True
            stats.files += 1
            if on_file is not None:
                on_file(path)
        if pending or owners:
            yield self._cut(pending, owners, len(pending), stats)

    @staticmethod
    def _cut(pending: list[SpanRecord], owners: list[_Owner], size: int, stats: ReplayStats) -> Batch:
        """The first ``size`` pending spans as a batch, taken out of ``pending`` and ``owners``."""
        records = pending[:size]
        del pending[:size]
        parts, content = [], []
        room = size
        while owners:
            owner = owners[0]
            if owner.pending == 0 and not owner.made:
                break  # the log being read, none of its spans pending yet
            taken = min(owner.pending, room)
            room -= taken
            owner.pending -= taken
            ended = owner.made and owner.pending == 0
            if taken or ended:
                parts.append((owner.log, taken, ended))
                if owner.content:
                    content.append((owner.log, owner.content))
            if not ended:
                break  # more of its spans wait, or are still to be made
            owners.pop(0)
        stats.spans += len(records)
        return Batch(records, b"", tuple(parts), tuple(content))

    def _file_spans(self, path: Path, skip: int, stats: ReplayStats, failed: list[tuple[str, str]],
                    owner: _Owner) -> Iterator[list[SpanRecord]]:
        """One log's spans, a read at a time, its first ``skip`` left out; what is open at its end closed as
        incomplete. A log that cannot be read (at any read) stops there, named in ``failed``; one read to its
        last byte gets its content identity in ``owner`` (for the ledger)."""
        reader = LogReader(path, self.options, max_line_bytes=self.max_line_bytes, metrics=stats.metrics is not None,
                           summaries=False)  # the interactions `inspect` lists: nothing a replay reads
        tail = reader.tail
        while True:
            result, out = reader.read(max_bytes=READ_BYTES)
            if result.error or result.gone:
                failed.append((str(path), result.error or "no such file"))
                return
            stats.fold(out)
            spans, skip = out.spans[skip:], max(0, skip - len(out.spans))
            # What these spans were made from (their ledger row names it): the bytes read so far.
            owner.content = content_identity(tail.offset, tail.crc, whole=False) if tail.crc is not None else ""
            yield spans
            if not result.more:
                break
        whole = tail.crc is not None and tail.offset == tail.size
        owner.content = content_identity(tail.offset, tail.crc, whole=True) if tail.crc is not None and whole else ""
        out = reader.finish()
        stats.fold(out)
        yield out.spans[skip:]


def plan_shards(files: Sequence[Item], shard_files: int = SHARD_FILES, shard_bytes: int = SHARD_BYTES) -> list[Shard]:
    """Cut the files, in order, into shards of at most ``shard_files`` files and ``shard_bytes`` bytes."""
    shards: list[Shard] = []
    current: list[Item] = []
    size = 0
    for item in files:
        try:
            length = _path_skip(item)[0].stat().st_size
        except OSError:
            length = 0
        if length > shard_bytes:
            if current:
                shards.append(Shard(current))
                current, size = [], 0
            shards.append(Shard([item], in_parent=True))
            continue
        if current and (len(current) >= shard_files or size + length > shard_bytes):
            shards.append(Shard(current))
            current, size = [], 0
        current.append(item)
        size += length
    if current:
        shards.append(Shard(current))
    return shards


def default_workers(files: int) -> int:
    """Processes for a replay of this many files: one per CPU when there are many, else 1."""
    if files < PARALLEL_MIN_FILES:
        return 1
    return max(1, min(available_cpus(), MAX_WORKERS))


def replay_files(files: Sequence[Item], sink: SpanSink, *, options: ModelOptions = ModelOptions(),
                 on_file: Callable[[Path], None] | None = None, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
                 workers: int | None = None, keep_metrics: bool = False, shard_files: int = SHARD_FILES,
                 shard_bytes: int = SHARD_BYTES, max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES,
                 refused: Callable[[list[SpanRecord], str], None] | None = None, retry_for: float = 0.0,
                 batch: int = BATCH, send: SendBatch | None = None,
                 unreadable: list[tuple[str, str]] | None = None,
                 send_logs: Callable[[list[LogRecord]], None] | None = None) -> ReplayStats:
    """Export every file's spans through ``sink``, in file order; raise ExportError if delivery fails.

    A ``(path, skip)`` item leaves out the log's first ``skip`` spans (a replay that continues).
    ``workers`` processes share the work (None: :func:`default_workers`); the spans, their order
    and the requests are the same for any number. ``keep_metrics``: keep the model's metric
    updates in ``stats.metrics`` (else the model makes none). ``send(batch, sink, stats)`` sends
    each batch; by default spans the backend refuses for good go to ``refused`` (None: that is an
    ExportError) and a failing request is retried for ``retry_for`` seconds. Logs that cannot be
    read make no span and are added to ``unreadable`` (logged without one). Raises WorkerError if a
    worker died. ``send_logs``: where the log records go when ``options.logs`` makes them, each batch's before
    its spans (a failure there stops the replay before those spans count as delivered).
    """
    encoder = sink.encoder if isinstance(sink, EncodingSink) else None
    job = ShardJob(options, max_line_bytes, encoder, keep_metrics, max_request_bytes, batch)
    shards = plan_shards(files, shard_files, shard_bytes)
    count = min(default_workers(len(files)) if workers is None else workers, len(shards))
    out = _Delivery(job, sink, send or RetryingSender(refused, retry_for), send_logs, unreadable,
                    keep_metrics=keep_metrics, logs=options.logs)
    if count <= 1:
        for shard in shards:
            out.stream(shard, on_file)
        return out.stats
    with WorkerPool(count) as pool:
        log.debug("replaying %d files in %d worker processes (%s)", len(files), count, pool.start_method)
        for shard, result in zip(shards, pool.map(job, shards)):
            if result.in_parent:
                out.stream(shard, None)
            else:
                out.made(result)
            if on_file is not None:
                for item in shard.files:
                    on_file(_path_skip(item)[0])
    return out.stats


class _Delivery:
    """Sends the batches of the shards, in order, through one sink (each batch's log records before its spans);
    sums their figures in ``stats``."""

    def __init__(self, job: ShardJob, sink: SpanSink, send: SendBatch,
                 send_logs: Callable[[list[LogRecord]], None] | None, unreadable: list[tuple[str, str]] | None, *,
                 keep_metrics: bool, logs: bool) -> None:
        self.job, self.sink, self.send, self.send_logs = job, sink, send, send_logs
        self.unreadable, self.keep_metrics, self.logs = unreadable, keep_metrics, logs
        self.stats = ReplayStats(metrics=[] if keep_metrics else None)

    def stream(self, shard: Shard, callback: Callable[[Path], None] | None) -> None:
        """Make the shard's batches in this process, sending each as it is made."""
        part = ReplayStats(metrics=[] if self.keep_metrics else None, logs=[] if self.logs else None)
        for one in self.job.batches(shard.files, part, callback, unreadable=self.unreadable):
            self._logs_of(part)
            self.send(one, self.sink, part)
        self.stats.add(part)

    def made(self, result: ShardResult) -> None:
        """Send the batches a worker process made of a shard."""
        self._logs_of(result.stats)
        for one in result.batches:
            self.send(one, self.sink, result.stats)
        self.stats.add(result.stats)
        if self.unreadable is not None:
            self.unreadable.extend(result.unreadable)
        else:
            for path, reason in result.unreadable:
                log.warning("cannot read %s: %s", path, reason)

    def _logs_of(self, part: ReplayStats) -> None:
        records = part.take_logs()
        if records and self.send_logs is not None:
            self.send_logs(records)


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
                  max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
                  refused: Callable[[list[SpanRecord], str], None] | None = None,
                  retry_for: float = 0.0, send_logs: Callable[[list[LogRecord]], None] | None = None) -> ReplayStats:
    """Export a headless run's live event stream (stdin); its ephemeral idle events end each loop (``send_logs``:
    where its log records go, when ``options.logs`` makes them)."""
    lines = data.splitlines()
    session_id = stream_session_id(lines)
    items: list[Event | DecodeError] = []
    offset = 0
    for number, raw in enumerate(lines, start=1):
        # The last line, {"type":"result",...}, sums up the run: it is not an event.
        if raw.strip() and not raw.startswith(RESULT_LINE):
            items.append(decode_line(raw.rstrip(b"\r"), offset=offset, line=number, max_bytes=max_line_bytes))
        offset += len(raw) + 1
    stats = ReplayStats(logs=[] if options.logs else None)
    spans = replay_session(session_id, items, stats, source="<stdin>", options=options, live_idle=True)
    records = stats.take_logs()
    if records and send_logs is not None:
        send_logs(records)
    sender = RetryingSender(refused, retry_for)
    for batch in (spans[i:i + BATCH] for i in range(0, len(spans), BATCH)):
        sender.export(sink, batch, stats)
        stats.spans += len(batch)
    stats.files = 1
    return stats
