"""The hard situations the real CLI 1.0.102 writes (tests/fixtures/situations/, see SITUATIONS.md):
crash and resume, aborts, cancelled sub-agents, background shells, steering, compaction, empty and
length-cut answers, parallel sub-agents in the headless stream, many tools. Each is checked through
`replay` in tests/component/test_situations.py; here the live daemon runs over all of them and must give the
very same spans as `replay` run as users run it (a process of its own)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from tests.fixtures.situations import FIXTURES, Fixture
from tests.support.daemon import DaemonProcess, complete_lines_spans
from tests.support.net import wait_until
from tests.support.otlp_json import read_spans
from tests.support.scrape import keyed

VERSIONS = Path(__file__).resolve().parents[1] / "fixtures" / "cli"


def replay(tmp_path: Path, *sources: Path, stdin: bytes | None = None, name: str = "traces") -> tuple[list, dict]:
    """`copilot-otel replay` of ``sources`` (or of stdin): the spans and the metrics file's samples."""
    traces, metrics = tmp_path / f"{name}.jsonl", tmp_path / f"{name}.prom"
    args = [str(s) for s in sources] or ["-"]
    result = subprocess.run([sys.executable, "-m", "copilot_otel.cli.main", "replay", *args, "--traces-file",
                             str(traces),
                             "--metrics-file", str(metrics), "--state-dir", str(tmp_path / "state")],
                            input=stdin, capture_output=True, timeout=120)
    assert result.returncode == 0, result.stderr.decode()
    assert b"skipped line" not in result.stderr and b"out of order" not in result.stderr, result.stderr.decode()
    return read_spans(traces), keyed(metrics.read_text())


def session(fx: Fixture, label: str) -> Path:
    return fx.path / "session-state" / fx.run(label)["session_id"]


def _settled(folder: Path) -> bool:
    """The daemon can finish this session as replay does: it ended, or a lock-writing CLI left it open."""
    events = [json.loads(line) for line in (folder / "events.jsonl").read_text().splitlines() if line.strip()]
    version = tuple(int(x) for x in events[0]["data"]["copilotVersion"].split("."))
    return version >= (1, 0, 24) or events[-1]["type"] == "session.shutdown"


def test_the_live_daemon_exports_exactly_what_replay_does(tmp_path):
    """Every situation and every version's fixture, followed by the live daemon (idle confirmed by quiet,
    dead processes found by their missing lock), gives byte-identical spans to `replay` of the same files.
    Sessions of CLIs that write no lock file (up to 1.0.2) and whose log ends mid-turn are left out: the
    daemon has no evidence that they ended, so it keeps their work open. Both use one state folder, so the
    resource (its service.instance.id) is the same too."""
    home = tmp_path / "home" / "session-state"
    folders = [*FIXTURES.glob("*/session-state/*"), *VERSIONS.glob("*/*/session-state/*")]
    for folder in folders:
        if _settled(folder):
            shutil.copytree(folder, home / folder.name)
    expected, _metrics = replay(tmp_path, home.parent)
    traces = tmp_path / "live.jsonl"
    with DaemonProcess(tmp_path / "home", tmp_path / "state", traces_file=traces,
                       args=("--idle-quiet", "0.2")):
        wait_until(lambda: len(complete_lines_spans(traces)) >= len(expected), timeout=60,
                   what=f"{len(expected)} spans")
    live = read_spans(traces)
    assert sorted(map(repr, live)) == sorted(map(repr, expected))


def test_live_crash_then_resume_agrees_with_replay(tmp_path):
    """Followed live: the daemon sees the CLI die mid-tool (no lock left, nothing more written) and ends the
    work; then the resumed CLI appends to the log. The spans are the ones replay gives for the whole file,
    and the resume's "interrupted" record is no anomaly."""
    fx = Fixture(FIXTURES / "crash_resume")
    source = session(fx, "crashed") / "events.jsonl"
    lines = source.read_bytes().splitlines(keepends=True)
    cut = next(i for i, line in enumerate(lines) if b'"session.resume"' in line)
    folder = tmp_path / "home" / "session-state" / source.parent.name
    folder.mkdir(parents=True)
    log = folder / "events.jsonl"
    log.write_bytes(b"".join(lines[:cut]))
    at_the_crash, _metrics = replay(tmp_path, folder, name="crash")
    expected, _metrics = replay(tmp_path, source.parent)
    traces = tmp_path / "live.jsonl"
    with DaemonProcess(tmp_path / "home", tmp_path / "state", traces_file=traces,
                       args=("--idle-quiet", "0.2")) as daemon:
        # The dead process left no lock: the daemon ends the open work, as replay ends it at the end of the file.
        wait_until(lambda: len(complete_lines_spans(traces)) >= len(at_the_crash), timeout=20, what="the crash noticed")
        assert sorted(map(repr, complete_lines_spans(traces))) == sorted(map(repr, at_the_crash))
        with open(log, "ab") as handle:
            handle.write(b"".join(lines[cut:]))
        wait_until(lambda: len(complete_lines_spans(traces)) >= len(expected), timeout=30,
                   what=f"{len(expected)} spans")
        assert "out of order" not in daemon.log_text()
    assert sorted(map(repr, read_spans(traces))) == sorted(map(repr, expected))
