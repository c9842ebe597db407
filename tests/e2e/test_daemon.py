"""`copilot-otel run`: follows live sessions and keeps the promises of docs/reliability.md.

The daemon runs as a real subprocess. Event logs are real CLI logs, either written live by
the CLI or replayed line by line into new session folders (a folder's name is its session
id, so each copy yields distinct span ids). What must arrive is computed by replaying the
final files (replay itself is checked against the events in test_replay.py).
"""

from __future__ import annotations

import signal
import time
import urllib.error
import urllib.request

from tests.support.copilot_cli import prompt_for
from tests.support.daemon import DaemonProcess, complete_lines_spans
from tests.support.files import append, new_session
from tests.support.model import label
from tests.support.net import wait_until
from tests.support.otlp_receiver import OtlpReceiver
from tests.support.provider import provider_marker
from tests.support.scrape import value
from tests.support.spans import expected_keys, key, spans_now, wait_for_keys

FAST = ("--idle-quiet", "0.3", "--rescan-interval", "1")


def lines_of(run) -> list[bytes]:
    return run.events_path.read_bytes().splitlines(keepends=True)


# ------------------------------------------------------------------------ live, real CLI

def test_live_sessions_end_to_end(cli, provider, tmp_path):
    """While the real CLI works (two sessions at once, one sleeping in a tool), every span
    reaches a real OTLP receiver exactly once, identical to a replay of the final logs."""
    home = tmp_path / "home"
    (home / "session-state").mkdir(parents=True)
    cwd = tmp_path / "work"
    cwd.mkdir()
    with OtlpReceiver() as receiver:
        env = {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.grpc_endpoint, "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}
        with DaemonProcess(home, tmp_path / "state", env=env, args=FAST) as daemon:
            first = cli.run(prompt_for("plain"), home=home, port=provider.port, cwd=cwd)
            sleeping = cli.start(prompt_for("sleep_tool", 2), home=home, port=provider.port, cwd=cwd)
            sub = cli.start(prompt_for("subagent"), home=home, port=provider.port, cwd=cwd)
            # While the tool sleeps, its turn is open: the turn span has not been exported yet.
            wait_until(lambda: sleeping.events_path.exists() and b'"tool.execution_start"' in
                       sleeping.events_path.read_bytes(), what="the sleeping tool to start")
            wait_until(lambda: value(daemon.scrape(), "copilot_sessions", state="waiting_tool") >= 1,
                       what="a session waiting on its tool")
            exported_now = [s for s in receiver.spans()
                            if s.attributes.get("gen_ai.conversation.id") == sleeping.session_id]
            if b'"tool.execution_complete"' not in sleeping.events_path.read_bytes():  # still sleeping
                assert not [s for s in exported_now if label(s) in ("turn 0", "execute_tool bash")]
            runs = [first, sleeping.wait(), sub.wait(),
                    cli.run(prompt_for("failing_tool", str(cwd)), home=home, port=provider.port, cwd=cwd)]
            expected = expected_keys(r.events_path for r in runs)
            received = receiver.wait_for_spans(len(expected), timeout=30)
            time.sleep(1.0)  # anything extra (a duplicate) would arrive now
            received = receiver.spans()
            samples = daemon.scrape()
        assert sorted(key(s) for s in received) == expected
        assert value(samples, "copilot_otel_spans_exported_total") == len(expected)


def test_live_daemon_counts_every_call_of_a_provider_that_reuses_ids(cli, provider, tmp_path):
    """The real CLI against a provider that gives every completion the same id, followed by the live
    daemon: each of the calls the provider answered is a chat span and an LLM call on /metrics."""
    home, traces = tmp_path / "home", tmp_path / "traces.jsonl"
    (home / "session-state").mkdir(parents=True)
    with DaemonProcess(home, tmp_path / "state", traces_file=traces, args=("--idle-quiet", "0.2")) as daemon:
        run = cli.run(prompt_for("multi_turn", text=f"{provider_marker('reuse_ids')} Please do the task."),
                      home=home, port=provider.port, cwd=tmp_path / "work")
        calls = [e for e in run.events() if e["type"] == "session.usage_record"]
        assert len(calls) == 3 and {c["data"]["usage"]["apiCallId"] for c in calls} == {"chatcmpl-reused"}
        wait_until(lambda: value(daemon.scrape(), "copilot_completion_signals_total", signal="shutdown") == 1,
                   what="the session read to its end")
        assert value(daemon.scrape(), "copilot_llm_calls_total", model="test-model", outcome="success") == 3
        wait_until(lambda: len([s for s in complete_lines_spans(traces) if s.name.startswith("chat ")]) == 3,
                   what="3 chat spans")


# ------------------------------------------------------------------------ file faults
# Files written in pieces, truncated, replaced, deleted, polled, and restarts over them: the real Daemon in
# process, tests/component/test_daemon_files.py. Here, what needs the process and a backend.


def test_backend_down_then_back(cli_corpus, tmp_path):
    """With the OTLP backend down, metrics are still served and spans wait; once it is back,
    everything is delivered, exactly once."""
    home = tmp_path / "home"
    path = new_session(home, "backend-outage")
    lines = lines_of(cli_corpus["subagent"])
    with OtlpReceiver() as receiver:
        env = {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.http_base, "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
               "OTEL_EXPORTER_OTLP_TIMEOUT": "1"}
        with DaemonProcess(home, tmp_path / "state", env=env, args=FAST) as daemon:
            receiver.down()
            append(path, b"".join(lines))
            wait_until(lambda: value(daemon.scrape(), "copilot_otel_spans_failed_total") > 0,
                       what="a failed export")
            samples = daemon.scrape()
            assert value(samples, "copilot_turns_total", agent="main") > 0  # metrics go on
            receiver.up()
            expected = expected_keys([path])
            receiver.wait_for_spans(len(expected), timeout=60)
            time.sleep(0.5)  # anything sent twice would arrive now
            assert sorted(key(s) for s in receiver.spans()) == expected


def test_backend_down_pauses_reading_instead_of_dropping(cli_corpus, tmp_path):
    """With the backend down and room for only 5 spans, the daemon stops reading ahead: /healthz
    stays 200 and says reading is paused, the queue holds about the cap, not everything; once
    the backend is back, every span of every log arrives, exactly once."""
    home = tmp_path / "home"
    paths = []
    for name in cli_corpus:
        paths.append(new_session(home, f"outage-{name}"))
        paths[-1].write_bytes(b"")
    with OtlpReceiver() as receiver:
        env = {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.http_base, "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
               "OTEL_EXPORTER_OTLP_TIMEOUT": "1"}
        with DaemonProcess(home, tmp_path / "state", env=env, args=FAST + ("--max-buffered-spans", "5")) as daemon:
            receiver.down()
            for path, run in zip(paths, cli_corpus.values()):
                append(path, run.events_path.read_bytes())
            expected = expected_keys(paths)

            def health() -> tuple[int, str]:
                try:
                    with urllib.request.urlopen(daemon.health_url, timeout=2) as response:
                        return response.status, response.read().decode().strip()
                except urllib.error.HTTPError as exc:
                    return exc.code, exc.read().decode().strip()

            wait_until(lambda: "reading paused" in health()[1], timeout=30, what="reading to pause")
            assert health()[0] == 200
            queued = value(daemon.scrape(), "copilot_otel_export_queue_spans")
            assert 5 <= queued < len(expected) / 2
            receiver.up()
            receiver.wait_for_spans(len(expected), timeout=90)
            time.sleep(0.5)  # anything sent twice would arrive now
            assert sorted(key(s) for s in receiver.spans()) == expected
            wait_until(lambda: health() == (200, "ok"), what="health to recover")


def test_a_finished_session_resumed_later(cli_corpus, tmp_path):
    """A session that shut down is compacted (its model dropped); when the CLI resumes it and the
    file grows, the daemon rebuilds it from the file and exports only what is new: the spans of
    the whole log, each once, and the counters of the new events only."""
    home, traces = tmp_path / "home", tmp_path / "traces.jsonl"
    run = cli_corpus["resume"]
    lines = lines_of(run)
    first_end = next(i for i, line in enumerate(lines) if b'"type":"session.shutdown"' in line) + 1
    path = new_session(home, run.session_id)
    with DaemonProcess(home, tmp_path / "state", traces_file=traces, args=FAST) as daemon:
        append(path, b"".join(lines[:first_end]))
        first = tmp_path / "first" / run.session_id / "events.jsonl"
        first.parent.mkdir(parents=True)
        first.write_bytes(b"".join(lines[:first_end]))
        wait_for_keys(traces, expected_keys([first]))
        turns_before = value(daemon.scrape(), "copilot_turns_total", agent="main")
        time.sleep(1)  # the scenario: the resume comes in a later read than the shutdown
        append(path, b"".join(lines[first_end:]))
        got = wait_for_keys(traces, expected_keys([path]))
        assert len(got) == len(set(got)), "a span exported twice"
        wait_until(lambda: value(daemon.scrape(), "copilot_completion_signals_total", signal="shutdown") == 2,
                   what="the second shutdown counted")
        samples = daemon.scrape()
    new_turns = sum(b'"type":"assistant.turn_start"' in line for line in lines[first_end:])
    assert value(samples, "copilot_turns_total", agent="main") == turns_before + new_turns
    assert value(samples, "copilot_sessions_started_total") == 1


def test_sigterm_flushes_and_exits_promptly(cli_corpus, tmp_path):
    """SIGTERM: exit 0 within a few seconds, with every span written and committed."""
    home, traces, state = tmp_path / "home", tmp_path / "traces.jsonl", tmp_path / "state"
    path = new_session(home, "sigterm")
    daemon = DaemonProcess(home, state, traces_file=traces, args=FAST).start()
    path.write_bytes(cli_corpus["failing_tool"].events_path.read_bytes())
    wait_for_keys(traces, expected_keys([path]))
    started = time.monotonic()
    assert daemon.stop(signal.SIGTERM) == 0
    assert time.monotonic() - started < 5
    # A restart finds nothing new to send.
    count = len(spans_now(traces))
    with DaemonProcess(home, state, traces_file=traces, args=FAST) as again:
        wait_until(lambda: value(again.scrape(), "copilot_otel_files_watched") == 1, what="the file")
        time.sleep(0.5)  # anything sent again would arrive now
    assert len(spans_now(traces)) == count

