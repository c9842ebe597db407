"""The pure session state machine: one event in -> a Step (finished spans, metric updates, anomalies).

A :class:`SessionModel` follows one Copilot session. It knows which interaction, turn,
LLM call, tool and sub-agent are open, closes their spans from the events' own
timestamps, infers the end of the agent loop (the file never holds ``assistant.idle``)
and reports the session's live state. It touches no clock, file or socket.
Tools and sub-agents are kept by :class:`~copilot_otel.model.tools.ToolBook`, LLM calls by
:class:`~copilot_otel.model.calls.CallBook`; what each span carries is built in spanattrs.
"""

from __future__ import annotations

from collections.abc import Callable

from msgspec.structs import replace

from ..decode.events import Event
from ..decode.lines import type_set
from ..decode.normalize import Normalizer
from ..decode.payloads import (
    SessionError,
    SessionFacts,
    SubagentEnd,
    SubagentStart,
    TaskComplete,
    ToolEnd,
    ToolStart,
    Usage,
    UserMessage,
    as_str,
    permission_result,
    request_id,
    requested_tools,
    user_request,
)
from ..vocab import (
    DUPLICATE_ID,
    END_ABORTED,
    END_IDLE,
    END_INCOMPLETE,
    END_SHUTDOWN,
    ERROR,
    IDLE,
    INCOMPLETE,
    OUT_OF_ORDER,
    SIGNAL_ERROR,
    SIGNAL_SHUTDOWN,
    SIGNAL_TASK_COMPLETE,
    UNKNOWN_MODEL,
    USER_REQUESTS,
    WAITING_TOOL,
    WAITING_USER,
    WORKING,
    Metric,
)
from . import attrs as A
from . import spanattrs
from .calls import CallBook
from .changes import CodeChanges
from .compaction import CompactionBook
from .hooks import HookBook
from .interactions import AgentLoop
from .logs import LOG_EVENT_TYPES, Context, EventLog
from .messages import Transcript
from .open_spans import InteractionSummary, Outbox
from .options import ModelOptions
from .records import SpanEvent, SpanRecord, Step
from .summary import SessionSummary, Tally, make_summary
from .tools import ToolBook


class SessionModel:
    """Follows one session's events and turns them into spans and metric updates."""

    def __init__(self, session_id: str, options: ModelOptions = ModelOptions(), *, live_idle: bool = False,
                 summaries: bool = True, metrics: bool = True) -> None:
        self.session_id = session_id
        # With a live subscriber the real session.idle / assistant.idle ends the loop.
        self.live_idle = live_idle
        self.facts = SessionFacts(None, None, None)  # session.start / resume / model_change, merged
        self.last_event_ns = 0
        self.ended: str | None = None  # END_SHUTDOWN or END_INCOMPLETE once the session is over
        self._capture = spanattrs.Capture(options.capture_content, options.content_max_chars)
        self._out = Outbox(keep_metrics=metrics)
        self.tally = Tally()
        self._talk = Transcript(self._capture, self._out.span)
        self._book = ToolBook(session_id, self._capture, self._out, self.tally, self._talk)
        self._calls = CallBook(session_id, self._out, self.tally, self._talk)
        self._loop = AgentLoop(session_id, self._out, self._book, self.tally, self._talk, summaries=summaries)
        self._compactions = CompactionBook(session_id, self._out)
        self._hooks = HookBook(session_id, self._out, self._capture)
        self._changes = CodeChanges(self._out, self.tally)
        # Requests waiting for the user (permission, input, ...): id -> (what is asked, when, the tool call it gates).
        self._requests: dict[str, tuple[str, int, str | None]] = {}
        self._seen: set[int] = set()  # hashes of event ids, kept for the life of the model (one file generation)
        self._normalize = Normalizer()  # the CLI-version layer: any version's events in the shape read here
        self._logs = EventLog(session_id, self._capture) if options.logs else None  # log records of the events
        self._call_event: str | None = None  # the id of the last event an LLM call's span was made from

    # ------------------------------------------------------------ public

    def feed(self, event: Event) -> Step:
        """Apply one event; return the spans it closed, the metric updates and anomalies it causes."""
        key = hash(event.id)
        if key in self._seen:  # the same event twice (a log copied into itself, a replayed stream)
            self._out.anomaly(DUPLICATE_ID, event)
            return self._out.take()
        self._seen.add(key)
        logs = self._logs
        for canonical in self._normalize(event):
            before = self.span_context(canonical) if logs is not None else None
            self._apply(canonical)
            if logs is not None:
                logs.after(canonical, before, self.span_context(canonical), event,
                           made_call=self._call_event == canonical.id)
        return self._take()

    def _take(self) -> Step:
        """What the model made since the last take: spans, metric updates, anomalies, and log records (a hook's
        once its span is placed)."""
        step = self._out.take()
        placed = self._hooks.take_placed()
        logs = self._logs
        if logs is not None:
            logs.place(placed)
            if logs.pending:
                step = replace(step, logs=logs.take())
        return step

    def _apply(self, event: Event) -> None:
        if event.type == "abort":
            main = self._loop.main  # a turn ended just before the abort, or still open (logged in either order)
            open_turn = [(main, main.turn)] if main.turn is not None and not self._book else []
            self._calls.cut_off(event, [*self._loop.held, *open_turn], self.facts.model)
        if self._loop.held and event.type != "session.error":
            self._loop.release_held()
        if event.type == "session.resume" and self.ended is None and not self.quiescent:
            # The process that held the session died with work open (it resumes now): that work ended
            # at the last event before the crash, as it does when the daemon sees the process die.
            self._settle(END_INCOMPLETE)
        if self.ended is not None and event.type != "session.shutdown":
            self.ended = None  # resumed after a shutdown or a crash
        self.tally.at_ns = event.timestamp_ns  # what this event counts is counted in its slot
        if self._talk.enabled and event.type != "assistant.message" and event.type in _HANDLERS:
            agent = self._loop.agents.get(event.agent_id)  # its last call's answer did not come: the call goes as is
            if agent is not None:
                self._talk.release(agent.talk)
        if event.timestamp_ns > self.last_event_ns:
            if not self.last_event_ns:
                self.tally.first_event_ns = event.timestamp_ns
            self.last_event_ns = event.timestamp_ns
        handler = _HANDLERS.get(event.type)
        if handler is not None:
            handler(self, event)

    def span_context(self, event: Event) -> Context | None:
        """(trace id, span id, start, tool name) of the open span ``event`` is about, read without changing
        anything: its tool call's or its compaction's, else its agent's turn or invoke span, else the running
        interaction's root (None: nothing is open)."""
        call_id = event.tool_call_id
        if call_id is None and event.type.endswith(".requested"):
            call_id = user_request(event).call_id
        entry = self._book.tools.get(call_id) if call_id else None
        attempt = event.data.get("compactionAttemptId")
        span = entry[0] if entry is not None else (
            self._compactions.open.get(attempt) if isinstance(attempt, str) else None)
        if span is None:
            agent = self._loop.agents.get(event.agent_id)
            if agent is not None:
                span = agent.turn.span if agent.turn is not None else agent.invoke_span
            if span is None and self._loop.current is not None:
                span = self._loop.current.root
        if span is None:
            return None
        tool = span.attributes.get(A.GEN_AI_TOOL_NAME) if entry is not None else None
        return span.trace_id, span.span_id, span.start_ns, tool if isinstance(tool, str) else None

    def seen(self, event_id: str) -> bool:
        """True if an event with this id was already applied."""
        return hash(event_id) in self._seen

    @property
    def awaiting_confirmation(self) -> bool:
        """The loop looks finished (final answer, task_complete, error) and nothing is open."""
        return self.confirmable_end is not None

    @property
    def confirmable_end(self) -> str | None:
        """How the loop looks to have ended, while it awaits confirmation (see awaiting_confirmation); else None."""
        current = self._loop.current
        if (current is None or self._book or self._loop.main.turn is not None or self._loop.lingering
                or self._compactions.open):
            return None
        return current.pending_end

    def confirm_end(self) -> Step:
        """The caller saw no new event for a quiet period: the agent loop really went idle."""
        if self.live_idle:
            return self._take()  # the live stream says when the loop really ended
        self._loop.release_held()
        if (how := self.confirmable_end) is not None:
            self._end(how)
        return self._take()

    def finish(self, reason: str = END_INCOMPLETE) -> Step:
        """The session is over (end of a replayed file, or its process is gone): close everything.

        A loop that looked finished ends normally; anything still open ends as incomplete.
        """
        if self.ended is None:
            self._settle(reason)
        return self._take()

    def open_spans(self, end_ns: int | None = None) -> list[SpanRecord]:
        """Snapshots of the spans still open, marked running, ending at ``end_ns`` (default: the last
        event: `inspect` of a live session ends them now, the daemon when it finds the session stuck)."""
        return self._loop.snapshots(self.last_event_ns if end_ns is None else end_ns)

    @property
    def state(self) -> str:
        """The session's live state: waiting_user, waiting_tool, working or idle."""
        if self._requests:
            return WAITING_USER
        if self._book.tools:
            return WAITING_TOOL
        if self._loop.turns_open():
            return WORKING
        return IDLE

    @property
    def quiescent(self) -> bool:
        """Nothing is open: no interaction, turn, tool or sub-agent (the model holds no span)."""
        return self._loop.current is None and not self._work_open

    @property
    def _work_open(self) -> bool:
        """A tool, a sub-agent or a turn is still running."""
        return bool(self._book) or bool(self._compactions.open) or self._loop.turns_open() or bool(self._hooks.open)

    @property
    def mid_turn(self) -> bool:
        """True while a turn or tool is open (a process dying now abandons work)."""
        return self.state != IDLE

    @property
    def open_interaction_start(self) -> tuple[int, int] | None:
        """(byte offset, line number - 1) of the first event of the interaction still running, if any."""
        current = self._loop.current
        if current is None or current.start_offset < 0:
            return None
        return current.start_offset, current.start_line - 1

    @property
    def trace_id(self) -> int | None:
        """The trace of the interaction running now, else of the last one that ended (None: none yet)."""
        current = self._loop.current
        if current is not None:
            return current.root.trace_id
        return self._loop.last_ended[1] if self._loop.last_ended else None

    def summary(self) -> SessionSummary:
        """The session at a glance, frozen (any thread may read it)."""
        oldest = self._book.oldest_tool()
        waiting = (str(oldest.attributes[A.GEN_AI_TOOL_NAME]), oldest.start_ns) if oldest is not None else (None, 0)
        current = self._loop.current
        return make_summary(self.session_id, self.state, self.ended, self.facts, self.tally, self.last_event_ns,
                            waiting, running_tools=len(self._book.tools),
                            confirms=self.confirmable_end,
                            cut_off_end=(current.pending_end or END_INCOMPLETE) if current is not None else None,
                            asking=self.asking)

    @property
    def interactions(self) -> list[InteractionSummary]:
        """The interactions that ended so far (kept only with summaries=True, for `inspect`)."""
        return self._loop.summaries or []

    def _end(self, how: str) -> None:
        self._loop.end(how, self.last_event_ns)

    def _settle(self, reason: str) -> None:
        """End the session: a loop that looked finished ends normally, anything still open as incomplete."""
        self._loop.release_held()
        if (how := self.confirmable_end) is not None:
            self._end(how)
        self._close_everything(reason)

    def _close_everything(self, reason: str) -> None:
        self._loop.release_held()
        had_open = self._work_open
        self._hooks.finish(self.last_event_ns)
        self._loop.close_all(self.last_event_ns)
        self._compactions.cut_off(self.last_event_ns, INCOMPLETE)
        self._requests.clear()
        if self._loop.current is not None:
            # Work cut off (a shutdown or a crash mid-turn) makes the interaction incomplete too.
            self._end(END_INCOMPLETE if reason == END_INCOMPLETE or had_open else reason)
        self.ended = reason
        # The id sets stay: a log copied into itself after its shutdown is still a duplicate.

    # ------------------------------------------------------------ session and interaction events

    @property
    def model(self) -> str | None:
        return self.facts.model

    @property
    def cwd(self) -> str | None:
        return self.facts.cwd

    @property
    def cli_version(self) -> str | None:
        return self.facts.cli_version

    def _on_session_start(self, event: Event) -> None:
        self.facts = self._loop.facts = self.facts.merged(SessionFacts.of(event))
        self._out.shared.update(spanattrs.vcs(self.facts))
        self._out.repository = self.facts.repository or ""
        if event.type == "session.start":
            self._out.count(Metric.SESSIONS_STARTED)
        else:  # a new process: the totals it will write start from here
            self._calls.counts.new_process()
            self._changes.new_process()

    def _on_model_change(self, event: Event) -> None:
        model = as_str(event.data.get("newModel")) or as_str(event.data.get("model"))
        if event.agent_id is None and model:
            self.facts = self._loop.facts = replace(self.facts, model=model)

    def _on_user_message(self, event: Event) -> None:
        message = UserMessage.of(event)
        if not message.for_subagent:  # a sub-agent's prompt: its work hangs under the task call
            self._loop.prompt(event, message, self.last_event_ns)
            if self._loop.current is not None:
                self._hooks.adopt(self._loop.current.root)  # the hooks that ran on this prompt
        elif event.agent_id is not None and self._talk.enabled:
            self._talk.user(self._loop.agent(event).talk, message.text, opening=True)

    def _on_system_message(self, event: Event) -> None:
        if self._talk.enabled:
            self._talk.system(self._loop.agent(event).talk, event.data.get("content"))

    def _on_turn_start(self, event: Event) -> None:
        self._loop.start_turn(event)

    def _on_turn_end(self, event: Event) -> None:
        self._loop.end_turn(event)

    def _on_assistant_message(self, event: Event) -> None:
        if self._talk.enabled:
            self._talk.answered(self._loop.agent(event).talk, event.data.get("content"), event.data.get("toolRequests"))
        self._loop.answer(event, requested_tools(event))

    def _on_task_complete(self, event: Event) -> None:
        if event.agent_id is None:
            self._out.count(Metric.COMPLETION_SIGNALS, SIGNAL_TASK_COMPLETE)
            task = TaskComplete.of(event)
            self._loop.task_complete(task, self._capture.text(task.summary))

    def _on_session_error(self, event: Event) -> None:
        error = SessionError.of(event)
        error = replace(error, message=self._capture.text(error.message))  # content capture decides
        agent = self._loop.agent(event)
        turns = [agent.turn] if agent.turn is not None else [turn for held, turn in self._loop.held if held is agent]
        # An LLM call failed, unless the turn it ended got its answer (an empty one: "No response was returned").
        # Live, each failed attempt arrives as model.call_failure instead.
        if not self.live_idle and (error.status_code is not None or not any(t.llm_calls for t in turns)):
            self.tally.llm_errors += 1
            self._out.count(Metric.LLM_CALLS, self.model or UNKNOWN_MODEL, ERROR)
        if event.agent_id is None:  # a sub-agent's error is its parent's failed task call, not a loop end
            self._out.count(Metric.COMPLETION_SIGNALS, SIGNAL_ERROR)
        self._loop.fail(event, agent, error)

    def _on_abort(self, event: Event) -> None:
        """The user stopped the loop: what is still running was cut off; the loop ends (the CLI goes idle)."""
        if event.agent_id is None:
            self._loop.abort(event, as_str(event.data.get("reason")) or END_ABORTED)

    def _on_user_request(self, event: Event) -> None:
        asked = user_request(event)
        self._requests[request_id(event) or event.id] = (asked.describe(self._book.name_of(asked.call_id)),
                                                         event.timestamp_ns, asked.call_id)

    def _on_user_answer(self, event: Event) -> None:
        answered = request_id(event)
        done = [self._requests.pop(answered)] if answered in self._requests else []
        if not answered:
            done, self._requests = list(self._requests.values()), {}
        for _what, asked_ns, call_id in done:
            if event.type == "permission.completed":
                self._book.waited_on_user(call_id, asked_ns, event.timestamp_ns, permission_result(event))

    @property
    def asking(self) -> tuple[str, int] | None:
        """What the session waits for a person to answer (``permission for bash``, ``input``), and since when."""
        first = min(self._requests.values(), key=lambda r: r[1], default=None)
        return (first[0], first[1]) if first is not None else None

    def _on_shutdown(self, event: Event) -> None:
        cumulative = self._normalize.cumulative_totals
        # Per-call premium requests (and, on CLIs that log no usage per call, tokens) are checked against the totals.
        self._calls.counts.reconcile(event.data.get("modelMetrics"), cumulative=cumulative,
                                     tokens=self._normalize.synthesizes_calls)
        self._calls.credits.shutdown(event.data.get("modelMetrics"), cumulative=cumulative)
        self._changes.shutdown(event.data, cumulative=cumulative, model=self.model or UNKNOWN_MODEL)
        self._calls.counts.new_process()  # a resume starts a new process
        self._changes.new_process()
        if (how := self.confirmable_end) is not None:
            self._end(how)
        self._out.count(Metric.COMPLETION_SIGNALS, SIGNAL_SHUTDOWN)
        self._close_everything(END_SHUTDOWN)

    def _on_live_idle(self, event: Event) -> None:
        if self.live_idle and event.agent_id is None and self._loop.current is not None:
            self._end(self._loop.current.pending_end or END_IDLE)

    def _on_notification(self, event: Event) -> None:
        """system.notification: about a background sub-agent of the running interaction, the loop goes on in it
        (the CLI reads the agent and answers there); else, when it comes after the loop ended (a background shell
        finished), the work the CLI does about it is new work of that interaction, with a root of its own."""
        if event.agent_id is not None:
            return
        self._loop.notified = True
        kind = event.data.get("kind")
        agent_id = kind.get("agentId") if isinstance(kind, dict) and str(kind.get("type", "")).startswith("agent_") \
            else None
        if agent_id is not None:
            if isinstance(agent_id, str) and self._loop.resume_for(agent_id):
                if self._loop.current is not None:
                    return
            else:  # about an agent this log never started
                self._out.anomaly(OUT_OF_ORDER, event)
        current = self._loop.current
        if self.awaiting_confirmation or (current is None and self._loop.last_ended):
            self._loop.continue_after(event)

    def _on_compaction_start(self, event: Event) -> None:
        """A compaction during the loop hangs under its interaction; a /compact between interactions (the loop
        ended) is a root of its own and does not stretch the interaction before it."""
        if event.data.get("trigger") == "manual":
            self._idle_now()
            if self._loop.current is None:
                self._compactions.start(event, None)
                return
        self._compactions.start(event, self._loop.interaction_for(event).root)

    def _on_compaction_call(self, event: Event) -> None:
        self._compactions.model_call(event)

    def _on_compaction_complete(self, event: Event) -> None:
        end_ns = self._compactions.complete(event)
        current = self._loop.current
        if end_ns is not None and current is not None and event.data.get("trigger") != "manual":
            current.last_end_ns = max(current.last_end_ns, end_ns)  # the root never ends before it

    # ------------------------------------------------------------ LLM calls, tools and sub-agents

    def _on_usage_record(self, event: Event) -> None:
        """One LLM call from the file (session.usage_record) or the live stream (assistant.usage)."""
        usage = Usage.of(event)
        if usage is not None and self._calls.first_report(event, usage):
            self._llm_call(event, usage)

    def _on_usage_checkpoint(self, event: Event) -> None:
        self._calls.credits.checkpoint(event.data)

    def _on_call_start(self, event: Event) -> None:
        self._calls.started(event)

    def _on_call_finished(self, event: Event) -> None:
        usage = self._calls.finished(event)
        if usage is not None:
            self._llm_call(event, usage)

    def _on_call_failure(self, event: Event) -> None:
        usage, error = self._calls.failed(event)
        self._llm_call(event, usage, error=error)

    def _llm_call(self, event: Event, usage: Usage, *, error: str | None = None) -> None:
        self._call_event = event.id
        agent = self._loop.agent(event)
        current = self._loop.current
        self._calls.record(event, usage, agent, self._loop.work_parent(event, agent), self.model, error=error,
                           nudge=current is not None and current.autopilot)

    def _on_tool_start(self, event: Event) -> None:
        view = ToolStart.of(event)
        if view.call_id is not None:
            agent = self._loop.agent(event)
            self._book.start_tool(event, view, agent, self._loop.work_parent(event, agent))

    def _on_tool_complete(self, event: Event) -> None:
        self._book.complete_tool(event, ToolEnd.of(event))

    def _on_subagent_started(self, event: Event) -> None:
        view = SubagentStart.of(event)
        if view.call_id is not None:
            self._loop.start_subagent(event, view)

    def _idle_now(self) -> None:
        """The user acts outside the agent loop (a command, the session's end): a loop that looked finished ended."""
        if (how := self.confirmable_end) is not None:
            self._end(how)

    def _on_hook_start(self, event: Event) -> None:
        """hook.start: under the work it runs in; a prompt's hooks wait for its interaction; one outside any
        interaction is a root of its own."""
        if self._hooks.before_prompt(event):
            self._hooks.start(event, None, wait=True)
            return
        if event.agent_id is None and event.data.get("hookType") != "agentStop":
            self._idle_now()  # agentStop decides the loop's end; any other hook after it runs outside the loop
        parent = None
        if event.agent_id is not None or self._loop.current is not None:
            parent = self._loop.work_parent(event, self._loop.agent(event))
        self._hooks.start(event, parent, wait=False)

    def _on_hook_end(self, event: Event) -> None:
        agent = self._loop.agents.get(event.agent_id)
        current = self._loop.current
        blocked = agent.invoke_span if agent is not None else None
        tools = {call_id: span for call_id, (span, _agent) in self._book.tools.items()}
        if self._hooks.end(event, tools, blocked) is not None and event.agent_id is None and current is not None \
                and not self._hooks.before_prompt(event):
            current.last_end_ns = max(current.last_end_ns, event.timestamp_ns)  # its root never ends before it

    def _on_skill_invoked(self, event: Event) -> None:
        """skill.invoked: an event on the span the agent works in (as the CLI's own export has it)."""
        if event.agent_id is None and self._loop.current is None:
            return
        name = as_str(event.data.get("name")) or "unknown"
        attributes: dict = {A.GEN_AI_SKILL_NAME: name}
        for key, attr in (("trigger", A.COPILOT_SKILL_TRIGGER), ("source", A.COPILOT_SKILL_SOURCE)):
            if (value := as_str(event.data.get(key))) is not None:
                attributes[attr] = value
        parent = self._loop.work_parent(event, self._loop.agent(event))
        parent.events.append(SpanEvent(A.COPILOT_SKILL_INVOKED, event.timestamp_ns, attributes))

    def _on_user_tool(self, event: Event) -> None:
        """tool.user_requested: a command the user ran (`!cmd`); its completion comes with no execution_start."""
        view = ToolStart.of(event)
        if view.call_id is None:
            self._out.anomaly(OUT_OF_ORDER, event)
            return
        if event.agent_id is None:
            self._idle_now()
        current = self._loop.current
        parent = self._loop.work_parent(event, self._loop.main) if current is not None else None
        self._book.start_tool(event, view, self._loop.main, parent)

    def _on_agent_selected(self, event: Event) -> None:
        self._loop.select_agent(event)

    def _on_subagent_end(self, event: Event) -> None:
        view = SubagentEnd.of(event)
        span = self._book.end_subagent(event, view)
        if span is not None:
            self._loop.close_agent_turns(span, event.timestamp_ns)
            self._book.close_subagent(span, event, view)
            self._loop.background_done(event.agent_id, event.timestamp_ns)


_HANDLERS: dict[str, Callable[[SessionModel, Event], None]] = {
    "session.start": SessionModel._on_session_start,
    "session.resume": SessionModel._on_session_start,
    "session.model_change": SessionModel._on_model_change,
    "user.message": SessionModel._on_user_message,
    "system.message": SessionModel._on_system_message,
    "assistant.turn_start": SessionModel._on_turn_start,
    "assistant.turn_end": SessionModel._on_turn_end,
    "session.usage_record": SessionModel._on_usage_record,
    "session.usage_checkpoint": SessionModel._on_usage_checkpoint,
    "assistant.usage": SessionModel._on_usage_record,
    "model.call_start": SessionModel._on_call_start,
    "model.call_finished": SessionModel._on_call_finished,
    "model.call_failure": SessionModel._on_call_failure,
    "assistant.message": SessionModel._on_assistant_message,
    "tool.execution_start": SessionModel._on_tool_start,
    "tool.execution_complete": SessionModel._on_tool_complete,
    "subagent.started": SessionModel._on_subagent_started,
    "subagent.completed": SessionModel._on_subagent_end,
    "subagent.failed": SessionModel._on_subagent_end,
    "subagent.selected": SessionModel._on_agent_selected,
    "hook.start": SessionModel._on_hook_start,
    "hook.end": SessionModel._on_hook_end,
    "skill.invoked": SessionModel._on_skill_invoked,
    "tool.user_requested": SessionModel._on_user_tool,
    "subagent.deselected": SessionModel._on_agent_selected,
    "session.task_complete": SessionModel._on_task_complete,
    "session.error": SessionModel._on_session_error,
    **{f"{kind}.requested": SessionModel._on_user_request for kind in USER_REQUESTS},
    **{f"{kind}.completed": SessionModel._on_user_answer for kind in USER_REQUESTS},
    "session.shutdown": SessionModel._on_shutdown,
    "abort": SessionModel._on_abort,
    "session.idle": SessionModel._on_live_idle,
    "system.notification": SessionModel._on_notification,
    "session.compaction_start": SessionModel._on_compaction_start,
    "session.compaction_complete": SessionModel._on_compaction_complete,
    "model.model_call_started": SessionModel._on_compaction_call,
    "model.model_call_success": SessionModel._on_compaction_call,
    "assistant.idle": SessionModel._on_live_idle,
}
HANDLED_TYPES = frozenset(_HANDLERS)  # event types the model reads; every other type only advances positions
CONTENT_TYPES = frozenset({"system.message"})  # read only with content capture on: the system prompt, most of a log
READ_TYPES = type_set(HANDLED_TYPES - CONTENT_TYPES)  # as decode_line's ``keep``: lines of other types are skimmed
_CAPTURE_READ_TYPES = type_set(HANDLED_TYPES)


_LOG_TYPES = type_set(LOG_EVENT_TYPES)


def read_types(options: ModelOptions) -> frozenset[bytes]:
    """The event types a model with these options reads (decode_line's ``keep``)."""
    types = _CAPTURE_READ_TYPES if options.capture_content else READ_TYPES
    return types | _LOG_TYPES if options.logs else types
