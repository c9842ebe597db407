"""status.py, catalog.py and listing.py: a session's state named from its files by the daemon's rules
(the same answer as the daemon's own view), its JSON form, the summary cache, and the listing's filters."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from msgspec.structs import replace

from copilot_otel.catalog.cache import Catalog
from copilot_otel.catalog.status import ENDED, SessionStatus, status_of
from copilot_otel.cli.listing import parse_since, select
from copilot_otel.config import ModelOptions
from copilot_otel.daemon.follow import Follower
from copilot_otel.model.pipeline import Outputs
from copilot_otel.model.sessions import SessionModel
from copilot_otel.source.liveness import ABANDONED_RETENTION, StuckPolicy, lock_pids
from copilot_otel.source.sources import SourceError, find_session
from copilot_otel.vocab import ABANDONED, IDLE, STUCK, WAITING_TOOL
from tests.support.events import SessionLog

POLICY = StuckPolicy(600.0, 1800.0, {"bash": 3600.0})


def dead_pid() -> int:
    """The pid of a process that has exited (and been reaped)."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def write_session(root, session_id: str, log: SessionLog, *, pids=()) -> os.PathLike:
    folder = root / "session-state" / session_id
    folder.mkdir(parents=True)
    (folder / "events.jsonl").write_bytes(log.jsonl())
    for pid in pids:
        (folder / f"inuse.{pid}.lock").write_text(str(pid))
    return folder / "events.jsonl"


def in_repo(session_id: str) -> SessionLog:
    log = SessionLog(session_id)
    log.add("session.start", {"sessionId": session_id, "copilotVersion": "1.0.102", "selectedModel": "gpt-5",
                              "context": {"cwd": "/work/api", "repository": "acme/api", "branch": "main"}})
    return log


def waiting_on_bash(session_id: str) -> SessionLog:
    log = in_repo(session_id)
    log.user()
    log.calling(("bash", "call-1"))
    return log


def summary_of(path):
    """The daemon's follower of a session log, read to its end."""
    follower = Follower.start(path, ModelOptions(), max_line_bytes=1 << 20, pids=lock_pids(path.parent))
    follower.read(Outputs(), warn=lambda *a: None)
    return follower


@pytest.mark.parametrize("quiet,state", [(10, WAITING_TOOL), (3000, WAITING_TOOL), (3700, STUCK)])
def test_a_session_waiting_on_a_tool_is_named_by_that_tools_threshold(tmp_path, quiet, state):
    """From the files: a live session waiting on bash (its own 3600 s threshold) is waiting_tool, then stuck;
    the daemon's view of the same file names it the same."""
    path = write_session(tmp_path, "s-bash", waiting_on_bash("s-bash"), pids=[os.getpid()])
    follower = summary_of(path)
    summary = follower.model.summary()
    now = summary.last_event_ns / 1e9 + quiet
    from_files = status_of(summary, path, policy=POLICY, now=now)
    # The daemon, which saw that last event arrive ``quiet`` seconds ago on its monotonic clock.
    by_daemon = status_of(summary, path, policy=POLICY, now=now, liveness=follower.liveness(),
                          monotonic=follower.seen_at + quiet)
    assert (from_files.state, from_files.waiting_on) == (by_daemon.state, by_daemon.waiting_on) == (state, "bash")
    assert from_files.stalled_seconds == pytest.approx(quiet if state == STUCK else 0.0)


def test_a_session_whose_process_died_mid_turn_is_abandoned_then_ended(tmp_path):
    """Mid-turn with its process gone: abandoned (still showing the tool it was running) until an hour after
    its last event, ended after that."""
    path = write_session(tmp_path, "s-dead", waiting_on_bash("s-dead"), pids=[dead_pid()])
    summary = summary_of(path).model.summary()
    last = summary.last_event_ns / 1e9
    soon = status_of(summary, path, policy=POLICY, now=last + 120)
    assert (soon.state, soon.waiting_on, soon.stalled_seconds) == (ABANDONED, "bash", pytest.approx(120))
    assert status_of(summary, path, policy=POLICY, now=last + ABANDONED_RETENTION + 1).state == ENDED


def test_idle_with_a_live_process_is_idle_and_a_shut_down_session_ended(tmp_path):
    """A session between interactions whose CLI waits is idle; one that shut down is ended."""
    log = in_repo("s-idle")
    log.user()
    log.answer()
    idle_path = write_session(tmp_path, "s-idle", log, pids=[os.getpid()])
    idle = summary_of(idle_path).model.summary()
    assert status_of(idle, idle_path, policy=POLICY, now=idle.last_event_ns / 1e9 + 5000).state == IDLE
    log.shutdown()
    over_path = write_session(tmp_path, "s-over", log)
    over = summary_of(over_path).model.summary()
    assert status_of(over, over_path, policy=POLICY, now=over.last_event_ns / 1e9 + 5).state == ENDED


def test_the_json_form_is_a_row_of_the_web_api_and_goes_both_ways(tmp_path):
    """A status's JSON is the web view's /api/sessions row (the summary, the state now, stalled seconds,
    times in milliseconds), and gives the same status back, to the millisecond."""
    path = write_session(tmp_path, "s-json", waiting_on_bash("s-json"), pids=[os.getpid()])
    summary = summary_of(path).model.summary()
    status = status_of(summary, path, policy=POLICY, now=summary.last_event_ns / 1e9 + 4000)
    now = summary.last_event_ns / 1e9 + 4000
    record = status.to_json(now=now)
    assert record["id"] == "s-json" and record["state"] == STUCK and record["repository"] == "acme/api"
    assert record["waiting_on"] == "bash" and record["tokens"] == summary.tokens
    assert record["started_ms"] == summary.started_ns // 1_000_000
    assert record["stalled_since_ms"] == int(now * 1000) - round(record["stalled_s"] * 1000)
    back = SessionStatus.from_json(record)  # read on the same clock: stalled_since_ms counts back from it
    assert back.to_json(now=now) == record and (back.state, back.waiting_on) == (STUCK, "bash")


def test_the_catalog_reads_a_log_again_only_when_it_changed(tmp_path):
    """A summary is kept under its log's inode, size and mtime (in memory and in the cache file): the same
    bytes are not read twice, a log that grew is read again, a log gone is forgotten."""
    log = in_repo("s-cat")
    log.user()
    log.answer()
    path = write_session(tmp_path, "s-cat", log)
    cache = tmp_path / "state" / "summaries.json"
    first = Catalog(tmp_path / "session-state", cache_file=cache).scan()
    assert [item.summary.turns for item in first] == [1]
    # Same inode, size and mtime, other bytes: a catalog that trusts its cache does not notice.
    st = path.stat()
    with open(path, "r+b") as handle:
        handle.write(b" " * st.st_size)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert [item.summary.turns for item in Catalog(tmp_path / "session-state", cache_file=cache).scan()] == [1]
    log.answer()
    path.write_bytes(log.jsonl())
    assert [item.summary.turns for item in Catalog(tmp_path / "session-state", cache_file=cache).scan()] == [2]
    assert oct(cache.stat().st_mode & 0o777) == "0o600"
    path.unlink()
    path.parent.rmdir()
    assert Catalog(tmp_path / "session-state", cache_file=cache).scan() == []
    assert b"s-cat" not in cache.read_bytes()


def test_the_catalog_skips_logs_last_written_before_since(tmp_path):
    """--since prunes by the log's mtime before reading it."""
    log = in_repo("s-old")
    log.user()
    path = write_session(tmp_path, "s-old", log)
    os.utime(path, (1_000_000_000, 1_000_000_000))
    assert Catalog(tmp_path / "session-state").scan(since_ns=2_000_000_000 * 10 ** 9) == []


def test_an_unreadable_session_folder_says_why(tmp_path):
    """A session-state folder that cannot be listed is a SourceError naming it and the reason."""
    with pytest.raises(SourceError, match="session-state: cannot read it"):
        Catalog(tmp_path / "session-state").scan()


def status(session_id: str, state: str, *, repository: str | None = None, started: int = 0, last: int = 0):
    """A status with only what the filters read."""
    empty = SessionModel(session_id).summary()
    return SessionStatus(replace(empty, repository=repository, started_ns=started, last_event_ns=last), state)


def test_filters_and_order():
    """--state (and `live`), --repository (owner/name, name, glob, any case) and --since; newest start first."""
    a = status("a", STUCK, repository="acme/api", started=3, last=30)
    b = status("b", ENDED, repository="acme/web", started=2, last=20)
    c = status("c", IDLE, started=1, last=10)
    everything = [c, a, b]
    assert [s.session_id for s in select(everything)] == ["a", "b", "c"]
    assert [s.session_id for s in select(everything, states=["live"])] == ["a", "c"]
    assert [s.session_id for s in select(everything, states=[ENDED, IDLE])] == ["b", "c"]
    assert [s.session_id for s in select(everything, repository="ACME/api")] == ["a"]
    assert [s.session_id for s in select(everything, repository="web")] == ["b"]
    assert [s.session_id for s in select(everything, repository="acme/*")] == ["a", "b"]
    assert [s.session_id for s in select(everything, since=15e-9)] == ["a", "b"]


def test_since_takes_durations_and_dates():
    """30m, 2h, 1d, 1w before now, or an ISO date; anything else says what it expects."""
    assert parse_since("30m", now=10_000) == 8_200 and parse_since("2h", now=10_000) == 2_800
    assert parse_since("1d", now=100_000) == 13_600 and parse_since("1w", now=700_000) == 95_200
    assert parse_since("2026-12-01T00:00+00:00") == 1796083200
    with pytest.raises(ValueError, match="expected a duration"):
        parse_since("yesterday")


def test_find_session_by_prefix_or_latest(tmp_path):
    """A unique prefix names one session, `latest` the log written last; an ambiguous prefix names the candidates."""
    root = tmp_path / "session-state"
    for name, mtime in (("0f3a9c21-aaaa", 100), ("0f3b1111-bbbb", 300), ("7c00ffee-cccc", 200)):
        folder = root / name
        folder.mkdir(parents=True)
        (folder / "events.jsonl").write_text("")
        os.utime(folder / "events.jsonl", (mtime, mtime))
    assert find_session(root, "7c").parent.name == "7c00ffee-cccc"
    assert find_session(root, "0f3a").parent.name == "0f3a9c21-aaaa"
    assert find_session(root, "latest").parent.name == "0f3b1111-bbbb"
    with pytest.raises(SourceError, match=r"2 sessions start with it \(0f3a9c21-aaaa, 0f3b1111-bbbb\)"):
        find_session(root, "0f3")
    with pytest.raises(SourceError, match="not a session id"):
        find_session(root, "99")
