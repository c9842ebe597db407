"""Clear refusals (issue 23 item 9): one line and exit 2 for what is no session log or a taken port, durations
read the same by every flag, and `replay` without a path replays COPILOT_HOME as `view` does."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
from pathlib import Path

from tests.support.commands import COMMAND, REPO, clean_env, run_copilot_otel, run_replay
from tests.support.otlp_json import read_spans

FIXTURES = Path(__file__).parent.parent / "fixtures" / "cli" / "1.0.102"


def home_with(tmp_path: Path, *scenarios: str) -> Path:
    home = tmp_path / "home"
    for scenario in scenarios:
        for folder in (FIXTURES / scenario / "session-state").iterdir():
            shutil.copytree(folder, home / "session-state" / folder.name)
    return home


def one_line(result: subprocess.CompletedProcess) -> str:
    lines = result.stderr.decode().strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


def test_inspect_of_a_file_that_is_no_session_log_is_one_line_and_exit_2(tmp_path):
    """The real CLI's workspace.yaml beside a log, and /etc/passwd: no warning per line, no invented session."""
    home = home_with(tmp_path, "plain")
    folder = next((home / "session-state").iterdir())
    for path in (folder / "workspace.yaml", Path("/etc/passwd")):
        result = run_copilot_otel("inspect", str(path), "--copilot-home", str(home))
        assert result.returncode == 2, result.stdout
        assert result.stdout == b""
        line = one_line(result)
        assert str(path) in line and "not a Copilot session log" in line, line
    fine = run_copilot_otel("inspect", str(folder / "events.jsonl"), "--copilot-home", str(home))
    assert fine.returncode == 0 and folder.name in fine.stdout.decode()


def test_view_with_its_port_taken_names_its_own_flag(tmp_path):
    """`view` takes --address; its refusal must not suggest --metrics-address (which `view` rejects)."""
    home = home_with(tmp_path, "plain")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run([*COMMAND, "view", str(home), "--address", f"127.0.0.1:{port}", "--state-dir",
                                 str(tmp_path / "state")], capture_output=True, env=clean_env(), timeout=60, cwd=REPO,
                                stdin=subprocess.DEVNULL)
    assert result.returncode == 2
    line = one_line(result)
    assert "--address HOST:PORT" in line and "--metrics-address" not in line, line


def test_durations_read_the_same_in_every_flag_and_variable(tmp_path):
    """--stuck-after 10m is --stuck-after 600, as --since 10m is accepted; the same in COPILOT_OTEL_STUCK_AFTER
    and in --stuck-after-tool; a duration that is none is one line, exit 2, naming the forms it takes."""
    home = home_with(tmp_path, "plain", "failing_tool", "multi_turn")
    base = ("sessions", "--from-files", "--json", "--copilot-home", str(home), "--state-dir", str(tmp_path / "s"))

    def listed(*args: str, env: dict | None = None) -> list:
        result = run_copilot_otel(*base, *args, env=env)
        assert result.returncode == 0, result.stderr
        return json.loads(result.stdout)

    in_seconds = listed("--stuck-after", "600", "--stuck-after-tool", "1800,bash=7200")
    assert in_seconds
    assert listed("--stuck-after", "10m", "--stuck-after-tool", "30m,bash=2h") == in_seconds
    assert listed(env={"COPILOT_OTEL_STUCK_AFTER": "10m", "COPILOT_OTEL_STUCK_AFTER_TOOL": "0.5h,bash=1h60m"}) \
        == in_seconds
    assert listed("--since", "3650d") == listed("--since", "87600h")
    for flag, bad in (("--stuck-after", "10 minutes"), ("--stuck-after-tool", "bash=soon"), ("--since", "m10")):
        result = run_copilot_otel(*base, flag, bad)
        assert result.returncode == 2
        assert "10m" in one_line(result) and bad in one_line(result)
    replayed = run_replay(str(home), "--state-dir", str(tmp_path / "r"), "--traces-file", str(tmp_path / "t.jsonl"),
                          "--give-up-after", "1m")
    assert replayed.returncode == 0, replayed.stderr


def test_replay_without_a_path_replays_copilot_home(tmp_path):
    """As `view` with no path shows $COPILOT_HOME (and --copilot-home), `replay` with no path replays it."""
    home = home_with(tmp_path, "plain", "subagent")
    named = tmp_path / "named.jsonl"
    assert run_replay(str(home), "--state-dir", str(tmp_path / "a"), "--traces-file", str(named)).returncode == 0
    for how, args, env in (("env", (), {"COPILOT_HOME": str(home)}), ("flag", ("--copilot-home", str(home)), None)):
        out = tmp_path / f"{how}.jsonl"
        result = run_replay(*args, "--state-dir", str(tmp_path / how), "--traces-file", str(out), env=env)
        assert result.returncode == 0, result.stderr
        assert sorted((s.trace_id, s.span_id) for s in read_spans(out)) \
            == sorted((s.trace_id, s.span_id) for s in read_spans(named))
