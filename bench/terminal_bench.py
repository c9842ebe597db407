"""What escaping text from the logs costs (safe_text.py): per string, per log line, and for a `sessions`
listing of many sessions, escaped as it is now and (for comparison) raw; the folder check run and
replay make at start (strictmodes.py); and how long a replay takes to refuse a ledger another replay,
or another program, holds (ledger.py). Prints figures; asserts nothing.

    .venv/bin/python bench/terminal_bench.py [--sessions 10000]
"""

from __future__ import annotations

import argparse
import io
import logging
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from unittest import mock

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rich.console import Console

from copilot_otel.base.safe_text import SafeFormatter, safe
from copilot_otel.base.strictmodes import check_folder
from copilot_otel.catalog.status import SessionStatus
from copilot_otel.cli import listing
from copilot_otel.model.summary import SessionSummary

CLEAN = "claude-sonnet-4.5 · octo-org/octo-repo@feature/otel-fixtures"
HOSTILE = "m\x1b]52;c;cHduZWQ=\x07\x1b]0;pwned\x07\x1b[2J\u202e" + CLEAN


def per_call(function, *args, repeat: int = 200_000) -> float:
    """Microseconds per call (best of three)."""
    best = float("inf")
    for _ in range(3):
        started = time.perf_counter()
        for _ in range(repeat):
            function(*args)
        best = min(best, time.perf_counter() - started)
    return best / repeat * 1e6


def statuses(count: int) -> list[SessionStatus]:
    now = int(time.time() * 1e9)
    return [SessionStatus(SessionSummary(f"{n:08x}-aaaa-bbbb-cccc-dddddddddddd", "idle", None, "claude-sonnet-4.5",
                                         "/home/u/work", "1.0.102", "octo-org/octo-repo", "main", now, now, None, 0,
                                         1, 0, 3, 3, 2, 0, 12000, 300, 0, 1.0, 0.0, "idle"), "ended")
            for n in range(count)]


def render_ms(rows: list[SessionStatus], *, terminal: bool) -> float:
    console = Console(file=io.StringIO(), width=200, force_terminal=terminal, color_system=None)
    started = time.perf_counter()
    listing.render(rows, console)
    return (time.perf_counter() - started) * 1000


def refusal_seconds(cmd: list[str], runs: int) -> list[float]:
    times = []
    for _ in range(runs):
        started = time.monotonic()
        result = subprocess.run(cmd, capture_output=True)
        times.append(time.monotonic() - started)
        assert result.returncode == 2, result.stderr.decode()
    return times


def ledger_locks(folder: Path) -> None:
    """A replay of 60 stored real sessions held at --rate 50; a second replay of the same tried meanwhile;
    then the ledger held by an sqlite3 connection."""
    fixtures = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "cli" / "1.0.102"
    home, state, traces = folder / "home", folder / "state", folder / "traces.jsonl"
    for n in range(20):
        for scenario in ("plain", "multi_turn", "subagent"):
            source = next((fixtures / scenario / "session-state").glob("*/events.jsonl"))
            (home / "session-state" / f"{scenario}-{n}").mkdir(parents=True)
            shutil.copy(source, home / "session-state" / f"{scenario}-{n}" / "events.jsonl")
    cmd = [sys.executable, "-m", "copilot_otel.cli.main", "replay", str(home), "--state-dir", str(state),
           "--traces-file", str(traces)]
    first = subprocess.Popen([*cmd, "--rate", "50"], stderr=subprocess.DEVNULL)
    while not (traces.exists() and traces.stat().st_size):
        time.sleep(0.05)
    busy = refusal_seconds(cmd, 5)
    os.kill(first.pid, signal.SIGINT)
    first.wait()
    holder = sqlite3.connect(next((state / "replay").glob("*.sqlite")), isolation_level=None)
    holder.execute("PRAGMA locking_mode=EXCLUSIVE")
    holder.execute("BEGIN EXCLUSIVE")
    locked = refusal_seconds(cmd, 3)
    holder.close()
    started = time.monotonic()
    subprocess.run([sys.executable, "-m", "copilot_otel.cli.main", "--version"], capture_output=True)
    print(f"a replay refused while another runs: {min(busy):.2f}-{max(busy):.2f} s; while a program locks the "
          f"ledger: {min(locked):.2f}-{max(locked):.2f} s (copilot-otel --version: {time.monotonic() - started:.2f} s)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=10_000)
    args = parser.parse_args()
    print(f"safe() on a clean 60-character string: {per_call(safe, CLEAN):.2f} us")
    print(f"safe() on a hostile string: {per_call(safe, HOSTILE):.2f} us")
    record = logging.LogRecord("copilot_otel.model.sessions", logging.INFO, __file__, 1, "session %s started (%s)",
                               ("8f1c2d3e-aaaa", CLEAN), None)
    plain, escaped = logging.Formatter("%(levelname)s %(name)s: %(message)s"), SafeFormatter(
        "%(levelname)s %(name)s: %(message)s")
    print(f"a log line: {per_call(plain.format, record, repeat=100_000):.2f} us plain, "
          f"{per_call(escaped.format, record, repeat=100_000):.2f} us escaped")
    rows = statuses(args.sessions)
    for terminal in (False, True):
        now = min(render_ms(rows, terminal=terminal) for _ in range(3))
        with mock.patch.object(listing, "safe", lambda text: text):
            raw = min(render_ms(rows, terminal=terminal) for _ in range(3))
        print(f"sessions, {args.sessions} rows {'on a terminal' if terminal else 'piped'}: {now:.0f} ms escaped, "
              f"{raw:.0f} ms raw")
    with tempfile.TemporaryDirectory() as folder:
        state = Path(folder) / "a" / "b" / "state"
        state.mkdir(parents=True)
        print(f"check_folder on {state}: {per_call(check_folder, state, repeat=20_000):.1f} us")
        ledger_locks(Path(folder))


if __name__ == "__main__":
    main()
