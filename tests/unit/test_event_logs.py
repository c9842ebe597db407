"""model/logs.py: the session's events as log records, each linked to the span the model made for its event,
on real CLI logs of every stored version and situation; the content rule; bad input never stops them."""

from __future__ import annotations

from pathlib import Path

import pytest

from copilot_otel.decode.lines import decode_line
from copilot_otel.logreader import LogReader
from copilot_otel.model import logs as L
from copilot_otel.model.options import ModelOptions
from copilot_otel.model.pipeline import Outputs, drive, finish
from copilot_otel.model.sessions import SessionModel
from tests.support.events import SessionLog

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
LOGS = sorted(FIXTURES.glob("**/session-state/*/events.jsonl"))
LOGS_ON = ModelOptions(logs=True)


def read(path: Path, options: ModelOptions = LOGS_ON) -> Outputs:
    reader = LogReader(path, options)
    out = reader.read_to_end()
    reader.finish(out)
    return out


@pytest.mark.parametrize("path", LOGS, ids=lambda p: f"{p.parts[-5]}/{p.parts[-4]}/{p.parts[-2][:8]}")
def test_each_record_links_to_a_span_of_its_log_and_logs_change_no_span(path):
    """Every record of every stored real log carries the trace and span id of a span the same read exported,
    its event's own time and id; turning logs on changes no span; reading again gives the same records."""
    out = read(path)
    spans = {(s.trace_id, s.span_id) for s in out.spans}
    events = {e.id: e for e in (decode_line(line) for line in path.read_bytes().splitlines()) if hasattr(e, "id")}
    for record in out.logs:
        assert (record.trace_id, record.span_id) in spans, record.event_name
        event = events[record.attributes[L.EVENT_ID]]
        assert record.time_ns == event.timestamp_ns and record.attributes[L.EVENT_TYPE] == event.type
        assert record.event_name in L.EVENT_NAMES and record.attributes[L.EVENT_NAME] == record.event_name
    without = read(path, ModelOptions())
    assert without.spans == out.spans and not without.logs
    assert read(path).logs == out.logs


def test_records_of_a_failing_tool_session():
    """The permission asked and denied, the denied tool, the failed and the succeeded ones: their names,
    severities and what each says, read off a real session."""
    path = next((FIXTURES / "cli" / "1.0.102" / "failing_tool").glob("session-state/*/events.jsonl"))
    records = read(path).logs
    names = [r.event_name for r in records]
    assert names[0] == L.USER_PROMPT and names[-1] == L.SESSION_END
    decision = next(r for r in records if r.event_name == L.TOOL_DECISION)
    assert decision.attributes[L.DECISION] == "reject" and decision.severity == L.SEVERITY_WARN
    asked = next(r for r in records if r.event_name == L.PERMISSION_REQUEST)
    assert asked.attributes["gen_ai.tool.name"] == "view" and asked.attributes[L.PERMISSION_KIND] == "read"
    results = [r for r in records if r.event_name == L.TOOL_RESULT]
    denied = [r for r in results if r.attributes.get(L.TOOL_DENIED)]
    assert len(results) == 4 and len(denied) == 1 and denied[0].attributes["error.type"] == "denied"
    assert {r.severity for r in results if r.attributes[L.TOOL_SUCCESS]} == {L.SEVERITY_INFO}
    assert all(r.attributes[L.DURATION] >= 0 for r in results)


def test_prompt_and_error_text_only_with_capture():
    """Without capture a prompt is its length and an error its type and status; with it, the prompt is the body
    and the error's message an attribute."""
    log = SessionLog("s-1")
    log.start()
    log.user("Summarise the secret plan.")
    log.turn_start()
    log.error(status_code=500, message="upstream said: the secret plan")
    plain = drive(SessionModel("s-1", LOGS_ON), log.decoded(), Outputs(), source="log").logs
    prompt, error = plain
    assert prompt.body is None and L.PROMPT not in prompt.attributes
    assert prompt.attributes[L.PROMPT_LENGTH] == len("Summarise the secret plan.")
    assert error.severity == L.SEVERITY_ERROR and error.attributes["http.response.status_code"] == 500
    assert L.ERROR_MESSAGE not in error.attributes and "secret" not in repr([r.attributes for r in plain])
    captured = drive(SessionModel("s-1", ModelOptions(capture_content=True, logs=True)), log.decoded(), Outputs(),
                     source="log").logs
    assert captured[0].body == captured[0].attributes[L.PROMPT] == "Summarise the secret plan."
    assert captured[1].attributes[L.ERROR_MESSAGE] == "upstream said: the secret plan"


def test_nudges_are_marked_and_a_sub_agents_prompt_is_no_users():
    """An autopilot nudge is a prompt marked as one; the prompt the CLI gives a sub-agent makes no record."""
    log = SessionLog("s-1")
    log.start()
    log.user()
    log.spawn("call-task", "agent-1")
    log.user(nudge=True)
    records = drive(SessionModel("s-1", LOGS_ON), log.decoded(), Outputs(), source="log").logs
    prompts = [r for r in records if r.event_name == L.USER_PROMPT]
    assert [r.attributes["github.copilot.autopilot.continuation"] for r in prompts] == [False, True]


def test_hooks_say_their_type_outcome_decision_and_time():
    """hook.start/hook.end make one record at the end: its type, whether it succeeded, what it decided, how long it
    ran, on its hook span in the turn it ran in; a hook that never ends makes none, and one that ends unstarted has
    no duration and, having no span, stays in the turn."""
    log = SessionLog("s-1")
    log.start()
    log.user()
    log.turn_start()
    log.add("hook.start", {"hookInvocationId": "h-1", "hookType": "preToolUse"})
    log.add("hook.end", {"hookInvocationId": "h-1", "hookType": "preToolUse", "success": True,
                         "output": {"permissionDecision": "deny"}})
    log.add("hook.start", {"hookInvocationId": "h-2", "hookType": "agentStop"})
    log.add("hook.end", {"hookInvocationId": "h-3", "hookType": "postToolUse", "success": False,
                         "error": {"message": "exit 2"}})
    model = SessionModel("s-1", LOGS_ON)
    out = drive(model, log.decoded(), Outputs(), source="log")
    records = [r for r in out.logs if r.event_name == L.HOOK]
    denied, failed = records
    assert denied.attributes[L.HOOK_TYPE] == "preToolUse" and denied.attributes[L.HOOK_DECISION] == "deny"
    assert denied.attributes[L.DURATION] == pytest.approx(0.01) and denied.severity == L.SEVERITY_INFO
    assert failed.attributes[L.HOOK_SUCCESS] is False and failed.severity == L.SEVERITY_WARN
    assert L.DURATION not in failed.attributes and L.ERROR_MESSAGE not in failed.attributes
    turn_span = model.span_context(decode_line(log.lines()[2]))
    assert turn_span is not None
    hook_span = next(s for s in out.spans if s.span_id == denied.span_id)
    assert hook_span.name == "hook preToolUse" and (hook_span.trace_id, hook_span.parent_span_id) == turn_span[:2]
    assert denied.trace_id == turn_span[0] and (failed.trace_id, failed.span_id) == turn_span[:2]


HOOKS_LOG = next((FIXTURES / "situations" / "hooks").glob("session-state/*/events.jsonl"))


def test_each_hook_record_carries_the_ids_its_hook_span_is_exported_with():
    """The real hooks log: every hook.end makes exactly one record, on the span of its own run (the invocation id
    the span names); a userPromptSubmitted hook, run before its interaction existed, is on that interaction's
    trace, the trace its span was adopted into."""
    out = read(HOOKS_LOG)
    events = {e.id: e for e in (decode_line(line) for line in HOOKS_LOG.read_bytes().splitlines())}
    ends = [e for e in events.values() if e.type == "hook.end"]
    records = [r for r in out.logs if r.event_name == L.HOOK]
    assert sorted(r.attributes[L.EVENT_ID] for r in records) == sorted(e.id for e in ends)
    spans = {(s.trace_id, s.span_id): s for s in out.spans}
    roots = {s.attributes.get("github.copilot.interaction_id"): s for s in out.spans if s.parent_span_id is None}
    for record in records:
        end = events[record.attributes[L.EVENT_ID]]
        span = spans[(record.trace_id, record.span_id)]
        assert span.name == f"hook {end.data['hookType']}"
        assert span.attributes["github.copilot.hook.invocation_id"] == end.data["hookInvocationId"]
    prompt_hooks = [r for r in records if r.attributes[L.HOOK_TYPE] == "userPromptSubmitted"
                    and r.attributes[L.EVENT_ID] not in {e.id for e in ends if e.agent_id is not None}]
    prompts = [e for e in events.values() if e.type == "user.message" and e.agent_id is None]
    assert len(prompt_hooks) == len(prompts) == 3
    for hook, prompt in zip(prompt_hooks, prompts):
        assert hook.trace_id == roots[prompt.interaction_id].trace_id


def test_a_hook_still_waiting_for_its_prompt_when_the_log_ends_is_recorded_on_its_own_root():
    """The real hooks log cut just after a userPromptSubmitted hook ended (its prompt never written): at the end
    the hook is a root of its own, and its one record carries that root's ids."""
    lines = HOOKS_LOG.read_bytes().splitlines(keepends=True)[:5]
    model = SessionModel(decode_line(lines[0]).data["sessionId"], LOGS_ON)
    out = drive(model, (decode_line(line) for line in lines), Outputs(), source="cut")
    assert not [r for r in out.logs if r.attributes[L.HOOK_TYPE] == "userPromptSubmitted"]
    finish(model, out)
    waited = [r for r in out.logs if r.event_name == L.HOOK and r.attributes[L.HOOK_TYPE] == "userPromptSubmitted"]
    assert len(waited) == 1
    span = next(s for s in out.spans if (s.trace_id, s.span_id) == (waited[0].trace_id, waited[0].span_id))
    assert span.name == "hook userPromptSubmitted" and span.parent_span_id is None


@pytest.mark.parametrize("event_type, data", [
    ("hook.end", {"hookInvocationId": ["x"], "hookType": {"a": 1}, "success": "yes", "output": [1, 2]}),
    ("hook.start", {"hookInvocationId": 7}),
    ("permission.requested", {"requestId": 3, "permissionRequest": "shell", "toolCallId": ["c"]}),
    ("permission.completed", {"requestId": None, "result": ["denied"], "decisionSource": {"x": 1}}),
    ("tool.execution_complete", {"toolCallId": "never-started", "success": "no", "error": "boom"}),
    ("session.usage_record", {"usage": "lots"}),
    ("session.usage_record", {"usage": {"model": 5, "inputTokens": -3, "outputTokens": 10 ** 30, "duration": "x",
                                        "cost": 1e308}}),
    ("session.error", {"errorType": ["x"], "statusCode": "five hundred", "message": {"a": "b"}}),
    ("session.compaction_complete", {"compactionAttemptId": 9, "compactionTokensUsed": [1], "success": False}),
    ("session.shutdown", {"shutdownType": 3, "totalPremiumRequests": "many", "totalApiDurationMs": -1}),
    ("user.message", {"content": {"not": "text"}, "interactionId": ["i"]}),
])
def test_fields_missing_or_of_the_wrong_type_never_stop_the_records(event_type, data):
    """An event of a known type whose fields are missing or of the wrong type makes a record from what it has,
    or none; the session's other records and spans are intact, and nothing raises."""
    log = SessionLog("s-1")
    log.start()
    log.user()
    log.tool_turn(("bash", "call-1"))
    log.add(event_type, data)
    log.answer()
    log.shutdown()
    bad = log.entries[-3]["id"]
    model = SessionModel("s-1", LOGS_ON)
    out = finish(model, drive(model, log.decoded(), Outputs(), source="log"))
    assert not out.rejected
    names = [r.event_name for r in out.logs if r.attributes[L.EVENT_ID] != bad]
    assert names[0] == L.USER_PROMPT and L.TOOL_RESULT in names and names[-1] == L.SESSION_END
    for record in out.logs:
        assert all(value is not None for value in record.attributes.values())
