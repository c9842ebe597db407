"""sessions.py: how interactions, turns and sessions end (idle inferred or live, task_complete,
session.error and the turns held for it, abort, shutdown, a crash), the live state, and input
the model must not believe (duplicates, ends of what is not open)."""

from __future__ import annotations

from copilot_otel.model import attrs as A
from copilot_otel.model.records import STATUS_ERROR, STATUS_OK, STATUS_UNSET
from copilot_otel.model.sessions import SessionModel
from copilot_otel.vocab import (
    CANCELLED,
    DUPLICATE_ID,
    END_ABORTED,
    END_ERROR,
    END_IDLE,
    END_INCOMPLETE,
    END_SHUTDOWN,
    END_TASK_COMPLETE,
    ERROR,
    IDLE,
    INCOMPLETE,
    OUT_OF_ORDER,
    SIGNAL_ERROR,
    SIGNAL_IDLE,
    SIGNAL_SHUTDOWN,
    SIGNAL_TASK_COMPLETE,
    WAITING_TOOL,
    WAITING_USER,
    WORKING,
    Metric,
)
from tests.support.events import MODEL, SessionLog
from tests.support.model import feed, label

SID = "session-1"
ROOT = "invoke_agent copilot"


def started(session_id: str = SID) -> SessionLog:
    log = SessionLog(session_id)
    log.start()
    log.user()
    return log


# ------------------------------------------------------------ the end of the loop, inferred or live

def test_a_final_answer_waits_for_confirmation():
    """After a turn that asked for no tool the loop looks finished, but the interaction is not
    exported until a quiet period confirms it; then it ends idle and counts one idle signal."""
    log = started()
    log.answer()
    model = SessionModel(SID)
    fed = feed(model, log.events())
    assert model.awaiting_confirmation
    assert fed.named(ROOT) == [] and fed.total(Metric.COMPLETION_SIGNALS, SIGNAL_IDLE) == 0
    fed.add(model.confirm_end())
    root = fed.one(ROOT)
    assert (root.status, root.attributes[A.COPILOT_INTERACTION_END]) == (STATUS_OK, END_IDLE)
    assert fed.total(Metric.COMPLETION_SIGNALS, SIGNAL_IDLE) == 1
    assert not model.awaiting_confirmation and model.quiescent


def test_a_turn_that_asked_for_tools_is_not_the_end():
    """A turn whose message requested tools leaves the loop running: nothing to confirm."""
    log = started()
    log.turn_start()
    log.usage(finish_reason="tool_calls")
    log.message(tools=["bash"])
    log.turn_end()
    model = SessionModel(SID)
    feed(model, log.events())
    assert not model.awaiting_confirmation
    assert model.confirm_end().spans == ()


def test_the_next_message_confirms_the_previous_end():
    """A new user message ends the previous interaction as it looked (idle), then opens its own trace."""
    log = started()
    log.answer()
    log.user("And now?")
    log.answer()
    log.shutdown()
    fed = feed(SessionModel(SID), log.events())
    roots = fed.named(ROOT)
    assert [r.attributes[A.COPILOT_INTERACTION_END] for r in roots] == [END_IDLE, END_IDLE]
    assert len({r.trace_id for r in roots}) == 2
    assert fed.total(Metric.COMPLETION_SIGNALS, SIGNAL_IDLE) == 2


def test_live_idle_waits_for_the_real_session_idle():
    """With a live subscriber, a quiet period confirms nothing: session.idle ends the loop."""
    log = started()
    log.answer()
    model = SessionModel(SID, live_idle=True)
    fed = feed(model, log.events())
    assert fed.add(model.confirm_end()).named(ROOT) == []
    log.idle()
    feed(model, log.events()[-1:], into=fed)
    assert fed.one(ROOT).attributes[A.COPILOT_INTERACTION_END] == END_IDLE
    assert fed.total(Metric.COMPLETION_SIGNALS, SIGNAL_IDLE) == 1


def test_task_complete_ends_the_loop():
    """session.task_complete counts its signal and ends the interaction as task_complete (one idle signal too)."""
    log = started()
    log.tool_turn(("task_complete", "call-done"))
    log.task_complete("Finished the task.")
    log.shutdown()
    fed = feed(SessionModel(SID), log.events())
    root = fed.one(ROOT)
    assert (root.status, root.attributes[A.COPILOT_INTERACTION_END]) == (STATUS_OK, END_TASK_COMPLETE)
    assert fed.total(Metric.COMPLETION_SIGNALS, SIGNAL_TASK_COMPLETE) == 1
    assert fed.total(Metric.COMPLETION_SIGNALS, SIGNAL_IDLE) == 1


def test_a_task_that_failed_is_marked():
    """session.task_complete with success: false marks the interaction."""
    log = started()
    log.task_complete(success=False)
    log.shutdown()
    assert feed(SessionModel(SID), log.events()).one(ROOT).attributes[A.COPILOT_TASK_SUCCESS] is False


def test_an_autopilot_nudge_is_a_new_marked_interaction():
    """A nudge ends the previous interaction, opens its own trace marked as a continuation, and is counted."""
    log = started()
    log.answer("Still working.")
    log.user(nudge=True)
    log.answer("Still working.")
    log.shutdown()
    fed = feed(SessionModel(SID), log.events())
    first, second = fed.named(ROOT)
    assert A.COPILOT_AUTOPILOT_CONTINUATION not in first.attributes
    assert second.attributes[A.COPILOT_AUTOPILOT_CONTINUATION] is True
    assert fed.named("turn 0")[1].attributes[A.COPILOT_AUTOPILOT_CONTINUATION] is True
    assert fed.total(Metric.AUTOPILOT_NUDGES) == 1


# ------------------------------------------------------------ session.error and the turns held for it

def provider_error() -> SessionLog:
    """The corpus' provider_error: a turn that made no call ends, then session.error (HTTP 500), shutdown."""
    log = started()
    log.turn_start()
    log.wait(20)  # five retries
    log.turn_end()
    log.error(error_type="query", status_code=500)
    log.shutdown()
    return log


def test_a_turn_without_a_call_is_held_for_the_error():
    """turn_end of a turn with no successful call exports nothing yet: the error that explains it comes next."""
    log = provider_error()
    events = log.events()
    fed = feed(SessionModel(SID), events[:-2])  # up to its turn_end
    assert fed.named("turn 0") == []
    start, end = (e for e in log.entries if e["type"].startswith("assistant.turn_"))
    assert fed.observed(Metric.TURN_DURATION, "main") == [(log.ns(end) - log.ns(start)) / 1e9]  # counted already


def test_session_error_fails_the_held_turn_and_the_interaction():
    """The held turn and the interaction end as errors with the error's type and HTTP status; the
    failed call and the error signal are counted, and the loop's end too."""
    log = provider_error()
    fed = feed(SessionModel(SID), log.events())
    error = next(e for e in log.entries if e["type"] == "session.error")["data"]
    turn, root = fed.one("turn 0"), fed.one(ROOT)
    for span in (turn, root):
        assert (span.status, span.attributes[A.ERROR_TYPE], span.attributes[A.HTTP_RESPONSE_STATUS_CODE]) == (
            STATUS_ERROR, error["errorType"], error["statusCode"])
    assert root.attributes[A.COPILOT_INTERACTION_END] == END_ERROR
    turn_end = next(e for e in log.entries if e["type"] == "assistant.turn_end")
    assert (turn.end_ns, root.end_ns) == (log.ns(turn_end), log.ns(next(e for e in log.entries
                                                                        if e["type"] == "session.error")))
    assert fed.total(Metric.LLM_CALLS, MODEL, ERROR) == 1
    assert fed.total(Metric.COMPLETION_SIGNALS, SIGNAL_ERROR) == 1
    assert fed.total(Metric.COMPLETION_SIGNALS, SIGNAL_IDLE) == 1


def test_a_held_turn_released_by_another_event_is_no_error():
    """A turn without a call whose next event is no session.error is exported as it was."""
    log = started()
    log.turn_start()
    log.turn_end()
    log.user("Next.")
    fed = feed(SessionModel(SID), log.events())
    turn = fed.one("turn 0")
    assert turn.status == STATUS_UNSET and A.ERROR_TYPE not in turn.attributes


def test_an_error_without_status_code():
    """An empty answer writes session.error without statusCode: an error all the same, no HTTP status."""
    log = started()
    log.turn_start()
    log.turn_end()
    log.error(error_type="empty_response", status_code=None)
    log.shutdown()
    root = feed(SessionModel(SID), log.events()).one(ROOT)
    assert (root.attributes[A.ERROR_TYPE], A.HTTP_RESPONSE_STATUS_CODE in root.attributes) == ("empty_response", False)


def test_a_live_error_counts_no_failed_call_twice():
    """Live, each failed attempt arrives as model.call_failure: session.error adds no failed call of its own."""
    log = started()
    log.turn_start()
    log.add("model.call_failure", {"model": MODEL, "statusCode": 500, "durationMs": 30}, ephemeral=True)
    log.turn_end()
    log.error()
    fed = feed(SessionModel(SID, live_idle=True), log.events())
    assert fed.total(Metric.LLM_CALLS, MODEL, ERROR) == 1
    assert fed.one(f"chat {MODEL}").attributes[A.ERROR_TYPE] == "500"


# ------------------------------------------------------------ abort, shutdown, a crash

def aborted_tool() -> SessionLog:
    """The corpus' abort_sigint_tool: a tool runs, the user presses Ctrl-C: abort, turn_end, shutdown."""
    log = started()
    log.calling(("bash", "call-sleep"))
    log.wait(3)
    log.abort("user_initiated")
    log.turn_end()
    log.shutdown()
    return log


def test_abort_cuts_off_the_running_tool():
    """The tool the abort cut off ends at the abort as an error; the interaction ends aborted, not failed."""
    log = aborted_tool()
    fed = feed(SessionModel(SID), log.events())
    abort = next(e for e in log.entries if e["type"] == "abort")
    tool = fed.one("execute_tool bash")
    assert (tool.end_ns, tool.status, tool.attributes[A.ERROR_TYPE], tool.status_message) == (
        log.ns(abort), STATUS_ERROR, END_ABORTED, "user_initiated")
    root = fed.one(ROOT)
    assert (root.status, root.attributes[A.COPILOT_INTERACTION_END], root.attributes[A.COPILOT_ABORT_REASON]) == (
        STATUS_UNSET, END_ABORTED, "user_initiated")
    assert fed.total(Metric.COMPLETION_SIGNALS, SIGNAL_IDLE) == 1
    assert fed.anomalies == []


def test_abort_cuts_off_a_running_subagent():
    """A sub-agent running at the abort ends then, cancelled (as its own late completion will say), with
    its open turn incomplete."""
    log = started()
    log.spawn("call-task", "agent-1")
    log.turn_start(agent="agent-1")
    log.turn_end()
    log.abort("user_abort")
    fed = feed(SessionModel(SID), log.events())
    sub = fed.one("invoke_agent general-purpose")
    child_turn = next(s for s in fed.named("turn 0") if s.parent_span_id == sub.span_id)
    assert (sub.attributes[A.ERROR_TYPE], child_turn.attributes[A.ERROR_TYPE]) == (CANCELLED, INCOMPLETE)


def test_the_cancelled_completion_of_a_cut_off_subagent_is_expected():
    """After an abort the CLI writes subagent.completed (cancelled: true) for the sub-agent it cut
    off (as the real CLI writes it): that is the expected order of a real log, not an end of something never started."""
    log = started()
    log.spawn("call-task", "agent-1", prompt=False)
    log.turn_end()
    log.abort("user_abort")
    log.subagent_completed("call-task", "agent-1", cancelled=True)
    fed = feed(SessionModel(SID), log.events())
    assert fed.anomalies == []


def test_shutdown_mid_turn_leaves_everything_incomplete():
    """A shutdown while a turn and its tool run ends both, and the interaction, as incomplete errors."""
    log = started()
    log.calling(("bash", "call-1"))
    shutdown = log.shutdown()
    model = SessionModel(SID)
    fed = feed(model, log.events())
    for name in ("execute_tool bash", "turn 0", ROOT):
        span = fed.one(name)
        assert (span.status, span.attributes[A.ERROR_TYPE], span.end_ns) == (STATUS_ERROR, INCOMPLETE,
                                                                             log.ns(shutdown))
    assert fed.one(ROOT).attributes[A.COPILOT_INTERACTION_END] == END_INCOMPLETE
    assert fed.total(Metric.COMPLETION_SIGNALS, SIGNAL_SHUTDOWN) == 1
    assert fed.total(Metric.COMPLETION_SIGNALS, SIGNAL_IDLE) == 0
    assert (model.ended, model.state, model.quiescent) == (END_SHUTDOWN, IDLE, True)


def test_finish_closes_what_a_crash_left_open():
    """finish() (the process is gone, or a replay reached the end) ends open work as incomplete at the last event."""
    log = started()
    last = log.calling(("bash", "call-1"))
    model = SessionModel(SID)
    fed = feed(model, log.events())
    assert fed.named(ROOT) == []
    fed.add(model.finish())
    assert {label(span) for span in fed.spans if span.attributes.get(A.ERROR_TYPE) == INCOMPLETE} == {
        "execute_tool bash", "turn 0", ROOT}
    assert {fed.one(name).end_ns for name in ("execute_tool bash", "turn 0", ROOT)} == {log.ns(last)}
    assert model.ended == END_INCOMPLETE
    assert model.finish().spans == ()  # once is enough


def test_finish_of_a_loop_that_looked_finished_ends_it_normally():
    """At the end of a replayed file, an interaction waiting for confirmation ends idle, not incomplete."""
    log = started()
    log.answer()
    model = SessionModel(SID)
    fed = feed(model, log.events())
    fed.add(model.finish())
    assert fed.one(ROOT).attributes[A.COPILOT_INTERACTION_END] == END_IDLE


def test_a_session_resumed_after_its_shutdown():
    """session.resume after a shutdown makes the session live again, and its new interaction is exported."""
    log = started()
    log.answer()
    log.shutdown()
    log.resume()
    log.user("Again.")
    log.turn_start()
    model = SessionModel(SID)
    fed = feed(model, log.events())
    assert (model.ended, model.state) == (None, WORKING)
    assert fed.total(Metric.SESSIONS_STARTED) == 1


# ------------------------------------------------------------ live state

def test_live_states_follow_the_events():
    """working in a turn, waiting_tool while a tool runs, waiting_user while a permission prompt waits, idle after."""
    log = started()
    model = SessionModel(SID)
    states = []

    def step(write) -> None:
        write()
        feed(model, log.events()[-1:])
        states.append(model.state)

    step(log.turn_start)
    step(lambda: log.tool_start("bash", "call-1"))
    step(log.permission_requested)
    step(log.permission_completed)
    step(lambda: log.tool_complete("call-1"))
    step(log.turn_end)
    assert states == [WORKING, WAITING_TOOL, WAITING_USER, WAITING_TOOL, WORKING, IDLE]
    assert model.mid_turn is False and model.last_event_ns == log.ns(log.entries[-1])


def test_where_an_open_interaction_starts():
    """The resume position of a running interaction is its first event's offset and line (for the checkpoint)."""
    log = started()
    log.turn_start()
    events = log.events()
    model = SessionModel(SID)
    assert model.open_interaction_start is None
    feed(model, events)
    user = events[1]
    assert model.open_interaction_start == (user.offset, user.line - 1)


def test_open_spans_of_a_running_session():
    """inspect of a live session shows the spans still open, marked running, ending at the last event."""
    log = started()
    log.turn_start()
    last = log.tool_start("bash", "call-1")
    model = SessionModel(SID)
    feed(model, log.events())
    spans = model.open_spans()
    assert sorted(label(s) for s in spans) == sorted(["execute_tool bash", "turn 0", ROOT])
    assert all(s.attributes[A.COPILOT_RUNNING] is True and s.end_ns == log.ns(last) for s in spans)


# ------------------------------------------------------------ input not to believe

def test_a_duplicate_event_is_an_anomaly_and_changes_nothing():
    """The same event id twice (a log copied into itself): the copy is reported, not applied."""
    log = started()
    log.turn_start()
    tool = log.tool_start("bash", "call-1")
    log.repeat(tool)
    model = SessionModel(SID)
    fed = feed(model, log.events())
    assert [(a.kind, a.event_type, a.event_id) for a in fed.anomalies] == [(DUPLICATE_ID, "tool.execution_start",
                                                                             tool["id"])]
    assert fed.spans == [] and model.seen(tool["id"])


def test_duplicates_after_a_shutdown_are_still_duplicates():
    """A whole log appended to itself after its shutdown exports nothing twice."""
    log = started()
    log.answer()
    log.shutdown()
    once = len(log.entries)
    for entry in list(log.entries[:once]):
        log.repeat(entry)
    fed = feed(SessionModel(SID), log.events())
    assert len(fed.anomalies) == once
    assert len(fed.named(ROOT)) == 1


def test_ends_of_what_is_not_open_are_anomalies():
    """A tool completion without its start, a turn_end without its turn, a sub-agent end without its
    start: each reported as out of order, nothing exported."""
    log = started()
    log.tool_complete("never-started")
    log.turn_end(turn="0")
    log.subagent_completed("never-started", "agent-1")
    fed = feed(SessionModel(SID), log.events())
    assert [(a.kind, a.event_type) for a in fed.anomalies] == [
        (OUT_OF_ORDER, "tool.execution_complete"), (OUT_OF_ORDER, "assistant.turn_end"),
        (OUT_OF_ORDER, "subagent.completed")]
    assert fed.spans == []


def test_a_subagent_may_end_after_its_task_call():
    """subagent.completed a few ms after the task call's completion (as the real CLI writes it) is no anomaly; the
    sub-agent's span ends at its own completion (issue 23), and the task call, held for it, ends with it."""
    log = started()
    log.spawn("call-task", "agent-1", prompt=False)
    task_done = log.tool_complete("call-task")
    completed = log.subagent_completed("call-task", "agent-1")
    fed = feed(SessionModel(SID), log.events())
    assert fed.anomalies == []
    assert fed.one("invoke_agent general-purpose").end_ns == log.ns(completed) > log.ns(task_done)
    assert fed.one("execute_tool task").end_ns == log.ns(completed)
    assert fed.one("execute_tool task").status == 1  # ok, as its completion said


def test_a_steering_message_stays_in_the_running_interaction():
    """A message typed while a tool runs (delivery: steering) carries the running interaction's id: no new trace."""
    log = started()
    log.turn_start()
    log.tool_start("bash", "call-1")
    log.user("Also check the tests.", interaction=log.interaction)
    log.tool_complete("call-1")
    log.turn_end()
    log.shutdown()
    fed = feed(SessionModel(SID), log.events())
    assert len(fed.named(ROOT)) == 1


def test_a_subagent_error_is_no_end_of_the_loop():
    """session.error of a sub-agent counts its failed call but neither an error signal nor the end of the loop."""
    log = started()
    log.turn_start()
    log.tool_start("task", "call-task")
    log.subagent_started("call-task", "agent-1")
    log.subagent_prompt("agent-1")
    log.turn_start(agent="agent-1")
    log.error(agent="agent-1")
    model = SessionModel(SID)
    fed = feed(model, log.events())
    assert fed.total(Metric.LLM_CALLS, MODEL, ERROR) == 1
    assert fed.total(Metric.COMPLETION_SIGNALS, SIGNAL_ERROR) == 0
    assert not model.awaiting_confirmation and fed.named(ROOT) == []


def test_calls_that_share_an_api_call_id_are_each_counted():
    """Providers may repeat a response id (as the real CLI writes it): two usage records of one log are two LLM
    calls even when their apiCallId is the same."""
    log = started()
    log.answer(api_call_id="chatcmpl-reused")
    log.user("Again.")
    log.answer(api_call_id="chatcmpl-reused")
    log.shutdown()
    fed = feed(SessionModel(SID), log.events())
    assert len(fed.named(f"chat {MODEL}")) == 2
    assert fed.total(Metric.LLM_CALLS, MODEL, "success") == 2


def test_a_turn_end_of_another_turn_id_is_out_of_order():
    """turn_end naming another turn than the open one does not close the open turn."""
    log = started()
    log.turn_start()
    log.turn_end(turn="7")
    model = SessionModel(SID)
    fed = feed(model, log.events())
    assert [a.kind for a in fed.anomalies] == [OUT_OF_ORDER]
    assert model.state == WORKING


def test_a_turn_started_twice_ends_the_first_as_incomplete():
    """A turn_start while the agent's turn is open: the open one never ended."""
    log = started()
    first = log.turn_start()
    log.turn_start()
    fed = feed(SessionModel(SID), log.events())
    turn = fed.one("turn 0")
    assert (turn.attributes[A.ERROR_TYPE], turn.start_ns) == (INCOMPLETE, log.ns(first))
