"""The `sessions` and `inspect` examples of docs/daily-use.md (once the README's) are the program's output
(tests/fixtures/readme_examples.py makes them from real runs): each block's command is run again and its
columns and lines compared with what it prints."""

from __future__ import annotations

import re
import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tests.support.commands import run_copilot_otel
from tests.support.events import SessionLog
from tests.support.files import new_session

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "docs" / "daily-use.md"
CLI_FIXTURES = REPO / "tests" / "fixtures" / "cli" / "1.0.102"
WIDTH = 80  # the page shows the output of an 80-column terminal
ENV = {"COLUMNS": str(WIDTH), "TZ": "UTC"}
# A `sessions` row as listing.render writes it: id, state, last activity, turns, tokens, premium, credits, last end.
ROW = re.compile(r"[0-9a-f]{8}  (?:stuck|abandoned|waiting_user|working|waiting_tool|idle|ended) +"
                 r"(?P<last>\S+ ago) +(?P<turns>\d+) +(?P<tokens>\d+(?:\.\d)?k?) +(?P<premium>-|\d+(?:\.\d+)?) +"
                 r"(?P<credits>-|unknown|<?\d[\d,]*\.\d\d\+?) {2}(?P<end>\S+)$")


def page_commands() -> list[tuple[str, list[str]]]:
    """Each `$ copilot-otel ...` in the page's code blocks, with the lines shown under it."""
    blocks, block = [], None
    for line in EXAMPLES.read_text().splitlines():
        if line.startswith("```"):
            block = [] if block is None else blocks.append("\n".join(block))  # an opening fence, or a closing one
        elif block is not None:
            block.append(line)
    found = []
    for block in blocks:
        for command in re.split(r"\n(?=\$ copilot-otel )", block):
            if command.startswith("$ copilot-otel "):
                first, *shown = command.split("\n")
                while shown and not shown[-1]:
                    shown.pop()
                found.append((first.removeprefix("$ copilot-otel "), shown))
    return found


def skeleton(line: str) -> str:
    """A line with what changes from run to run (ids, times, figures) made placeholders."""
    line = re.sub(r"[0-9a-f]{8}(?:-[0-9a-f]{4}){3}-[0-9a-f]{12}", "<id>", line)
    line = re.sub(r"[A-Z][a-z]{2} \d\d \d\d:\d\d|\d\d:\d\d:\d\d", "<time>", line)
    return re.sub(r"\d+(?:[.,]\d+)*k?", "N", line)


@pytest.fixture(scope="module")
def home(tmp_path_factory) -> Path:
    """The stored real sessions the examples show, and a live session stuck in bash (in acme/webshop, as the
    example's was; written as the CLI writes it, held by this process) whose tool began 15 s ago."""
    home = tmp_path_factory.mktemp("readme") / "home"
    for scenario in ("copilot_api_subagent", "copilot_api_autopilot", "git_repo", "provider_error"):
        for folder in (CLI_FIXTURES / scenario / "session-state").iterdir():
            shutil.copytree(folder, home / "session-state" / folder.name)
    stuck = next(shown[0].split()[1] for command, shown in page_commands() if "--stuck-after-tool" in command
                 and command.startswith("inspect"))  # the example's id: `inspect` names it by its start
    log = SessionLog(stuck, start=datetime.now(UTC) - timedelta(seconds=16))
    log.start(cwd="/home/mona/webshop", repository="acme/webshop", branch="main", gitRoot="/home/mona/webshop")
    log.user("[scenario:sleep_tool:40] Please do the scripted task.")
    log.calling(("bash", "call-1"))
    path = new_session(home, log.session_id)
    path.write_bytes(log.jsonl())
    (path.parent / "workspace.yaml").write_text("name: '[scenario:sleep_tool:40] Please do the scripted task.'\n"
                                                "user_named: false\n")
    return home


def run(command: str, home: Path, columns: int = WIDTH) -> list[str]:
    result = run_copilot_otel(*command.split(), "--copilot-home", str(home), env={**ENV, "COLUMNS": str(columns)})
    assert result.returncode == 0, (command, result.stderr.decode())
    return result.stdout.decode().splitlines()


def test_the_readme_sessions_example_has_the_program_s_columns(home):
    """The `sessions` example: the same header and legend as the program prints at 80 columns, each row in the
    program's columns (the pattern each real row of the same command matches), two lines a session, none wider."""
    (command, shown), = [(c, s) for c, s in page_commands() if c.startswith("sessions")]
    real = run(command, home)
    assert shown[0] == real[0]
    assert shown[-1] == real[-1] and real[-1].startswith("CREDITS: ")  # the legend of "unknown" and "8.67+"
    for lines in (shown, real):
        rows, facts = lines[1:-1:2], lines[2:-1:2]
        assert rows and len(rows) == len(facts)
        assert all(ROW.match(row) for row in rows), [row for row in rows if not ROW.match(row)]
        assert all(fact.startswith(" " * 10 + ("on " if " stuck " in row else "started ")) for row, fact in
                   zip(rows, facts)), facts
        assert max(map(len, lines)) <= WIDTH
    assert {row[:8] for row in real[1:-1:2]} <= {row[:8] for row in shown[1:-1:2]}  # the same sessions, and more


def test_the_readme_inspect_examples_are_what_inspect_prints(home):
    """Each `inspect` example, line by line: the stored session's exactly as printed at 80 columns (its times
    aside), the live stuck session's with the same lines as the program prints for one (its figures aside)."""
    examples = [(c, s) for c, s in page_commands() if c.startswith("inspect")]
    assert len(examples) == 2
    for command, shown in examples:
        assert max(map(len, shown)) <= WIDTH, command
        if command == "inspect 91f3":
            assert [skeleton(line) for line in shown] == [skeleton(line) for line in run(command, home)]
            continue
        real = run(command, home, columns=200)  # whole lines: the example's were cut at 80 columns
        assert len(shown) == len(real), (shown, real)
        for mine, theirs in zip(shown, real):
            assert skeleton(theirs).startswith(skeleton(mine).removesuffix("…")), (mine, theirs)
