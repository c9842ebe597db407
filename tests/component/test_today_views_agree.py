"""Today's CLI features (tests/fixtures/situations: background sub-agents, custom agents, hooks, skills, MCP
tools, `!cmd`, reasoning tokens), read in this process by every view: `inspect --json`, `sessions --json` and
the trace `replay` exports tell the same story, span for span and count for count."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from copilot_otel.cli.main import main
from tests.fixtures.situations import FIXTURES
from tests.support.otlp_json import read_spans

TODAY = ("background_subagent", "custom_agent", "hooks", "skill", "mcp_tools", "user_command", "reasoning_tokens")
ENV = {"OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": None, "COLUMNS": "200", "TZ": "UTC",
       "COPILOT_OTEL_BACKFILL": "true"}
SESSIONS = [(name, folder) for name in TODAY for folder in sorted((FIXTURES / name / "session-state").iterdir())]


def run(*args: str) -> str:
    result = CliRunner().invoke(main, list(args), env=ENV)
    assert result.exit_code == 0, result.output
    return result.stdout


def nodes(node: dict) -> list[dict]:
    return [node] + [n for child in node["children"] for n in nodes(child)]


@pytest.mark.parametrize(("name", "folder"), SESSIONS, ids=[f"{n}/{f.name[:8]}" for n, f in SESSIONS])
def test_inspect_sessions_and_the_trace_agree(tmp_path: Path, name: str, folder: Path):
    traces = tmp_path / "traces.jsonl"
    run("replay", str(folder), "--traces-file", str(traces), "--state-dir", str(tmp_path / "replay-state"))
    spans = read_spans(traces)
    assert spans, f"{name}: replay exported nothing"

    tree = json.loads(run("inspect", str(folder), "--json"))
    shown = [n for i in tree["interactions"] for n in nodes(i["tree"])]
    assert sorted((n["span_id"], n["name"]) for n in shown) == sorted((s.span_id, s.name) for s in spans)
    by_id = {s.span_id: s for s in spans}
    for n in shown:
        assert n["status"] == by_id[n["span_id"]].status_code.lower(), (n["name"], n["span_id"])
        assert n["attributes"] == by_id[n["span_id"]].attributes, (n["name"], n["span_id"])

    def op(operation: str) -> list:
        return [s for s in spans if s.attributes.get("gen_ai.operation.name") == operation]

    rows = json.loads(run("sessions", "--copilot-home", str(folder.parent.parent), "--state-dir",
                          str(tmp_path / "state"), "--from-files", "--json"))
    (row,) = [r for r in rows if r["id"] == folder.name]
    chats, tools = op("chat"), op("execute_tool")
    assert row["llm_calls"] == len(chats)
    assert row["turns"] == len([s for s in spans if s.name == "turn"])
    assert row["tool_calls"] == len(tools)
    assert row["tool_failures"] == len([s for s in tools if s.status_code == "ERROR"])
    assert row["input_tokens"] == sum(s.attributes.get("gen_ai.usage.input_tokens", 0) for s in chats)
    assert row["output_tokens"] == sum(s.attributes.get("gen_ai.usage.output_tokens", 0) for s in chats)
