"""export.py: the export queue delivers spans in order with retries, commits each checkpoint
marker only after the spans before it, holds bounded memory, and stops."""

from __future__ import annotations

import threading
import time

import orjson
import pytest

from copilot_otel.delivery.deadletter import DeadLetter
from copilot_otel.delivery.queue import ExportQueue
from copilot_otel.delivery.sinks import ExportError, MemorySink, RejectedError
from copilot_otel.model.records import SpanRecord
from copilot_otel.otlp.json_encoder import OtlpJsonEncoder
from copilot_otel.otlp.retry import RetryPolicy
from copilot_otel.source.tail import FileIdentity
from copilot_otel.state.checkpoint import FilePosition
from tests.support.net import wait_until

EXPORT_THREAD = "copilot-otel-export"


def spans(count: int, first: int = 1) -> list[SpanRecord]:
    return [SpanRecord(7, n, None, f"span {n}", 1, n, n + 1, {}) for n in range(first, first + count)]


def marker(path: str, offset: int) -> FilePosition:
    return FilePosition(path, FileIdentity(1, 2, "", 0), offset, offset, offset, offset)


class Checkpoint:
    """Records each commit, and how many spans the sink held at that moment."""

    def __init__(self, sink: MemorySink, failures: int = 0) -> None:
        self.sink = sink
        self.failures = failures
        self.commits: list[tuple[list[FilePosition], int]] = []

    def commit(self, positions: list[FilePosition], totals: bytes | None = None) -> None:
        if self.failures:
            self.failures -= 1
            raise OSError("disk full")
        self.commits.append((positions, len(self.sink.records)))


class FlakySink(MemorySink):
    """Fails the first ``failures`` exports (with ExportError, or another exception), then delivers."""

    description = "flaky"

    def __init__(self, failures: int, error: type[Exception] = ExportError) -> None:
        super().__init__()
        self.failures = failures
        self.error = error
        self.attempts = 0

    def export(self, records) -> None:
        self.attempts += 1
        if self.failures:
            self.failures -= 1
            raise self.error("backend down")
        super().export(records)


class GatedSink(MemorySink):
    """Delivers only once the gate is open; ``held`` is set once the exporter waits at the gate."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = threading.Event()
        self.held = threading.Event()

    def export(self, records) -> None:
        self.held.set()
        self.gate.wait(10)
        super().export(records)


def export_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == EXPORT_THREAD]


@pytest.fixture
def make_queue():
    """Build started queues (fast backoff); each is stopped at the end of the test."""
    queues: list[ExportQueue] = []

    def make(sink, checkpoint=None, **options) -> ExportQueue:
        options = {"retry": RetryPolicy(0.01, 0.05), **options}
        queue = ExportQueue(sink, checkpoint, **options)
        queue.start()
        queues.append(queue)
        return queue

    yield make
    for queue in queues:
        queue.stop(timeout=1)


def test_spans_are_delivered_in_order_in_batches(make_queue):
    """Every span reaches the sink once, in order, in batches of at most ``batch``; each batch is reported."""
    sink = MemorySink()
    exported: list[int] = []
    queue = make_queue(sink, batch=4, on_exported=exported.append)
    sent = spans(10)
    for start in range(0, 10, 3):
        queue.put(sent[start:start + 3])
    assert queue.flush(5)
    assert sink.records == sent
    assert sum(exported) == 10 and max(exported) <= 4 + 2  # a batch stops after the list that reaches it
    assert queue.depth == 0


def test_a_marker_is_committed_only_after_the_spans_before_it(make_queue):
    """Markers share the FIFO with spans: a position is committed once everything queued before it is delivered."""
    sink = GatedSink()
    checkpoint = Checkpoint(sink)
    committed: list[int] = []
    queue = make_queue(sink, checkpoint, batch=2, on_commit=lambda: committed.append(1))
    queue.put(spans(3))
    queue.put([], (marker("/a", 100),))
    queue.put(spans(2, first=4))
    queue.put([], (marker("/a", 200),))
    assert sink.held.wait(5)
    assert checkpoint.commits == []  # the sink has delivered nothing yet
    sink.gate.set()
    assert queue.flush(5)
    queued_before = {100: 3, 200: 5}  # spans queued before each marker
    assert [positions[0].offset for positions, _ in checkpoint.commits] == [100, 200]
    assert all(delivered >= queued_before[positions[0].offset] for positions, delivered in checkpoint.commits)
    assert len(committed) == 2


def test_the_latest_marker_of_a_file_wins_within_a_batch(make_queue):
    """Several positions of one file taken together commit only the last one."""
    sink = GatedSink()
    checkpoint = Checkpoint(sink)
    queue = make_queue(sink, checkpoint)
    queue.put(spans(1))  # holds the exporter while the rest queue up
    assert sink.held.wait(5)
    queue.put(spans(1, first=2))
    for offset in (10, 20, 30):
        queue.put([], (marker("/a", offset),))
    queue.put([], (marker("/b", 5),))
    sink.gate.set()
    assert queue.flush(5)
    last = checkpoint.commits[-1][0]
    assert sorted((p.path, p.offset) for p in last) == [("/a", 30), ("/b", 5)]


def test_a_failing_backend_is_retried_until_it_recovers(make_queue):
    """Export errors are retried with backoff, reported as failures, and the queue is unhealthy until the
    backend takes the batch; the marker behind it is committed only then."""
    sink = FlakySink(failures=3)
    checkpoint = Checkpoint(sink)
    failed: list[int] = []
    unhealthy: list[bool] = []  # what the queue said of itself at each failure (it recovers within 0.1 s)

    def on_failed(count: int) -> None:
        failed.append(count)
        unhealthy.append(not queue.healthy and queue.last_error == "backend down")

    queue = make_queue(sink, checkpoint, on_failed=on_failed)
    queue.put(spans(5))
    queue.put([], (marker("/a", 100),))
    assert queue.flush(5)
    assert (sink.attempts, failed, len(sink.records)) == (4, [5, 5, 5], 5)
    assert unhealthy == [True, True, True]
    assert queue.healthy is True and queue.last_error is None
    assert [(positions[0].offset, delivered) for positions, delivered in checkpoint.commits] == [(100, 5)]


def test_a_sink_bug_does_not_kill_the_exporter(make_queue):
    """A sink that raises something other than ExportError is retried like a failure; the thread goes on."""
    sink = FlakySink(failures=2, error=ValueError)
    failed: list[int] = []
    queue = make_queue(sink, on_failed=failed.append)
    queue.put(spans(3))
    assert queue.flush(5)
    assert (len(sink.records), failed) == (3, [3, 3])


def test_stop_while_the_backend_is_down_leaves_the_checkpoint_behind(make_queue):
    """Stopping with undeliverable spans returns False at once after the timeout, commits nothing, and joins."""
    sink = FlakySink(failures=10**9)
    checkpoint = Checkpoint(sink)
    before = set(export_threads())
    queue = ExportQueue(sink, checkpoint, retry=RetryPolicy(0.01, 0.05))
    queue.start()
    queue.put(spans(2))
    queue.put([], (marker("/a", 100),))
    wait_until(lambda: sink.attempts, timeout=5, what="an export attempt")
    started = time.monotonic()
    assert queue.stop(timeout=0.2) is False
    assert time.monotonic() - started < 2
    assert checkpoint.commits == [] and sink.records == []
    assert set(export_threads()) == before


def test_stop_joins_the_thread_while_the_sink_keeps_raising(make_queue):
    """A sink that raises an unexpected exception on every attempt does not keep the exporter thread
    alive after stop()."""
    sink = FlakySink(failures=10**9, error=RuntimeError)
    before = set(export_threads())
    queue = ExportQueue(sink, None, retry=RetryPolicy(0.01, 0.05))
    queue.start()
    queue.put(spans(2))
    wait_until(lambda: sink.attempts >= 2, timeout=5, what="retries")
    assert queue.stop(timeout=0.1) is False
    assert set(export_threads()) == before


def test_a_full_queue_blocks_the_producer_until_there_is_room(make_queue):
    """Back-pressure: past max_spans put waits (the queue says it is blocked), and goes on once
    the exporter made room; nothing is dropped."""
    sink = GatedSink()
    queue = make_queue(sink, max_spans=3, batch=2)
    queue.put(spans(3))
    producer_done = threading.Event()

    def produce() -> None:
        queue.put(spans(2, first=4))
        producer_done.set()

    producer = threading.Thread(target=produce)
    producer.start()
    try:
        wait_until(lambda: queue.blocked, timeout=5, what="the producer to block")
        assert not producer_done.is_set() and queue.depth == 3
        sink.gate.set()
        assert producer_done.wait(5)
        assert queue.flush(5)
    finally:
        sink.gate.set()
        producer.join(5)
    assert [s.span_id for s in sink.records] == [1, 2, 3, 4, 5]
    assert queue.blocked is False


def test_a_blocked_producer_can_give_up_when_asked_to_stop(make_queue):
    """put returns when should_stop() says so, even with the queue still full."""
    sink = GatedSink()
    queue = make_queue(sink, max_spans=1)
    queue.put(spans(1))
    started = time.monotonic()
    queue.put(spans(1, first=2), should_stop=lambda: time.monotonic() - started > 0.3)
    assert 0.3 <= time.monotonic() - started < 3
    sink.gate.set()


def test_offer_never_blocks_and_says_what_it_dropped(make_queue):
    """offer_spans (the SDK's thread) drops what does not fit and returns how many."""
    sink = GatedSink()
    queue = make_queue(sink, max_spans=2)
    assert queue.offer_spans(spans(2)) == 0
    assert queue.offer_spans(spans(3, first=3)) == 3
    assert queue.offer_spans([]) == 0
    sink.gate.set()
    assert queue.flush(5)
    assert [s.span_id for s in sink.records] == [1, 2]


class RefusingSink(MemorySink):
    """Refuses, as a backend would: requests of more than ``max_spans`` spans as too large, and any
    request holding a span whose id is in ``poison`` as malformed. Keeps every request it saw."""

    description = "refusing"

    def __init__(self, max_spans: int = 10**9, poison: frozenset[int] = frozenset()) -> None:
        super().__init__()
        self.max_spans, self.poison = max_spans, poison
        self.requests: list[list[int]] = []
        self.events: list[str] = []

    def export(self, records) -> None:
        self.requests.append([r.span_id for r in records])
        if len(records) > self.max_spans:
            raise RejectedError(f"{len(records)} spans is too large", too_large=True)
        if any(r.span_id in self.poison for r in records):
            raise RejectedError("HTTP 400 Bad Request")
        super().export(records)
        self.events.append("export")

    def sync(self) -> None:
        self.events.append("sync")


def test_one_large_put_leaves_in_batches(make_queue):
    """A read that produced thousands of spans is exported in batches of at most ``batch``, in order."""
    sink = RefusingSink()
    queue = make_queue(sink, batch=512)
    queue.put(spans(5000))
    assert queue.flush(5)
    assert max(len(request) for request in sink.requests) == 512
    assert [s.span_id for s in sink.records] == list(range(1, 5001))


def test_a_request_too_large_is_halved_until_it_fits(make_queue):
    """A request the sink finds too large is split in halves, recursively; every span arrives once, in order."""
    sink = RefusingSink(max_spans=3)
    queue = make_queue(sink, batch=20)
    queue.put(spans(20))
    assert queue.flush(5)
    assert [s.span_id for s in sink.records] == list(range(1, 21))
    assert sink.requests[0] == list(range(1, 21)) and len(sink.requests) > 8


def test_a_refused_span_is_dead_lettered_and_the_queue_moves_on(make_queue, tmp_path):
    """A span the backend refuses for good is found by halving, kept in the dead-letter file and counted;
    the spans around it are delivered and the checkpoint moves past all of them."""
    sink = RefusingSink(poison=frozenset({13}))
    checkpoint = Checkpoint(sink)
    dead = DeadLetter(tmp_path / "state" / "dead-letter.jsonl", OtlpJsonEncoder({}))
    counted: list[int] = []
    queue = make_queue(sink, checkpoint, batch=32, dead_letter=dead, on_dead_lettered=counted.append)
    queue.put(spans(32))
    queue.put([], (marker("/a", 100),))
    assert queue.flush(5)
    dead.close()
    assert [s.span_id for s in sink.records] == [n for n in range(1, 33) if n != 13]
    assert (counted, dead.spans, dead.last_reason) == ([1], 1, "HTTP 400 Bad Request")
    (line,) = (tmp_path / "state" / "dead-letter.jsonl").read_bytes().splitlines()
    assert orjson.loads(line)["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["spanId"] == f"{13:016x}"
    assert (tmp_path / "state" / "dead-letter.jsonl").stat().st_mode & 0o777 == 0o600
    assert [positions[0].offset for positions, _ in checkpoint.commits] == [100]


def test_spans_that_cannot_be_dead_lettered_are_retried_not_lost(make_queue, tmp_path):
    """If the dead-letter file cannot be written, the refused span is tried again later; once it can, it is kept."""
    blocker = tmp_path / "state"
    blocker.write_bytes(b"a file where the state folder should be")
    sink = RefusingSink(poison=frozenset({2}))
    dead = DeadLetter(blocker / "dead-letter.jsonl", OtlpJsonEncoder({}))
    queue = make_queue(sink, batch=4, dead_letter=dead)
    queue.put(spans(3))
    wait_until(lambda: sink.requests.count([2]) >= 2, timeout=5, what="the refused span tried again")
    assert dead.spans == 0
    blocker.unlink()
    assert queue.flush(5)
    dead.close()
    assert dead.spans == 1 and [s.span_id for s in sink.records] == [1, 3]


def test_markers_waiting_behind_a_stuck_span_stay_one_per_file(make_queue):
    """While the backend holds one span, thousands of positions of three files cost three markers."""
    sink = GatedSink()
    queue = make_queue(sink)
    queue.put(spans(1))
    assert sink.held.wait(5)  # the exporter holds it
    queue.put(spans(1, first=2))
    for n in range(5000):
        queue.put([], (marker(f"/{n % 3}", n),))
    assert queue.markers == 3
    sink.gate.set()
    assert queue.flush(5)


def test_the_sink_is_synced_before_the_commit_that_covers_its_spans(make_queue):
    """What the sink wrote is made durable before the checkpoint moves past it."""
    sink = RefusingSink()
    checkpoint = Checkpoint(sink)
    queue = make_queue(sink, checkpoint)
    queue.put(spans(2))
    queue.put([], (marker("/a", 10),))
    assert queue.flush(5)
    assert sink.events == ["export", "sync"] and len(checkpoint.commits) == 1


def test_a_failed_commit_keeps_its_positions_and_commits_them_later(make_queue):
    """A commit that fails (locked database, full disk) is retried on its own, with nothing new queued."""
    sink = MemorySink()
    checkpoint = Checkpoint(sink, failures=1)
    queue = make_queue(sink, checkpoint)
    queue.put(spans(1))
    queue.put([], (marker("/a", 100),))
    assert queue.flush(5)
    assert queue.commit_error == "disk full"
    wait_until(lambda: checkpoint.commits, timeout=5, what="the retried commit")
    assert [p.offset for p in checkpoint.commits[0][0]] == [100] and queue.commit_error is None
