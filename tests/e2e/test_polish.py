"""Polish (issue 23 item 10) on the real CLI 1.0.102's logs: the premium count first on `inspect`'s totals, so a
narrow terminal does not cut it; "1 premium request"; the lag gauge's HELP as docs/metrics.md says it."""

from __future__ import annotations

import re
from pathlib import Path

from tests.support.commands import run_copilot_otel
from tests.support.daemon import DaemonProcess
from tests.support.files import append, new_session
from tests.support.net import wait_until

FIXTURES = Path(__file__).parent.parent / "fixtures" / "cli" / "1.0.102"
DOCS = Path(__file__).parent.parent.parent / "docs" / "metrics.md"


def test_inspect_at_a_narrow_terminal_keeps_the_premium_count():
    """Each interaction's totals line of a Copilot API session ends in an ellipsis at 60 columns; its premium count
    stays, with the session's."""
    (log,) = (FIXTURES / "copilot_api_autopilot" / "session-state").glob("*/events.jsonl")
    shown = run_copilot_otel("inspect", str(log), env={"COLUMNS": "60"})
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.decode().splitlines()
    totals = [line for line in lines if "totals:" in line]
    assert totals and all(re.search(r"totals: \d+ premium", line) for line in totals), totals
    assert any(re.search(r"interactions? · \d+ premium", line) for line in lines), lines


def test_the_daemon_says_one_premium_request_in_the_singular(tmp_path):
    """A Copilot API session that spent 1 premium request ends while the daemon follows it."""
    (source,) = (FIXTURES / "copilot_api" / "session-state").glob("*/events.jsonl")
    lines = source.read_bytes().splitlines(keepends=True)
    home = tmp_path / "home"
    path = new_session(home, source.parent.name)
    append(path, b"".join(lines[:-1]))
    with DaemonProcess(home, tmp_path / "state", args=("--idle-quiet", "0.3")) as daemon:
        daemon.wait_for_metric("copilot_sessions", 1, timeout=30, state="idle")
        append(path, lines[-1])
        wait_until(lambda: f"session {source.parent.name} ended" in daemon.log_text(), timeout=30,
                   what="the session's end in the log")
    ended = next(line for line in daemon.log_text().splitlines() if f"session {source.parent.name} ended" in line)
    assert ended.endswith(", 1 premium request"), ended


def test_the_lag_gauge_says_what_the_metric_contract_says(tmp_path):
    documented = next(line for line in DOCS.read_text().splitlines() if line.startswith("| `copilot_otel_lag_seconds`"))
    with DaemonProcess(tmp_path / "home", tmp_path / "state") as daemon:
        text = daemon.scrape_text()
    (help_line,) = [line for line in text.splitlines() if line.startswith("# HELP copilot_otel_lag_seconds ")]
    said = help_line.removeprefix("# HELP copilot_otel_lag_seconds ").rstrip(".").split(" (")[0]
    assert said.lower() in documented.lower(), (said, documented)
