"""The daemon's reader over real files that are written in pieces, truncated, replaced, deleted and
read again after a restart: every span of the real CLI logs (tests/fixtures/cli/1.0.102) exported
once, as a replay of the final files exports them, and nothing rejected.

The real ``Daemon`` runs in this process (tests/support/inprocess.py): its watcher, reader, queue
and checkpoint are the ones ``copilot-otel run`` uses; what only the process shows (signals, the
endpoint, an OTLP backend) stays in tests/e2e/test_daemon.py. FileTail's own cases are in
tests/unit/test_tail.py; here they go through discovery, the model and the export.
"""

from __future__ import annotations

import gc
import os
import shutil
import threading
from pathlib import Path

import pytest

from copilot_otel.config import Config
from copilot_otel.daemon.daemon import Daemon
from copilot_otel.delivery.sinks import MemorySink
from copilot_otel.model.attrs import COPILOT_RUNNING
from tests.support.files import append, new_session
from tests.support.inprocess import InProcessDaemon
from tests.support.net import wait_until
from tests.support.scrape import value
from tests.support.spans import expected_keys

STORED = Path(__file__).resolve().parents[1] / "fixtures" / "cli" / "1.0.102"


def real_log(scenario: str) -> bytes:
    """The event log the real CLI 1.0.102 wrote for a scenario."""
    return next((STORED / scenario / "session-state").glob("*/events.jsonl")).read_bytes()


def lines_of(scenario: str) -> list[bytes]:
    return real_log(scenario).splitlines(keepends=True)


def rejected(daemon: InProcessDaemon) -> float:
    return sum(v for (n, _l), v in daemon.scrape().items() if n == "copilot_otel_lines_rejected_total")


def test_line_written_in_two_pieces(tmp_path):
    """A partial line waits for its newline: no error, no span, then the span."""
    lines = lines_of("plain")
    home = tmp_path / "home"
    path = new_session(home, "two-pieces")
    cut = next(i for i, line in enumerate(lines) if b'"tool.execution_complete"' in line)
    with InProcessDaemon(home, tmp_path / "state") as daemon:
        append(path, b"".join(lines[:cut]))
        half = len(lines[cut]) // 2
        append(path, lines[cut][:half])
        wait_until(lambda: value(daemon.scrape(), "copilot_otel_events_read_total", type="tool.execution_start"),
                   what="the lines before the split one")
        # The reader has seen the file with the half line in it (its size) and handed out the lines before it.
        whole = len(b"".join(lines[:cut]))

        def saw_the_half_line() -> bool:
            follower = daemon.daemon.sessions.get(path)
            return follower is not None and (follower.tail.size, follower.tail.offset) == (whole + half, whole)

        wait_until(saw_the_half_line, what="the reader to read the half line and stop before it")
        # No finished tool span. (The fixture's events are days old, so the stuck check may export a snapshot of
        # the open tool, marked github.copilot.running: that is not the span the half line would finish.)
        assert not [r for r in daemon.sink.records
                    if r.name.startswith("execute_tool") and not r.attributes.get(COPILOT_RUNNING)]
        append(path, lines[cut][half:] + b"".join(lines[cut + 1:]))
        daemon.wait_for_keys(expected_keys([path]))
        assert rejected(daemon) == 0


def test_restart_with_partial_last_line(tmp_path):
    """Stopped while a line is half written, restarted after it completes: exported once."""
    lines = lines_of("failing_tool")
    home, state, sink = tmp_path / "home", tmp_path / "state", MemorySink()
    path = new_session(home, "partial-restart")
    cut = len(lines) // 2
    with InProcessDaemon(home, state, sink=sink) as daemon:
        append(path, b"".join(lines[:cut]) + lines[cut][:10])
        wait_until(lambda: value(daemon.scrape(), "copilot_otel_checkpoint_commits_total"), what="a commit")
    append(path, lines[cut][10:] + b"".join(lines[cut + 1:]))
    with InProcessDaemon(home, state, sink=sink) as daemon:
        got = daemon.wait_for_keys(expected_keys([path]))
    assert len(daemon.keys()) == len(got) == len(set(got))


def test_restart_between_export_and_checkpoint(tmp_path):
    """Commits lost after an export: the restart re-sends, with identical ids, and loses nothing."""
    lines = lines_of("subagent")
    home, state, sink = tmp_path / "home", tmp_path / "state", MemorySink()
    path = new_session(home, "lost-commit")
    cut = next(i for i, line in enumerate(lines) if b'"subagent.started"' in line)
    with InProcessDaemon(home, state, sink=sink) as daemon:
        append(path, b"".join(lines[:cut]))
        wait_until(lambda: value(daemon.scrape(), "copilot_otel_events_read_total", type="subagent.started") == 0
                   and value(daemon.scrape(), "copilot_otel_checkpoint_commits_total"), what="a commit")
    saved = tmp_path / "checkpoint-before"
    shutil.copytree(state, saved)
    append(path, b"".join(lines[cut:]))
    with InProcessDaemon(home, state, sink=sink) as daemon:
        daemon.wait_for_keys(expected_keys([path]))
    shutil.rmtree(state)
    shutil.copytree(saved, state)  # as if every commit after the first export never happened
    with InProcessDaemon(home, state, sink=sink) as daemon:
        wait_until(lambda: len(daemon.keys()) > len(set(daemon.keys())), what="the re-sent spans")
    got = daemon.keys()
    assert set(got) == set(expected_keys([path]))  # duplicates are identical spans, nothing lost


@pytest.mark.parametrize("keep", ["nothing", "half"])
def test_truncate_then_write(tmp_path, keep):
    """A truncated file (to nothing, or to its first half: the same first bytes) is read again
    from the start: both generations are exported, the second with ids of its own."""
    home = tmp_path / "home"
    path = new_session(home, "truncated")
    first, second = real_log("plain"), real_log("failing_tool")
    with InProcessDaemon(home, tmp_path / "state") as daemon:
        path.write_bytes(first)
        daemon.wait_for_keys(expected_keys([path]))
        before = set(daemon.keys())
        lines = first.splitlines(keepends=True)
        with open(path, "r+b") as handle:
            handle.truncate(0 if keep == "nothing" else len(b"".join(lines[:len(lines) // 2])))
        # Seen before it grows again (a cut regrown past its old size between two looks reads as an append).
        wait_until(lambda: getattr(daemon.daemon.sessions.get(path), "generation", 0) == 1, what="the truncation seen")
        append(path, second)
        daemon.wait_for_keys(sorted(before | set(expected_keys([path], generation=1))))


def test_file_replaced_by_a_new_one(tmp_path):
    """A new file (new inode) under the same name is read from its start, as a new generation."""
    home = tmp_path / "home"
    path = new_session(home, "replaced")
    with InProcessDaemon(home, tmp_path / "state") as daemon:
        path.write_bytes(real_log("multi_turn"))
        daemon.wait_for_keys(expected_keys([path]))
        before = set(daemon.keys())
        fresh = path.with_name("events.jsonl.new")
        fresh.write_bytes(real_log("autopilot"))
        os.replace(fresh, path)
        daemon.wait_for_keys(sorted(before | set(expected_keys([path], generation=1))))


def test_deleted_empty_blank_and_crlf(tmp_path):
    """A file deleted as soon as it appears, an empty file written later, blank and CRLF lines:
    no crash, no rejected line, every span of the surviving logs."""
    home = tmp_path / "home"
    gone = new_session(home, "deleted")
    empty = new_session(home, "empty-then-written")
    crlf = new_session(home, "crlf")
    # The deleted log appears whole (a rename) and vanishes at once: the daemon may or may not
    # catch it in between, so its spans may be exported, complete, but never in part.
    copy = tmp_path / "copy" / "deleted" / "events.jsonl"
    copy.parent.mkdir(parents=True)
    copy.write_bytes(real_log("plain"))
    staged = gone.with_name("staged")
    with InProcessDaemon(home, tmp_path / "state") as daemon:
        staged.write_bytes(copy.read_bytes())
        os.rename(staged, gone)
        gone.unlink()
        empty.write_bytes(b"")
        crlf.write_bytes(b"\n\n" + real_log("multi_turn").replace(b"\n", b"\r\n\n"))
        wait_until(lambda: empty in daemon.daemon.sessions, what="the empty log followed")
        append(empty, real_log("plain"))
        wanted = set(expected_keys([empty, crlf]))
        wait_until(lambda: set(daemon.keys()) >= wanted, timeout=20, what="the surviving logs' spans")
        extra = set(daemon.keys()) - wanted
        assert not extra or extra == set(expected_keys([copy])), "the deleted log exported in part"
        samples = daemon.scrape()
        assert rejected(daemon) == 0
        assert value(samples, "copilot_otel_files_watched") == 2


def test_rescan_finds_what_no_watch_reported(tmp_path):
    """Without inotify (--poll), the periodic rescan alone finds new folders and appends."""
    home = tmp_path / "home"
    with InProcessDaemon(home, tmp_path / "state", poll=True, rescan_interval=0.3) as daemon:
        path = new_session(home, "polled")
        path.write_bytes(real_log("plain"))
        daemon.wait_for_keys(expected_keys([path]))


def test_from_end_skips_history(tmp_path):
    """--from-end: history present at the first start is not exported; what comes later is."""
    home = tmp_path / "home"
    old = new_session(home, "history")
    old.write_bytes(real_log("plain"))
    with InProcessDaemon(home, tmp_path / "state", from_start=False) as daemon:
        fresh = new_session(home, "after-start")
        fresh.write_bytes(real_log("multi_turn"))
        daemon.wait_for_keys(expected_keys([fresh]))
        assert value(daemon.scrape(), "copilot_sessions_started_total") == 1
    assert not [r for r in daemon.sink.records if r.attributes.get("gen_ai.conversation.id") == "history"]


def test_the_collector_is_off_while_the_history_is_read_then_it_is_frozen(tmp_path):
    """`copilot-otel run` (own_gc): while the logs there at the start are read, the cyclic collector is off
    (each collection would walk everything read so far); once they are read it is on again and what the
    history left is frozen out of its reach."""
    home = tmp_path / "home"
    for n in range(20):
        new_session(home, f"history-{n}").write_bytes(real_log("plain"))
    config = Config(copilot_home=home, state_dir=tmp_path / "state", idle_quiet=0.3, rescan_interval=1.0,
                    backfill=True)
    daemon = Daemon(config, sink=MemorySink(), own_gc=True)
    gc.unfreeze()  # what an earlier test in this process froze (base/workers.py freezes) must not pass for ours
    enabled_while_reading: list[bool] = []
    frozen_before_reading: list[int] = []  # run() freezes what start-up built before the first read
    read = daemon._read

    def observed(path):
        if not frozen_before_reading:
            frozen_before_reading.append(gc.get_freeze_count())
        enabled_while_reading.append(gc.isenabled())
        return read(path)

    daemon._read = observed
    thread = threading.Thread(target=daemon.run, name="daemon-in-process")
    try:
        thread.start()
        # the history frozen too: more than start-up froze (waiting for any freeze raced the first pass on a busy
        # machine: start-up's own freeze satisfied it before the 20 logs were read)
        wait_until(lambda: frozen_before_reading and gc.get_freeze_count() > frozen_before_reading[0],
                   what="the history frozen")
        assert len(daemon.sessions) == 20
        assert len(enabled_while_reading) >= 20 and not any(enabled_while_reading)
        assert gc.isenabled()
    finally:
        daemon.request_stop()
        thread.join(30)
        gc.unfreeze()
        gc.enable()
