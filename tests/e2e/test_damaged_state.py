"""Issue 21, item 12: damaged state. A replay's ledger full of garbage, truncated or of another schema; a
ledger held by another replay or another program; a summaries.json that is valid JSON with bad entries, or
no JSON at all; a damaged checkpoint. Each is one clear line, through the real commands and the real
daemon: the ledger and the summaries recover on their own (rebuilt; the bad entries left out), the
checkpoint is set aside only when starting afresh would count nothing twice (--from-end), else the daemon
refuses, saying what to do."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import time
import urllib.request
from collections import Counter
from pathlib import Path

import pytest

from tests.support import viewclient
from tests.support.commands import COMMAND, REPO, clean_env, run_copilot_otel, run_replay
from tests.support.daemon import DaemonProcess
from tests.support.files import EVENTS_FILE, SESSION_STATE
from tests.support.net import free_port, wait_until
from tests.support.otlp_json import read_spans
from tests.support.spans import expected_keys, key, wait_for_keys

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "cli" / "1.0.102"
SCENARIOS = ("plain", "multi_turn", "subagent", "failing_tool", "git_repo", "autopilot")
FAST = ("--idle-quiet", "0.3", "--rescan-interval", "1")


def real_log(scenario: str) -> bytes:
    return next((FIXTURES / scenario / SESSION_STATE).glob(f"*/{EVENTS_FILE}")).read_bytes()


def make_home(home: Path, copies: int = 1) -> list[Path]:
    """A COPILOT_HOME with ``copies`` of each stored real session; their logs."""
    paths = []
    for n in range(copies):
        for scenario in SCENARIOS:
            path = home / SESSION_STATE / f"{scenario}-{n}" / EVENTS_FILE
            path.parent.mkdir(parents=True)
            path.write_bytes(real_log(scenario))
            paths.append(path)
    return paths


def stderr_lines(result) -> list[str]:
    return [line for line in result.stderr.decode(errors="replace").splitlines() if line.strip()]


def api_sessions(daemon: DaemonProcess) -> tuple[int, dict]:
    """GET the daemon's /api/sessions, with its token (every request of these tests to the daemon goes through here)."""
    status, _headers, body = viewclient.get(daemon.port, "/api/sessions?limit=500")
    return status, json.loads(body) if status == 200 else {}


# ------------------------------------------------------------------------ the replay's ledger


@pytest.fixture
def interrupted(tmp_path):
    """A replay of 60 real sessions into a trace file, stopped by Ctrl-C part-way (--rate 100): its home,
    state folder, trace file and ledger."""
    home, state, traces = tmp_path / "home", tmp_path / "state", tmp_path / "traces.jsonl"
    make_home(home, copies=10)
    process = subprocess.Popen([*COMMAND, "replay", str(home), "--state-dir", str(state), "--traces-file",
                                str(traces), "--rate", "100"], env=clean_env(), stdin=subprocess.DEVNULL,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=REPO)
    try:
        wait_until(lambda: traces.exists() and traces.stat().st_size > 0, timeout=60, what="the first spans")
        os.kill(process.pid, signal.SIGINT)
        _out, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 130, err.decode()
    (ledger,) = (state / "replay").glob("*.sqlite")
    return home, state, traces, ledger


def _garbage(ledger: Path) -> None:
    ledger.write_bytes(b"this is no database\n" * 300)


def _truncated(ledger: Path) -> None:
    with sqlite3.connect(ledger) as db:  # make it span pages, then cut it in the middle of one
        db.execute("PRAGMA journal_mode=DELETE")
        db.executemany("INSERT INTO logs VALUES (?, '', 0, 0)", [(f"/nowhere/{n}" * 20,) for n in range(300)])
    os.truncate(ledger, ledger.stat().st_size // 2 + 100)


def _another_schema(ledger: Path) -> None:
    ledger.unlink()
    with sqlite3.connect(ledger) as db:
        db.execute("CREATE TABLE logs (name TEXT)")


@pytest.mark.parametrize("damage", [_garbage, _truncated, _another_schema], ids=lambda f: f.__name__.strip("_"))
def test_a_damaged_ledger_is_rebuilt_and_the_replay_finishes(interrupted, damage):
    """Once a traceback and exit 1 at every re-run; now one warning naming the file, the replay sends every
    session (again: the same spans, byte for byte the same ids and content) and exits 0."""
    home, state, traces, ledger = interrupted
    before = Counter(key(s) for s in read_spans(traces))
    damage(ledger)
    result = run_replay(str(home), "--state-dir", str(state), "--traces-file", str(traces))
    assert result.returncode == 0, result.stderr.decode()
    lines = stderr_lines(result)
    assert len(lines) == 2 and "Traceback" not in result.stderr.decode(), lines
    assert str(ledger) in lines[0] and "is damaged" in lines[0] and "sent again, with the same span ids" in lines[0]
    assert "exported" in lines[1] and "delivered by an earlier run" not in lines[1]
    after = Counter(key(s) for s in read_spans(traces))
    expected = set(expected_keys(sorted(home.glob(f"{SESSION_STATE}/*/{EVENTS_FILE}"))))
    assert set(after) == expected and after - before == Counter(expected)  # all again, nothing different
    size = traces.stat().st_size  # a trace file's ledger is kept once done: a re-run adds nothing
    assert run_replay(str(home), "--state-dir", str(state), "--traces-file", str(traces)).returncode == 0
    assert traces.stat().st_size == size


def test_a_ledger_another_replay_holds_is_refused_at_once_naming_it(tmp_path):
    """A second replay of the same sessions to the same destination while the first runs: once a traceback
    after 5 s; now one line at once, exit 2 (to a trace file: the file another process writes; to OTLP: the
    ledger, naming the first's pid). The first goes on; a re-run after it
    was interrupted continues it."""
    home, state, traces = tmp_path / "home", tmp_path / "state", tmp_path / "traces.jsonl"
    make_home(home, copies=10)
    args = (str(home), "--state-dir", str(state), "--traces-file", str(traces))
    first = subprocess.Popen([*COMMAND, "replay", *args, "--rate", "50"], env=clean_env(), stdin=subprocess.DEVNULL,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=REPO)
    try:
        wait_until(lambda: traces.exists() and traces.stat().st_size > 0, timeout=60, what="the first spans")
        started = time.monotonic()
        second = run_replay(*args)
        took = time.monotonic() - started
        assert first.poll() is None, "the first replay ended before the second was tried"
        os.kill(first.pid, signal.SIGINT)
        first.communicate(timeout=60)
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    (line,) = stderr_lines(second)  # the trace file the first writes is refused before its ledger is asked
    assert second.returncode == 2 and f"refusing to write traces to {traces}: another process" in line, line
    assert took < 4.0, f"{took:.1f} s"  # a Python start-up; no wait on a lock
    again = run_replay(*args)
    assert again.returncode == 0 and "delivered by an earlier run" in again.stderr.decode()


def test_a_ledger_another_program_locks_is_one_line(interrupted):
    """A ledger another program holds locked (an sqlite3 shell, say): one line within about a second, exit 2."""
    home, state, traces, ledger = interrupted
    holder = sqlite3.connect(ledger, isolation_level=None)
    holder.execute("PRAGMA locking_mode=EXCLUSIVE")
    holder.execute("BEGIN EXCLUSIVE")
    try:
        started = time.monotonic()
        result = run_replay(str(home), "--state-dir", str(state), "--traces-file", str(traces))
        took = time.monotonic() - started
    finally:
        holder.close()
    (line,) = stderr_lines(result)
    assert result.returncode == 2 and str(ledger) in line and "locked by another program" in line
    assert took < 5.0, f"{took:.1f} s"


# ------------------------------------------------------------------------ summaries.json


def listing(home: Path, state: Path):
    return run_copilot_otel("sessions", "--copilot-home", str(home), "--state-dir", str(state), "--from-files",
                            "--json")


def figures(rows: list[dict]) -> dict:
    return {row["id"]: (row["state"], row["turns"], row["input_tokens"], row["output_tokens"], row["tool_calls"],
                        row["model"], row["repository"]) for row in rows}


def damage_entries(cache: Path) -> int:
    """Four entries spoiled four ways, and one added that is not an entry at all; how many are bad."""
    document = json.loads(cache.read_bytes())
    logs = document["logs"]
    names = sorted(logs)
    logs[names[0]][1]["turns"] = "many"  # a wrong type
    del logs[names[1]][1]["model"]  # a missing field
    logs[names[2]][1] = list(logs[names[2]][1].values())  # a list instead of a dict
    logs[names[3]][1]["input_tokens"] = 10**30  # numbers past int64 (JSON: a float, and an unsigned 64-bit)
    logs[names[3]][1]["output_tokens"] = 2**64 - 1
    logs["/nowhere/events.jsonl"] = "junk"
    cache.write_text(json.dumps(document))
    return 5


@pytest.fixture
def cached(tmp_path):
    """A home of six real sessions, what `sessions` lists for it without a cache, and a state folder whose
    summaries.json holds them."""
    home = tmp_path / "home"
    make_home(home)
    reference = listing(home, tmp_path / "fresh")
    assert reference.returncode == 0
    state = tmp_path / "state"
    assert listing(home, state).returncode == 0 and (state / "summaries.json").exists()
    return home, state, figures(json.loads(reference.stdout))


def test_sessions_leaves_out_the_bad_entries_of_the_cache_and_rewrites_it(cached):
    """Once `sessions` crashed until the file was deleted; now the bad entries are left out, said in one
    line, their sessions read again, the list right, and the cache rewritten: the next run says nothing."""
    home, state, reference = cached
    bad = damage_entries(state / "summaries.json")
    result = listing(home, state)
    assert result.returncode == 0, result.stderr.decode()
    (line,) = stderr_lines(result)
    assert f"held {bad} damaged entries" in line and str(state / "summaries.json") in line
    assert figures(json.loads(result.stdout)) == reference
    again = listing(home, state)
    assert stderr_lines(again) == [] and figures(json.loads(again.stdout)) == reference
    assert "/nowhere/events.jsonl" not in json.loads((state / "summaries.json").read_bytes())["logs"]


def test_a_cache_that_is_no_json_is_rebuilt(cached):
    """summaries.json cut off mid-way: one line, the list right, the file valid again."""
    home, state, reference = cached
    cache = state / "summaries.json"
    cache.write_bytes(cache.read_bytes()[:200])
    result = listing(home, state)
    (line,) = stderr_lines(result)
    assert "is unusable" in line and "rebuilding it" in line
    assert figures(json.loads(result.stdout)) == reference
    assert len(json.loads(cache.read_bytes())["logs"]) == len(SCENARIOS)


def test_the_daemon_serves_its_sessions_despite_bad_cache_entries(cached, tmp_path):
    """After a restart the daemon lists the sessions its checkpoint had read from the cache: once every
    /api/sessions answered 500 (while /healthz said ok); now 200, the right figures, one warning."""
    home, state, reference = cached
    traces = tmp_path / "traces.jsonl"
    with DaemonProcess(home, state, traces_file=traces, args=FAST) as daemon:  # reads every log, commits
        wait_for_keys(traces, expected_keys(sorted(home.glob(f"{SESSION_STATE}/*/{EVENTS_FILE}"))))
        daemon.wait_for_metric("copilot_otel_checkpoint_commits_total", 1, timeout=30)
    damage_entries(state / "summaries.json")
    with DaemonProcess(home, state, traces_file=traces, args=FAST, log_level="info") as daemon:
        answers = [api_sessions(daemon) for _ in range(3)]
    assert [code for code, _ in answers] == [200, 200, 200]
    assert all(figures(document["sessions"]) == reference for _, document in answers)
    assert daemon.log_text().count("damaged entries") == 1 and "Traceback" not in daemon.log_text()


# ------------------------------------------------------------------------ the daemon's checkpoint


def _checkpoint(home: Path, state: Path, traces: Path) -> Path:
    """A real checkpoint: the daemon read every log of ``home`` and committed."""
    with DaemonProcess(home, state, traces_file=traces, args=FAST) as daemon:
        wait_for_keys(traces, expected_keys(sorted(home.glob(f"{SESSION_STATE}/*/{EVENTS_FILE}"))))
        daemon.wait_for_metric("copilot_otel_checkpoint_commits_total", 1, timeout=30)
    return state / "checkpoint.sqlite"


@pytest.mark.parametrize("damage", ["garbage", "truncated"])
def test_a_damaged_checkpoint_stops_the_daemon_with_what_to_do(tmp_path, damage):
    """Starting afresh would export every session again and count its metrics again (a counter jumping by
    the whole history): the daemon refuses in one line, exit 2, saying how to start afresh or skip the
    history, and leaves the file as it is."""
    home, state, traces = tmp_path / "home", tmp_path / "state", tmp_path / "traces.jsonl"
    make_home(home, copies=20)
    checkpoint = _checkpoint(home, state, traces)
    if damage == "garbage":
        checkpoint.write_bytes(b"this is not a database" * 200)
    else:
        os.truncate(checkpoint, checkpoint.stat().st_size // 2)
    damaged = checkpoint.read_bytes()
    result = run_copilot_otel("run", "--copilot-home", str(home), "--state-dir", str(state), "--traces-file",
                              str(traces), "--metrics-address", f"127.0.0.1:{free_port()}", timeout=60)
    (line,) = stderr_lines(result)
    assert result.returncode == 2 and "Traceback" not in result.stderr.decode()
    assert f"the checkpoint {checkpoint} is damaged" in line and "move it aside" in line and "--from-end" in line
    assert checkpoint.read_bytes() == damaged and not list(state.glob("checkpoint.sqlite.corrupt-*"))


def test_with_from_end_a_damaged_checkpoint_is_set_aside_and_the_history_skipped(tmp_path):
    """--from-end counts nothing twice: the damaged file is moved aside with one warning, the history in the
    files is skipped, and a session that starts afterwards is exported."""
    home, state, traces = tmp_path / "home", tmp_path / "state", tmp_path / "traces.jsonl"
    make_home(home)
    checkpoint = _checkpoint(home, state, traces)
    checkpoint.write_bytes(b"this is not a database" * 200)
    exported = traces.read_bytes()
    with DaemonProcess(home, state, traces_file=traces, args=(*FAST, "--from-end"), log_level="info") as daemon:
        later = home / SESSION_STATE / "later" / EVENTS_FILE
        later.parent.mkdir()
        later.write_bytes(real_log("plain"))
        wait_until(lambda: traces.read_bytes() != exported, timeout=30, what="the new session's spans")
        time.sleep(1.0)  # anything of the history would be written by now
    new = traces.read_bytes()[len(exported):]
    extra = tmp_path / "extra.jsonl"
    extra.write_bytes(new)
    assert sorted(key(s) for s in read_spans(extra)) == expected_keys([later])
    assert [line for line in daemon.log_text().splitlines() if "is unreadable" in line and "moved it to" in line]
    assert list(state.glob("checkpoint.sqlite.corrupt-*"))


# ------------------------------------------------------------------------ a folder name no encoder takes


def test_a_session_folder_named_with_bytes_that_are_no_utf8(tmp_path):
    """Another program names a session folder with stray bytes and an escape sequence. Once: the daemon's
    export retried that batch for good (orjson refuses lone surrogates), every checkpoint commit failed (the
    other sessions' too), /api/sessions answered 500, sessions and replay crashed. Now its id is text (the
    stray byte written \\xff), its path is kept in the checkpoint, ledger and cache, and everything works."""
    home, state, traces = tmp_path / "home", tmp_path / "state", tmp_path / "traces.jsonl"
    make_home(home)
    odd = home / SESSION_STATE / os.fsdecode(b"odd-\xff\x1b[2J") / EVENTS_FILE
    odd.parent.mkdir()
    odd.write_bytes(real_log("plain"))
    logs = sorted(home.glob(f"{SESSION_STATE}/*/{EVENTS_FILE}"))
    replayed = run_replay(str(home), "--state-dir", str(state), "--traces-file", str(tmp_path / "replayed.jsonl"))
    assert replayed.returncode == 0, replayed.stderr.decode()
    ids = {s.attributes.get("gen_ai.conversation.id") for s in read_spans(tmp_path / "replayed.jsonl")}
    assert "odd-\\xff\x1b[2J" in ids and len(ids) == len(logs)
    args = ("sessions", "--copilot-home", str(home), "--state-dir", str(state), "--from-files")
    listed, as_json = run_copilot_otel(*args), run_copilot_otel(*args, "--json")
    assert listed.returncode == 0 and stderr_lines(listed) == [] and r"odd-\xff" in listed.stdout.decode()
    assert "odd-\\xff\x1b[2J" in {row["id"] for row in json.loads(as_json.stdout)}
    with DaemonProcess(home, state, traces_file=traces, args=FAST) as daemon:
        wait_for_keys(traces, expected_keys(logs))
        daemon.wait_for_metric("copilot_otel_checkpoint_commits_total", 1, timeout=30)
        code, document = api_sessions(daemon)
        health = urllib.request.urlopen(daemon.health_url, timeout=10).read().decode()
    assert code == 200 and len(document["sessions"]) == len(logs) and health == "ok\n"
    exported = traces.read_bytes()
    with DaemonProcess(home, state, traces_file=traces, args=FAST):  # the checkpoint kept every path
        time.sleep(2.0)  # two rescans: anything re-read would be written by now
    assert traces.read_bytes() == exported
