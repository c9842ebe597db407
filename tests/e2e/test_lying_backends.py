"""Issue 21, items 5 and 6, through the real commands: `copilot-otel replay` and the daemon against backends
that lie (a 2xx that is no OTLP answer), trickle, or never answer, on loopback (tests/support/liars.py), in
front of a real receiver (Rotel) that then takes what they held back."""

from __future__ import annotations

import re
import shutil
import signal
import time
from collections import Counter
from pathlib import Path

import pytest

from copilot_otel.delivery.sinks import MemorySink
from copilot_otel.replay.runner import replay_files
from tests.support.backends import HangingGrpc
from tests.support.commands import run_replay
from tests.support.daemon import DaemonProcess
from tests.support.files import new_session
from tests.support.liars import LIES, Answer, LyingBackend, Silent
from tests.support.net import wait_until
from tests.support.otlp_receiver import OtlpReceiver
from tests.support.scrape import fetch, value

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "cli" / "1.0.102"
FAST = ("--idle-quiet", "0.3", "--rescan-interval", "1")
TRICKLE = Answer(200, "application/x-protobuf", b"\0" * 120, trickle=1.0)  # headers, then a byte a second
SAID = {"html": "the endpoint answered 200 with text/html, not an OTLP response",
        "json_error": 'the endpoint answered 200 with a JSON error, not an OTLP response: {"error":"quota exceeded"}',
        "random_bytes": "the endpoint answered 200 with 340 bytes of application/x-protobuf that are not an "
                        "ExportTraceServiceResponse",
        "wrong_type": "the endpoint answered 200 with text/plain, not an OTLP response",
        "redirect": "HTTP 302 Found (redirected to http://portal.invalid/login"}
STARTUP = 5.0  # seconds a replay subprocess may take to start and report on a busy machine


@pytest.fixture(scope="module")
def home(tmp_path_factory) -> Path:
    """A COPILOT_HOME holding every stored real session of CLI 1.0.102."""
    home = tmp_path_factory.mktemp("lying") / "home"
    for scenario in sorted(FIXTURES.iterdir()):
        for session in (scenario / "session-state").iterdir():
            shutil.copytree(session, home / "session-state" / session.name)
    return home


def logs(home: Path) -> list[Path]:
    return sorted((home / "session-state").glob("*/events.jsonl"))


def span_ids(paths: list[Path]) -> Counter:
    """(trace id, span id) of every span these logs make, from an in-process replay."""
    sink = MemorySink()
    replay_files(paths, sink)
    return Counter((f"{r.trace_id:032x}", f"{r.span_id:016x}") for r in sink.records)


def received(receiver: OtlpReceiver) -> Counter:
    return Counter((s.trace_id, s.span_id) for s in receiver.spans())


def http_env(base: str, timeout: float = 5) -> dict[str, str]:
    return {"OTEL_EXPORTER_OTLP_ENDPOINT": base, "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
            "OTEL_EXPORTER_OTLP_TIMEOUT": str(timeout)}


def ledgers(state: Path) -> list[Path]:
    return list((state / "replay").glob("*.sqlite")) if (state / "replay").exists() else []


# ------------------------------------------------------------------------ item 5: replay


@pytest.mark.parametrize("lie", sorted(LIES))
def test_a_replay_to_a_lying_backend_exits_1_keeps_its_ledger_and_a_rerun_delivers_the_rest(home, tmp_path, lie):
    """Two requests go through to Rotel, then the backend answers with a lie (an HTML page, a JSON error,
    random bytes labelled protobuf, a valid response labelled text/plain, a redirect): the replay does
    not count it as delivered, exits 1 naming what it did not deliver and why, and keeps its ledger;
    once the same address answers honestly, the same command delivers the rest, each span exactly once."""
    expected = span_ids(logs(home))
    with OtlpReceiver() as receiver, LyingBackend(LIES[lie], receiver=receiver, honest_for=2) as backend:
        env = http_env(backend.base)
        first = run_replay(str(home), "--state-dir", str(tmp_path), "--give-up-after", "1", "--rate", "20", env=env)
        stderr = first.stderr.decode()
        assert first.returncode == 1, stderr
        assert f"gave up: OTLP export to {backend.traces_url} (http/protobuf) failed: {SAID[lie]}" in stderr, stderr
        assert re.search(rf"\d+ of {len(logs(home))} session\(s\) not delivered",
                         stderr) and "run the same command again" in stderr
        assert ledgers(tmp_path) and backend.lies >= 1 and "Traceback" not in stderr
        delivered_first = sum(received(receiver).values())
        backend.honest()
        second = run_replay(str(home), "--state-dir", str(tmp_path), env=env)
        assert second.returncode == 0, second.stderr.decode()
        assert "session(s) delivered by an earlier run" in second.stderr.decode()
        receiver.wait_for_spans(sum(expected.values()), timeout=30)
        time.sleep(0.5)  # anything sent twice would arrive now
        got = received(receiver)
    assert delivered_first == 40  # two requests of 20 spans (--rate 20)
    assert got == expected and not ledgers(tmp_path)


def test_a_replay_told_of_dropped_spans_says_so_and_exits_1(home, tmp_path):
    """The backend takes every request (Rotel gets them) but says it dropped 1 span of each (OTLP partial
    success): the replay does not retry, counts them, says so with the backend's message, exits 1, and
    keeps no ledger (every request was answered: nothing can be sent again selectively)."""
    paths = logs(home)[:3]
    with OtlpReceiver() as receiver, LyingBackend(None, receiver=receiver, partial=(1, "span too old")) as backend:
        result = run_replay(*map(str, paths), "--state-dir", str(tmp_path), "--rate", "10", env=http_env(backend.base))
        requests = backend.requests
        receiver.wait_for_spans(sum(span_ids(paths).values()), timeout=30)
    stderr = result.stderr.decode()
    assert result.returncode == 1, stderr
    assert f"{requests} span(s) dropped by the backend" in stderr
    assert (f"the trace backend accepted the requests but dropped {requests} span(s) (OTLP partial success: span "
            "too old); it does not say which") in stderr
    assert not ledgers(tmp_path) and "Traceback" not in stderr


# ------------------------------------------------------------------------ item 6: replay's deadline


@pytest.mark.parametrize("backend_kind", ["trickle", "silent", "grpc_hanging"])
def test_give_up_after_is_kept_within_one_timeout(home, tmp_path, backend_kind):
    """A backend that trickles its answer a byte a second, one that never answers, a gRPC server that holds
    the call: with OTEL_EXPORTER_OTLP_TIMEOUT=2 and --give-up-after 3 the replay ends within 3 + 2 s (plus
    its start), exit 1, saying no answer came in time. Before, the trickle held one request for minutes."""
    backends = {"trickle": lambda: LyingBackend(TRICKLE), "silent": Silent, "grpc_hanging": HangingGrpc}
    with backends[backend_kind]() as backend:
        if backend_kind == "grpc_hanging":
            env = {**http_env(backend.endpoint, 2), "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}
        else:
            env = http_env(backend.base, 2)
        started = time.monotonic()
        result = run_replay(str(logs(home)[0]), "--state-dir", str(tmp_path), "--give-up-after", "3", env=env)
        took = time.monotonic() - started
    stderr = result.stderr.decode()
    assert result.returncode == 1, stderr
    assert "no answer within the OTLP timeout of 2 s" in stderr and "1 of 1 session(s) not delivered" in stderr
    assert took < 3 + 2 + STARTUP, took
    assert ledgers(tmp_path)


# ------------------------------------------------------------------------ the daemon


def health(daemon: DaemonProcess) -> str:
    return fetch(daemon.health_url)


def stop_seconds(daemon: DaemonProcess) -> float:
    """SIGTERM the daemon; the seconds until it exited (0)."""
    started = time.monotonic()
    assert daemon.stop(signal.SIGTERM, timeout=30) == 0
    return time.monotonic() - started


def test_the_daemon_keeps_its_checkpoint_behind_a_lying_backend_and_says_so(tmp_path):
    """A backend that answers 200 with an HTML page: /healthz says the export fails and why, the failures
    are counted, the checkpoint does not move; after a restart against the same address, now honest,
    every span arrives exactly once."""
    home, state = tmp_path / "home", tmp_path / "state"
    path = new_session(home, "behind-a-portal")
    path.write_bytes(next((FIXTURES / "multi_turn" / "session-state").glob("*/events.jsonl")).read_bytes())
    expected = span_ids([path])
    with OtlpReceiver() as receiver, LyingBackend(LIES["html"], receiver=receiver) as backend:
        with DaemonProcess(home, state, env=http_env(backend.base), args=FAST) as daemon:
            wait_until(lambda: "answered 200 with text/html" in health(daemon), timeout=30, what="/healthz saying it")
            said = health(daemon)
            samples = daemon.scrape()
        assert value(samples, "copilot_otel_spans_failed_total") > 0
        assert value(samples, "copilot_otel_spans_exported_total") == 0
        assert value(samples, "copilot_otel_checkpoint_commits_total") == 0
        backend.honest()
        with DaemonProcess(home, state, env=http_env(backend.base), args=FAST):
            receiver.wait_for_spans(sum(expected.values()), timeout=30)
            time.sleep(0.5)  # anything sent twice would arrive now
        got = received(receiver)
    assert said.startswith("ok (trace export failing") and "is OTEL_EXPORTER_OTLP_ENDPOINT right?" in said
    assert got == expected


def test_the_daemon_says_a_timed_out_export_is_failing_and_stops_promptly(tmp_path):
    """A backend that trickles its answer: with OTEL_EXPORTER_OTLP_TIMEOUT=2 /healthz says the export is
    failing (no answer within 2 s) while requests keep timing out; SIGTERM, with a request in flight, ends
    the daemon within the 5 s flush and a second."""
    home, state = tmp_path / "home", tmp_path / "state"
    new_session(home, "trickled").write_bytes(
        next((FIXTURES / "plain" / "session-state").glob("*/events.jsonl")).read_bytes())
    with LyingBackend(TRICKLE) as backend, DaemonProcess(home, state, env=http_env(backend.base, 2),
                                                           args=FAST) as daemon:
        wait_until(lambda: "no answer within the OTLP timeout of 2 s" in health(daemon), timeout=30,
                   what="/healthz saying the export times out")
        said = health(daemon)
        assert value(daemon.scrape(), "copilot_otel_checkpoint_commits_total") == 0
        took = stop_seconds(daemon)
    assert said.startswith("ok (trace export failing")
    assert took < 5 + 1.5, took


def test_sigterm_is_prompt_whatever_the_timeout_with_traces_and_metrics_held(tmp_path):
    """Traces and the OTLP metrics push both go to backends that accept and never answer, with a 60 s
    OTLP timeout: SIGTERM ends the daemon within its stated bound (5 s flushing the traces, the requests in
    flight abandoned, at most 5 s for the final metrics push), far under systemd's TimeoutStopSec=30 s."""
    home, state = tmp_path / "home", tmp_path / "state"
    new_session(home, "held").write_bytes(
        next((FIXTURES / "plain" / "session-state").glob("*/events.jsonl")).read_bytes())
    with Silent() as traces, Silent() as metrics:
        env = {**http_env(traces.base, 60), "OTEL_METRICS_EXPORTER": "otlp",
               "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT": f"{metrics.base}/v1/metrics",
               "OTEL_METRIC_EXPORT_INTERVAL": "200"}
        with DaemonProcess(home, state, env=env, args=FAST) as daemon:
            wait_until(lambda: traces.accepted and metrics.accepted, timeout=30, what="both requests in flight")
            took = stop_seconds(daemon)
        text = daemon.log_text()
    assert took < 5 + 5 + 2, took
    assert "stopped" in text and "Traceback" not in text


def test_the_daemon_counts_spans_a_backend_dropped(tmp_path):
    """A backend that takes every request and says it dropped 1 span of each (partial success): the daemon
    does not retry, counts them in copilot_otel_spans_dropped_by_backend_total, logs the backend's message,
    says it on /healthz, and its checkpoint moves on."""
    home, state = tmp_path / "home", tmp_path / "state"
    new_session(home, "partly").write_bytes(
        next((FIXTURES / "plain" / "session-state").glob("*/events.jsonl")).read_bytes())
    with OtlpReceiver() as receiver, LyingBackend(None, receiver=receiver, partial=(1, "span too old")) as backend:
        with DaemonProcess(home, state, env=http_env(backend.base), args=FAST) as daemon:
            daemon.wait_for_metric("copilot_otel_spans_dropped_by_backend_total", 1, timeout=30)
            daemon.wait_for_metric("copilot_otel_checkpoint_commits_total", 1, timeout=30)
            said = health(daemon)
            dropped = value(daemon.scrape(), "copilot_otel_spans_dropped_by_backend_total")
        assert dropped == backend.requests
    assert "span(s) accepted and dropped by the trace backend" in said and "last: span too old" in said
    assert "accepted a request but dropped 1 of its" in daemon.log_text() and "span too old" in daemon.log_text()
