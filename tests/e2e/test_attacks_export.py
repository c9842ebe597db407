"""Attacks on the way out (issue 17): big logs, poison batches, torn trace files, markers, the checkpoint.

Each test reproduces one attack against the real daemon (a subprocess) with real files and a real
OTLP receiver that refuses gRPC requests over 4 MiB, as the OpenTelemetry Collector does by default.
What must arrive is the replay of the final logs (tests/support/spans.py).
"""

from __future__ import annotations

import os
import re
import sqlite3
import subprocess
import time
from datetime import UTC, datetime
from pathlib import Path

import orjson
import pytest

from tests.support.biglog import grow
from tests.support.commands import REPO, clean_env, run_copilot_otel
from tests.support.daemon import DaemonProcess
from tests.support.events import SessionLog
from tests.support.files import append, new_session
from tests.support.net import free_port, wait_until
from tests.support.otlp_receiver import OtlpReceiver
from tests.support.scrape import fetch, value
from tests.support.spans import expected_keys, key, spans_now, wait_for_keys

FAST = ("--idle-quiet", "0.3", "--rescan-interval", "1")
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "cli" / "1.0.102"
LIMIT = 4 << 20


def real_log(scenario: str) -> bytes:
    """A stored real CLI 1.0.102 log."""
    return next((FIXTURES / scenario / "session-state").glob("*/events.jsonl")).read_bytes()


def grpc_env(receiver: OtlpReceiver, **extra: str) -> dict:
    return {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.grpc_endpoint, "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
            "OTEL_EXPORTER_OTLP_TIMEOUT": "5", **extra}


def received_keys(receiver: OtlpReceiver, count: int, timeout: float) -> list:
    receiver.wait_for_spans(count, timeout=timeout)
    time.sleep(0.5)  # anything extra would arrive now
    return sorted({key(s) for s in receiver.spans()})


def names_of(receiver: OtlpReceiver, session_id: str) -> set[str]:
    """The names of the spans of one session the receiver got."""
    return {s.name for s in receiver.spans() if s.attributes.get("gen_ai.conversation.id") == session_id}


def health(daemon: DaemonProcess) -> str:
    return fetch(daemon.health_url)


# ------------------------------------------------------------------------ defect 1: a log read whole, one request


def test_a_20_mb_log_reaches_a_receiver_with_a_4_mib_limit(tmp_path):
    """A 20 MB session log (real CLI events, grown) is read in parts and exported in requests under the
    receiver's 4 MiB limit: every span arrives, none refused, in many requests."""
    home = tmp_path / "home"
    path = new_session(home, "big-20mb")
    path.write_bytes(grow(real_log("reused_ids"), 20 << 20))
    expected = expected_keys([path])
    with OtlpReceiver() as receiver:
        with DaemonProcess(home, tmp_path / "state", env=grpc_env(receiver), args=FAST) as daemon:
            got = received_keys(receiver, len(expected), timeout=180)
            samples = daemon.scrape()
        sizes = [request.ByteSize() for request in receiver.requests()]
    assert got == expected
    assert max(sizes) <= LIMIT and len(sizes) >= len(expected) // 512
    assert value(samples, "copilot_otel_spans_dead_lettered_total") == 0


def test_requests_over_the_receivers_limit_are_split(tmp_path):
    """With our own budget set above the receiver's limit (here 1 MiB), content capture makes requests of
    a few megabytes: the receiver refuses them as too large, the daemon halves them until they pass,
    and everything arrives."""
    home = tmp_path / "home"
    path = new_session(home, "captured")
    log = SessionLog("captured")
    log.start()
    log.user()
    for n in range(150):
        log.calling(("bash", f"call-{n}"))
        log.tool_complete(f"call-{n}", result="r" * 60_000)
        log.turn_end()
    log.answer()
    log.shutdown()
    path.write_bytes(log.jsonl())
    args = FAST + ("--max-request-bytes", str(64 << 20), "--content-max-chars", "100000")
    expected_count = len(expected_keys([path]))
    with OtlpReceiver(max_grpc_request_mib=1) as receiver:
        env = grpc_env(receiver, OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT="true")
        with DaemonProcess(home, tmp_path / "state", env=env, args=args) as daemon:
            receiver.wait_for_spans(expected_count, timeout=120)
            time.sleep(0.5)  # anything sent twice would arrive now
            samples = daemon.scrape()
        got = receiver.spans()
        sizes = [request.ByteSize() for request in receiver.requests()]
    assert len({s.span_id for s in got}) == expected_count
    assert max(sizes) <= 1 << 20 and value(samples, "copilot_otel_spans_dead_lettered_total") == 0
    assert "decoded message length too large" in daemon.log_text()  # the receiver's refusals, then halves


# ------------------------------------------------------------------------ defect 2: poison batches


def poisoned_session(name: str) -> SessionLog:
    """A session whose log lies: it starts in 1960, a tool's exit code, token counts and a status code
    lie beyond int64 (within what JSON parsers read: unsigned 64 bits)."""
    log = SessionLog(name, start=datetime(1960, 5, 1, tzinfo=UTC))
    log.start()
    log.user()
    log.turn_start()
    log.usage(input_tokens=2**64 - 2, output_tokens=2**63)
    log.message(tools=["bash"])
    log.tool_start("bash", "call-1")
    log.tool_complete("call-1", success=False, exit_code=2**64 - 1)
    log.turn_end()
    log.error(status_code=2**63 + 5)
    log.shutdown()
    return log


@pytest.mark.parametrize("protocol", ["grpc", "http/protobuf"])
def test_poisoned_values_are_clamped_and_export_goes_on(tmp_path, protocol):
    """Times before 1970 and integers outside int64 no longer stop the export: the poisoned session's
    spans arrive clamped, and a normal session written after it arrives too."""
    home = tmp_path / "home"
    poisoned = new_session(home, "poisoned")
    poisoned.write_bytes(poisoned_session("poisoned").jsonl())
    normal = new_session(home, "normal")
    normal.write_bytes(real_log("plain"))
    with OtlpReceiver() as receiver:
        endpoint = receiver.grpc_endpoint if protocol == "grpc" else receiver.http_base
        env = {**grpc_env(receiver), "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, "OTEL_EXPORTER_OTLP_PROTOCOL": protocol}
        with DaemonProcess(home, tmp_path / "state", env=env, args=FAST) as daemon:
            expected_normal = set(expected_keys([normal]))
            wait_until(lambda: expected_normal <= {key(s) for s in receiver.spans()}, timeout=60,
                       what="the normal session")
            wait_until(lambda: {s.attributes.get("gen_ai.conversation.id") for s in receiver.spans()} >= {"poisoned"},
                       timeout=30, what="the poisoned session")
            healthz = health(daemon)
    poisoned_spans = [s for s in receiver.spans() if s.attributes.get("gen_ai.conversation.id") == "poisoned"]
    assert all(s.start_time_unix_nano >= 0 for s in poisoned_spans)
    tool = next(s for s in poisoned_spans if s.name == "execute_tool bash")
    assert tool.attributes["process.exit.code"] == 2**63 - 1
    assert healthz.startswith("ok") and "Traceback" not in daemon.log_text()


def test_a_span_no_request_can_hold_is_dead_lettered_and_the_export_goes_on(tmp_path):
    """With requests capped at their least (64 KiB), one tool argument of 64 Ki characters (capture on)
    makes a span larger than any request may be: it goes to the private dead-letter file, is counted
    and said on /healthz; the other spans, and a later session, arrive; after a restart it is not sent
    again."""
    home, state = tmp_path / "home", tmp_path / "state"
    path = new_session(home, "huge-argument")
    log = SessionLog("huge-argument")
    log.start()
    log.user()
    log.turn_start()
    log.usage(finish_reason="tool_calls")
    log.message(tools=["edit"])
    log.tool_start("edit", "call-1", arguments={"content": "A" * 70_000})
    log.tool_complete("call-1")
    log.turn_end()
    log.answer()
    path.write_bytes(log.jsonl())
    later = new_session(home, "later")
    args = FAST + ("--content-max-chars", "100000", "--max-request-bytes", str(64 << 10))
    with OtlpReceiver() as receiver:
        env = grpc_env(receiver, OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT="true")
        with DaemonProcess(home, state, env=env, args=args) as daemon:
            daemon.wait_for_metric("copilot_otel_spans_dead_lettered_total", 1, timeout=60)
            later.write_bytes(real_log("plain"))
            expected_later = {k[1] for k in expected_keys([later])}  # span ids: capture adds attributes
            wait_until(lambda: expected_later <= {s.span_id for s in receiver.spans()}, timeout=60,
                       what="the later session")
            wait_until(lambda: "invoke_agent copilot" in names_of(receiver, "huge-argument"), timeout=30,
                       what="the interaction's root, once its loop went idle")
            healthz = health(daemon)
            daemon.wait_for_metric("copilot_otel_checkpoint_commits_total", 1, timeout=10)
        names = names_of(receiver, "huge-argument")
        before_restart = len(receiver.spans())
        with DaemonProcess(home, state, env=env, args=args) as again:
            time.sleep(2)  # rescans after the restart: anything re-sent would arrive now
            samples = again.scrape()
        after_restart = len(receiver.spans())
    dead = state / "dead-letter.jsonl"
    (line,) = dead.read_bytes().splitlines()
    span = orjson.loads(line)["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    assert span["name"] == "execute_tool edit" and dead.stat().st_mode & 0o777 == 0o600
    assert "execute_tool edit" not in names and "turn" in names and "invoke_agent copilot" in names
    assert "refused by the trace backend" in healthz and str(dead) in healthz and healthz.startswith("ok")
    assert after_restart == before_restart and value(samples, "copilot_otel_spans_dead_lettered_total") == 0


# ------------------------------------------------------------------------ defect 5: torn lines in the trace file


def _all_lines_parse(path: Path) -> bool:
    return all(orjson.loads(line) for line in path.read_bytes().splitlines())


def test_a_torn_line_left_in_the_trace_file_is_cut_off_at_start(tmp_path):
    """A trace file that ends in a fragment (a crash mid-write) is repaired when the daemon starts: the
    spans after it are readable lines, not glued to the fragment."""
    home, traces = tmp_path / "home", tmp_path / "traces.jsonl"
    path = new_session(home, "after-a-crash")
    traces.write_bytes(b'{"resourceSpans":[{"resource":{"attributes":[]},"scopeSpans":[{"spans":[{"traceId":"ab')
    path.write_bytes(real_log("plain"))
    with DaemonProcess(home, tmp_path / "state", traces_file=traces, args=FAST):
        wait_for_keys(traces, expected_keys([path]))
    assert _all_lines_parse(traces)


def _mount_tmpfs(where: Path, size: str) -> str | None:
    """Mount a small tmpfs (root only); None on success, else why not."""
    if os.geteuid() != 0:
        return "filling a disk needs a tmpfs, and mounting one needs root"
    where.mkdir(parents=True, exist_ok=True)
    result = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)], capture_output=True)
    if result.returncode != 0:
        return f"cannot mount a tmpfs: {result.stderr.decode(errors='replace').strip()}"
    return None


@pytest.fixture
def small_disk(tmp_path):
    """A 4 MiB tmpfs for the test to fill (unmounted at the end)."""
    where = tmp_path / "disk"
    reason = _mount_tmpfs(where, "4m")
    if reason:
        pytest.skip(reason)
    yield where
    subprocess.run(["umount", "-l", str(where)], check=False)


def test_a_full_disk_leaves_no_torn_line_and_loses_nothing(tmp_path, small_disk):
    """The trace file's disk fills up mid-write: the partial request is taken back, the export is retried,
    and once space is freed every span is in the file, each line whole."""
    home, traces = tmp_path / "home", small_disk / "traces.jsonl"
    filler = small_disk / "filler"
    filler.write_bytes(b"\0" * ((4 << 20) - (64 << 10)))  # leaves less room than the session's spans need
    path = new_session(home, "disk-full")
    path.write_bytes(grow(real_log("subagent"), 1 << 20))
    expected = expected_keys([path])
    with DaemonProcess(home, tmp_path / "state", traces_file=traces, args=FAST) as daemon:
        daemon.wait_for_metric("copilot_otel_spans_failed_total", 1, timeout=60)
        assert _all_lines_parse(traces)
        filler.unlink()
        wait_for_keys(traces, expected, timeout=60)
    assert _all_lines_parse(traces)
    assert "No space left on device" in daemon.log_text()


# ------------------------------------------------------------------------ defect 7: markers while the backend is down


def test_checkpoint_positions_do_not_pile_up_while_the_backend_is_down(tmp_path):
    """With the backend down, thousands of appends that make no span add no checkpoint position: one per file
    waits behind each put of spans (/healthz says how many), and nothing is lost when it comes back."""
    home = tmp_path / "home"
    path = new_session(home, "many-appends")
    log = SessionLog("many-appends")
    log.start()
    log.user()
    log.turn_start()
    with OtlpReceiver() as receiver, DaemonProcess(
            home, tmp_path / "state", env=grpc_env(receiver, OTEL_EXPORTER_OTLP_TIMEOUT="1"), args=FAST) as daemon:
            with receiver.outage():
                append(path, log.jsonl())
                first = len(log.entries)
                log.usage()
                log.message("hi")
                log.turn_end()  # the LLM call's span and the turn's cannot leave: every later position waits
                append(path, log.jsonl(first))
                wait_until(lambda: "trace export failing" in health(daemon), timeout=30, what="the outage seen")
                daemon.wait_for_metric("copilot_otel_events_read_total", 1, timeout=60, type="assistant.turn_end")
                # One more line read: the read that queued the turn's span has queued its position too.
                shown = len(log.entries)
                log.add("session.info", {"n": -1})
                append(path, log.jsonl(shown))
                daemon.wait_for_metric("copilot_otel_events_read_total", 1, timeout=60, type="session.info")
                # its position joins the queue with the next save of the totals (at most a second later)
                wait_until(lambda: positions(health(daemon)) > 0, timeout=30, what="the turn's position queued")
                before = positions(health(daemon))
                for n in range(3000):
                    shown = len(log.entries)
                    log.add("session.info", {"n": n})
                    append(path, log.jsonl(shown))
                    if n % 100 == 0:
                        time.sleep(0.01)  # the scenario: the log grows in bursts
                daemon.wait_for_metric("copilot_otel_events_read_total", 3001, timeout=60, type="session.info")
                after = positions(health(daemon))
            log.answer()
            log.shutdown()
            append(path, log.jsonl(shown + 1))
            expected = expected_keys([path])
            assert received_keys(receiver, len(expected), timeout=60) == expected
    # One position per put of spans: the LLM call's and the turn's spans came in one read (1) or, the reader having
    # met their lines in two reads, two (the turn's lines were still being written). The appends add none.
    assert before in (1, 2) and after == before, (before, after)


def positions(healthz: str) -> int:
    """The checkpoint positions /healthz says are queued behind spans that cannot leave."""
    found = re.search(r"(\d+) checkpoint position\(s\) queued", healthz)
    assert found, healthz
    return int(found.group(1))


# ------------------------------------------------------------------------ defect 8: the checkpoint and the state dir


def test_a_second_daemon_on_the_same_state_directory_is_refused(tmp_path):
    """Two daemons on one checkpoint would export everything twice: the second one says which daemon
    holds the state directory, in one line, and exits 2."""
    home, state = tmp_path / "home", tmp_path / "state"
    (home / "session-state").mkdir(parents=True)
    with DaemonProcess(home, state, traces_file=tmp_path / "t.jsonl", args=FAST) as first:
        result = run_copilot_otel("run", "--copilot-home", str(home), "--state-dir", str(state),
                                  "--metrics-address", f"127.0.0.1:{free_port()}")
        stderr = result.stderr.decode()
        assert result.returncode == 2 and "Traceback" not in stderr
        assert f"another copilot-otel daemon (pid {first.pid})" in stderr and "--state-dir" in stderr


def test_a_second_daemon_is_refused_after_the_lock_file_is_deleted(tmp_path):
    """A tmp cleaner deletes state/daemon.lock while a daemon runs: a second daemon on the same folder (with a
    trace file of its own) is refused all the same, naming the running one, and exports nothing."""
    home, state, traces = tmp_path / "home", tmp_path / "state", tmp_path / "traces.jsonl"
    second_traces = tmp_path / "second.jsonl"
    session = new_session(home, "only")
    session.write_bytes(real_log("plain"))
    with DaemonProcess(home, state, traces_file=traces, args=FAST) as first:
        wait_for_keys(traces, expected_keys([session]))
        (state / "daemon.lock").unlink()
        result = run_copilot_otel("run", "--copilot-home", str(home), "--state-dir", str(state),
                                  "--metrics-address", f"127.0.0.1:{free_port()}", "--traces-file", str(second_traces),
                                  timeout=60)
        stderr = result.stderr.decode()
        assert result.returncode == 2 and "Traceback" not in stderr, stderr
        assert f"another copilot-otel daemon (pid {first.pid})" in stderr
    assert not second_traces.exists()


def _start_together(pair: list[DaemonProcess]) -> list:
    """Start both daemons at once (no wait for either); their log files, to close."""
    logs = [open(daemon.log_path, "wb") for daemon in pair]  # noqa: SIM115 - closed by the caller
    for daemon, log in zip(pair, logs):
        daemon.proc = subprocess.Popen(daemon.argv(), env=clean_env(), stdin=subprocess.DEVNULL, stdout=log,
                                       stderr=log, cwd=REPO)
    return logs


def test_two_daemons_racing_to_start_on_one_state_folder_make_one(tmp_path):
    """Two daemons, each with a trace file of its own, started at the same moment on one state folder (not made
    yet the first time), five times over with the lock file deleted before each pair: one runs, the other exits 2
    naming it; every span reaches the trace files once."""
    home, state = tmp_path / "home", tmp_path / "state"
    session = new_session(home, "only")
    session.write_bytes(real_log("multi_turn"))
    expected = expected_keys([session])
    files = []
    for attempt in range(5):
        (state / "daemon.lock").unlink(missing_ok=True)
        pair = [DaemonProcess(home, state, traces_file=tmp_path / f"traces-{attempt}-{n}.jsonl", args=FAST,
                              log_path=tmp_path / f"race-{attempt}-{n}.log") for n in range(2)]
        logs = _start_together(pair)
        try:
            wait_until(lambda: any(d.proc.poll() is not None for d in pair), timeout=30,  # noqa: B023 - now
                       what="one of the pair to exit")
            loser = next(d for d in pair if d.proc.poll() is not None)
            winner = next(d for d in pair if d is not loser)
            assert loser.proc.returncode == 2, loser.log_text()
            assert f"another copilot-otel daemon (pid {winner.pid})" in loser.log_text()
            wait_until(winner._ready, timeout=30, what="the daemon that won")
            if attempt == 0:
                wait_for_keys(winner.traces_file, expected)
            files.append(winner.traces_file)
        finally:
            for daemon in pair:
                daemon.stop()
            for log in logs:
                log.close()
    spans = [span for path in files if path.exists() for span in spans_now(path)]
    assert sorted(spans) == expected


def test_a_locked_checkpoint_stops_start_up_and_is_not_moved_aside(tmp_path):
    """A checkpoint another process holds locked is not 'corrupt': start-up says it is locked, exits 2,
    and the history stays (no re-export of everything)."""
    home, state = tmp_path / "home", tmp_path / "state"
    (home / "session-state").mkdir(parents=True)
    state.mkdir()
    holder = sqlite3.connect(state / "checkpoint.sqlite", isolation_level=None)
    holder.execute("CREATE TABLE IF NOT EXISTS x (y)")
    holder.execute("PRAGMA locking_mode=EXCLUSIVE")
    holder.execute("BEGIN EXCLUSIVE")
    try:
        result = run_copilot_otel("run", "--copilot-home", str(home), "--state-dir", str(state),
                                  "--metrics-address", f"127.0.0.1:{free_port()}", timeout=60)
    finally:
        holder.close()
    stderr = result.stderr.decode()
    assert result.returncode == 2 and "Traceback" not in stderr and "locked" in stderr
    assert not list(state.glob("checkpoint.sqlite.corrupt-*"))


def test_a_full_disk_under_the_checkpoint_is_reported_and_commits_resume(tmp_path, small_disk):
    """The state directory's disk fills up: /healthz says the checkpoint cannot be committed and why,
    the daemon goes on, and once space is freed the commits resume."""
    home, state = tmp_path / "home", small_disk / "state"
    traces = tmp_path / "traces.jsonl"
    first = new_session(home, "before-full")
    first.write_bytes(real_log("plain"))
    with DaemonProcess(home, state, traces_file=traces, args=FAST, log_path=tmp_path / "daemon.log") as daemon:
        wait_for_keys(traces, expected_keys([first]))
        daemon.wait_for_metric("copilot_otel_checkpoint_commits_total", 1, timeout=10)  # it returns seconds waited
        commits = value(daemon.scrape(), "copilot_otel_checkpoint_commits_total")
        filler = small_disk / "filler"
        with open(filler, "wb", buffering=0) as handle:
            try:
                while True:
                    handle.write(b"\0" * 65536)
                    handle.flush()
            except OSError:
                pass
        for n in range(40):  # new sessions, each with files to commit: the WAL has to grow
            append(new_session(home, f"while-full-{n}"), real_log("multi_turn"))
        wait_until(lambda: "checkpoint not committed" in health(daemon), timeout=60, what="the full disk said")
        said = health(daemon)
        filler.unlink()
        wait_until(lambda: "checkpoint not committed" not in health(daemon), timeout=30, what="commits resuming")
        committed = value(daemon.scrape(), "copilot_otel_checkpoint_commits_total")
    assert "full" in said and said.startswith("ok")
    assert committed > commits
    assert not list(state.glob("checkpoint.sqlite.corrupt-*"))
