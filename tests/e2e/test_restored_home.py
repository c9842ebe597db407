"""A CI runner that restores a cached ~/.copilot does not report the cache's sessions as its own again: logs the
real CLI wrote elsewhere, copied into a second home before or after the daemon starts, are history older than the
state folder's first start and are left out (spans and metrics); what happens from then on is followed: a new
session, and the new interaction of a restored session resumed; --backfill exports the history. What is written
after the first start is never history, whatever its events' timestamps say."""

from __future__ import annotations

import json
import shutil
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from copilot_otel.decode.events import Event
from copilot_otel.decode.lines import decode_line
from tests.support.daemon import DaemonProcess, complete_lines_spans
from tests.support.events import SessionLog
from tests.support.files import append, new_session
from tests.support.net import wait_until
from tests.support.otlp_json import read_spans
from tests.support.otlp_receiver import OtlpReceiver
from tests.support.scrape import value
from tests.support.spans import expected_keys, key

FAST = ("--idle-quiet", "0.3", "--rescan-interval", "1")
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "cli" / "1.0.102"
CACHED = ("plain", "subagent", "failing_tool")  # sessions the real CLI wrote on another runner
DEFAULT = {"COPILOT_OTEL_BACKFILL": "false"}  # the default rule (the test harness backfills otherwise)


def restore(home: Path, scenario: str) -> Path:
    """Copy a recorded session folder into ``home``, as a cache restore does (content and times kept)."""
    source = next((FIXTURES / scenario / "session-state").iterdir())
    target = home / "session-state" / source.name
    shutil.copytree(source, target)
    return target / "events.jsonl"


def newest_ns(path: Path) -> int:
    """The timestamp of the newest event of a log."""
    events = (decode_line(line) for line in path.read_bytes().splitlines() if line.strip())
    return max(event.timestamp_ns for event in events if isinstance(event, Event))


def now_log(session_id: str) -> SessionLog:
    return SessionLog(session_id, start=datetime.now(UTC))


def conversations(spans) -> set[str]:
    return {span.attributes.get("gen_ai.conversation.id") for span in spans}


def test_a_restored_home_is_not_reported_again_and_what_happens_after_is(tmp_path):
    """Two cached sessions restored before the start and one after it: no span and no session counted for
    them, one log line saying so; a session written now, and a restored session resumed now (its new interaction
    only), are exported; after a restart nothing of the history is sent either."""
    home, state, traces = tmp_path / "home", tmp_path / "state", tmp_path / "traces.jsonl"
    (home / "session-state").mkdir(parents=True)
    restored = [restore(home, scenario) for scenario in CACHED[:2]]
    daemon = DaemonProcess(home, state, traces_file=traces, env=DEFAULT, args=FAST)
    with daemon:
        late = restore(home, CACHED[2])  # a cache restored once the daemon runs
        # The rule is decided when the daemon first reads a log: a restored log already appended to by then reads as
        # new (docs/reliability.md). Here the CLI resumes a session only once the daemon has taken the history in.
        wait_until(lambda: "left out as history" in daemon.log_text()
                   and value(daemon.scrape(), "copilot_otel_files_watched") >= 3, timeout=60,
                   what="the three restored logs followed")
        old_ends = max(newest_ns(log) for log in (*restored, late))
        fresh = now_log("fresh-session")
        fresh.start()
        fresh.user()
        fresh.turn_start()
        fresh.usage()
        fresh.message("Done.")
        fresh.turn_end()
        fresh.shutdown()
        new_session(home, "fresh-session").write_bytes(fresh.jsonl())
        resumed_id = restored[0].parent.name
        more = now_log(resumed_id)
        more.resume()
        more.user("One more thing.")
        more.turn_start()
        more.usage()
        more.message("Done again.")
        more.turn_end()
        append(restored[0], more.jsonl())
        wait_until(lambda: {"fresh-session", resumed_id} <= conversations(complete_lines_spans(traces)),
                   timeout=30, what="the new session and the resumed interaction")
        time.sleep(2.0)  # a rescan: anything of the history would be written by now
        samples = daemon.scrape()
    spans = read_spans(traces)
    resumed_spans = [span for span in spans if span.attributes.get("gen_ai.conversation.id") == resumed_id]
    assert conversations(spans) == {"fresh-session", resumed_id}
    assert resumed_spans and min(span.start_time_unix_nano for span in resumed_spans) > old_ends
    assert value(samples, "copilot_sessions_started_total") == 1  # the fresh one: the history's are not counted
    said = daemon.log_text()
    assert "whose last event is older than this state folder's first start" in said and "--backfill" in said
    exported = traces.read_bytes()
    with DaemonProcess(home, state, traces_file=traces, env=DEFAULT, args=FAST):
        time.sleep(2.5)  # two rescans
    assert traces.read_bytes() == exported


def test_backfill_exports_the_history(tmp_path):
    """--backfill (COPILOT_OTEL_BACKFILL): the same restored sessions are exported, each counted."""
    home, traces = tmp_path / "home", tmp_path / "traces.jsonl"
    (home / "session-state").mkdir(parents=True)
    ids = {restore(home, scenario).parent.name for scenario in CACHED}
    with DaemonProcess(home, tmp_path / "state", traces_file=traces, env=DEFAULT, args=(*FAST, "--backfill")) as daemon:
        wait_until(lambda: ids <= conversations(complete_lines_spans(traces)), timeout=30, what="the history")
        daemon.wait_for_metric("copilot_sessions_started_total", len(ids), timeout=30)


def finished(session_id: str, start: datetime) -> bytes:
    """A whole session (one interaction, one LLM call, shut down) stamped from ``start``."""
    log = SessionLog(session_id, start=start)
    log.start()
    log.user()
    log.turn_start()
    log.usage()
    log.message("Done.")
    log.turn_end()
    log.shutdown()
    return log.jsonl()


def test_sessions_written_after_the_first_start_are_followed_whatever_their_timestamps(tmp_path):
    """Sessions written while the daemon runs, stamped ten minutes behind its clock, in 2001, before 1970, beyond
    2262 and two hours ahead, and one stamped in 2001 written while it was stopped (after its first start): each
    exported, counted and listed by the web view's API; none is said to be history (before, those behind the first
    start were left out for good)."""
    home, state, traces = tmp_path / "home", tmp_path / "state", tmp_path / "traces.jsonl"
    (home / "session-state").mkdir(parents=True)
    now = datetime.now(UTC)
    stamped = {"ten-minutes-behind": now - timedelta(minutes=10), "in-2001": datetime(2001, 3, 1, tzinfo=UTC),
               "before-1970": datetime(1960, 5, 1, tzinfo=UTC), "beyond-2262": datetime(2300, 1, 1, tzinfo=UTC),
               "two-hours-ahead": now + timedelta(hours=2)}
    with DaemonProcess(home, state, traces_file=traces, env=DEFAULT, args=FAST) as daemon:
        for session_id, start in stamped.items():
            new_session(home, session_id).write_bytes(finished(session_id, start))
        wait_until(lambda: set(stamped) <= conversations(complete_lines_spans(traces)), timeout=30,
                   what="every session's spans")
        daemon.wait_for_metric("copilot_sessions_started_total", len(stamped), timeout=30)
        said = daemon.log_text()
    assert "left out as history" not in said
    new_session(home, "written-while-stopped").write_bytes(finished("written-while-stopped",
                                                                    datetime(2001, 3, 2, tzinfo=UTC)))
    with DaemonProcess(home, state, traces_file=traces, env=DEFAULT, args=FAST) as daemon:
        wait_until(lambda: "written-while-stopped" in conversations(complete_lines_spans(traces)), timeout=30,
                   what="the session written while the daemon was stopped")
        daemon.wait_for_metric("copilot_sessions_started_total", len(stamped) + 1, timeout=30)
        listed = {row["id"] for row in json.loads(daemon.api_get("/api/sessions?limit=500"))["sessions"]}
        said = daemon.log_text()
    assert "left out as history" not in said
    assert listed == {*stamped, "written-while-stopped"}


def queued(daemon: DaemonProcess) -> float:
    return value(daemon.scrape(), "copilot_otel_export_queue_spans")


def test_a_backfill_that_could_not_deliver_is_sent_by_the_next_starts(tmp_path):
    """The three starts of issue 43: `run --backfill` with an endpoint that refuses, SIGTERM; a start without the
    flag; a start with it and the endpoint back. The first stop counts the spans really queued; the second start
    reads the history again (it is not taken for history: a backfill began) and says so at its stop too; the
    third delivers every span of the restored logs, each exactly once."""
    home, state = tmp_path / "home", tmp_path / "state"
    (home / "session-state").mkdir(parents=True)
    logs = [restore(home, scenario) for scenario in CACHED]
    expected = expected_keys(logs)
    with OtlpReceiver() as receiver:
        env = {**DEFAULT, "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.grpc_endpoint, "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
               "OTEL_EXPORTER_OTLP_TIMEOUT": "5"}
        receiver.down()
        for flags in (("--backfill",), ()):
            daemon = DaemonProcess(home, state, env=env, args=(*FAST, *flags)).start()
            try:
                wait_until(lambda now=daemon: queued(now) == len(expected), timeout=30, what="every span queued")
            finally:
                daemon.stop()
            said = daemon.log_text()
            assert f"stopped with {len(expected)} spans not yet exported" in said
            assert "left out as history" not in said
        receiver.up()
        with DaemonProcess(home, state, env=env, args=(*FAST, "--backfill")) as daemon:
            receiver.wait_for_spans(len(expected), timeout=30)
            wait_until(lambda: value(daemon.scrape(), "copilot_otel_checkpoint_commits_total") > 0
                       and queued(daemon) == 0, what="the checkpoint past what was delivered")
        got = sorted(key(span) for span in receiver.spans())
    assert got == expected


def test_history_left_out_is_sent_by_a_later_backfill(tmp_path):
    """A start without --backfill leaves the restored logs out as history (and says so); a later start with it
    sends them, each span once; a start after that sends nothing again."""
    home, state, traces = tmp_path / "home", tmp_path / "state", tmp_path / "traces.jsonl"
    (home / "session-state").mkdir(parents=True)
    logs = [restore(home, scenario) for scenario in CACHED]
    expected = expected_keys(logs)
    with DaemonProcess(home, state, traces_file=traces, env=DEFAULT, args=FAST) as daemon:
        wait_until(lambda: "left out as history" in daemon.log_text(), what="the history left out")
    assert not traces.exists() or not read_spans(traces)
    with DaemonProcess(home, state, traces_file=traces, env=DEFAULT, args=(*FAST, "--backfill")) as daemon:
        wait_until(lambda: len(complete_lines_spans(traces)) >= len(expected), timeout=30, what="the history sent")
        daemon.wait_for_metric("copilot_sessions_started_total", len(CACHED), timeout=30)
    sent = traces.read_bytes()
    assert sorted(key(span) for span in read_spans(traces)) == expected
    with DaemonProcess(home, state, traces_file=traces, env=DEFAULT, args=(*FAST, "--backfill")):
        time.sleep(2.5)  # two rescans: anything sent again would be written by now
    assert traces.read_bytes() == sent
