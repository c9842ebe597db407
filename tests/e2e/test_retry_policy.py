"""One retry policy against backends that say how long to wait, or lie about it: a real replay into a real
receiver (Rotel) behind a gate that refuses with HTTP 429 + ``Retry-After: 999999``, 503 + an HTTP date, or gRPC
RESOURCE_EXHAUSTED + RetryInfo. A delay the backend asks for is honoured, a huge one is capped and never holds
``--give-up-after`` or a daemon's stop hostage."""

from __future__ import annotations

import contextlib
import email.utils
import re
import signal
import threading
import time
from collections import Counter
from pathlib import Path

import grpc
import pytest

from tests.support.commands import run_replay
from tests.support.daemon import DaemonProcess
from tests.support.net import wait_until
from tests.support.otlp_json import read_spans
from tests.support.otlp_receiver import OtlpReceiver
from tests.support.throttling_receiver import ThrottlingGate

QUICK_EXPORTER = {"OTEL_EXPORTER_OTLP_TIMEOUT": "2"}


@pytest.fixture(scope="module")
def home(cli_corpus, tmp_path_factory) -> Path:
    """A COPILOT_HOME holding one real session with tools."""
    home = tmp_path_factory.mktemp("retry") / "home"
    run = cli_corpus["multi_turn"]
    target = home / "session-state" / run.session_id
    target.mkdir(parents=True)
    (target / "events.jsonl").write_bytes(run.events_path.read_bytes())
    return home


@pytest.fixture(scope="module")
def expected(home, tmp_path_factory) -> Counter:
    target = tmp_path_factory.mktemp("reference") / "spans.jsonl"
    assert run_replay(str(home), "--traces-file", str(target)).returncode == 0
    return Counter((s.trace_id, s.span_id) for s in read_spans(target))


def env_for(gate: ThrottlingGate, protocol: str) -> dict[str, str]:
    endpoint = gate.grpc_endpoint if protocol == "grpc" else gate.http_base
    return {"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, "OTEL_EXPORTER_OTLP_PROTOCOL": protocol, **QUICK_EXPORTER}


@contextlib.contextmanager
def refusing_once(gate: ThrottlingGate):
    """The gate refuses every request until it has refused one, then takes everything (however slowly the replay
    starts on a busy machine)."""
    gate.refuse_for(3600)
    done = threading.Event()

    def open_after_a_refusal() -> None:
        while not done.is_set():
            if gate.refused:
                gate.open()
                return
            time.sleep(0.01)  # polls the gate (its own thread, ended by done)

    opener = threading.Thread(target=open_after_a_refusal, name="gate-opener")
    opener.start()
    try:
        yield
    finally:
        done.set()
        opener.join(5)


def waits_logged(stderr: str) -> list[float]:
    """The waits a replay or daemon logged that the backend asked for."""
    return [float(s) for s in re.findall(r"retrying in ([0-9.]+) s \(as the backend asked\)", stderr)]


def test_a_retry_after_of_999999_seconds_is_capped_and_give_up_after_still_ends_the_replay(home, tmp_path):
    """HTTP 429 with ``Retry-After: 999999``: the wait is the policy's cap (300 s), and --give-up-after 3 ends the
    replay within one OTLP timeout of 3 s, exit 1, instead of waiting 11 days."""
    with OtlpReceiver() as receiver, ThrottlingGate(receiver, http_status=429, retry_after="999999") as gate:
        gate.refuse_for(3600)
        started = time.monotonic()
        result = run_replay(str(home), "--state-dir", str(tmp_path), "--give-up-after", "3",
                            env=env_for(gate, "http/protobuf"))
        took = time.monotonic() - started
    stderr = result.stderr.decode()
    assert result.returncode == 1, stderr
    assert took < 60, f"the replay took {took:.0f} s"  # its start, one wait of 3 s and one 2 s timeout
    assert gate.refused >= 1
    assert "Traceback" not in stderr


def test_a_retry_after_date_is_waited_out_then_every_span_arrives_once(home, expected, tmp_path):
    """HTTP 503 with ``Retry-After: <an HTTP date 4 s ahead>``: the replay waits until then (as the backend asked),
    retries, exits 0, and the receiver holds each span exactly once."""
    with OtlpReceiver() as receiver, ThrottlingGate(receiver, http_status=503) as gate:
        gate.retry_after = lambda: email.utils.formatdate(time.time() + 4, usegmt=True)
        with refusing_once(gate):
            result = run_replay(str(home), "--state-dir", str(tmp_path), env=env_for(gate, "http/protobuf"))
        receiver.wait_for_spans(sum(expected.values()), timeout=30)
        time.sleep(0.5)  # anything sent twice would arrive now
        got = Counter((s.trace_id, s.span_id) for s in receiver.spans())
    stderr = result.stderr.decode()
    assert result.returncode == 0, stderr
    assert got == expected
    waits = waits_logged(stderr)
    # HTTP dates have whole seconds: the wait is what was left of the 4 s when the refusal came, give or take one
    assert waits and all(0 < w <= 5 for w in waits), stderr


def test_resource_exhausted_with_retry_info_waits_the_delay_it_names(home, expected, tmp_path):
    """gRPC RESOURCE_EXHAUSTED carrying a google.rpc.RetryInfo of 1.5 s: the replay waits exactly that (no jitter
    on a backend's own delay), then delivers every span once."""
    with OtlpReceiver() as receiver, ThrottlingGate(receiver, grpc_code=grpc.StatusCode.RESOURCE_EXHAUSTED,
                                                    retry_info=1.5) as gate:
        with refusing_once(gate):
            result = run_replay(str(home), "--state-dir", str(tmp_path), env=env_for(gate, "grpc"))
        receiver.wait_for_spans(sum(expected.values()), timeout=30)
        time.sleep(0.5)  # anything sent twice would arrive now
        got = Counter((s.trace_id, s.span_id) for s in receiver.spans())
    stderr = result.stderr.decode()
    assert result.returncode == 0, stderr
    assert got == expected
    assert waits_logged(stderr) and set(waits_logged(stderr)) == {1.5}, stderr


def test_a_daemon_waiting_out_a_huge_retry_after_stops_at_once(home, tmp_path):
    """The daemon's export told to wait 999999 s: the wait is capped, and SIGTERM ends the daemon within seconds,
    its checkpoint behind the spans it could not deliver."""
    with OtlpReceiver() as receiver, ThrottlingGate(receiver, http_status=429, retry_after="999999") as gate:
        gate.refuse_for(3600)
        env = env_for(gate, "http/protobuf")
        daemon = DaemonProcess(home, tmp_path / "state", env=env, log_level="info")
        with daemon:
            wait_until(lambda: "retrying in 300.0 s (as the backend asked)" in daemon.log_text(), timeout=60,
                       what="the daemon's capped wait")
            started = time.monotonic()
            code = daemon.stop(signal.SIGTERM, timeout=30)
            took = time.monotonic() - started
        assert code == 0 and took < 15, f"exit {code} after {took:.1f} s"
