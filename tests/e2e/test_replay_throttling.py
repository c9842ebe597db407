"""Replay that finishes: into a real OTLP receiver (Rotel) behind a gate that throttles as a backend at
capacity does, every span arrives exactly once; a replay that gives up names the sessions it did not
deliver and a re-run sends only those; --rate holds the pace; a terminal gets a progress bar, a pipe one
summary line."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path

import grpc
import pytest

from tests.support.commands import COMMAND, REPO, clean_env, run_replay
from tests.support.net import wait_until
from tests.support.otlp_json import read_spans
from tests.support.otlp_receiver import OtlpReceiver
from tests.support.terminal import plain as strip_terminal_codes
from tests.support.terminal import run_on_pty
from tests.support.throttling_receiver import ThrottlingGate

# The SDK exporter retries within its own timeout, then gives up on the batch: 1 s makes the
# replay's own waiting and retrying do the work.
QUICK_EXPORTER = {"OTEL_EXPORTER_OTLP_TIMEOUT": "1"}


@pytest.fixture(scope="module")
def corpus_home(cli_corpus, tmp_path_factory) -> Path:
    """A COPILOT_HOME with four copies of every real session (each copy its own session id)."""
    home = tmp_path_factory.mktemp("throttled") / "home"
    for n in range(4):
        for run in cli_corpus.values():
            shutil.copytree(run.session_dir, home / "session-state" / f"{run.session_id}-{n}")
    return home


@pytest.fixture(scope="module")
def expected(corpus_home, tmp_path_factory) -> Counter:
    """(trace id, span id) of every span the corpus makes, from a replay into a file."""
    target = tmp_path_factory.mktemp("reference") / "spans.jsonl"
    assert run_replay(str(corpus_home), "--traces-file", str(target)).returncode == 0
    spans = Counter((s.trace_id, s.span_id) for s in read_spans(target))
    assert max(spans.values()) == 1
    return spans


def otlp_env(gate: ThrottlingGate, protocol: str) -> dict[str, str]:
    endpoint = gate.grpc_endpoint if protocol == "grpc" else gate.http_base
    return {"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, "OTEL_EXPORTER_OTLP_PROTOCOL": protocol, **QUICK_EXPORTER}


def received(receiver: OtlpReceiver, expected: Counter) -> Counter:
    receiver.wait_for_spans(sum(expected.values()), timeout=30)
    time.sleep(0.5)  # anything sent twice would arrive now
    return Counter((s.trace_id, s.span_id) for s in receiver.spans())


@pytest.mark.parametrize("protocol,code,status", [("grpc", grpc.StatusCode.RESOURCE_EXHAUSTED, 429),
                                                  ("grpc", grpc.StatusCode.UNAVAILABLE, 503),
                                                  ("http/protobuf", grpc.StatusCode.UNAVAILABLE, 429),
                                                  ("http/protobuf", grpc.StatusCode.UNAVAILABLE, 503)])
def test_throttled_for_a_while_every_span_arrives_exactly_once(corpus_home, expected, tmp_path, protocol, code,
                                                                status):
    """The backend refuses everything for 4 s, then takes at most 150 spans a second: the replay waits,
    retries, exits 0, and the receiver holds each span exactly once."""
    with OtlpReceiver() as receiver, ThrottlingGate(receiver, grpc_code=code, http_status=status) as gate:
        gate.refuse_for(4)
        gate.capacity(150)
        result = run_replay(str(corpus_home), "--state-dir", str(tmp_path), env=otlp_env(gate, protocol))
        assert result.returncode == 0, result.stderr.decode()
        got = received(receiver, expected)
        assert gate.refused > 0
    assert got == expected
    stderr = result.stderr.decode()
    assert re.search(rf"exported {sum(expected.values())} spans from {len(os.listdir(corpus_home / 'session-state'))}"
                     r" session\(s\).*, \d+ retries", stderr)
    assert "Traceback" not in stderr
    assert not (tmp_path / "replay").exists() or not list((tmp_path / "replay").iterdir()), "ledger left behind"


def test_a_replay_that_gives_up_names_what_it_did_not_deliver_and_a_rerun_sends_only_that(corpus_home, expected,
                                                                                          tmp_path):
    """Three requests (of 60 spans) get through, then the backend refuses for longer than --give-up-after: exit 1, the
    sessions not delivered are named; once the backend takes spans again the same command delivers the rest,
    and over both runs every span arrived exactly once."""
    with OtlpReceiver() as receiver, ThrottlingGate(receiver) as gate:
        env = otlp_env(gate, "grpc")
        gate.accept_then_refuse(3)
        batches = ("--rate", "60")  # batches of 60 spans: several requests
        first = run_replay(str(corpus_home), "--state-dir", str(tmp_path), "--give-up-after", "2", *batches, env=env)
        stderr = first.stderr.decode()
        assert first.returncode == 1, stderr
        total = len(os.listdir(corpus_home / "session-state"))
        missing = re.search(rf"gave up: .*RESOURCE_EXHAUSTED.*; (\d+) of {total} session\(s\) not delivered: (.*)",
                            stderr)
        assert missing, stderr
        assert 0 < int(missing.group(1)) < total
        assert "run the same command again to continue" in stderr
        delivered_first = len(receiver.spans())
        gate.open()
        second = run_replay(str(corpus_home), "--state-dir", str(tmp_path), "--give-up-after", "2", *batches, env=env)
        assert second.returncode == 0, second.stderr.decode()
        assert f"{total - int(missing.group(1))} session(s) delivered by an earlier run" in second.stderr.decode()
        got = received(receiver, expected)
    assert 0 < delivered_first < sum(expected.values())
    assert got == expected


def test_an_interrupted_replay_continues_where_it_stopped(corpus_home, expected, tmp_path):
    """Ctrl-C (SIGINT) while the backend throttles: the replay stops at once, saying how to continue; the
    same command then delivers the rest, each span once."""
    with OtlpReceiver() as receiver, ThrottlingGate(receiver) as gate:
        # PYTHONFAULTHANDLER: were it ever to hang after Ctrl-C, SIGABRT makes it print where each thread is.
        env = clean_env({**otlp_env(gate, "grpc"), "PYTHONFAULTHANDLER": "1"})
        gate.accept_then_refuse(2)
        process = subprocess.Popen([*COMMAND, "replay", str(corpus_home), "--state-dir", str(tmp_path), "--rate", "60"],
                                   env=env,
                                   stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=REPO)
        try:
            # Interrupted while the backend throttles (two requests refused), not before it is even reached.
            wait_until(lambda: gate.refused >= 2 or process.poll() is not None, timeout=120, interval=0.05,
                       what="the replay to be refused twice")
            assert process.poll() is None, f"the replay ended before it was interrupted: {process.communicate()}"
            os.kill(process.pid, signal.SIGINT)
            try:
                _out, err = process.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                process.send_signal(signal.SIGABRT)
                _out, err = process.communicate(timeout=30)
                pytest.fail(f"the replay did not stop within 60 s of SIGINT:\n{err.decode(errors='replace')}")
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
        assert process.returncode == 130, err.decode()
        assert "interrupted" in err.decode() and "run the same command again" in err.decode()
        gate.open()
        again = run_replay(str(corpus_home), "--state-dir", str(tmp_path), env=otlp_env(gate, "grpc"))
        assert again.returncode == 0, again.stderr.decode()
        got = received(receiver, expected)
    assert got == expected


def test_rate_caps_spans_per_second(corpus_home, expected, tmp_path):
    """--rate 100: the replay of the corpus takes at least its span count / 100 seconds (less the first
    second's allowance), and every span arrives."""
    spans = sum(expected.values())
    with OtlpReceiver() as receiver, ThrottlingGate(receiver) as gate:
        started = time.monotonic()
        result = run_replay(str(corpus_home), "--state-dir", str(tmp_path), "--rate", "100",
                            env=otlp_env(gate, "grpc"))
        took = time.monotonic() - started
        assert result.returncode == 0, result.stderr.decode()
        got = received(receiver, expected)
    assert got == expected
    assert took >= spans / 100 - 1
    assert max(len(request.resource_spans[0].scope_spans[0].spans) for request in receiver.requests()) <= 100


def test_a_terminal_gets_a_progress_bar_and_a_pipe_one_summary_line(corpus_home, tmp_path):
    """On an 80-column terminal the replay draws sessions, spans, rate and the time left while a throttled
    backend makes it wait; piped (to a backend that takes everything), it writes one summary line."""
    with OtlpReceiver() as receiver, ThrottlingGate(receiver) as gate:
        gate.capacity(100)
        env = clean_env({**otlp_env(gate, "grpc"), "COLUMNS": "80", "LINES": "24", "TERM": "xterm-256color"})
        code, screen = run_on_pty([*COMMAND, "replay", str(corpus_home), "--state-dir", str(tmp_path / "a")], env,
                                  cwd=REPO, timeout=60)
        gate.open()
        piped = run_replay(str(corpus_home), "--state-dir", str(tmp_path / "b"), env=otlp_env(gate, "grpc"))
    assert code == 0, screen
    plain = strip_terminal_codes(screen)
    assert re.search(r"\d+/\d+ sessions\s+\d+ spans\s+\d+/s", plain), plain
    assert "exported" in plain
    lines = [line for line in piped.stderr.decode().splitlines() if line.strip()]
    assert piped.returncode == 0 and len(lines) == 1 and lines[0].startswith("copilot-otel: exported"), lines
    bars = [line for line in re.split(r"[\r\n]", plain) if line.startswith(("replaying", "refused, retry"))]
    assert bars and all(len(line) <= 80 for line in bars), bars
    assert "\x1b" not in lines[0]
