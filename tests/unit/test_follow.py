"""follow.py: one session log followed for the daemon: reading, compaction and rebuild, the floor
after a restart, skipping history, and the checkpoint position it offers."""

from __future__ import annotations

from datetime import UTC
from pathlib import Path

import pytest

from copilot_otel.config import DEFAULT_MAX_LINE_BYTES, ModelOptions
from copilot_otel.daemon.follow import Follower
from copilot_otel.model import attrs as A
from copilot_otel.model.pipeline import Outputs
from copilot_otel.vocab import END_INCOMPLETE, IDLE, INCOMPLETE, WAITING_TOOL, Metric
from tests.support.events import MODEL, SessionLog
from tests.support.files import append
from tests.support.model import label

SID = "session-1"
ROOT = "invoke_agent copilot"


def log_path(tmp_path: Path) -> Path:
    folder = tmp_path / "session-state" / SID
    folder.mkdir(parents=True)
    return folder / "events.jsonl"


def start(path: Path, **kwargs) -> Follower:
    return Follower.start(path, ModelOptions(), max_line_bytes=DEFAULT_MAX_LINE_BYTES, **kwargs)


def read(follower: Follower) -> Outputs:
    out = Outputs()
    result = follower.read(out, warn=lambda *args: None)
    assert not (result.gone or result.error)
    return out


def turn_running() -> SessionLog:
    """A session whose first turn is running."""
    log = SessionLog(SID)
    log.start()
    log.user()
    log.turn_start()
    return log


def finished_session() -> SessionLog:
    log = SessionLog(SID)
    log.start(cwd="/work/a")
    log.user()
    log.tool_turn(("bash", "call-1"))
    log.answer()
    log.shutdown()
    return log


def following(tmp_path: Path, log: SessionLog, **kwargs) -> tuple[Path, Follower]:
    """The log written to its session folder, followed and read to its end."""
    path = log_path(tmp_path)
    path.write_bytes(log.jsonl())
    follower = start(path, **kwargs)
    read(follower)
    return path, follower


def test_reads_what_was_appended(tmp_path):
    """A followed log delivers each event once, as it is appended, named after its folder."""
    log = finished_session()
    path = log_path(tmp_path)
    append(path, log.jsonl(0, 5))
    follower = start(path)
    first = read(follower)
    append(path, log.jsonl(5))
    second = read(follower)
    assert follower.session_id == SID
    assert sum(first.events.values()) + sum(second.events.values()) == len(log.entries)
    assert sorted(label(s) for s in first.spans + second.spans) == sorted(
        [ROOT, "turn 0", "turn 1", f"chat {MODEL}", f"chat {MODEL}", "execute_tool bash"])


def test_a_finished_session_is_compacted_to_its_position(tmp_path):
    """After its shutdown nothing is open: the model is dropped, the position kept; the view says idle."""
    path, follower = following(tmp_path, finished_session())
    assert follower.compact() is True
    assert follower.model is None
    assert follower.tail.offset == path.stat().st_size
    assert (follower.liveness().state, follower.liveness().last_event_ns) == (IDLE, 0)


def test_a_session_with_open_work_is_not_compacted(tmp_path):
    """A running turn keeps its model."""
    _path, follower = following(tmp_path, turn_running())
    assert follower.compact() is False and follower.model is not None


def test_a_compacted_session_that_grows_is_rebuilt_and_delivers_only_what_is_new(tmp_path):
    """When a compacted log grows (the CLI resumed the session), the model is rebuilt from the whole
    file, but only the new lines are counted and only the spans they close are delivered."""
    log = finished_session()
    path = log_path(tmp_path)
    path.write_bytes(log.jsonl())
    follower = start(path)
    before = read(follower)
    follower.compact()
    assert follower.wake() is False  # nothing changed yet
    old_entries = len(log.entries)
    log.resume()
    log.user("Again.")
    log.answer()
    log.shutdown()
    append(path, log.jsonl(old_entries))
    assert follower.wake() is True
    assert follower.floor_line == old_entries and follower.model is not None
    after = read(follower)
    new_types = [e["type"] for e in log.entries[old_entries:]]
    assert sum(after.events.values()) == len(new_types)
    assert sum(u.value for u in after.metrics if u.metric is Metric.TURNS) == new_types.count("assistant.turn_start")
    assert not {s.span_id for s in before.spans} & {s.span_id for s in after.spans}
    assert sorted(label(s) for s in after.spans) == sorted([ROOT, "turn 0", f"chat {MODEL}"])


def test_a_compacted_session_whose_file_was_truncated_starts_a_new_generation(tmp_path):
    """A compacted log cut shorter than its position is read again from the start."""
    path, follower = following(tmp_path, finished_session())
    follower.compact()
    other = SessionLog(SID, step_ms=7)
    other.start()
    with open(path, "r+b") as handle:
        handle.truncate(0)
    path.write_bytes(other.jsonl())
    assert follower.wake() is True
    out = Outputs()
    result = follower.read(out, warn=lambda *args: None)
    assert result.restarted == "truncated"
    assert dict(out.events) == {"session.start": 1}


def test_a_restart_resumes_from_the_checkpoint_without_delivering_anything_twice(tmp_path):
    """A follower started from a committed position re-reads the open interaction from its first
    event (to rebuild its spans) but delivers only what lies past the committed offset."""
    log = SessionLog(SID)
    log.start(cwd="/work/b")
    log.user()
    log.calling(("bash", "call-1"))
    path = log_path(tmp_path)
    path.write_bytes(log.jsonl())
    first = start(path)
    delivered = read(first)
    marker = first.marker()
    user_line = log.decoded()[1]
    assert (marker.offset, marker.resume_offset, marker.resume_line) == (path.stat().st_size, user_line.offset, 1)
    old = len(log.entries)
    log.tool_complete("call-1")
    log.turn_end()
    log.answer()
    log.shutdown()
    append(path, log.jsonl(old))
    restarted = start(path, restored=marker)
    assert (restarted.floor_line, restarted.tail.offset) == (marker.line, marker.resume_offset)
    out = read(restarted)
    assert sum(out.events.values()) == len(log.entries) - old
    assert sorted(label(s) for s in out.spans) == sorted(["execute_tool bash", "turn 0", "turn 1", f"chat {MODEL}",
                                                         ROOT])
    assert not {s.span_id for s in delivered.spans} & {s.span_id for s in out.spans}
    root = next(s for s in out.spans if s.name == ROOT)
    assert root.attributes[A.COPILOT_CWD] == "/work/b"  # a session fact primed from before the resume position


def test_the_marker_below_the_floor_keeps_the_floor_and_the_generation(tmp_path):
    """While reading has not passed what was delivered before, the position offered keeps the floor (what was
    delivered is never offered again after a restart) and the generation its spans were made under; it resumes
    where the read is."""
    log = finished_session()
    path = log_path(tmp_path)
    path.write_bytes(log.jsonl())
    follower = start(path)
    follower.floor_line = len(log.entries) + 1
    follower.generation = 2
    read(follower)
    marker = follower.marker()
    assert (marker.line, marker.generation) == (len(log.entries) + 1, 2)
    assert (marker.offset, marker.resume_offset, marker.resume_line) == (len(log.jsonl()),) * 2 + (len(log.entries),)


def test_skip_history_delivers_only_what_comes_later(tmp_path):
    """--from-end: a log present at start is followed from its end; the session facts before it are known."""
    log = SessionLog(SID)
    log.start(cwd="/work/c")
    log.user()
    log.answer()
    path = log_path(tmp_path)
    path.write_bytes(log.jsonl() + b'{"type":"session.info"')  # a partial last line is not history yet
    follower = start(path, skip_history=True)
    lines = len(log.entries)
    assert (follower.tail.offset, follower.tail.line, follower.floor_line) == (len(log.jsonl()), lines, lines)
    with open(path, "r+b") as handle:
        handle.truncate(len(log.jsonl()))
    old = len(log.entries)
    log.user("Later.")
    log.turn_start()
    log.tool_start("bash", "call-1")
    append(path, log.jsonl(old))
    out = read(follower)
    assert sum(out.events.values()) == 3
    assert follower.model.state == WAITING_TOOL
    out.add(follower.model.finish())
    root = next(s for s in out.spans if s.name == ROOT)
    assert (root.attributes[A.COPILOT_CWD], root.attributes[A.ERROR_TYPE]) == ("/work/c", INCOMPLETE)


def another_session() -> SessionLog:
    """A finished session other than SID's (its events have other ids), written into SID's folder."""
    log = SessionLog("other-session")
    log.start(cwd="/work/a")
    log.user()
    log.answer()
    log.shutdown()
    return log


def test_a_replaced_file_finishes_the_old_generation(tmp_path):
    """A log replaced by another session's log ends what the old one left open, then reads the new one from 0."""
    path, follower = following(tmp_path, turn_running())
    fresh = path.with_name("new")
    fresh.write_bytes(another_session().jsonl())
    fresh.replace(path)
    out = read(follower)
    incomplete = [label(s) for s in out.spans if s.attributes.get(A.ERROR_TYPE) == INCOMPLETE]
    assert sorted(incomplete) == sorted([ROOT, "turn 0"])
    assert out.events["session.start"] == 1 and follower.floor_line == 0


def test_finish_and_view(tmp_path):
    """finish() ends open work as incomplete; view() is a frozen snapshot of state, last event and pids."""
    log = turn_running()
    last = log.tool_start("bash", "call-1")
    _path, follower = following(tmp_path, log, pids=[4242])
    view = follower.liveness()
    assert (view.session_id, view.state, view.last_event_ns, view.pids) == (SID, WAITING_TOOL, log.ns(last), (4242,))
    out = Outputs()
    follower.finish(out, END_INCOMPLETE)
    assert {s.attributes.get(A.ERROR_TYPE) for s in out.spans} == {INCOMPLETE}


def test_a_crash_found_then_compacted_is_not_delivered_again_when_the_cli_resumes(tmp_path):
    """The real crash_resume log: the daemon ends the work the dead CLI left open, compacts the session,
    and when the resumed CLI appends, the rebuilt model exports only the new work, never those spans again."""
    source = next((Path(__file__).resolve().parent.parent / "fixtures" / "situations" / "crash_resume"
                   / "session-state").glob("*/events.jsonl"))
    lines = source.read_bytes().splitlines(keepends=True)
    cut = next(i for i, line in enumerate(lines) if b'"session.resume"' in line)
    path = log_path(tmp_path)
    path.write_bytes(b"".join(lines[:cut]))
    follower = start(path)
    delivered = read(follower).spans
    out = Outputs()
    follower.finish(out, END_INCOMPLETE)  # its process was found dead
    delivered += out.spans
    assert follower.compact()
    append(path, b"".join(lines[cut:]))
    assert follower.wake()
    after = read(follower).spans
    assert after and not {s.span_id for s in after} & {s.span_id for s in delivered}


def test_a_log_truncated_to_a_prefix_and_regrown_never_reuses_a_span_id(tmp_path):
    """A live log cut back to its first lines while a tool runs, then written on to its end: what the
    old generation left open ends as incomplete (ERROR) under its ids, the new generation's spans
    (OK) have ids of their own, so no span id is ever delivered twice with different content."""
    log = turn_running()
    prefix = log.jsonl()
    old = len(log.entries)
    log.tool_start("bash", "call-1")
    path, follower = following(tmp_path, log)
    assert follower.model.state == WAITING_TOOL
    with open(path, "r+b") as handle:
        handle.truncate(len(prefix))
    cut = read(follower)
    incomplete = {s.span_id: s for s in cut.spans}
    assert {s.attributes.get(A.ERROR_TYPE) for s in incomplete.values()} == {INCOMPLETE}
    assert "execute_tool bash" in {s.name for s in incomplete.values()}
    log.tool_complete("call-1")
    log.turn_end()
    log.answer()
    log.shutdown()
    append(path, log.jsonl(old))
    regrown = read(follower).spans
    assert follower.generation == 1 and follower.marker().generation == 1
    assert "execute_tool bash" in {s.name for s in regrown}
    assert not {s.span_id for s in regrown} & set(incomplete)
    assert not {s.trace_id for s in regrown} & {s.trace_id for s in incomplete.values()}
    parents = {s.parent_span_id for s in regrown} - {None}
    assert parents <= {s.span_id for s in regrown}  # the new generation's tree holds together


def test_a_restart_keeps_the_generation(tmp_path):
    """The generation is part of the checkpoint position: after a restart the same ids come out."""
    path, follower = following(tmp_path, turn_running())
    fresh = path.with_name("new")
    fresh.write_bytes(another_session().jsonl())
    fresh.replace(path)
    first = read(follower)
    restarted = start(path, restored=follower.marker())
    assert restarted.generation == follower.generation == 1
    log = another_session()
    log.user("again")
    log.answer()
    append(path, log.jsonl(len(another_session().entries)))
    assert {s.span_id for s in read(restarted).spans}.isdisjoint({s.span_id for s in first.spans})


def test_silence_is_counted_from_arrival_except_for_a_log_written_before_the_daemon(tmp_path):
    """seen_at: the monotonic time a read found new events; for history (a log written before the daemon
    started) that time less the last event's age, never more than now (a log stamped ahead is measured from
    its arrival)."""
    import time
    from datetime import datetime, timedelta

    for age, history, expected in ((1000.0, False, 0.0), (1000.0, True, 1000.0), (-7200.0, True, 0.0)):
        log = SessionLog(SID, start=datetime.now(UTC) - timedelta(seconds=age))
        log.start()
        log.user()
        log.turn_start()
        path = log_path(tmp_path / f"{age}-{history}")
        path.write_bytes(log.jsonl())
        follower = start(path, history=history)
        read(follower)
        assert time.monotonic() - follower.seen_at == pytest.approx(expected, abs=5)
        assert follower.liveness().seen_at == follower.seen_at
