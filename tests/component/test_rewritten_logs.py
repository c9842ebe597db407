"""A log rewritten under the daemon never sends one span id with two contents.

A real log (the real CLI's, from the fixtures) is written in pieces cut anywhere, and now and then truncated and
written again with the same event ids and other content (tool names, token counts, lines left out), cut mid-line,
in place or through a new file, while the daemon reads it and across restarts. Whatever the order, the trace
file holds one content per span id: a rewrite of bytes already read is a new generation with ids of its own. A
log only appended to stays generation 0: exactly the spans a replay of it gives.
"""

from __future__ import annotations

import os
import re
import tempfile
from collections import defaultdict
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.inprocess import InProcessDaemon
from tests.support.net import wait_until
from tests.support.otlp_json import read_spans
from tests.support.scrape import value
from tests.support.spans import expected_keys, key

FIXTURE = next((Path(__file__).resolve().parents[1] / "fixtures" / "cli" / "1.0.102" / "subagent"
                / "session-state").iterdir()) / "events.jsonl"
SETTINGS = {"stuck_after": 3600.0}  # no snapshot of a running span: only final spans reach the file
RUNNING = "github.copilot.running"


def _renamed_tools(data: bytes) -> bytes:
    return re.sub(rb'"toolName":"([^"]+)"', rb'"toolName":"\1_as_renamed_by_a_rewrite_of_the_log"', data)


def _other_tokens(data: bytes) -> bytes:
    return re.sub(rb'"(input|output)Tokens":(\d+)', lambda m: b'"%sTokens":%d' % (m[1], int(m[2]) * 3 + 7), data)


def _fewer_lines(data: bytes) -> bytes:
    lines = data.splitlines(keepends=True)
    return b"".join(line for i, line in enumerate(lines) if i == 0 or i % 4)


ORIGINAL = FIXTURE.read_bytes()
# The same log and three rewrites of it: the same event ids, other content.
VARIANTS = (ORIGINAL, _renamed_tools(ORIGINAL), _other_tokens(ORIGINAL), _fewer_lines(_renamed_tools(ORIGINAL)))
assert len(set(VARIANTS)) == len(VARIANTS)

GROW = st.tuples(st.just("grow"), st.integers(1, 6000))
REWRITE = st.tuples(st.just("rewrite"), st.integers(0, len(VARIANTS) - 1), st.floats(0.0, 1.0),
                    st.sampled_from(["truncate", "overwrite", "new_file"]))
SETTLE = st.tuples(st.sampled_from(["settle", "settle", "settle_dead"]))
OPS = st.lists(st.one_of(GROW, GROW, REWRITE, REWRITE, SETTLE, SETTLE, st.tuples(st.just("restart"))), min_size=3,
               max_size=14)


class Writer:
    """The log on disk: a prefix of one variant, grown or rewritten."""

    def __init__(self, path: Path, *, alive: bool = True) -> None:
        self.path, self.variant, self.cursor = path, VARIANTS[0], 0
        path.parent.mkdir(parents=True)
        if alive:  # its CLI's lock, naming a live process; without it a session cut off mid-turn is abandoned
            (path.parent / f"inuse.{os.getpid()}.lock").write_text(str(os.getpid()))
        path.write_bytes(b"")

    def grow(self, size: int) -> None:
        """Append the next ``size`` bytes of the variant (cut anywhere, mid-line too)."""
        piece = self.variant[self.cursor:self.cursor + size]
        with open(self.path, "ab") as handle:
            handle.write(piece)
        self.cursor += len(piece)

    def rewrite(self, variant: int, fraction: float, how: str) -> None:
        """Write the log again as a prefix of ``variant``: in place (truncated first, or written over), or as a new
        file moved over it."""
        self.variant = VARIANTS[variant]
        self.cursor = int(len(self.variant) * fraction)
        data = self.variant[:self.cursor]
        if how == "truncate":  # cut to nothing, then written: a reader may see it empty in between
            with open(self.path, "r+b") as handle:
                handle.truncate(0)
                handle.write(data)
        elif how == "overwrite":  # written over from the start, then cut to its length: never seen shorter if longer
            with open(self.path, "r+b") as handle:
                handle.write(data)
                handle.truncate(len(data))
        else:
            scratch = self.path.with_name("events.jsonl.new")
            scratch.write_bytes(data)
            os.replace(scratch, self.path)


def caught_up(daemon: InProcessDaemon, path: Path) -> bool:
    """Has the daemon read the log as it is now, to its last complete line, and handed over what it made?"""
    follower = daemon.daemon.sessions.get(path)
    data, st_now = path.read_bytes(), os.stat(path)
    tail = follower.tail if follower is not None else None
    # tail.size is the size fstat gave at the tail's last read, which may have read on past it while the writer
    # wrote: a tail at the file's end has seen it whole, whatever that size was.
    return (tail is not None and tail.identity is not None and tail.identity.inode == st_now.st_ino
            and len(data) in (tail.size, tail.offset) and tail.offset == data.rfind(b"\n") + 1
            and daemon.daemon.outbox.waiting == 0
            and daemon.daemon.queue.flush(0))  # nothing queued, nothing in flight: written to the trace file


def settled_dead(daemon: InProcessDaemon, path: Path) -> bool:
    """Is the session, whose CLI is gone, found abandoned (its open spans sent as incomplete), or open no more?"""
    follower = daemon.daemon.sessions.get(path)
    model = follower.model if follower is not None else None
    return follower is not None and (follower.abandoned_at is not None or model is None or not model.mid_turn)


def contents_by_span_id(traces: Path) -> dict[str, set[tuple]]:
    """Every final span in the trace file, its distinct contents grouped by span id."""
    contents: dict[str, set[tuple]] = defaultdict(set)
    for span in read_spans(traces) if traces.exists() else ():
        if not span.attributes.get(RUNNING):
            contents[span.span_id].add(key(span))
    return contents


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=OPS, alive=st.booleans())
def test_rewrites_truncations_and_appends_never_send_one_span_id_with_two_contents(ops, alive):
    """Random appends, rewrites (in place or through a new file, cut anywhere) and restarts while the daemon
    reads, its CLI alive or gone (then what a session left open is ended as incomplete, and sent): every span id
    in the trace file has one content."""
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        home, state, traces = root / "home", root / "state", root / "traces.jsonl"
        writer = Writer(home / "session-state" / FIXTURE.parent.name / "events.jsonl", alive=alive)
        daemon = InProcessDaemon(home, state, traces_file=traces, **SETTINGS).__enter__()
        try:
            for op in ops:
                if op[0] == "grow":
                    writer.grow(op[1])
                elif op[0] == "rewrite":
                    writer.rewrite(op[1], op[2], op[3])
                elif op[0] == "settle" and writer.path.read_bytes().count(b"\n"):
                    wait_until(lambda now=daemon: caught_up(now, writer.path), timeout=20,
                               what="the daemon to catch up")
                elif op[0] == "settle_dead" and not alive and writer.path.read_bytes().count(b"\n"):
                    wait_until(lambda now=daemon: caught_up(now, writer.path) and settled_dead(now, writer.path),
                               timeout=20, what="the daemon to find the session abandoned")
                elif op[0] == "restart":
                    daemon.__exit__(None, None, None)
                    daemon = InProcessDaemon(home, state, traces_file=traces, **SETTINGS).__enter__()
            if writer.path.read_bytes().count(b"\n"):
                wait_until(lambda: caught_up(daemon, writer.path), timeout=20, what="the daemon to catch up")
        finally:
            daemon.__exit__(None, None, None)
        twice = {span_id: sorted(found) for span_id, found in contents_by_span_id(traces).items() if len(found) > 1}
        assert not twice, f"span ids sent with two contents: {twice}"


def edit_counted(samples):
    """The samples, once they count a rewrite as an edit (None before)."""
    return samples if value(samples, "copilot_otel_log_generations_total", how="edited") >= 1 else None


@pytest.mark.parametrize("how", ["overwrite", "new_file"])
def test_a_session_abandoned_then_rewritten_is_a_new_generation(tmp_path, how):
    """Half a log read, its CLI gone mid-turn: what it left open is sent as incomplete. The log is then written
    again with the tool names changed (over itself in place, or as a new file moved over it): what the rewrite
    closes comes under a new generation's ids, never under those the incomplete spans were sent with."""
    home, state, traces = tmp_path / "home", tmp_path / "state", tmp_path / "traces.jsonl"
    writer = Writer(home / "session-state" / FIXTURE.parent.name / "events.jsonl", alive=False)
    half = ORIGINAL.index(b"\n", len(ORIGINAL) // 2) + 1
    with InProcessDaemon(home, state, traces_file=traces, **SETTINGS) as daemon:
        writer.grow(half)
        wait_until(lambda: caught_up(daemon, writer.path) and settled_dead(daemon, writer.path), timeout=20,
                   what="the session found abandoned")
        # found abandoned, its open spans are queued as incomplete: the file has them once the queue wrote them
        wait_until(lambda: {span_id for span_id, found in contents_by_span_id(traces).items()
                            if any('"incomplete"' in k[-1] for k in found)}, timeout=20,
                   what="the abandoned session's open spans, sent as incomplete")
        writer.rewrite(1, 1.0, how)
        wait_until(lambda: caught_up(daemon, writer.path), what="the rewritten log read")
        # the generation is counted once the rewrite is read: wait for the count, not for a fixed time
        samples = wait_until(lambda: edit_counted(daemon.scrape()), timeout=20, what="the rewrite counted as an edit")
    contents = contents_by_span_id(traces)
    twice = {span_id: sorted(found) for span_id, found in contents.items() if len(found) > 1}
    assert not twice, f"span ids sent with two contents: {twice}"
    assert value(samples, "copilot_otel_log_generations_total", how="edited") >= 1  # a write seen half done: twice


def test_a_rewrite_in_place_while_the_daemon_reads_is_a_new_generation_said_once(tmp_path):
    """The log written over in place (the same inode, never shorter than what was read: its lines shifted) with
    the tool names changed: found, said once, counted; the rewritten log's spans come under ids of their own, and
    no span id is sent with two contents."""
    home, state, traces = tmp_path / "home", tmp_path / "state", tmp_path / "traces.jsonl"
    writer = Writer(home / "session-state" / FIXTURE.parent.name / "events.jsonl")
    half = ORIGINAL.index(b"\n", len(ORIGINAL) // 2) + 1
    with InProcessDaemon(home, state, traces_file=traces, **SETTINGS) as daemon:
        writer.grow(half)
        wait_until(lambda: caught_up(daemon, writer.path), what="the first half read")
        before = set(contents_by_span_id(traces))
        assert before, "the first half's finished spans"
        writer.rewrite(1, 1.0, "overwrite")
        wait_until(lambda: caught_up(daemon, writer.path), what="the rewritten log read")
        # the generation is counted once the rewrite is read: wait for the count, not for a fixed time
        samples = wait_until(lambda: edit_counted(daemon.scrape()), timeout=20, what="the rewrite counted as an edit")
        # The queue is empty once the daemon caught up: the trace file holds everything it sent.
    contents = contents_by_span_id(traces)
    assert all(len(found) == 1 for found in contents.values())
    rewritten = expected_keys([writer.path], generation=1)
    assert {k[1] for k in rewritten if k[1] in contents} - before, "the rewrite's spans under generation 1's ids"
    assert value(samples, "copilot_otel_log_generations_total", how="edited") >= 1  # a write seen half done: twice


def test_a_log_only_appended_to_stays_generation_0_across_restarts(tmp_path):
    """Appends cut mid-line, read as they come and across two restarts: exactly the spans a replay of the log
    gives (generation 0), each once; no generation counted."""
    home, state, traces = tmp_path / "home", tmp_path / "state", tmp_path / "traces.jsonl"
    writer = Writer(home / "session-state" / FIXTURE.parent.name / "events.jsonl")
    pieces = [len(ORIGINAL) // 5] * 5 + [len(ORIGINAL)]
    for restart in range(3):
        with InProcessDaemon(home, state, traces_file=traces, **SETTINGS) as daemon:
            for size in pieces[restart * 2:restart * 2 + 2]:
                writer.grow(size)
                wait_until(lambda: caught_up(daemon, writer.path), what="the daemon to catch up")
            generations = sum(v for (name, _labels), v in daemon.scrape().items()
                              if name == "copilot_otel_log_generations_total")
            assert generations == 0
    assert writer.cursor == len(ORIGINAL)
    got = sorted(key(span) for span in read_spans(traces) if not span.attributes.get(RUNNING))
    assert got == expected_keys([writer.path])
