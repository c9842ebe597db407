"""A session waiting on a person (issue 23 item 8): it says on what, the wait is not the tool's run time, and it is
never coloured as a fault. On the real CLI 1.0.102's log of a permission prompt (failing_tool: `view` of a path
outside the folder asks for permission; offline, the CLI answered it itself), the commands run in this process."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

from tests.support.files import EVENTS_FILE, new_session
from tests.support.inprocess import run_command
from tests.support.otlp_json import read_spans
from tests.support.scrape import parse

FIXTURE = next((Path(__file__).parent.parent / "fixtures" / "cli" / "1.0.102" / "failing_tool" / "session-state")
               .iterdir())


def events() -> list[dict]:
    return [json.loads(line) for line in (FIXTURE / EVENTS_FILE).read_text().splitlines()]


def ns(timestamp: str) -> int:
    return int(datetime.fromisoformat(timestamp.replace("Z", "+00:00")).timestamp() * 1e9)


def permission() -> tuple[dict, dict, int]:
    """The log's permission request, its answer, and the line after which the session waits on it."""
    log = events()
    line, asked = next((n, e) for n, e in enumerate(log) if e["type"] == "permission.requested")
    answered = next(e for e in log if e["type"] == "permission.completed"
                    and e["data"]["requestId"] == asked["data"]["requestId"])
    return asked, answered, line + 1


def test_the_tool_span_carries_the_wait_on_the_person_and_its_duration_metric_leaves_it_out(tmp_path):
    asked, answered, _line = permission()
    call_id = asked["data"]["permissionRequest"]["toolCallId"]
    waited_ms = (ns(answered["timestamp"]) - ns(asked["timestamp"])) / 1e6
    traces, metrics = tmp_path / "t.jsonl", tmp_path / "m.prom"
    result = run_command("replay", str(FIXTURE), "--state-dir", str(tmp_path / "s"), "--traces-file", str(traces),
                         "--metrics-file", str(metrics))
    assert result.exit_code == 0, result.output
    spans = read_spans(traces)
    (gated,) = [s for s in spans if s.attributes.get("gen_ai.tool.call.id") == call_id]
    assert abs(gated.attributes["github.copilot.tool.user_wait.duration"] - waited_ms / 1e3) < 1e-5 and waited_ms > 0
    (event,) = [e for e in gated.events if e.name == "github.copilot.permission"]
    assert event.attributes["github.copilot.permission.result"] == answered["data"]["result"]["kind"]
    assert abs(event.time_unix_nano - ns(answered["timestamp"])) < 10_000
    tool = gated.attributes["gen_ai.tool.name"]
    same_tool = [s for s in spans if s.name == gated.name]
    run_time = sum(s.end_time_unix_nano - s.start_time_unix_nano for s in same_tool) / 1e9 - waited_ms / 1e3
    samples = parse(metrics.read_text())
    recorded = samples[("copilot_tool_duration_seconds_sum", (("tool", tool),))]
    assert abs(recorded - run_time) < 1e-5, (recorded, run_time)


def test_a_session_waiting_on_a_permission_says_for_which_tool(tmp_path):
    """The log cut right after the prompt, its CLI alive: `sessions` and `inspect` say "permission for view"."""
    asked, _answered, line = permission()
    home = tmp_path / "home"
    path = new_session(home, FIXTURE.name)
    path.write_text("".join(json.dumps(e) + "\n" for e in events()[:line]))
    listed = run_command("sessions", "--from-files", "--json", "--copilot-home", str(home), "--state-dir",
                         str(tmp_path / "s"))
    assert listed.exit_code == 0, listed.output
    (row,) = json.loads(listed.stdout)
    tool = next(e["data"]["toolName"] for e in events() if e["type"] == "tool.execution_start"
                and e["data"]["toolCallId"] == asked["data"]["permissionRequest"]["toolCallId"])
    assert row["state"] == "waiting_user" and row["asking"] == f"permission for {tool}", row
    assert row["asking_since_ms"] == ns(asked["timestamp"]) // 1_000_000
    text = run_command("sessions", "--from-files", "--copilot-home", str(home), "--state-dir", str(tmp_path / "s"),
                       env={"COLUMNS": "200"})
    assert f"(asks permission for {tool})" in text.stdout, text.output
    shown = run_command("inspect", str(path), env={"COLUMNS": "200"})
    assert f"asks the user for permission for {tool}" in shown.stdout, shown.output


def test_waiting_on_the_user_is_not_coloured_as_a_fault():
    """The page's colour for waiting_user is none of the fault colours (stuck, abandoned) nor a red or an orange."""
    css = (Path(__file__).parent.parent.parent / "copilot_otel" / "web" / "static" / "view.css").read_text()
    colours = dict(part.strip().lstrip("-").split(": ") for part in css.split(":root")[1].split("}")[0].strip(" {\n")
                   .replace("\n", " ").split(";") if part.strip().startswith("--"))
    waiting = colours["waiting_user"]
    assert waiting not in (colours["stuck"], colours["abandoned"])
    red, _green, blue = (int(waiting[i:i + 2], 16) for i in (1, 3, 5))
    assert blue >= red, waiting  # a calm blue, not a warning's red or amber
