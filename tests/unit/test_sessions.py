"""sessions.py: the spans of an interaction, their parents, ids, times and attributes, and the
metric updates each event causes (the ends of the loop are in test_session_ends.py)."""

from __future__ import annotations

import json

from copilot_otel.config import ModelOptions
from copilot_otel.model import attrs as A
from copilot_otel.model.records import KIND_CLIENT, STATUS_ERROR, STATUS_OK, STATUS_UNSET, span_id_for, trace_id_for
from copilot_otel.model.sessions import SessionModel
from copilot_otel.vocab import END_IDLE, ERROR, FAILURE, MAIN_AGENT, SIGNAL_IDLE, SIGNAL_SHUTDOWN, SUCCESS, Metric
from tests.support.events import MODEL, SessionLog
from tests.support.model import feed, label

SID = "session-1"


def plain_session(system: str | None = None) -> SessionLog:
    """A prompt, a turn that runs bash, a turn that answers, shutdown: the corpus' `plain` (``system``: with
    a system.message after the prompt, as the CLI writes it)."""
    log = SessionLog(SID)
    log.start(cwd="/work/plain")
    log.user("Say hello.")
    if system is not None:
        log.add("system.message", {"role": "system", "content": system})
    log.turn_start()
    log.wait(0.3)  # the LLM call (107 ms) runs inside its turn
    log.usage(input_tokens=4700, output_tokens=42, cache_read=137, cache_write=0, duration_ms=107,
              finish_reason="tool_calls")
    log.message(tools=["bash"])
    log.tool_start("bash", "call-1", arguments={"command": "echo hello"})
    log.wait(0.7)
    log.tool_complete("call-1", exit_code=0, result="hello")
    log.turn_end()
    log.turn_start()
    log.wait(0.1)
    log.usage(input_tokens=4800, output_tokens=5, cache_read=4700, cache_write=12, duration_ms=18)
    log.message("All done.")
    log.turn_end()
    log.shutdown()
    return log


def by_type(log: SessionLog, event_type: str, agent: str | None = None) -> list[dict]:
    return [e for e in log.entries if e["type"] == event_type and e.get("agentId") == agent]


def test_one_span_per_interaction_turn_call_and_tool():
    """A plain session exports its interaction, two turns, two LLM calls and one tool, each once."""
    fed = feed(SessionModel(SID), plain_session().events())
    assert sorted(label(span) for span in fed.spans) == sorted([
        "invoke_agent copilot", "turn 0", "turn 1", f"chat {MODEL}", f"chat {MODEL}", "execute_tool bash"])


def test_the_tree_of_an_interaction():
    """Turns hang under the interaction, each chat and tool under its turn, all in the interaction's trace."""
    log = plain_session()
    fed = feed(SessionModel(SID), log.events())
    root, turn0, turn1 = fed.one("invoke_agent copilot"), fed.one("turn 0"), fed.one("turn 1")
    chats = fed.named(f"chat {MODEL}")
    assert root.parent_span_id is None
    assert turn0.parent_span_id == turn1.parent_span_id == root.span_id
    assert [chat.parent_span_id for chat in chats] == [turn0.span_id, turn1.span_id]
    assert fed.one("execute_tool bash").parent_span_id == turn0.span_id
    assert {span.trace_id for span in fed.spans} == {trace_id_for(SID, "interaction-1")}


def test_span_ids_come_from_the_first_event_of_each_span():
    """Span ids are derived from the session id and the id of the event that opened the span."""
    log = plain_session()
    fed = feed(SessionModel(SID), log.events())
    user = by_type(log, "user.message")[0]
    turns = by_type(log, "assistant.turn_start")
    usages = by_type(log, "session.usage_record")
    assert fed.one("invoke_agent copilot").span_id == span_id_for(SID, user["id"])
    assert [fed.one("turn 0").span_id, fed.one("turn 1").span_id] == [span_id_for(SID, t["id"]) for t in turns]
    assert [c.span_id for c in fed.named(f"chat {MODEL}")] == [span_id_for(SID, u["id"]) for u in usages]
    assert fed.one("execute_tool bash").span_id == span_id_for(SID, by_type(log, "tool.execution_start")[0]["id"])


def test_the_same_log_gives_the_same_spans():
    """Replaying a log twice gives identical spans (a backend can merge a re-export)."""
    log = plain_session()
    assert feed(SessionModel(SID), log.events()).spans == feed(SessionModel(SID), log.events()).spans


def test_times_are_the_events_own():
    """Turns and tools last from their start event to their end event; a chat ends at its usage
    record and lasts usage.duration; the interaction ends at the end of its last turn."""
    log = plain_session()
    fed = feed(SessionModel(SID), log.events())
    turn_starts, turn_ends = by_type(log, "assistant.turn_start"), by_type(log, "assistant.turn_end")
    for number in (0, 1):
        turn = fed.one(f"turn {number}")
        assert (turn.start_ns, turn.end_ns) == (log.ns(turn_starts[number]), log.ns(turn_ends[number]))
    tool = fed.one("execute_tool bash")
    assert (tool.start_ns, tool.end_ns) == (log.ns(by_type(log, "tool.execution_start")[0]),
                                            log.ns(by_type(log, "tool.execution_complete")[0]))
    for chat, usage in zip(fed.named(f"chat {MODEL}"), by_type(log, "session.usage_record")):
        duration_ns = int(usage["data"]["usage"]["duration"] * 1_000_000)
        assert (chat.start_ns, chat.end_ns) == (log.ns(usage) - duration_ns, log.ns(usage))
    root = fed.one("invoke_agent copilot")
    assert (root.start_ns, root.end_ns) == (log.ns(by_type(log, "user.message")[0]), log.ns(turn_ends[-1]))


def test_a_chat_never_starts_before_its_turn():
    """The CLI times a call from before it logs turn_start: the chat span is clipped to its turn."""
    log = SessionLog(SID)
    log.start()
    log.user()
    log.answer(duration_ms=60_000)
    log.shutdown()
    fed = feed(SessionModel(SID), log.events())
    assert fed.one(f"chat {MODEL}").start_ns == fed.one("turn 0").start_ns


def test_attributes_of_each_kind_of_span():
    """GenAI attributes: operation, provider, conversation, model, tokens, tool name and call id;
    copilot.* ones: interaction id, turn id, cwd, CLI version."""
    log = plain_session()
    fed = feed(SessionModel(SID), log.events())
    root = fed.one("invoke_agent copilot").attributes
    assert (root[A.GEN_AI_OPERATION_NAME], root[A.GEN_AI_PROVIDER_NAME], root[A.GEN_AI_CONVERSATION_ID]) == (
        "invoke_agent", "github", SID)
    assert (root[A.GEN_AI_REQUEST_MODEL], root[A.COPILOT_CWD], root[A.COPILOT_CLI_VERSION]) == (
        MODEL, "/work/plain", "1.0.102")
    assert root[A.COPILOT_INTERACTION_ID] == "interaction-1"
    assert fed.one("turn 1").attributes[A.COPILOT_TURN_ID] == "1"
    usage = by_type(log, "session.usage_record")[0]["data"]["usage"]
    chat = fed.named(f"chat {MODEL}")[0]
    assert chat.kind == KIND_CLIENT
    assert (chat.attributes[A.GEN_AI_OPERATION_NAME], chat.attributes[A.GEN_AI_REQUEST_MODEL]) == ("chat", MODEL)
    assert (chat.attributes[A.GEN_AI_USAGE_INPUT_TOKENS], chat.attributes[A.GEN_AI_USAGE_OUTPUT_TOKENS],
            chat.attributes[A.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS]) == (
        usage["inputTokens"], usage["outputTokens"], usage["cacheReadTokens"])
    assert chat.attributes[A.GEN_AI_RESPONSE_FINISH_REASONS] == (usage["finishReason"],)
    tool = fed.one("execute_tool bash").attributes
    assert (tool[A.GEN_AI_TOOL_NAME], tool[A.GEN_AI_TOOL_CALL_ID], tool[A.PROCESS_EXIT_CODE]) == ("bash", "call-1", 0)


def test_no_content_unless_capture_is_on():
    """Prompt, system prompt, arguments, results and answers are exported only with capture on, each text cut
    to the limit inside messages that stay JSON."""
    log = plain_session(system="You are the CLI.")
    off = feed(SessionModel(SID), log.events())
    content = {A.GEN_AI_INPUT_MESSAGES, A.GEN_AI_OUTPUT_MESSAGES, A.GEN_AI_SYSTEM_INSTRUCTIONS,
               A.GEN_AI_TOOL_CALL_ARGUMENTS, A.GEN_AI_TOOL_CALL_RESULT}
    assert not [key for span in off.spans for key in span.attributes if key in content]
    on = feed(SessionModel(SID, ModelOptions(capture_content=True, content_max_chars=5)), log.events())
    root = on.one("invoke_agent copilot").attributes
    assert json.loads(root[A.GEN_AI_INPUT_MESSAGES]) == [{"role": "user", "parts": [{"type": "text",
                                                                                     "content": "Say h"}]}]
    assert json.loads(root[A.GEN_AI_SYSTEM_INSTRUCTIONS]) == [{"type": "text", "content": "You a"}]
    assert json.loads(root[A.GEN_AI_OUTPUT_MESSAGES]) == [
        {"role": "assistant", "parts": [{"type": "text", "content": "All d"}], "finish_reason": "stop"}]
    tool = on.one("execute_tool bash").attributes
    assert tool[A.GEN_AI_TOOL_CALL_ARGUMENTS] == '{"command":"echo hello"}'[:5]
    assert tool[A.GEN_AI_TOOL_CALL_RESULT] == "hello"


def test_each_chat_holds_what_its_call_got_and_answered():
    """With capture on, a chat span's input is what its agent was told since its previous call (the prompt,
    then each tool's result as a tool message), its output the answer with the tools it asked for and the
    conventions' finish reason, and every call of the agent carries its system prompt; turns carry none."""
    log = plain_session(system="You are the CLI.")
    on = feed(SessionModel(SID, ModelOptions(capture_content=True)), log.events())
    first, second = on.named(f"chat {MODEL}")
    (asked,) = by_type(log, "assistant.message")[0]["data"]["toolRequests"]
    assert json.loads(first.attributes[A.GEN_AI_INPUT_MESSAGES]) == [
        {"role": "user", "parts": [{"type": "text", "content": "Say hello."}]}]
    assert json.loads(first.attributes[A.GEN_AI_OUTPUT_MESSAGES]) == [
        {"role": "assistant", "parts": [{"type": "tool_call", "id": asked["toolCallId"], "name": "bash",
                                         "arguments": {}}], "finish_reason": "tool_call"}]
    assert json.loads(second.attributes[A.GEN_AI_INPUT_MESSAGES]) == [
        {"role": "tool", "parts": [{"type": "tool_call_response", "id": "call-1", "response": "hello"}]}]
    assert json.loads(second.attributes[A.GEN_AI_OUTPUT_MESSAGES]) == [
        {"role": "assistant", "parts": [{"type": "text", "content": "All done."}], "finish_reason": "stop"}]
    for chat in (first, second):
        assert json.loads(chat.attributes[A.GEN_AI_SYSTEM_INSTRUCTIONS]) == [
            {"type": "text", "content": "You are the CLI."}]
    assert not [key for span in on.spans if span.name == "turn" for key in span.attributes if "messages" in key]
    off = feed(SessionModel(SID), log.events())
    assert [(s.span_id, s.end_ns) for s in off.spans if s.name.startswith("chat")] == [
        (s.span_id, s.end_ns) for s in (first, second)]


def test_statuses():
    """A completed tool and a finished interaction are OK; turns and chats keep the unset status."""
    fed = feed(SessionModel(SID), plain_session().events())
    assert fed.one("execute_tool bash").status == STATUS_OK
    assert fed.one("invoke_agent copilot").status == STATUS_OK
    assert fed.one("invoke_agent copilot").attributes[A.COPILOT_INTERACTION_END] == END_IDLE
    assert {fed.one("turn 0").status, fed.one("turn 1").status} == {STATUS_UNSET}


def test_a_failed_tool():
    """success: false makes the tool span an error with the CLI's error code, counted as a failure."""
    log = SessionLog(SID)
    log.start()
    log.user()
    log.tool_turn(("view", "call-1"), success=False)
    fed = feed(SessionModel(SID), log.events())
    tool = fed.one("execute_tool view")
    assert (tool.status, tool.attributes[A.ERROR_TYPE]) == (STATUS_ERROR, "failure")
    assert fed.total(Metric.TOOL_CALLS, "view", FAILURE) == 1
    assert fed.total(Metric.TOOL_CALLS, "view", SUCCESS) == 0


def test_metric_updates_of_a_session():
    """Each event counts as docs/metrics.md says: sessions, turns, calls, tokens by type, tools, durations, signals."""
    log = plain_session()
    fed = feed(SessionModel(SID), log.events())
    usages = [u["data"]["usage"] for u in by_type(log, "session.usage_record")]
    assert fed.total(Metric.SESSIONS_STARTED) == 1
    assert fed.total(Metric.TURNS, MAIN_AGENT) == len(by_type(log, "assistant.turn_start"))
    assert fed.total(Metric.LLM_CALLS, MODEL, SUCCESS) == len(usages)
    assert fed.total(Metric.LLM_CALLS, MODEL, ERROR) == 0
    for kind, key in (("input", "inputTokens"), ("output", "outputTokens"), ("cache_read", "cacheReadTokens"),
                      ("cache_write", "cacheWriteTokens")):
        assert fed.total(Metric.TOKENS, MODEL, kind) == sum(u[key] for u in usages)
    assert fed.total(Metric.TOOL_CALLS, "bash", SUCCESS) == 1
    assert fed.observed(Metric.LLM_CALL_DURATION, MODEL) == [u["duration"] / 1000 for u in usages]
    tool = fed.one("execute_tool bash")
    assert fed.observed(Metric.TOOL_DURATION, "bash") == [(tool.end_ns - tool.start_ns) / 1e9]
    assert fed.observed(Metric.TURN_DURATION, MAIN_AGENT) == [
        (fed.one(f"turn {n}").end_ns - fed.one(f"turn {n}").start_ns) / 1e9 for n in (0, 1)]
    assert (fed.total(Metric.COMPLETION_SIGNALS, SIGNAL_IDLE), fed.total(Metric.COMPLETION_SIGNALS,
                                                                         SIGNAL_SHUTDOWN)) == (1, 1)


def test_zero_token_counts_make_no_update():
    """A token type with no tokens adds nothing (no empty series is created)."""
    log = SessionLog(SID)
    log.start()
    log.user()
    log.answer(cache_write=0, cache_read=0)
    fed = feed(SessionModel(SID), log.events())
    assert not [u for u in fed.metrics if u.metric is Metric.TOKENS and u.labels[1] in ("cache_read", "cache_write")]


def test_no_metric_updates_when_not_kept():
    """A replay without a metrics file asks the model for none; the spans are the same."""
    log = plain_session()
    kept, not_kept = SessionModel(SID), SessionModel(SID, metrics=False)
    assert feed(not_kept, log.events()).metrics == []
    assert feed(not_kept, []).spans == [] and feed(kept, log.events()).spans == feed(
        SessionModel(SID, metrics=False), log.events()).spans


def test_model_of_the_session_and_its_changes():
    """A call without a model in its usage is named by the session's model, which model_change updates."""
    log = SessionLog(SID)
    log.start(model="model-a")
    log.model_change("model-b")
    log.user()
    log.turn_start()
    log.add("session.usage_record", {"usage": {"inputTokens": 1, "outputTokens": 1, "duration": 5}})
    log.message("Done.")
    log.turn_end()
    fed = feed(SessionModel(SID), log.events())
    assert [span.name for span in fed.spans if span.name.startswith("chat ")] == ["chat model-b"]


def test_subagent_spans_hang_under_the_task_call():
    """A sub-agent's invoke_agent span hangs under its task tool, its turns under that, its tools under its turns."""
    log = SessionLog(SID)
    log.start()
    log.user()
    log.spawn("call-task", "agent-1", name="helper")
    log.tool_turn(("bash", "call-child"), agent="agent-1")
    log.answer("Greeted.", agent="agent-1")
    log.subagent_completed("call-task", "agent-1", name="helper", total_tokens=321, tool_calls=1)
    log.tool_complete("call-task")
    log.turn_end()
    log.answer("The sub-agent finished.")
    log.shutdown()
    fed = feed(SessionModel(SID), log.events())
    task, sub = fed.one("execute_tool task"), fed.one("invoke_agent helper")
    assert sub.parent_span_id == task.span_id
    child_turns = [s for s in fed.spans if s.name == "turn" and s.parent_span_id == sub.span_id]
    assert sorted(label(s) for s in child_turns) == ["turn 0", "turn 1"]
    child_turn0 = next(s for s in child_turns if label(s) == "turn 0")
    assert fed.one("execute_tool bash").parent_span_id == child_turn0.span_id
    assert (sub.status, sub.attributes[A.COPILOT_SUBAGENT_TOTAL_TOKENS],
            sub.attributes[A.COPILOT_SUBAGENT_TOOL_CALLS]) \
        == (STATUS_OK, 321, 1)
    assert fed.total(Metric.TURNS, "helper") == 2 and fed.total(Metric.TURNS, MAIN_AGENT) == 2
    # Only the main agent's loop counts as an end of the loop; the sub-agent's answer does not.
    assert fed.total(Metric.COMPLETION_SIGNALS, SIGNAL_IDLE) == 1
    assert fed.anomalies == []


def test_turn_ids_restart_for_each_agent():
    """Turn "0" of a sub-agent does not end or replace turn "0" of the main agent."""
    log = SessionLog(SID)
    log.start()
    log.user()
    log.spawn("call-task", "agent-1")
    log.answer("child", agent="agent-1")
    log.subagent_completed("call-task", "agent-1")
    model = SessionModel(SID)
    fed = feed(model, log.events())
    assert [label(s) for s in fed.spans if s.name == "turn"] == ["turn 0"]  # the sub-agent's
    assert model.state == "waiting_tool"  # the main turn 0 and its task call are still open


def test_a_subagent_that_failed():
    """subagent.failed ends the sub-agent's span as an error."""
    log = SessionLog(SID)
    log.start()
    log.user()
    log.spawn("call-task", "agent-1", prompt=False)
    log.subagent_failed("call-task", "agent-1")
    fed = feed(SessionModel(SID), log.events())
    sub = fed.one("invoke_agent general-purpose")
    assert (sub.status, sub.attributes[A.ERROR_TYPE]) == (STATUS_ERROR, "subagent_failed")


def test_unknown_event_types_are_ordinary_input():
    """Types the model does not know change nothing and raise nothing."""
    log = SessionLog(SID)
    log.start()
    log.add("x.planted.unknown_type", {"whatever": [1, {"nested": True}]})
    log.add("session.info", {"infoType": "model"})
    fed = feed(SessionModel(SID), log.events())
    assert (fed.spans, fed.anomalies) == ([], [])
    assert fed.total(Metric.SESSIONS_STARTED) == 1 and len(fed.metrics) == 1


def test_a_user_message_without_an_interaction_id():
    """An older CLI's message without interactionId still opens an interaction, named after the event."""
    log = SessionLog(SID)
    log.start()
    message = log.add("user.message", {"content": "hi"})
    log.answer()
    model = SessionModel(SID)
    fed = feed(model, log.events())
    fed.add(model.confirm_end())
    assert fed.one("invoke_agent copilot").attributes[A.COPILOT_INTERACTION_ID] == f"implicit-{message['id']}"
