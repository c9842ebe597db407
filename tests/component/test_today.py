"""Today's CLI (tests/fixtures/situations: background_subagent, custom_agent, hooks, skill, mcp_tools,
user_command, reasoning_tokens), read through `replay` (in this process) and checked against the events and
the CLI's own export."""

from __future__ import annotations

import pytest

from tests.component.test_situations import by_op, check_nesting, replay, roots, session
from tests.fixtures.situations import FIXTURES, Fixture
from tests.support.otlp_json import iso_ns


def _dir(tmp_path, name):
    folder = tmp_path / name
    folder.mkdir()
    return folder


@pytest.mark.parametrize("label", ["after", "before"])
def test_a_background_subagent_stays_in_its_interaction(tmp_path, label):
    """One root for the one prompt; the sub-agent's span sits under its task call and ends at its
    subagent.completed; read_agent and the turn after the notification are in the same trace; one chat span
    per usage record; one idle signal."""
    fx = Fixture(FIXTURES / "background_subagent")
    events = fx.events(label)
    spans, metrics = replay(tmp_path, session(fx, label))
    check_nesting(spans)
    (root,) = roots(spans)
    assert {s.trace_id for s in spans} == {root.trace_id}
    (task,) = [s for s in by_op(spans, "execute_tool") if s.name == "execute_tool task"]
    (sub,) = [s for s in by_op(spans, "invoke_agent") if s.parent_span_id is not None]
    done = next(e for e in events if e["type"] == "subagent.completed")
    assert sub.parent_span_id == task.span_id and sub.end_time_unix_nano == iso_ns(done["timestamp"])
    (read,) = [s for s in spans if s.name == "execute_tool read_agent"]
    assert read.trace_id == root.trace_id
    records = [e for e in events if e["type"] == "session.usage_record"]
    assert len(by_op(spans, "chat")) == len(records)
    assert metrics['copilot_completion_signals_total{signal="idle"}'] == 1


def test_a_custom_agent_names_the_root_as_the_cli_does(tmp_path):
    """--agent reviewer: the root is `invoke_agent reviewer`, as in the CLI's own export; as a sub-agent too."""
    fx = Fixture(FIXTURES / "custom_agent")
    for label in ("selected", "as_subagent"):
        spans, _ = replay(_dir(tmp_path, label), session(fx, label))
        ours = {s.name for s in by_op(spans, "invoke_agent")}
        cli = {s["name"] for s in fx.cli_spans(label, "invoke_agent")}
        assert "invoke_agent reviewer" in ours & cli, (ours, cli)


def test_hooks_are_spans_with_their_outcomes(tmp_path):
    """Each hook.start/end pair is a span; the denied bash names preToolUse; both blocked stops name agentStop."""
    fx = Fixture(FIXTURES / "hooks")
    events = fx.events("hooks")
    spans, _ = replay(tmp_path, session(fx, "hooks"))
    hooks = [s for s in spans if s.name.startswith("hook ")]
    assert len(hooks) == len([e for e in events if e["type"] == "hook.end"])
    (denied,) = [s for s in by_op(spans, "execute_tool") if s.attributes.get("github.copilot.hook.denied_by")]
    assert denied.attributes["github.copilot.hook.denied_by"] == "preToolUse" and denied.status_code == "ERROR"
    outcomes = [s.attributes["github.copilot.hook.outcome"] for s in hooks if s.name == "hook agentStop"]
    assert outcomes.count("block") == 2
    assert len([r for r in roots(spans) if r.attributes.get("github.copilot.hook.blocked_by") == "agentStop"]) == 2


def test_skills_mcp_user_commands_and_reasoning(tmp_path):
    """The skill tool names its skill; MCP tools name their server and count by it; !cmd is the user's tool span;
    reasoning tokens reach the chat spans and copilot_tokens_total{type="reasoning"}."""
    fx = Fixture(FIXTURES / "skill")
    spans, _ = replay(_dir(tmp_path, "skill"), session(fx, "skill"))
    (tool,) = [s for s in spans if s.name == "execute_tool skill"]
    assert tool.attributes["gen_ai.skill.name"] == "greeter"
    fx = Fixture(FIXTURES / "mcp_tools")
    spans, metrics = replay(_dir(tmp_path, "mcp"), session(fx, "mcp"))
    assert {s.attributes.get("github.copilot.mcp.server.name") for s in by_op(spans, "execute_tool")} == {"probe"}
    assert metrics['copilot_mcp_tool_calls_total{outcome="success",server="probe"}'] == 1
    assert metrics['copilot_mcp_tool_calls_total{outcome="failure",server="probe"}'] == 3
    fx = Fixture(FIXTURES / "user_command")
    spans, _ = replay(_dir(tmp_path, "user"), session(fx, "user_command"))
    (own,) = [s for s in by_op(spans, "execute_tool") if s.attributes.get("github.copilot.tool.user_requested")]
    assert own.name == "execute_tool local_shell" and own.parent_span_id is None
    fx = Fixture(FIXTURES / "reasoning_tokens")
    spans, metrics = replay(_dir(tmp_path, "reasoning"), session(fx, "reasoning"))
    assert sorted(s.attributes["gen_ai.usage.reasoning.output_tokens"] for s in by_op(spans, "chat")) == [180, 190]
    assert metrics['copilot_tokens_total{model="test-model",type="reasoning"}'] == 370
