"""The sessions at a glance (overview.py): states named by the daemon's rule, live first, filters, pages."""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path

import pytest

from copilot_otel.catalog.board import STATE_ORDER, Live, make_board, page
from copilot_otel.catalog.cache import Catalog
from copilot_otel.config import Config, ModelOptions
from copilot_otel.daemon.daemon import Daemon
from copilot_otel.delivery.sinks import MemorySink
from copilot_otel.source.liveness import StuckPolicy
from copilot_otel.vocab import ABANDONED, ENDED, IDLE, STUCK, WAITING_TOOL, WAITING_USER, WORKING
from copilot_otel.web.overview import DaemonSessions, HistorySessions
from tests.support.events import BASE_TIME, SessionLog
from tests.support.files import new_session

STUCK_AFTER = 60.0
NOW = (BASE_TIME + timedelta(minutes=10)).timestamp()  # the clock the sources are given


def write(home: Path, log: SessionLog, *, held: bool = True) -> Path:
    """The log in its session folder, held by this process's lock file unless ``held`` is False."""
    if held:
        path = new_session(home, log.session_id)
    else:
        path = home / "session-state" / log.session_id / "events.jsonl"
        path.parent.mkdir(parents=True)
    path.write_bytes(log.jsonl())
    return path


def started(name: str, minutes_ago: float, repository: str | None = None) -> SessionLog:
    """A session that started ``minutes_ago`` before NOW, in ``repository`` if given."""
    log = SessionLog(name, start=BASE_TIME + timedelta(minutes=10 - minutes_ago))
    if repository:
        log.start(repository=repository, branch=f"topic/{name}", gitRoot="/work")
    else:
        log.start()
    return log


@pytest.fixture
def home(tmp_path) -> Path:
    """A COPILOT_HOME with one session in each state the page groups by."""
    home = tmp_path / "home"
    working = started("working", 0.5, "octo/app")
    working.user()
    working.turn_start()
    write(home, working)
    tool = started("tool", 0.5, "octo/app")
    tool.user()
    tool.turn_start()
    tool.usage()
    tool.message(tools=["bash"])
    tool.tool_start("bash", "call-1")
    write(home, tool)
    asking = started("asking", 3)
    asking.user()
    asking.turn_start()
    asking.permission_requested()
    write(home, asking)
    idle = started("idle", 5, "octo/lib")
    idle.user()
    idle.turn_start()
    idle.answer()
    write(home, idle)
    stuck = started("stuck", 5, "octo/lib")
    stuck.user()
    stuck.turn_start()
    stuck.usage()
    stuck.message(tools=["bash"])
    stuck.tool_start("bash", "call-2")
    write(home, stuck)
    crashed = started("crashed", 2)
    crashed.user()
    crashed.turn_start()
    write(home, crashed, held=False)  # mid-turn, and the lock went with its process
    done = started("done", 9)
    done.user()
    done.turn_start()
    done.answer()
    done.shutdown()
    write(home, done, held=False)
    return home


def source(home: Path) -> HistorySessions:
    files = lambda: sorted((home / "session-state").glob("*/events.jsonl"))  # noqa: E731
    history = HistorySessions(files, ModelOptions(), policy=StuckPolicy(STUCK_AFTER, STUCK_AFTER), clock=lambda: NOW)
    history.scan()
    return history


def test_each_session_gets_the_state_the_daemon_would_give_it(home):
    """Live sessions by their model's state, stuck past --stuck-after, abandoned when the process died
    mid-turn, ended when shut down."""
    board = source(home).board()
    assert {row.summary.session_id: row.state for row in board.rows} == {
        "working": WORKING, "tool": WAITING_TOOL, "asking": WAITING_USER, "idle": IDLE, "stuck": STUCK,
        "crashed": ABANDONED, "done": ENDED}
    stuck = board.by_id["stuck"]
    assert stuck.stalled_s == pytest.approx(NOW - stuck.summary.last_event_ns / 1e9)


def test_live_sessions_come_first_grouped_by_state_then_newest_first(home, tmp_path):
    """Rows are grouped in the page's state order (attention first, ended last), newest activity first within."""
    for name, minutes_ago in (("idle-older", 8), ("idle-newer", 1)):
        more = started(name, minutes_ago)
        more.user()
        more.turn_start()
        more.answer()
        write(home, more)
    rows = source(home).board().rows
    states = [row.state for row in rows]
    assert states == sorted(states, key=STATE_ORDER.index)
    assert states[0] == STUCK and states[-1] == ENDED
    idle = [row.summary.session_id for row in rows if row.state == IDLE]
    assert idle == ["idle-newer", "idle", "idle-older"]


def test_a_page_filters_by_state_and_repository_and_counts_everything(home):
    """The counts cover every session whatever the filter; the rows only those that match."""
    board = source(home).board()
    everything = page(board)
    assert everything["total"] == everything["matching"] == 7
    assert everything["states"] == {STUCK: 1, ABANDONED: 1, WAITING_USER: 1, WORKING: 1, WAITING_TOOL: 1,
                                    IDLE: 1, ENDED: 1}
    assert everything["repositories"] == {"": 3, "octo/app": 2, "octo/lib": 2}
    lib = page(board, repository="octo/lib")
    assert [s["id"] for s in lib["sessions"]] == ["stuck", "idle"] and lib["total"] == 7
    assert lib["sessions"][0]["branch"] == "topic/stuck"
    assert [s["id"] for s in page(board, state=WAITING_TOOL)["sessions"]] == ["tool"]
    assert page(board, state=WAITING_TOOL, repository="octo/lib")["sessions"] == []


def test_pages_cut_the_sorted_rows(home):
    """offset and limit walk the same order as the board, and stay inside it."""
    board = source(home).board()
    ids = [row.summary.session_id for row in board.rows]
    walked = [s["id"] for offset in range(0, 7, 3) for s in page(board, offset=offset, limit=3)["sessions"]]
    assert walked == ids
    assert page(board, offset=99)["sessions"] == [] and page(board, offset=99)["offset"] == 7


def test_a_row_holds_what_the_sessions_page_shows(home):
    """State, repository, model, activity, what it waits on, turns, tokens: from the session's summary."""
    row = next(s for s in page(source(home).board())["sessions"] if s["id"] == "tool")
    assert row["state"] == WAITING_TOOL and row["waiting_on"] == "bash" and row["turns"] == 1
    assert row["tokens"] == row["input_tokens"] + row["output_tokens"] > 0
    assert row["model"] == "test-model" and row["repository"] == "octo/app"
    assert row["last_ms"] >= row["waiting_since_ms"] > 0


def test_a_rescan_sees_new_grown_and_deleted_logs_and_says_so_by_its_key(home):
    """The change key moves when a log appears, grows or goes, and stays put when nothing changed."""
    history = source(home)
    key = history.change_key()
    history.scan()
    assert history.change_key() == key
    log = started("new", 1)
    log.user()
    path = write(home, log)
    history.scan()
    assert history.change_key() != key and "new" in history.board().by_id
    key = history.change_key()
    log.turn_start()
    path.write_bytes(log.jsonl())
    history.scan()
    assert history.change_key() != key and history.board().by_id["new"].state == WORKING
    key = history.change_key()
    os.unlink(path)
    history.scan()
    assert history.change_key() != key and "new" not in history.board().by_id


def live_of(board):
    """The live state of each row of a board, as make_board takes them."""
    return {row.session_id: Live(row.state, row.stalled_s, row.silent_s, row.activity) for row in board.rows}


def unmeasured(rows):
    """The rows without the time their durations were measured at (a board built afresh measures now)."""
    return tuple(row._replace(at=0.0) for row in rows)


def test_a_board_rebuilt_from_the_previous_one_is_the_board_built_afresh(home):
    """Reusing the previous board's rows, order and counts gives what sorting and counting anew gives,
    after sessions changed state, appeared and went away."""
    history = source(home)
    before = history.board()
    log = started("later", 0.1, "octo/app")
    log.user()
    log.turn_start()
    path = write(home, log)
    os.unlink(home / "session-state" / "done" / "events.jsonl")
    history.scan()
    after = history.board()
    fresh = make_board(after.key, reversed([(row.path, row.summary) for row in after.rows]), live_of(after))
    assert (unmeasured(after.rows), after.states, after.repositories) == (
        unmeasured(fresh.rows), fresh.states, fresh.repositories)
    assert "done" not in after.by_id and after.by_id["later"].state == WORKING and before.rows != after.rows
    log.turn_end()
    path.write_bytes(log.jsonl())
    history.scan()
    again = history.board()
    fresh = make_board(again.key, [(r.path, r.summary) for r in again.rows], live_of(again))
    assert (unmeasured(again.rows), again.states, again.repositories) == (
        unmeasured(fresh.rows), fresh.states, fresh.repositories)


class WalkCountingCatalog(Catalog):
    """The real catalog, counting the walks of the session folder it makes."""

    walks = 0

    def scan(self, **kwargs):
        self.walks += 1
        return super().scan(**kwargs)


def read_all_logs(config: Config) -> Daemon:
    """A daemon (in this process, into a MemorySink) that follows every log of its home and has read it once
    (from its first line, or on from its checkpoint)."""
    daemon = Daemon(config, sink=MemorySink())
    daemon.discoverer.start()
    expected = len(list((config.copilot_home / "session-state").glob("*/events.jsonl")))
    while len(daemon.sessions) < expected:
        daemon._pass()
    return daemon


def stop(daemon: Daemon) -> None:
    daemon.request_stop()
    daemon.run()  # returns at once: flushes, commits the checkpoint, releases the state lock


def test_the_daemons_sessions_walk_the_files_only_while_the_reader_knows_some_log_in_part(home, tmp_path):
    """Once the reader has read every log from its first line, a rescan walks no folder (10,000 logs cost a
    few hundred milliseconds of the web view's time); after a restart, resumed from the checkpoint, it walks
    them again and its sessions count everything, as before the restart."""
    config = Config(copilot_home=home, state_dir=tmp_path / "state", backfill=True, poll=True)
    daemon = read_all_logs(config)
    try:
        catalog = WalkCountingCatalog(daemon.root)
        sessions = DaemonSessions(config, lambda: daemon.published, catalog=catalog, rescan_every=0)
        sessions.scan()  # the first scan walks, whatever the reader knows
        sessions.scan()
        sessions.scan()
        assert catalog.walks == 1 and len(daemon.published.summaries) == 7 and not daemon.published.partial
        before = {row.session_id: row.summary for row in sessions.board().rows}
    finally:
        stop(daemon)
    restarted = read_all_logs(config)  # resumes every log at its checkpoint: none known whole
    try:
        catalog = WalkCountingCatalog(restarted.root)
        sessions = DaemonSessions(config, lambda: restarted.published, catalog=catalog, rescan_every=0)
        sessions.scan()
        sessions.scan()
        assert catalog.walks == 2
        after = {row.session_id: row.summary for row in sessions.board().rows}
    finally:
        stop(restarted)
    assert len(before) == 7 and {sid: s.turns for sid, s in after.items()} == {sid: s.turns for sid, s in
                                                                                  before.items()}
