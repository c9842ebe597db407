"""The hard situations the real CLI 1.0.102 writes (tests/fixtures/situations/, see SITUATIONS.md):
crash and resume, aborts, cancelled sub-agents, background shells, steering, compaction, empty and
length-cut answers, parallel sub-agents in the headless stream, many tools. Each is read through
`replay` (the command, run in this process) and the trace and metrics are checked against the events.
tests/e2e/test_situations.py runs the live daemon over all of them and demands the very same spans."""

from __future__ import annotations

import json
import logging
from collections import Counter
from pathlib import Path

import pytest

from tests.fixtures.situations import FIXTURES, Fixture
from tests.support.inprocess import run_command
from tests.support.model import label as span_label
from tests.support.otlp_json import iso_ns, read_spans
from tests.support.scrape import keyed


class _Said(logging.Handler):
    """What a command logged while it ran."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def replay(tmp_path: Path, *sources: Path, stdin: bytes | None = None, name: str = "traces") -> tuple[list, dict]:
    """`copilot-otel replay` of ``sources`` (or of stdin): the spans and the metrics file's samples; it must
    skip no line and find nothing out of order."""
    traces, metrics = tmp_path / f"{name}.jsonl", tmp_path / f"{name}.prom"
    args = [str(s) for s in sources] or ["-"]
    said = _Said()
    logging.getLogger().addHandler(said)
    try:
        result = run_command("replay", *args, "--traces-file", str(traces), "--metrics-file", str(metrics),
                             "--state-dir", str(tmp_path / "state"), stdin=stdin)
    finally:
        logging.getLogger().removeHandler(said)
    assert result.exit_code == 0, result.output
    warned = [line for line in said.lines + result.stderr.splitlines()
              if "skipped line" in line or "out of order" in line]
    assert not warned, warned
    return read_spans(traces), keyed(metrics.read_text())


def session(fx: Fixture, label: str) -> Path:
    return fx.path / "session-state" / fx.run(label)["session_id"]


def by_op(spans, operation):
    return [s for s in spans if s.attributes.get("gen_ai.operation.name") == operation]


def roots(spans):
    return sorted((s for s in spans if s.parent_span_id is None), key=lambda s: s.start_time_unix_nano)


def check_nesting(spans):
    by_id = {(s.trace_id, s.span_id): s for s in spans}
    for span in spans:
        if span.parent_span_id is not None:
            parent = by_id[(span.trace_id, span.parent_span_id)]
            assert parent.start_time_unix_nano <= span.start_time_unix_nano, (span.name, parent.name)
            assert span.end_time_unix_nano <= parent.end_time_unix_nano, (span.name, parent.name)


def test_crash_then_resume(tmp_path):
    """The work a SIGKILL cut off ends, incomplete, at the last event the dead process wrote (not across
    the 20 s of downtime); the resume's synthetic "interrupted" completion is expected, not an anomaly;
    the tool counts once; the resumed prompt is an ordinary trace of its own."""
    fx = Fixture(FIXTURES / "crash_resume")
    events = fx.events("crashed")
    spans, metrics = replay(tmp_path, session(fx, "crashed"))
    check_nesting(spans)
    crashed, resumed = roots(spans)
    before_resume = events[[e["type"] for e in events].index("session.resume") - 1]
    assert crashed.attributes["github.copilot.interaction.end"] == "incomplete" and crashed.status_code == "ERROR"
    assert crashed.end_time_unix_nano == iso_ns(before_resume["timestamp"])
    (cut,) = [s for s in by_op(spans, "execute_tool") if s.trace_id == crashed.trace_id]
    assert cut.attributes["error.type"] == "incomplete" and cut.end_time_unix_nano <= crashed.end_time_unix_nano
    assert resumed.attributes["github.copilot.interaction.end"] == "idle"
    assert "resume" not in {r.attributes["github.copilot.interaction_id"] for r in roots(spans)}
    assert metrics['copilot_tool_calls_total{outcome="incomplete",tool="bash"}'] == 1
    assert metrics['copilot_tool_calls_total{outcome="success",tool="bash"}'] == 1


@pytest.mark.parametrize("label", ["sigint", "sigterm"])
def test_abort_cuts_off_the_running_tool(tmp_path, label):
    """SIGINT/SIGTERM mid-tool: the tool fails as aborted and is counted so, ending with its turn (whichever
    of turn_end and abort came first); the interaction ends aborted, and the loop's end counts once."""
    fx = Fixture(FIXTURES / "abort_sigint_tool")
    spans, metrics = replay(tmp_path, session(fx, label))
    check_nesting(spans)
    (root,) = roots(spans)
    (tool,) = by_op(spans, "execute_tool")
    assert tool.status_code == "ERROR" and tool.attributes["error.type"] == "aborted"
    assert root.attributes["github.copilot.interaction.end"] == "aborted"
    assert metrics['copilot_tool_calls_total{outcome="aborted",tool="bash"}'] == 1
    assert metrics['copilot_completion_signals_total{signal="idle"}'] == 1


@pytest.mark.parametrize("label", ["run1", "run2"])
def test_a_cancelled_subagent_is_an_error_whatever_the_order(tmp_path, label):
    """subagent.completed(cancelled), the main turn_end and abort come in any order: the sub-agent span is an
    error `cancelled` each time, its bash and the task call count as aborted, and nothing ends after its parent."""
    fx = Fixture(FIXTURES / "abort_subagent")
    spans, metrics = replay(tmp_path, session(fx, label))
    check_nesting(spans)
    (child,) = [s for s in by_op(spans, "invoke_agent") if s.parent_span_id is not None]
    assert child.status_code == "ERROR" and child.attributes["error.type"] == "cancelled"
    assert metrics['copilot_tool_calls_total{outcome="aborted",tool="task"}'] == 1
    assert metrics['copilot_tool_calls_total{outcome="aborted",tool="bash"}'] == 1


@pytest.mark.parametrize("situation, label", [("background_shell", None), ("steering", "during_tool")])
def test_work_after_a_background_shell_gets_its_own_linked_root(tmp_path, situation, label):
    """After the loop ended, a finished background shell makes the CLI run read_bash and a turn in the old
    interaction: that work is a new root (trigger system.notification, same interaction id) linked to the
    first one, which ends at its last turn, not across the idle gap; each loop end counts once."""
    fx = Fixture(FIXTURES / situation)
    (folder,) = (fx.path / "session-state").iterdir() if label is None else (session(fx, label),)
    events = [json.loads(line) for line in (folder / "events.jsonl").read_text().splitlines()]
    spans, metrics = replay(tmp_path, folder)
    check_nesting(spans)
    first, second = roots(spans)
    notification = next(e for e in events if e["type"] == "system.notification")
    last_turn_end = [e for e in events if e["type"] == "assistant.turn_end"
                     and e["timestamp"] < notification["timestamp"]][-1]
    assert first.end_time_unix_nano == iso_ns(last_turn_end["timestamp"])
    assert second.attributes["github.copilot.trigger"] == "system.notification"
    assert second.attributes["github.copilot.interaction_id"] == first.attributes["github.copilot.interaction_id"]
    assert second.trace_id != first.trace_id
    assert [(link.trace_id, link.span_id) for link in second.links] == [(first.trace_id, first.span_id)]
    assert {span_label(s) for s in spans if s.trace_id == second.trace_id} >= {"execute_tool read_bash", "turn 0"}
    assert metrics['copilot_completion_signals_total{signal="idle"}'] == 2


def test_steering_stays_in_its_interaction_and_a_queued_message_starts_one(tmp_path):
    """A message typed during the final LLM call is queued: a new interaction, two loop ends."""
    fx = Fixture(FIXTURES / "steering")
    spans, metrics = replay(tmp_path, session(fx, "during_model_call"))
    assert len(roots(spans)) == 2
    assert metrics['copilot_completion_signals_total{signal="idle"}'] == 2


def test_compactions_have_spans_and_count_their_tokens_apart(tmp_path):
    """Each automatic compaction is a span under its interaction's root (which never ends before it); a /compact
    between interactions is a root of its own, holding its LLM call's chat span with the tokens model.* give, and
    the interaction before it ends at its last turn; the tokens of compactions' own LLM requests count as
    compaction_* tokens, exactly as compactionTokensUsed says."""
    fx = Fixture(FIXTURES / "compaction")
    spans, metrics = replay(tmp_path, fx.path)
    check_nesting(spans)
    completes = [e for events in fx.sessions.values() for e in events if e["type"] == "session.compaction_complete"]
    compactions = [s for s in spans if s.name == "compaction"]
    assert len(compactions) == len(completes) > 0
    assert all(s.status_code == "OK" for s in compactions)
    manual = [s for s in compactions if s.attributes["github.copilot.compaction.trigger"] == "manual"]
    assert len(manual) == 1 and manual[0].parent_span_id is None
    assert all(s.parent_span_id is not None for s in compactions if s not in manual)
    (call,) = [s for s in spans if s.trace_id == manual[0].trace_id and s.name == "chat test-model"]
    success = next(e for e in fx.events("manual") if e["type"] == "model.model_call_success")["data"]["responseUsage"]
    assert call.attributes["gen_ai.usage.input_tokens"] == success["prompt_tokens"]
    assert call.attributes["gen_ai.usage.output_tokens"] == success["completion_tokens"]
    (before,) = [s for s in roots(spans) if s.name == "invoke_agent copilot"
                 and s.attributes["gen_ai.conversation.id"] == fx.run("manual")["session_id"]]
    last_turn_end = [e for e in fx.events("manual") if e["type"] == "assistant.turn_end"][-1]
    assert before.end_time_unix_nano == iso_ns(last_turn_end["timestamp"]), "the /compact stretched the interaction"
    expected = Counter()
    for event in completes:
        used = event["data"]["compactionTokensUsed"]
        for key, label in (("inputTokens", "compaction_input"), ("outputTokens", "compaction_output"),
                           ("cacheReadTokens", "compaction_cache_read")):
            expected[label] += used[key]
    for label, value in expected.items():
        assert metrics[f'copilot_tokens_total{{model="test-model",type="{label}"}}'] == value
    usage = [e["data"]["usage"] for events in fx.sessions.values() for e in events
             if e["type"] == "session.usage_record"]
    assert metrics['copilot_tokens_total{model="test-model",type="input"}'] == sum(u["inputTokens"] for u in usage)


def test_an_empty_answer_fails_its_turn_but_not_its_llm_call(tmp_path):
    """"No response was returned" (session.error without statusCode after turn_end): the turn and the
    interaction fail with its errorType; the LLM call itself was answered and counts as a success."""
    fx = Fixture(FIXTURES / "empty_answer")
    spans, metrics = replay(tmp_path, fx.path)
    (root,) = roots(spans)
    (turn,) = [s for s in spans if s.name == "turn"]
    error = next(e for events in fx.sessions.values() for e in events if e["type"] == "session.error")
    assert root.status_code == turn.status_code == "ERROR"
    assert root.attributes["error.type"] == turn.attributes["error.type"] == error["data"]["errorType"]
    assert metrics['copilot_llm_calls_total{model="test-model",outcome="success"}'] == 1
    assert 'copilot_llm_calls_total{model="test-model",outcome="error"}' not in metrics
    assert metrics['copilot_completion_signals_total{signal="error"}'] == 1


def test_length_cut_answers_continue_the_loop(tmp_path):
    """finish_reason length: one chat span per usage record (each with its finish reason), the turns the
    CLI adds to continue stay in the interaction, and each session's loop ends once, as idle."""
    fx = Fixture(FIXTURES / "finish_length")
    spans, metrics = replay(tmp_path, fx.path)
    usage = [e for events in fx.sessions.values() for e in events if e["type"] == "session.usage_record"]
    chats = by_op(spans, "chat")
    assert len(chats) == len(usage)
    assert sorted(c.attributes["gen_ai.response.finish_reasons"][0] for c in chats) == \
        sorted(u["data"]["usage"]["finishReason"] for u in usage)
    assert len(roots(spans)) == len(fx.sessions)
    assert all(r.attributes["github.copilot.interaction.end"] == "idle" for r in roots(spans))
    assert metrics['copilot_completion_signals_total{signal="idle"}'] == len(fx.sessions)


def test_fifty_tools_in_one_turn(tmp_path):
    """50 tools started before any completes: 50 spans under the turn, counted 40 success, 10 failure."""
    fx = Fixture(FIXTURES / "many_tools")
    spans, metrics = replay(tmp_path, fx.path)
    tools = by_op(spans, "execute_tool")
    assert len(tools) == 50 and len({t.parent_span_id for t in tools}) == 1
    outcomes = Counter()
    for key, value in metrics.items():
        if key.startswith("copilot_tool_calls_total"):
            outcomes[key.split('outcome="')[1].split('"')[0]] += value
    assert outcomes == {"success": 40, "failure": 10}


def test_parallel_subagents_in_the_headless_stream(tmp_path):
    """The stream's overlapping model.call_start/finished of three sub-agents: every call counted (as many
    as the CLI's own chat spans), under the session id the result line gives."""
    fx = Fixture(FIXTURES / "parallel_subagents_stream")
    stream = (fx.path / fx.run("complete")["stdout"]).read_bytes()
    spans, metrics = replay(tmp_path, stdin=stream)
    own = fx.meta["cli_otel"][fx.run("complete")["session_id"]]["chat"]
    assert len(by_op(spans, "chat")) == own == metrics['copilot_llm_calls_total{model="test-model",outcome="success"}']
    assert {s.attributes["gen_ai.conversation.id"] for s in spans} == {fx.run("complete")["session_id"]}


def test_a_stream_cut_off_before_its_result_line_keeps_its_session_id(tmp_path):
    """Killed before the result line: the session id comes from a sub-agent prompt's source, not 'stdin'."""
    fx = Fixture(FIXTURES / "parallel_subagents_stream")
    spans, _metrics = replay(tmp_path, stdin=(fx.path / fx.run("killed")["stdout"]).read_bytes())
    assert {s.attributes["gen_ai.conversation.id"] for s in spans} == {fx.run("killed")["session_id"]}
