"""`copilot-otel run`: follows live sessions and keeps design.md §4's promises.

The daemon runs as a real subprocess. Event logs are real CLI logs, either written live by
the CLI or replayed line by line into new session folders (a folder's name is its session
id, so each copy yields distinct span ids). What must arrive is computed by replaying the
final files (replay itself is checked against the events in test_replay.py).
"""

from __future__ import annotations

import os
import shutil
import signal
import time
import urllib.error
import urllib.request

import pytest

from tests.support.copilot_cli import prompt_for
from tests.support.otlp_receiver import OtlpReceiver
from tests.support.daemon import DaemonProcess, complete_lines_spans
from tests.support.files import append, new_session
from tests.support.net import wait_until
from tests.support.scrape import value
from tests.support.spans import expected_keys, key, spans_now, wait_for_keys
from tests.support.model import label

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


# ------------------------------------------------------------------------ file faults

def test_line_written_in_two_pieces(cli_corpus, tmp_path):
    """A partial line waits for its newline: no error, no span, then the span."""
    lines = lines_of(cli_corpus["plain"])
    home, traces = tmp_path / "home", tmp_path / "traces.jsonl"
    path = new_session(home, "two-pieces")
    cut = next(i for i, l in enumerate(lines) if b'"tool.execution_complete"' in l)
    with DaemonProcess(home, tmp_path / "state", traces_file=traces, args=FAST) as daemon:
        append(path, b"".join(lines[:cut]))
        half = len(lines[cut]) // 2
        append(path, lines[cut][:half])
        wait_until(lambda: value(daemon.scrape(), "copilot_otel_events_read_total", type="tool.execution_start"),
                   what="the lines before the split one")
        time.sleep(0.5)
        assert not [s for s in complete_lines_spans(traces) if s.name.startswith("execute_tool")]
        append(path, lines[cut][half:] + b"".join(lines[cut + 1:]))
        wait_for_keys(traces, expected_keys([path]))
        assert sum(v for (n, _l), v in daemon.scrape().items() if n == "copilot_otel_lines_rejected_total") == 0


def test_restart_with_partial_last_line(cli_corpus, tmp_path):
    """Stopped while a line is half written, restarted after it completes: exported once."""
    lines = lines_of(cli_corpus["multi_tools"])
    home, traces, state = tmp_path / "home", tmp_path / "traces.jsonl", tmp_path / "state"
    path = new_session(home, "partial-restart")
    cut = len(lines) // 2
    with DaemonProcess(home, state, traces_file=traces, args=FAST) as daemon:
        append(path, b"".join(lines[:cut]) + lines[cut][:10])
        wait_until(lambda: daemon.scrape().get(("copilot_otel_checkpoint_commits_total", ())), what="a commit")
    append(path, lines[cut][10:] + b"".join(lines[cut + 1:]))
    with DaemonProcess(home, state, traces_file=traces, args=FAST):
        got = wait_for_keys(traces, expected_keys([path]))
        time.sleep(0.5)
    assert len(spans_now(traces)) == len(got) == len(set(got))


def test_restart_between_export_and_checkpoint(cli_corpus, tmp_path):
    """Commits lost after an export: the restart re-sends, with identical ids, and loses nothing."""
    lines = lines_of(cli_corpus["subagent"])
    home, traces, state = tmp_path / "home", tmp_path / "traces.jsonl", tmp_path / "state"
    path = new_session(home, "lost-commit")
    cut = next(i for i, l in enumerate(lines) if b'"subagent.started"' in l)
    with DaemonProcess(home, state, traces_file=traces, args=FAST) as daemon:
        append(path, b"".join(lines[:cut]))
        wait_until(lambda: value(daemon.scrape(), "copilot_otel_events_read_total", type="subagent.started") == 0
                   and value(daemon.scrape(), "copilot_otel_checkpoint_commits_total"), what="a commit")
    saved = tmp_path / "checkpoint-before"
    shutil.copytree(state, saved)
    append(path, b"".join(lines[cut:]))
    with DaemonProcess(home, state, traces_file=traces, args=FAST):
        wait_for_keys(traces, expected_keys([path]))
    shutil.rmtree(state)
    shutil.copytree(saved, state)  # as if every commit after the first export never happened
    with DaemonProcess(home, state, traces_file=traces, args=FAST):
        wait_until(lambda: len(spans_now(traces)) > len(set(spans_now(traces))), what="the re-sent spans")
        time.sleep(0.5)
    got = spans_now(traces)
    assert set(got) == set(expected_keys([path]))  # duplicates are byte-identical spans, nothing lost


@pytest.mark.parametrize("keep", ["nothing", "half"])
def test_truncate_then_write(cli_corpus, tmp_path, keep):
    """A truncated file (to nothing, or to its first half: the same first bytes) is read again
    from the start: both generations are exported, the second with ids of its own."""
    home, traces = tmp_path / "home", tmp_path / "traces.jsonl"
    path = new_session(home, "truncated")
    first, second = cli_corpus["plain"].events_path, cli_corpus["failing_tool"].events_path
    with DaemonProcess(home, tmp_path / "state", traces_file=traces, args=FAST):
        path.write_bytes(first.read_bytes())
        wait_for_keys(traces, expected_keys([path]))
        before = set(spans_now(traces))
        lines = first.read_bytes().splitlines(keepends=True)
        with open(path, "r+b") as handle:
            handle.truncate(0 if keep == "nothing" else len(b"".join(lines[:len(lines) // 2])))
        time.sleep(0.3)
        append(path, second.read_bytes())
        wait_for_keys(traces, sorted(before | set(expected_keys([path], generation=1))))


def test_file_replaced_by_a_new_one(cli_corpus, tmp_path):
    """A new file (new inode) under the same name is read from its start, as a new generation."""
    home, traces = tmp_path / "home", tmp_path / "traces.jsonl"
    path = new_session(home, "replaced")
    with DaemonProcess(home, tmp_path / "state", traces_file=traces, args=FAST):
        path.write_bytes(cli_corpus["multi_turn"].events_path.read_bytes())
        wait_for_keys(traces, expected_keys([path]))
        before = set(spans_now(traces))
        fresh = path.with_name("events.jsonl.new")
        fresh.write_bytes(cli_corpus["autopilot"].events_path.read_bytes())
        os.replace(fresh, path)
        wait_for_keys(traces, sorted(before | set(expected_keys([path], generation=1))))


def test_deleted_empty_blank_and_crlf(cli_corpus, tmp_path):
    """A file deleted as soon as it appears, an empty file written later, blank and CRLF lines:
    no crash, no rejected line, every span of the surviving logs."""
    home, traces = tmp_path / "home", tmp_path / "traces.jsonl"
    gone = new_session(home, "deleted")
    empty = new_session(home, "empty-then-written")
    crlf = new_session(home, "crlf")
    # The deleted log appears whole (a rename) and vanishes at once: the daemon may or may not
    # catch it in between, so its spans may be exported, complete, but never in part.
    copy = tmp_path / "copy" / "deleted" / "events.jsonl"
    copy.parent.mkdir(parents=True)
    copy.write_bytes(cli_corpus["plain"].events_path.read_bytes())
    staged = gone.with_name("staged")
    with DaemonProcess(home, tmp_path / "state", traces_file=traces, args=FAST) as daemon:
        staged.write_bytes(copy.read_bytes())
        os.rename(staged, gone)
        gone.unlink()
        empty.write_bytes(b"")
        text = cli_corpus["multi_tools"].events_path.read_bytes()
        crlf.write_bytes(b"\n\n" + text.replace(b"\n", b"\r\n\n"))
        time.sleep(0.5)
        append(empty, cli_corpus["plain"].events_path.read_bytes())
        wanted = set(expected_keys([empty, crlf]))
        wait_until(lambda: set(spans_now(traces)) >= wanted, timeout=20, what="the surviving logs' spans")
        extra = set(spans_now(traces)) - wanted
        assert not extra or extra == set(expected_keys([copy])), "the deleted log exported in part"
        samples = daemon.scrape()
        assert sum(v for (n, _l), v in samples.items() if n == "copilot_otel_lines_rejected_total") == 0
        assert value(samples, "copilot_otel_files_watched") == 2


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
            time.sleep(0.5)
            assert sorted(key(s) for s in receiver.spans()) == expected


def test_backend_down_pauses_reading_instead_of_dropping(cli_corpus, tmp_path):
    """With the backend down and room for only 5 spans, the daemon stops reading ahead: /healthz
    stays 200 and says reading is paused, the queue holds about the cap, not everything; once
    the backend is back, every span of every log arrives, exactly once."""
    home = tmp_path / "home"
    paths = []
    for name, run in cli_corpus.items():
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
            time.sleep(0.5)
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
        time.sleep(1)
        append(path, b"".join(lines[first_end:]))
        got = wait_for_keys(traces, expected_keys([path]))
        assert len(got) == len(set(got)), "a span exported twice"
        wait_until(lambda: value(daemon.scrape(), "copilot_completion_signals_total", signal="shutdown") == 2,
                   what="the second shutdown counted")
        samples = daemon.scrape()
    new_turns = sum(b'"type":"assistant.turn_start"' in line for line in lines[first_end:])
    assert value(samples, "copilot_turns_total", agent="main") == turns_before + new_turns
    assert value(samples, "copilot_sessions_started_total") == 1


def test_rescan_finds_what_no_watch_reported(cli_corpus, tmp_path):
    """Without inotify (--poll), the periodic rescan alone finds new folders and appends."""
    home, traces = tmp_path / "home", tmp_path / "traces.jsonl"
    with DaemonProcess(home, tmp_path / "state", traces_file=traces,
                       args=("--poll", "--rescan-interval", "0.3", "--idle-quiet", "0.3")):
        path = new_session(home, "polled")
        path.write_bytes(cli_corpus["plain"].events_path.read_bytes())
        wait_for_keys(traces, expected_keys([path]))


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
        time.sleep(0.5)
    assert len(spans_now(traces)) == count


def test_from_end_skips_history(cli_corpus, tmp_path):
    """--from-end: history present at the first start is not exported; what comes later is."""
    home, traces = tmp_path / "home", tmp_path / "traces.jsonl"
    old = new_session(home, "history")
    old.write_bytes(cli_corpus["plain"].events_path.read_bytes())
    with DaemonProcess(home, tmp_path / "state", traces_file=traces, args=FAST + ("--from-end",)) as daemon:
        fresh = new_session(home, "after-start")
        fresh.write_bytes(cli_corpus["multi_turn"].events_path.read_bytes())
        wait_for_keys(traces, expected_keys([fresh]))
        assert value(daemon.scrape(), "copilot_sessions_started_total") == 1
    assert not [s for s in complete_lines_spans(traces) if s.attributes.get("gen_ai.conversation.id") == "history"]
