"""`replay` into a trace file (issue 23 item 7): never into a file another process writes, and a repeated
replay adds nothing (the file's ledger); `--restart` writes everything again."""

from __future__ import annotations

import shutil
from collections import Counter
from pathlib import Path

from tests.support.commands import run_replay
from tests.support.daemon import DaemonProcess, complete_lines_spans
from tests.support.net import wait_until
from tests.support.otlp_json import read_spans

FIXTURES = Path(__file__).parent.parent / "fixtures" / "cli" / "1.0.102"


def copy_sessions(home: Path, *scenarios: str) -> list[str]:
    """The sessions the real CLI 1.0.102 wrote for ``scenarios``, copied into ``home``; their ids."""
    ids = []
    for scenario in scenarios:
        for folder in (FIXTURES / scenario / "session-state").iterdir():
            shutil.copytree(folder, home / "session-state" / folder.name)
            ids.append(folder.name)
    return ids


def span_keys(path: Path) -> Counter:
    return Counter((s.trace_id, s.span_id) for s in read_spans(path))


def test_a_replay_into_the_file_a_running_daemon_writes_is_refused(tmp_path):
    """The daemon writes its state dir's traces.jsonl; `replay` of the same home with the same state dir (and so
    the same default file) is refused with one line and exit 2, and the daemon's file holds each span once."""
    home, state = tmp_path / "home", tmp_path / "state"
    copy_sessions(home, "plain", "failing_tool")
    traces = state / "traces.jsonl"
    with DaemonProcess(home, state, args=("--idle-quiet", "0.3")) as daemon:
        wait_until(lambda: len(complete_lines_spans(traces)) > 0, timeout=60, what="the daemon's spans")
        written = daemon.scrape()
        result = run_replay(str(home), "--state-dir", str(state))
        also_named = run_replay(str(home), "--state-dir", str(tmp_path / "other"), "--traces-file", str(traces))
        daemon.wait_for_metric("copilot_otel_spans_exported_total", 1, timeout=30)
    assert written is not None
    for refused in (result, also_named):
        assert refused.returncode == 2, refused.stderr
        lines = refused.stderr.decode().strip().splitlines()
        assert len(lines) == 1 and "another process" in lines[0] and str(traces) in lines[0], lines
    counts = span_keys(traces)
    assert counts and max(counts.values()) == 1, counts.most_common(3)


def test_a_repeated_replay_into_a_file_adds_nothing_and_restart_writes_again(tmp_path):
    """Twice the same home into one file: the second run adds no line and says why; a session added since is
    the only one written by the third, and its --metrics-file says it counts only that one; `--restart` writes
    them all again and says so on the terminal; an emptied file is written anew."""
    home, state, traces = tmp_path / "home", tmp_path / "state", tmp_path / "out" / "traces.jsonl"
    copy_sessions(home, "plain", "failing_tool", "multi_turn")
    common = ("--state-dir", str(state), "--traces-file", str(traces))
    first = run_replay(str(home), *common)
    assert first.returncode == 0, first.stderr
    once = span_keys(traces)
    assert once and max(once.values()) == 1
    size = traces.stat().st_size

    second = run_replay(str(home), *common)
    assert second.returncode == 0, second.stderr
    assert traces.stat().st_size == size
    assert "--restart writes them again" in second.stderr.decode(), second.stderr

    added = copy_sessions(home, "subagent")
    metrics = tmp_path / "out" / "replay.prom"
    third = run_replay(str(home), *common, "--metrics-file", str(metrics))
    assert third.returncode == 0, third.stderr
    assert f"{metrics} counts only the 1 session(s) written now" in third.stderr.decode(), third.stderr
    assert "copilot_sessions_started_total" in metrics.read_text()
    after = span_keys(traces)
    assert max(after.values()) == 1
    new = {s.trace_id for s in read_spans(traces)} - {trace for trace, _span in once}
    assert new and len(after) > len(once)
    assert {s.attributes.get("gen_ai.conversation.id") for s in read_spans(traces)
            if s.trace_id in new} <= set(added)

    again = run_replay(str(home), *common, "--restart")
    assert again.returncode == 0, again.stderr
    assert set(span_keys(traces).values()) == {2}
    said = again.stderr.decode()
    assert f"--restart: {traces} holds spans already; every session is written again" in said, said
    assert "written again after what the file held (--restart)" in said, said

    traces.write_bytes(b"")
    anew = run_replay(str(home), *common)
    assert anew.returncode == 0, anew.stderr
    assert span_keys(traces) == after
