"""delivery.py and ledger.py: a replay's batches go out at a rate, through refusals until a deadline, and
a replay that stopped continues from its ledger without sending a span twice."""

from __future__ import annotations

import os
from collections import Counter

import pytest

from copilot_otel.delivery.sinks import ExportError, MemorySink
from copilot_otel.replay.delivery import GaveUp, RateLimit, ReplaySender
from copilot_otel.replay.ledger import Ledger, Progress, identity_of
from copilot_otel.replay.runner import replay_files
from tests.support.events import SessionLog


class FakeTime:
    """A clock that only moves when slept on."""

    def __init__(self) -> None:
        self.now = 100.0
        self.slept: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


class Refusing(MemorySink):
    """A backend that refuses (as a throttled one does) while ``refuse()`` says so; what it accepts, it keeps."""

    def __init__(self, refuse) -> None:
        super().__init__()
        self.refuse = refuse
        self.attempts = 0

    def export(self, records) -> None:
        self.attempts += 1
        if self.refuse(self.attempts):
            raise ExportError("OTLP export failed: StatusCode.RESOURCE_EXHAUSTED, Server is at capacity")
        super().export(records)


def logs(tmp_path, sessions: int = 6):
    """Session logs of a few spans each, in their own folders."""
    paths = []
    for n in range(sessions):
        log = SessionLog(f"s-{n}")
        log.start()
        log.user()
        log.tool_turn(("bash", f"c-{n}"))
        log.answer()
        log.shutdown()
        folder = tmp_path / "session-state" / f"s-{n}"
        folder.mkdir(parents=True)
        (folder / "events.jsonl").write_bytes(log.jsonl())
        paths.append(folder / "events.jsonl")
    return paths


def top() -> float:
    """The jitter's draw at the top of its range: each wait is its backoff's whole ceiling."""
    return 1.0


def keys(records) -> Counter:
    return Counter((r.trace_id, r.span_id) for r in records)


def test_the_rate_limit_spaces_spans():
    """At 100 spans/s, 1000 spans in batches of 100 take 9 s of waiting (the first second's worth goes at once)."""
    time = FakeTime()
    limit = RateLimit(100, clock=time.clock, sleep=time.sleep)
    for _ in range(10):
        limit.take(100)
    assert sum(time.slept) == pytest.approx(9.0)
    RateLimit(0, clock=time.clock, sleep=time.sleep).take(10 ** 6)  # 0: no limit
    assert sum(time.slept) == pytest.approx(9.0)


def test_refusals_are_waited_out_and_every_span_arrives_once(tmp_path):
    """A backend that refuses the first five attempts: the replay waits with growing backoff (here each wait at the
    top of its jitter), retries, and the backend holds each span once; the ledger says every log is done."""
    time = FakeTime()
    reference = MemorySink()
    replay_files(logs(tmp_path), reference)
    sink = Refusing(lambda attempt: attempt <= 5)
    ledger = Ledger(tmp_path / "state" / "replay" / "x.sqlite")
    delivery = ReplaySender(ledger=ledger, give_up_after=60, clock=time.clock, sleep=time.sleep, draw=top)
    replay_files(sorted((tmp_path / "session-state").glob("*/events.jsonl")), sink, send=delivery, batch=4)
    assert keys(sink.records) == keys(reference.records) and max(keys(sink.records).values()) == 1
    assert time.slept == [0.5, 1.0, 2.0, 4.0, 8.0] and delivery.retries == 5
    assert all(progress.done for progress in ledger.load().values()) and len(ledger.load()) == 6


def test_a_backend_refusing_past_the_deadline_ends_the_replay(tmp_path):
    """Refused for longer than give_up_after: GaveUp, with the backend's reason; what went before is recorded."""
    time = FakeTime()
    sink = Refusing(lambda attempt: attempt > 2)
    ledger = Ledger(tmp_path / "l.sqlite")
    delivery = ReplaySender(ledger=ledger, give_up_after=20, clock=time.clock, sleep=time.sleep)
    with pytest.raises(GaveUp, match="RESOURCE_EXHAUSTED"):
        replay_files(logs(tmp_path), sink, send=delivery, batch=4)
    assert sum(time.slept) == pytest.approx(20)
    assert sum(progress.sent for progress in ledger.load().values()) == len(sink.records) == 8


class TimingOut(MemorySink):
    """A backend whose every request ends in the OTLP timeout: each attempt takes ``timeout`` seconds of the clock."""

    def __init__(self, time: FakeTime, timeout: float) -> None:
        super().__init__()
        self.time, self.timeout = time, timeout

    def export(self, records) -> None:
        self.time.now += self.timeout
        raise ExportError(f"no answer within the OTLP timeout of {self.timeout:g} s")


def test_give_up_after_counts_the_time_attempts_take(tmp_path):
    """Attempts that each take a 10 s timeout: --give-up-after 20 ends the replay within one timeout of 20 s
    (counted from the start of the first attempt), not after a third attempt beyond 30 s as before."""
    time = FakeTime()
    started = time.now
    delivery = ReplaySender(give_up_after=20, clock=time.clock, sleep=time.sleep, draw=top)
    with pytest.raises(GaveUp, match="no answer within the OTLP timeout of 10 s"):
        replay_files(logs(tmp_path, sessions=1), TimingOut(time, 10), send=delivery)
    assert 20 <= time.now - started <= 20 + 10
    assert time.slept == [0.5]


def test_a_replay_that_stopped_continues_without_sending_a_span_twice(tmp_path):
    """Stopped mid-way (a log half delivered), then run again from the ledger: together the two runs deliver
    every span exactly once; a log that changed since is sent from its start."""
    paths = logs(tmp_path)
    reference = MemorySink()
    replay_files(paths, reference)
    time = FakeTime()
    ledger_path = tmp_path / "l.sqlite"
    sink = Refusing(lambda attempt: attempt > 3)
    first = Ledger(ledger_path)
    with pytest.raises(GaveUp):
        replay_files(paths, sink, send=ReplaySender(ledger=first, give_up_after=1,
                                                   identities={str(p): identity_of(p) for p in paths},
                                                   clock=time.clock, sleep=time.sleep), batch=5)
    first.close()  # the first run ends
    second = Ledger(ledger_path)
    progress = second.load()
    assert any(not p.done and p.sent for p in progress.values()), "a log was cut in the middle"
    todo = [(p, progress[str(p)].sent if str(p) in progress else 0) for p in paths
            if not (str(p) in progress and progress[str(p)].done)]
    sink.refuse = lambda attempt: False
    replay_files(todo, sink, send=ReplaySender(ledger=second, sent={str(p): n for p, n in todo}), batch=5)
    second.close(remove=True)
    assert keys(sink.records) == keys(reference.records) and max(keys(sink.records).values()) == 1
    assert identity_of(paths[0]) != "" and identity_of(tmp_path / "missing") == ""


def test_the_ledger_is_named_by_what_is_replayed_where():
    """The same logs to the same destination find the same ledger; another destination or setting another."""
    from pathlib import Path

    one = Ledger.path_for(Path("/s"), "http://a:4317 (grpc)", [Path("/x/1"), Path("/x/2")], "False:4096")
    assert one == Ledger.path_for(Path("/s"), "http://a:4317 (grpc)", [Path("/x/2"), Path("/x/1")], "False:4096")
    assert one != Ledger.path_for(Path("/s"), "http://b:4317 (grpc)", [Path("/x/1"), Path("/x/2")], "False:4096")
    assert one != Ledger.path_for(Path("/s"), "http://a:4317 (grpc)", [Path("/x/1"), Path("/x/2")], "True:4096")
    assert one.parent == Path("/s/replay")


def test_a_ledger_row_names_a_log_by_its_content(tmp_path):
    """same_log: a row made from the first bytes of a log still names it once those bytes are copied over it or
    more are appended; a row of a log read whole names it only at that size; other bytes name another log."""
    import os
    import zlib

    from copilot_otel.replay.ledger import content_identity, same_log

    path = tmp_path / "events.jsonl"
    data = b'{"a":1}\n{"b":2}\n'
    path.write_bytes(data)
    prefix = content_identity(8, zlib.crc32(data[:8]), whole=False)
    whole = content_identity(len(data), zlib.crc32(data), whole=True)
    assert same_log(prefix, path) and same_log(whole, path)
    by_inode = identity_of(path)
    copy = tmp_path / "copy"
    copy.write_bytes(data)
    os.replace(copy, path)  # a new inode and modification time, the same bytes
    assert same_log(prefix, path) and same_log(whole, path)
    assert not same_log(by_inode, path)  # the rule for a log that could not be hashed: its inode
    with open(path, "ab") as handle:
        handle.write(b'{"c":3}\n')
    assert same_log(prefix, path) and not same_log(whole, path)
    path.write_bytes(b'{"a":9}\n{"b":2}\n')
    assert not same_log(prefix, path) and not same_log(whole, path)
    assert not same_log(prefix, tmp_path / "missing")


def test_a_ledger_keeps_a_path_that_is_not_utf8(tmp_path):
    """A log in a folder whose name is no UTF-8: its progress is recorded and read back under the same path."""
    odd = os.fsdecode(b"/home/session-state/\xff\x1b[2J/events.jsonl")
    ledger = Ledger(tmp_path / "l.sqlite")
    try:
        ledger.record([(odd, "1:2:3", 4, False), ("/a/events.jsonl", "5:6:7", 8, True)])
        assert ledger.load() == {odd: Progress("1:2:3", 4, False), "/a/events.jsonl": Progress("5:6:7", 8, True)}
    finally:
        ledger.close(remove=True)
    assert list(tmp_path.iterdir()) == []
