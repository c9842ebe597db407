"""Issue 21, items 7 and 8: logs that change under the reader, and clocks, against the real daemon.

A log written by the real CLI (tests/fixtures/cli/1.0.102/multi_turn) is copied over itself (cp to a
temporary file, then mv: what rsync or a restore does), its folder renamed, or one word of lines
already read edited with `sed -i`, while the daemon runs and while it is stopped: nothing is counted
or exported again, and what is appended afterwards is exported once, under the session's first ids.
Logs stamped 50 minutes behind or 2 hours ahead of this machine's clock (what a clock step looks
like to the daemon) are exported in full, and a working session among them is stuck after the
threshold measured from when its last event arrived, not from its timestamp.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tests.support.commands import run_replay
from tests.support.daemon import DaemonProcess
from tests.support.events import SessionLog
from tests.support.files import append, new_session
from tests.support.net import wait_until, wait_until_steady
from tests.support.otlp_json import read_spans
from tests.support.scrape import value
from tests.support.spans import expected_keys, spans_now, wait_for_keys

FIXTURE = next(Path(__file__).resolve().parents[1].joinpath("fixtures/cli/1.0.102/multi_turn/session-state")
               .glob("*/events.jsonl"))
FAST = ("--idle-quiet", "0.3", "--rescan-interval", "1")
_TIMESTAMP = re.compile(rb'"timestamp":"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3})Z"')


def lines() -> list[bytes]:
    """The real log's lines, stamped from now (a session at work now: not stuck after a restart)."""
    return restamped(FIXTURE.read_bytes(), datetime.now(UTC)).splitlines(keepends=True)


def tokens_in(data: bytes) -> int:
    """Every token the usage records of a log count (what copilot_tokens_total adds up to)."""
    total = 0
    for raw in data.splitlines():
        event = json.loads(raw)
        if event["type"] == "session.usage_record":
            usage = event["data"]["usage"]
            total += sum(int(usage.get(k) or 0) for k in ("inputTokens", "outputTokens", "cacheReadTokens",
                                                           "cacheWriteTokens"))
    return total


def tokens(daemon: DaemonProcess) -> float:
    return sum(v for (name, _labels), v in daemon.scrape().items() if name == "copilot_tokens_total")


def reference(tmp_path: Path, data: bytes, session_id: str) -> Path:
    """The log at a path of its own named by ``session_id``: what replaying it exports is what must arrive."""
    path = tmp_path / "reference" / session_id / "events.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def settled(daemon: DaemonProcess, traces: Path) -> tuple:
    """(sessions started, tokens, span keys) once the daemon's figures stop moving (two equal scrapes)."""
    def figures():
        return (value(daemon.scrape(), "copilot_sessions_started_total"), tokens(daemon), spans_now(traces))

    # two scrapes 0.3 s apart: the reader turns every 0.2 s
    return wait_until_steady(figures, polls=2, timeout=30, interval=0.3, what="the daemon's figures to settle")


def cp_mv(path: Path) -> None:
    """What rsync or a restore does: the same bytes written to a temporary file, moved over the log."""
    temporary = path.with_name(".events.jsonl.tmp")
    shutil.copyfile(path, temporary)
    os.replace(temporary, path)


def rename_folder(path: Path) -> Path:
    """The session folder renamed; the log's new path."""
    moved = path.parent.with_name(path.parent.name + "-restored")
    path.parent.rename(moved)
    return moved / "events.jsonl"


def sed_one_word(path: Path) -> None:
    """`sed -i` of one word in lines already read: the model's name, in the first line and every usage record."""
    subprocess.run(["sed", "-i", "s/test-model/best-model/", str(path)], check=True)


# ------------------------------------------------------------------------ item 7: copied, moved, edited

SAID = {"cp_mv": "a copy moved over it", "sed": "lines already read changed (the log was edited or rewritten)",
        "rename": "following it there as the same session", "rename-stopped": "moved while stopped"}


def events_read(daemon: DaemonProcess) -> float:
    return sum(v for (name, _labels), v in daemon.scrape().items() if name == "copilot_otel_events_read_total")


@pytest.mark.parametrize("stopped", [False, True], ids=["running", "stopped"])
@pytest.mark.parametrize("attack", ["cp_mv", "rename", "sed"])
def test_a_log_copied_moved_or_edited_is_not_counted_again(tmp_path, attack, stopped):
    """The first half of a real log is read (its first turn exported, its second open); then the log is
    copied over itself, its folder renamed, or a word of its lines edited, with the daemon running or
    stopped: the daemon says what it saw, and no session starts, no token is counted, no span is exported
    again. The second half, appended afterwards, is exported once: the whole log's spans, each once, under
    the ids of the session's first folder (an edit: those still open under a new generation's ids)."""
    home, state, traces = tmp_path / "home", tmp_path / "state", tmp_path / "traces.jsonl"
    session_id = FIXTURE.parent.name
    path = new_session(home, session_id)
    log = lines()
    half = len(log) // 2
    first, second = b"".join(log[:half]), b"".join(log[half:])
    path.write_bytes(first)
    daemon = DaemonProcess(home, state, traces_file=traces, args=FAST).start()
    try:
        wait_until(lambda: events_read(daemon) == half, what="the first half read")
        wait_until(lambda: value(daemon.scrape(), "copilot_otel_checkpoint_commits_total"), what="a commit")
        started, counted, exported = settled(daemon, traces)
        assert (started, counted) == (1, tokens_in(first)) and exported
        sent = {k[1] for k in spans_now(traces)}
        if stopped:
            daemon.stop()
        if attack == "cp_mv":
            cp_mv(path)
        elif attack == "rename":
            path = rename_folder(path)
        else:
            sed_one_word(path)
        if stopped:
            daemon = DaemonProcess(home, state, traces_file=traces, args=FAST).start()
            # the counters resume from the checkpoint: the new process goes on from what was counted
        said = SAID[f"{attack}-stopped" if attack == "rename" and stopped else attack]
        wait_until(lambda: said in daemon.log_text(), what=f"the daemon to say {said!r}")
        assert settled(daemon, traces) == (started, counted, exported)
        append(path, second)
        whole = expected_keys([reference(tmp_path, first + second, session_id)])
        wait_until(lambda: len(set(spans_now(traces))) >= len(whole), what="the second half's spans")
        assert settled(daemon, traces)[:2] == (started, counted + tokens_in(second))
        got = spans_now(traces)
    finally:
        daemon.stop()
    assert len(got) == len(set(got)), "a span exported twice"
    if attack == "sed":  # the edited log is a new generation: what was not sent before comes under its ids
        again = {k[3:]: k[1] for k in expected_keys([reference(tmp_path, first + second, session_id)], generation=1)}
        assert sorted(k[1] for k in got) == sorted(k[1] if k[1] in sent else again[k[3:]] for k in whole)
    else:
        assert got == whole


def test_a_copy_of_a_log_next_to_its_original_is_another_session(tmp_path):
    """A log copied into a second folder while the first still exists is another session, as copies of one
    log in several folders always were (tests and benchmarks build many sessions so)."""
    home, traces = tmp_path / "home", tmp_path / "traces.jsonl"
    original = new_session(home, "original")
    original.write_bytes(FIXTURE.read_bytes())
    with DaemonProcess(home, tmp_path / "state", traces_file=traces, args=FAST) as daemon:
        wait_for_keys(traces, expected_keys([original]))
        copy = new_session(home, "copy")
        copy.write_bytes(FIXTURE.read_bytes())
        wait_for_keys(traces, expected_keys([original, copy]))
        assert value(daemon.scrape(), "copilot_sessions_started_total") == 2


def test_a_log_replaced_by_another_sessions_log_is_a_new_generation(tmp_path):
    """A real replacement (another session's log, its own first event) moved over the log is read from its
    start as a new generation, as before: both logs' spans arrive, the second with ids of its own."""
    home, traces = tmp_path / "home", tmp_path / "traces.jsonl"
    path = new_session(home, "replaced")
    path.write_bytes(FIXTURE.read_bytes())
    other = next(Path(__file__).resolve().parents[1].joinpath("fixtures/cli/1.0.102/autopilot/session-state")
                 .glob("*/events.jsonl"))
    with DaemonProcess(home, tmp_path / "state", traces_file=traces, args=FAST) as daemon:
        before = wait_for_keys(traces, expected_keys([path]))
        fresh = path.with_name(".fresh")
        fresh.write_bytes(other.read_bytes())
        os.replace(fresh, path)
        wait_for_keys(traces, sorted(set(before) | set(expected_keys([path], generation=1))))
        assert value(daemon.scrape(), "copilot_sessions_started_total") == 2


# ------------------------------------------------------------------------ item 8: clocks

def restamped(data: bytes, first_at: datetime) -> bytes:
    """The log with every timestamp moved by the same amount, so that its first event is at ``first_at``."""
    first = datetime.fromisoformat(_TIMESTAMP.search(data).group(1).decode()).replace(tzinfo=UTC)
    shift = first_at - first

    def moved(match: re.Match) -> bytes:
        moment = datetime.fromisoformat(match.group(1).decode()).replace(tzinfo=UTC) + shift
        return b'"timestamp":"%s.%03dZ"' % (moment.strftime("%Y-%m-%dT%H:%M:%S").encode(), moment.microsecond // 1000)

    return _TIMESTAMP.sub(moved, data)


def test_a_log_stamped_two_hours_ahead_is_exported_in_full(tmp_path):
    """A log written with a clock 2 h fast: every line is read and every span exported with its own (future)
    times, by the daemon and by replay; the daemon counts and names the events ahead of its clock."""
    home, traces, replayed = tmp_path / "home", tmp_path / "traces.jsonl", tmp_path / "replayed.jsonl"
    path = new_session(home, "fast-clock")
    data = restamped(FIXTURE.read_bytes(), datetime.now(UTC) + timedelta(hours=2))
    path.write_bytes(data)
    count = len(data.splitlines())
    with DaemonProcess(home, tmp_path / "state", traces_file=traces, args=FAST) as daemon:
        exported = wait_for_keys(traces, expected_keys([path]))
        samples = daemon.scrape()
        said = daemon.log_text()
    assert sum(v for (n, _l), v in samples.items() if n == "copilot_otel_events_read_total") == count
    assert value(samples, "copilot_otel_events_ahead_of_clock_total") == count
    assert sum(v for (n, _l), v in samples.items() if n == "copilot_otel_lines_rejected_total") == 0
    assert f"{path}:1: events stamped" in said and "ahead of this machine's clock" in said
    assert min(int(k[4]) for k in exported) > time.time_ns() + 3600 * 10 ** 9  # their own times, not ours
    result = run_replay(str(path), "--traces-file", str(replayed))
    assert result.returncode == 0, result.stderr.decode()
    assert len(read_spans(replayed)) == len(exported)


def working_session(home: Path, name: str, first_at: datetime) -> Path:
    """A session whose first turn is running (its process: this test), stamped from ``first_at``."""
    log = SessionLog(name, start=first_at)
    log.start()
    log.user()
    log.turn_start()
    path = new_session(home, name)
    path.write_bytes(log.jsonl())
    return path


def stalled(daemon: DaemonProcess, name: str) -> float:
    return sum(v for (n, labels), v in daemon.scrape().items()
               if n == "copilot_session_stalled_seconds" and ("session_id", name) in labels
               and ("state", "stuck") in labels)


@pytest.mark.parametrize("shift", [timedelta(minutes=-50), timedelta(minutes=50), timedelta(hours=2)],
                         ids=["50min-behind", "50min-ahead", "2h-ahead"])
def test_stuck_is_measured_from_when_the_event_arrived(tmp_path, shift):
    """A working session whose events are stamped 50 min behind, 50 min ahead or 2 h ahead of this clock (to the
    daemon, a clock stepped forward or back): at a 3 s threshold it is working when read, stuck once 3 s have passed
    since its last event arrived (not at once, not never), and its stalled seconds count from that arrival."""
    home = tmp_path / "home"
    (home / "session-state").mkdir(parents=True)
    threshold = 3.0
    with DaemonProcess(home, tmp_path / "state", args=FAST + ("--stuck-after", str(threshold))) as daemon:
        written = time.monotonic()
        working_session(home, "stepped", datetime.now(UTC) + shift)
        wait_until(lambda: value(daemon.scrape(), "copilot_otel_events_read_total", type="assistant.turn_start"),
                   what="the session read")
        read_at = time.monotonic()
        samples = daemon.scrape()
        if read_at - written < threshold:  # read in time to see it before its threshold (a busy machine may not)
            assert value(samples, "copilot_sessions", state="working") == 1, "stuck before its threshold"
        wait_until(lambda: stalled(daemon, "stepped"), timeout=30, what="the session to be stuck")
        found = time.monotonic()
        assert found - written >= threshold
        assert threshold <= stalled(daemon, "stepped") <= time.monotonic() - written + 1
    assert found - read_at < 20


# ------------------------------------------------------------------------ replay's ledger: the same rule

def test_a_replay_continued_after_its_logs_were_copied_over_themselves_sends_nothing_twice(tmp_path):
    """A replay gives up with some sessions delivered; every log is then copied over itself (rsync, a
    restore: new inodes and times, the same bytes). The same command delivers the rest, and over both runs
    every span arrives exactly once: a log delivered whole is known by its content, not its inode."""
    from collections import Counter

    from tests.support.otlp_receiver import OtlpReceiver
    from tests.support.throttling_receiver import ThrottlingGate

    home = tmp_path / "home"
    for n in range(3):
        for folder in FIXTURE.parent.parent.parent.parent.glob("*/session-state/*"):
            shutil.copytree(folder, home / "session-state" / f"{folder.name}-{n}")
    reference = tmp_path / "reference.jsonl"
    assert run_replay(str(home), "--traces-file", str(reference)).returncode == 0
    expected = Counter((s.trace_id, s.span_id) for s in read_spans(reference))
    with OtlpReceiver() as receiver, ThrottlingGate(receiver) as gate:
        env = {"OTEL_EXPORTER_OTLP_ENDPOINT": gate.grpc_endpoint, "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
               "OTEL_EXPORTER_OTLP_TIMEOUT": "1"}
        gate.accept_then_refuse(3)
        args = (str(home), "--state-dir", str(tmp_path / "state"), "--give-up-after", "2", "--rate", "60")
        first = run_replay(*args, env=env)
        assert first.returncode == 1 and "gave up" in first.stderr.decode(), first.stderr.decode()
        for path in home.glob("session-state/*/events.jsonl"):
            cp_mv(path)
        gate.open()
        second = run_replay(*args, env=env)
        assert second.returncode == 0, second.stderr.decode()
        assert re.search(r"\d+ session\(s\) delivered by an earlier run", second.stderr.decode())
        receiver.wait_for_spans(sum(expected.values()), timeout=30)
        wait_until(lambda: len(receiver.spans()) >= sum(expected.values()), what="every span")
        got = Counter((s.trace_id, s.span_id) for s in receiver.spans())
    assert got == expected


def test_a_session_stamped_ahead_whose_process_dies_mid_turn_is_abandoned(tmp_path):
    """A working session stamped 50 min ahead of this clock (the clock stepped back) is held by a process that
    then dies: it is abandoned within seconds (the grace measured from when its last event arrived, not
    from its timestamp), its stalled seconds counting from that arrival."""
    import signal
    import sys

    home = tmp_path / "home"
    (home / "session-state").mkdir(parents=True)
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        with DaemonProcess(home, tmp_path / "state", args=FAST) as daemon:
            written = time.monotonic()
            path = working_session(home, "held", datetime.now(UTC) + timedelta(minutes=50))
            for lock in path.parent.glob("inuse.*.lock"):
                lock.unlink()
            (path.parent / f"inuse.{holder.pid}.lock").write_text(str(holder.pid))
            wait_until(lambda: value(daemon.scrape(), "copilot_sessions", state="working") == 1, what="working")
            holder.send_signal(signal.SIGKILL)
            holder.wait()
            wait_until(lambda: value(daemon.scrape(), "copilot_sessions", state="abandoned") == 1, timeout=30,
                       what="the session abandoned")
            stalled = [v for (n, labels), v in daemon.scrape().items()
                       if n == "copilot_session_stalled_seconds" and ("state", "abandoned") in labels]
            assert stalled and 0 < stalled[0] <= time.monotonic() - written + 1
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()
