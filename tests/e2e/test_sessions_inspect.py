"""`sessions` and `inspect` on real session logs: what they list and show is what the logs say, from the
files or from the running daemon alike; ids by prefix or `latest`; JSON; 80 columns; live durations that
grow; `--follow` on a terminal; tool arguments only with content capture on; `--help` with its own flags."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from tests.support.commands import COMMAND, REPO, clean_env, run_copilot_otel, run_replay
from tests.support.copilot_cli import prompt_for
from tests.support.daemon import DaemonProcess
from tests.support.net import wait_until
from tests.support.otlp_json import read_spans
from tests.support.scrape import value
from tests.support.terminal import plain as strip_terminal_codes
from tests.support.terminal import run_on_pty

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "cli" / "1.0.102"
GIT_REPO = FIXTURES / "git_repo"  # a real session in a git repository, on a Copilot subscription
FAST = ("--idle-quiet", "0.3", "--rescan-interval", "1")


@pytest.fixture(scope="module")
def home(cli_corpus, tmp_path_factory) -> Path:
    """Every corpus session and the stored git-repository session in one COPILOT_HOME."""
    home = tmp_path_factory.mktemp("daily") / "home"
    for run in cli_corpus.values():
        shutil.copytree(run.session_dir, home / "session-state" / run.session_id)
    for folder in (GIT_REPO / "session-state").iterdir():
        shutil.copytree(folder, home / "session-state" / folder.name)
    return home


def events_of(home: Path, session_id: str) -> list[dict]:
    path = home / "session-state" / session_id / "events.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def expected_tally(events: list[dict]) -> dict:
    """What a session's log says, counted here from the raw events."""
    usage = [e["data"]["usage"] for e in events if e["type"] == "session.usage_record"]
    return {
        "turns": sum(e["type"] == "assistant.turn_start" for e in events),
        "tool_calls": sum(e["type"] == "tool.execution_complete" for e in events),
        "input_tokens": sum(u.get("inputTokens", 0) for u in usage),
        "output_tokens": sum(u.get("outputTokens", 0) for u in usage),
        "premium_requests": sum(u.get("cost", 0) for u in usage if u.get("initiator") == "user"),
    }


def sessions_json(home: Path, *args: str, env: dict | None = None) -> list[dict]:
    result = run_copilot_otel("sessions", "--copilot-home", str(home), "--json", *args, env=env)
    assert result.returncode == 0, result.stderr.decode()
    return json.loads(result.stdout)


def test_sessions_tallies_every_session_from_its_log(home, tmp_path):
    """From the files: one record per session, newest first, each with the turns, tool calls, tokens and
    premium requests its log holds, its repository and branch, and the state `ended` (every CLI exited)."""
    listed = sessions_json(home, "--from-files", "--state-dir", str(tmp_path))
    assert sorted(s["id"] for s in listed) == sorted(os.listdir(home / "session-state"))
    assert [s["last_ms"] for s in listed] == sorted((s["last_ms"] for s in listed), reverse=True)
    for record in listed:
        tally = expected_tally(events_of(home, record["id"]))
        assert {key: record[key] for key in tally} == pytest.approx(tally, abs=0.01), record["id"]
        assert record["state"] == "ended"
    meta = json.loads((GIT_REPO / "meta.json").read_text())
    (git,) = [s for s in listed if s["id"] == meta["session_id"]]
    assert (git["repository"], git["branch"], git["model"]) == ("octo-org/octo-repo", meta["git"]["branch"],
                                                                meta["model"])
    assert git["premium_requests"] > 0 and git["last_end"] == "idle"


def test_the_daemon_lists_the_same_sessions_before_and_after_a_restart(home, tmp_path):
    """`sessions` asks the running daemon (its web view's /api/sessions, every page) and gets what the files
    say; after a restart the daemon resumes from its checkpoint and still lists every session with its whole
    tally (the logs it did not read whole are summed up from the files)."""
    from_files = sessions_json(home, "--from-files", "--state-dir", str(tmp_path / "files"))
    count = len(from_files)
    for _restart in range(2):
        with DaemonProcess(home, tmp_path / "state", traces_file=tmp_path / "t.jsonl", args=FAST) as daemon:
            daemon.wait_for_metric("copilot_otel_files_watched", count, timeout=60)
            wait_until(lambda: value(daemon.scrape(), "copilot_otel_export_queue_spans") == 0, what="export")
            via_daemon = sessions_json(home, "--metrics-address", f"127.0.0.1:{daemon.port}",
                                       "--state-dir", str(daemon.state_dir))
            api = json.loads(daemon.api_get("/api/sessions"))
        assert via_daemon == from_files
        assert api["copilot_home"] == str(home) and api["total"] == len(api["sessions"]) == count


def test_sessions_filters_and_fits_the_terminal(home, tmp_path):
    """--repository, --state and --since select; the text form fits 80 columns (two lines a session) and
    uses one line a session on a wide terminal."""
    meta = json.loads((GIT_REPO / "meta.json").read_text())
    common = ("--from-files", "--state-dir", str(tmp_path))
    assert [s["id"] for s in sessions_json(home, *common, "--repository", "octo-repo")] == [meta["session_id"]]
    assert sessions_json(home, *common, "--state", "live") == []
    assert len(sessions_json(home, *common, "--since", "2000-01-01")) == len(os.listdir(home / "session-state"))
    for columns, lines_per_session in (("80", 2), ("160", 2), ("220", 1)):  # one line: every column and the names
        result = run_copilot_otel("sessions", "--copilot-home", str(home), *common, env={"COLUMNS": columns})
        lines = result.stdout.decode().splitlines()
        assert result.returncode == 0 and lines[0].startswith("SESSION")
        assert lines[-1].startswith("CREDITS: AI credits; 8.67+: some calls reported no amount")  # "unknown" shown
        assert len(lines) == 2 + lines_per_session * len(os.listdir(home / "session-state"))
        assert max(len(line) for line in lines) <= int(columns)
        assert "octo-org/octo-repo@" in result.stdout.decode()


def inspect(*args: str, columns: str = "80", env: dict | None = None) -> subprocess.CompletedProcess:
    return run_copilot_otel("inspect", *args, env={"COLUMNS": columns, **(env or {})}, timeout=60)


def test_inspect_by_prefix_latest_and_an_ambiguous_prefix(home, tmp_path):
    """The first characters of an id are enough; `latest` is the session whose last event is the newest, the one
    `sessions` lists first, even when another log was copied (or touched) later; a prefix of two sessions names
    both."""
    some = sorted(os.listdir(home / "session-state"))[3]
    full = inspect(some, "--copilot-home", str(home))
    assert full.returncode == 0 and inspect(some[:8], "--copilot-home", str(home)).stdout == full.stdout
    listed = sessions_json(home, "--from-files", "--state-dir", str(tmp_path / "state"))
    assert [row["last_ms"] for row in listed] == sorted((row["last_ms"] for row in listed), reverse=True)
    os.utime(home / "session-state" / listed[-1]["id"] / "events.jsonl")  # as a copy leaves it: written last
    latest = inspect("latest", "--copilot-home", str(home))
    assert latest.returncode == 0 and latest.stdout == inspect(listed[0]["id"], "--copilot-home", str(home)).stdout
    twins = tmp_path / "home"
    for name in ("abcd0001-x", "abcd0002-y"):
        shutil.copytree(home / "session-state" / some, twins / "session-state" / name)
    result = inspect("abcd", "--copilot-home", str(twins))
    assert result.returncode == 2
    assert "abcd: 2 sessions start with it (abcd0001-x, abcd0002-y)" in result.stderr.decode()


def count_spans(node: dict) -> int:
    return 1 + sum(count_spans(child) for child in node["children"])


def test_inspect_json_totals_match_the_log_and_the_trace(home, tmp_path):
    """--json: the interactions' totals add up to what the log holds, and the trees hold exactly the
    spans a replay exports for the session."""
    for session_id in os.listdir(home / "session-state"):
        result = inspect(session_id, "--copilot-home", str(home), "--json")
        assert result.returncode == 0, result.stderr.decode()
        shown = json.loads(result.stdout)
        tally = expected_tally(events_of(home, session_id))
        interactions = shown["interactions"]
        assert sum(i["totals"]["turns"] for i in interactions) == tally["turns"] == shown["session"]["turns"]
        assert sum(i["totals"]["tool_calls"] for i in interactions) == tally["tool_calls"]
        assert sum(i["totals"]["premium_requests"] for i in interactions) == pytest.approx(tally["premium_requests"])
        target = tmp_path / f"{session_id}.jsonl"
        assert run_replay(str(home / "session-state" / session_id), "--traces-file", str(target)).returncode == 0
        assert sum(count_spans(i["tree"]) for i in interactions) == len(read_spans(target))
        assert shown["session"]["state"] == "ended" and shown["running"] is False


def test_inspect_fits_80_columns(home):
    """Every line of every session's tree fits an 80-column terminal (long ones end in an ellipsis)."""
    for session_id in os.listdir(home / "session-state"):
        out = inspect(session_id, "--copilot-home", str(home)).stdout.decode()
        assert max(len(line) for line in out.splitlines()) <= 80, out


def test_inspect_help_shows_only_its_own_flags():
    """inspect's --help lists what inspect uses: nothing of replay's or the daemon's."""
    out = run_copilot_otel("inspect", "--help", env={"COLUMNS": "100"}).stdout.decode()
    flags = set(re.findall(r"^\s+(?:-\w, )?(--[a-z-]+)", out, re.M))
    assert flags == {"--copilot-home", "--max-line-bytes", "--log-level", "--stuck-after", "--stuck-after-tool",
                     "--json", "--follow", "--hide-names", "--help"}


def test_inspect_says_what_a_session_argument_is_not_and_follow_into_a_pipe_ends_its_line(home):
    """A device or an empty SESSION is one clear line, exit 2 (not "Not a directory", not "."); `inspect --follow`
    of a finished session into a pipe prints the tree once, its last line ended."""
    device = inspect("/dev/null", "--copilot-home", str(home))
    assert device.returncode == 2
    assert device.stderr.decode() == ("copilot-otel: /dev/null: a character device, not COPILOT_HOME, a session "
                                      "folder or an events.jsonl\n")
    empty = inspect("", "--copilot-home", str(home))
    assert empty.returncode == 2 and empty.stderr.decode().startswith("copilot-otel: SESSION is empty: give a")
    some = sorted(os.listdir(home / "session-state"))[0]
    followed = inspect(some, "--follow", "--copilot-home", str(home))
    assert followed.returncode == 0 and followed.stdout.endswith(b"\n") and not followed.stdout.endswith(b"\n\n")
    assert followed.stdout == inspect(some, "--copilot-home", str(home)).stdout


def test_tool_arguments_only_with_content_capture(home, cli_corpus):
    """The bash command a tool ran is shown with OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true, and
    not without it."""
    run = cli_corpus["multi_tools"]
    command = next(e["data"]["arguments"]["command"] for e in run.events()
                   if e["type"] == "tool.execution_start" and e["data"]["toolName"] == "bash")
    off = inspect(run.session_id, "--copilot-home", str(home)).stdout.decode()
    on = inspect(run.session_id, "--copilot-home", str(home),
                 env={"OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "true"}).stdout.decode()
    assert f"$ {command}" in on and command not in off


def running_seconds(out: str) -> float:
    match = re.search(r"tool bash\s+running (\d+(?:\.\d+)?) (ms|s)", out)
    assert match, out
    return float(match.group(1)) / (1000 if match.group(2) == "ms" else 1)


def test_inspect_of_a_running_session_and_follow(cli, provider, tmp_path):
    """While bash sleeps: inspect names the session waiting_tool on bash and the tool's duration grows
    between two looks; --follow on an 80x24 terminal redraws it until the session ends, then exits."""
    home = tmp_path / "home"
    process = cli.start(prompt_for("sleep_tool", 6), home=home, port=provider.port, cwd=tmp_path / "work")
    try:
        wait_until(lambda: process.events_path.exists() and b'"tool.execution_start"' in
                   process.events_path.read_bytes(), timeout=90, what="the tool to start")
        first = inspect(process.session_id, "--copilot-home", str(home)).stdout.decode()
        time.sleep(1.5)  # a clock that must advance: the duration grows between two looks
        second = inspect(process.session_id, "--copilot-home", str(home)).stdout.decode()
        assert "waiting_tool: waiting on tool bash" in first
        assert running_seconds(second) >= running_seconds(first) + 1
        env = clean_env({"COLUMNS": "80", "LINES": "24", "TERM": "xterm-256color"})
        code, screen = run_on_pty([*COMMAND, "inspect", process.session_id[:8], "--follow", "--copilot-home",
                                   str(home)], env, cwd=REPO)
    finally:
        process.wait()
    plain = strip_terminal_codes(screen)
    assert code == 0, plain
    assert "running" in plain and "following; Ctrl-C to stop" in plain
    frames = [line for line in re.split(r"[\r\n]", plain) if line.strip()]
    assert max(len(line) for line in frames) <= 80
    assert "ended (shutdown)" in plain and "ended: idle" in plain
