"""Issue 21, item 9: escape sequences in a session log never reach a terminal. A real CLI session log
(1.0.102, in a git repository) with a clipboard write (OSC 52), a window title, a screen clear, hidden
text, a C1 CSI, a bidi override and rich markup in its model, folder, repository, branch, tool name and
(capture on) tool arguments, through the real `inspect` (piped, on a terminal, --json), `sessions` and
the daemon's log: every such character is shown escaped, the values themselves are kept."""

from __future__ import annotations

import json
import os
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from copilot_otel.base.safe_text import unsafe
from tests.support.commands import COMMAND, REPO, clean_env, run_copilot_otel
from tests.support.daemon import DaemonProcess
from tests.support.events import iso
from tests.support.files import new_session
from tests.support.net import wait_until
from tests.support.terminal import run_on_pty

FIXTURE = next((Path(__file__).resolve().parents[1] / "fixtures" / "cli" / "1.0.102" / "git_repo" /
                "session-state").glob("*/events.jsonl"))
CAPTURE = {"OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "true"}
OSC52, TITLE, CLEAR, HIDDEN = "\x1b]52;c;cHduZWQ=\x07", "\x1b]0;pwned\x07", "\x1b[2J\x1b[H", "\x1b[8m"
C1_CSI, BIDI, MARKUP = "\x9b31m", "\u202e", "[bold red]x[/][link=http://evil/]y[/link]"
HOSTILE = OSC52 + TITLE + CLEAR + HIDDEN + C1_CSI + BIDI + MARKUP
SHOWN = r"\x1b]52;c;cHduZWQ=\x07\x1b]0;pwned\x07\x1b[2J\x1b[H\x1b[8m\x9b31m\u202e[bold red]x[/]"  # as printed
SGR = re.compile(r"\x1b\[[0-9;]*m")
OWN = re.compile(r"\x1b\[[0-9;]*[mAK]|\x1b\[\?25[lh]")  # rich's colours; Live's cursor up, erase line, hide/show


def hostile_events(*, now: datetime | None = None, until_tool: bool = False) -> list[dict]:
    """The real log with HOSTILE appended to the model, folder, repository, branch, tool name and command;
    ``now``: its times moved to end now; ``until_tool``: cut after the tool's start (a session at work)."""
    events = [json.loads(line) for line in FIXTURE.read_text().splitlines()]
    out = []
    for event in events:
        data = event["data"]
        if event["type"] == "session.start":
            data["selectedModel"] += HOSTILE
            context = data["context"]
            for field in ("cwd", "repository", "branch"):
                context[field] += HOSTILE
        elif event["type"] == "session.usage_record":
            data["usage"]["model"] += HOSTILE
        elif event["type"] == "assistant.message":
            for request in data.get("toolRequests", []):
                request["name"] += HOSTILE
        elif event["type"] == "tool.execution_start":
            data["toolName"] += HOSTILE
            data["arguments"]["command"] = "echo " + HOSTILE
        out.append(event)
        if until_tool and event["type"] == "tool.execution_start":
            break
    if now is not None:
        shift = now - datetime.fromisoformat(out[-1]["timestamp"].replace("Z", "+00:00"))
        for event in out:
            moved = datetime.fromisoformat(event["timestamp"].replace("Z", "+00:00")) + shift
            event["timestamp"] = iso(moved)
    return out


def write_log(path: Path, events: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(event) + "\n" for event in events))
    return path


@pytest.fixture(scope="module")
def home(tmp_path_factory) -> Path:
    """A COPILOT_HOME holding the hostile session."""
    home = tmp_path_factory.mktemp("escapes") / "home"
    events = hostile_events()
    write_log(home / "session-state" / events[0]["data"]["sessionId"] / "events.jsonl", events)
    return home


def raw_controls(text: str, *, allowed: str = "\n") -> list[str]:
    """The characters a terminal would act on or hide, left in ``text`` (beyond ``allowed``)."""
    return sorted({repr(c) for c in text if unsafe().match(c) and c not in allowed})


def test_inspect_piped_shows_every_field_escaped(home):
    """The tree, piped (capture on: the command is shown): no control character, the escaped forms visible,
    the markup printed as text."""
    result = run_copilot_otel("inspect", "latest", "--copilot-home", str(home), env={**CAPTURE, "COLUMNS": "1000"})
    out, err = result.stdout.decode(), result.stderr.decode()
    assert result.returncode == 0, err
    assert raw_controls(out) == [] and raw_controls(err) == []
    assert out.count(SHOWN) >= 6  # model (header, two chats), where (repository@branch), tool, its command
    assert f"$ echo {SHOWN}" in out and "/][link=http://evil/]y[/link]" in out


@pytest.mark.parametrize("follow", [(), ("--follow",)], ids=["tree", "follow"])
def test_inspect_on_a_terminal_sends_only_its_own_colours(home, follow):
    """On a pseudo-terminal, drawn once or through --follow's live redraw (the session is over, so it
    stops after one), the only escape sequences are rich's colours and cursor moves: no OSC (clipboard,
    title), no screen clear, no hidden text, no C1 or bidi control."""
    env = clean_env({"COPILOT_HOME": str(home), "COLUMNS": "1000", "LINES": "60", "TERM": "xterm-256color",
                     **CAPTURE})
    code, screen = run_on_pty([*COMMAND, "inspect", "latest", *follow], env, cwd=REPO)
    assert code == 0, screen
    assert raw_controls(OWN.sub("", screen), allowed="\n\r") == []
    assert SHOWN in OWN.sub("", screen)


def test_inspect_json_keeps_the_values_and_escapes_what_a_terminal_acts_on(home):
    """--json parses to the log's own values (the hostile text intact), while the printed document holds
    no raw C1, DEL or bidi character (orjson would write them raw; they are written as \\uXXXX)."""
    result = run_copilot_otel("inspect", "latest", "--copilot-home", str(home), "--json", env=CAPTURE)
    assert result.returncode == 0, result.stderr.decode()
    assert raw_controls(result.stdout.decode()) == []
    document = json.loads(result.stdout)
    assert document["session"]["model"] == "claude-sonnet-4.5" + HOSTILE
    assert document["session"]["repository"] == "octo-org/octo-repo" + HOSTILE
    tools = [child for turn in document["interactions"][0]["tree"]["children"] for child in turn["children"]
             if child["attributes"].get("gen_ai.operation.name") == "execute_tool"]
    assert [tool["attributes"]["gen_ai.tool.name"] for tool in tools] == ["bash" + HOSTILE]
    assert json.loads(tools[0]["attributes"]["gen_ai.tool.call.arguments"])["command"] == "echo " + HOSTILE


@pytest.mark.parametrize("columns", ["80", "200"])
def test_sessions_piped_and_json(home, tmp_path, columns):
    """`sessions`, narrow (two lines a session) and wide, and `--json`: escaped, values kept."""
    args = ("sessions", "--copilot-home", str(home), "--state-dir", str(tmp_path / "state"), "--from-files")
    result = run_copilot_otel(*args, env={"COLUMNS": columns})
    out = result.stdout.decode()
    assert result.returncode == 0 and raw_controls(out) == [] and r"\x1b]52;c;" in out
    listed = run_copilot_otel(*args, "--json")
    assert raw_controls(listed.stdout.decode()) == []
    (row,) = json.loads(listed.stdout)
    assert (row["model"], row["cwd"], row["branch"]) == ("claude-sonnet-4.5" + HOSTILE,
                                                         "/tmp/copilot-record/<run>/work" + HOSTILE,
                                                         "feature/otel-fixtures" + HOSTILE)


def test_sessions_on_a_terminal_sends_only_its_own_colours(home, tmp_path):
    """`sessions` on a pseudo-terminal 200 columns wide: colours only."""
    env = clean_env({"COPILOT_HOME": str(home), "COLUMNS": "200", "TERM": "xterm-256color"})
    code, screen = run_on_pty([*COMMAND, "sessions", "--from-files", "--state-dir", str(tmp_path / "state")], env,
                              cwd=REPO)
    assert code == 0, screen
    assert raw_controls(SGR.sub("", screen), allowed="\n\r") == [] and r"\x1b]52;c;" in screen


def test_the_daemons_log_escapes_what_it_quotes(tmp_path):
    """A live session at work on the hostile tool, stuck past a 1 s threshold: the daemon's lines that
    name its model, folder, repository, branch and tool ('started', 'is stuck') are escaped."""
    home = tmp_path / "home"
    events = hostile_events(now=datetime.now(UTC) - timedelta(seconds=1), until_tool=True)
    path = write_log(new_session(home, events[0]["data"]["sessionId"]), events)
    with DaemonProcess(home, tmp_path / "state", traces_file=tmp_path / "traces.jsonl", log_level="info",
                       args=("--stuck-after-tool", "1", "--rescan-interval", "1")) as daemon:
        wait_until(lambda: "is stuck" in daemon.log_text(), timeout=60, what="the stuck line")
    log = daemon.log_text()
    assert raw_controls(log) == []
    started = next(line for line in log.splitlines() if f"session {path.parent.name} started" in line)
    assert SHOWN in started
    stuck = next(line for line in log.splitlines() if "is stuck" in line)
    assert f"waiting on tool bash{SHOWN}" in stuck and f"in octo-org/octo-repo{SHOWN}" in stuck
    assert os.path.getsize(tmp_path / "traces.jsonl") > 0
