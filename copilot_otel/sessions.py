"""The pure session state machine: one event in -> finished spans and metric updates out.

A :class:`SessionModel` follows one Copilot session. It knows which interaction,
turn, LLM call, tool and sub-agent are open, closes their spans from the events'
own timestamps, infers the end of the agent loop (the file never holds
``assistant.idle``) and reports the session's live state. It touches no clock,
file or socket: callers pass ``now`` in.
"""

from __future__ import annotations

from typing import Any, Iterable, Union

from . import attrs as A
from .events import MAIN_AGENT, Event
from .records import KIND_CLIENT, KIND_INTERNAL, STATUS_OK, MetricUpdate, SpanRecord, span_id_for, trace_id_for
from .spans import (
    Agent,
    Interaction,
    InteractionSummary,
    OpenSpan,
    Turn,
    as_num,
    as_str,
    chat_attributes,
    to_json,
)

Output = Union[SpanRecord, MetricUpdate]

# Live states, the label values of copilot_sessions{state} that the model itself knows.
WORKING = "working"
WAITING_TOOL = "waiting_tool"
WAITING_USER = "waiting_user"
IDLE = "idle"

# How an interaction ended (copilot.interaction.end, and `inspect`).
END_IDLE = "idle"
END_TASK_COMPLETE = "task_complete"
END_ERROR = "error"
END_SHUTDOWN = "shutdown"
END_INCOMPLETE = "incomplete"
END_ABORTED = "aborted"  # the user stopped the loop (Ctrl-C, SIGINT/SIGTERM): `abort`, then idle

INCOMPLETE = "incomplete"

# The metric updates that report a bad event (a duplicate, an end without its start).
ANOMALIES = ("rejected", "out_of_order")

# Requests the CLI puts to the person at the terminal: while one is open the session is waiting_user.
USER_REQUESTS = ("permission", "user_input", "elicitation", "exit_plan_mode")


class SessionModel:
    """Follows one session's events and turns them into spans and metric updates."""

    def __init__(self, session_id: str, *, capture_content: bool = False, content_max_chars: int = 4096,
                 live_idle: bool = False, summaries: bool = True, metrics: bool = True) -> None:
        self.session_id = session_id
        self.capture_content = capture_content
        self.content_max_chars = content_max_chars
        # With a live subscriber the real session.idle / assistant.idle ends the loop.
        self.live_idle = live_idle
        self.model: str | None = None
        self.cwd: str | None = None
        self.cli_version: str | None = None
        self.last_event_ns = 0
        self.ended: str | None = None  # END_SHUTDOWN or END_INCOMPLETE once the session is over
        self.interactions: list[InteractionSummary] = []  # kept only with summaries=True (for `inspect`)
        self._summaries = summaries
        self._metrics = metrics  # False: only the updates that report a bad event (a replay that keeps no metrics)
        self._current: Interaction | None = None
        self._agents: dict[str | None, Agent] = {None: Agent(MAIN_AGENT, None)}
        self._tools: dict[str, tuple[OpenSpan, str]] = {}  # toolCallId -> (span, agent)
        self._subagents: dict[str, OpenSpan] = {}  # toolCallId of the task call -> invoke_agent span
        self._permissions: set[str] = set()  # requests waiting for the user (permission, input, ...)
        # Ended turns that made no successful LLM call: the CLI writes turn_end before the
        # session.error that explains it, so they wait for the next event before they are exported.
        self._held: list[tuple[Agent, Turn]] = []
        self._seen: set[int] = set()  # hashes of event ids, kept for the life of the model (one file generation)
        self._calls: set[str] = set()  # apiCallIds of LLM calls already turned into spans
        self._call_accounted = True  # the LLM call in flight already has its span
        self._call_model: str | None = None
        self._out: list[Output] = []

    # ------------------------------------------------------------ public

    def feed(self, event: Event) -> list[Output]:
        """Apply one event; return the spans it closed and the metric updates it causes."""
        key = hash(event.id)
        if key in self._seen:  # the same event twice (a log copied into itself, a replayed stream)
            self._metric("rejected", reason="duplicate_id")
            return self._handover()
        self._seen.add(key)
        if self._held and event.type != "session.error":
            self._release_held()
        if self.ended is not None and event.type != "session.shutdown":
            self.ended = None  # resumed after a shutdown or a crash
        if event.timestamp_ns > self.last_event_ns:
            self.last_event_ns = event.timestamp_ns
        handler = _HANDLERS.get(event.type)
        if handler is not None:
            handler(self, event)
        return self._handover()

    def _handover(self) -> list[Output]:
        """Give the caller the outputs gathered so far; keep none (a finished session holds no garbage)."""
        out, self._out = self._out, []
        return out

    def seen(self, event_id: str) -> bool:
        """True if an event with this id was already applied."""
        return hash(event_id) in self._seen

    @property
    def awaiting_confirmation(self) -> bool:
        """The loop looks finished (final answer, task_complete, error) and nothing is open."""
        current = self._current
        return (current is not None and current.pending_end is not None and not self._tools
                and self._agents[None].turn is None)

    def confirm_end(self) -> list[Output]:
        """The caller saw no new event for a quiet period: the agent loop really went idle."""
        if self.live_idle:
            return []  # the live stream says when the loop really ended
        self._release_held()
        if self.awaiting_confirmation:
            self._end_interaction(self._current.pending_end)
        return self._handover()

    def finish(self, reason: str = END_INCOMPLETE) -> list[Output]:
        """The session is over (end of a replayed file, or its process is gone): close everything.

        A loop that looked finished ends normally; anything still open ends as incomplete.
        """
        if self.ended is not None:
            return []
        self._release_held()
        if self.awaiting_confirmation:
            self._end_interaction(self._current.pending_end)
        self._close_everything(reason)
        return self._handover()

    def open_spans(self) -> list[SpanRecord]:
        """Snapshots of the spans still open, ending at the last event (for `inspect` of a live session)."""
        spans: list[OpenSpan] = [span for span, _agent in self._tools.values()] + list(self._subagents.values())
        spans += [agent.turn.span for agent in self._agents.values() if agent.turn is not None]
        if self._current is not None:
            spans.append(self._current.root)
        held = [_close_turn(turn) for _agent, turn in self._held]
        return held + [SpanRecord(s.trace_id, s.span_id, s.parent_span_id, s.name, s.kind, s.start_ns,
                           max(s.start_ns, self.last_event_ns), {**s.attributes, A.COPILOT_RUNNING: True})
                for s in spans]

    @property
    def state(self) -> str:
        """The session's live state: waiting_user, waiting_tool, working or idle."""
        if self._permissions:
            return WAITING_USER
        if self._tools:
            return WAITING_TOOL
        # tuple(): read at scrape time on another thread while the reader may add an agent.
        if any(agent.turn is not None for agent in tuple(self._agents.values())):
            return WORKING
        return IDLE

    @property
    def quiescent(self) -> bool:
        """Nothing is open: no interaction, turn, tool or sub-agent (the model holds no span)."""
        return self._current is None and not self._work_open

    @property
    def _work_open(self) -> bool:
        """A tool, a sub-agent or a turn is still running."""
        return bool(self._tools or self._subagents) or any(agent.turn is not None for agent in self._agents.values())

    @property
    def mid_turn(self) -> bool:
        """True while a turn or tool is open (a process dying now abandons work)."""
        return self.state in (WORKING, WAITING_TOOL, WAITING_USER)

    @property
    def open_interaction_start(self) -> tuple[int, int] | None:
        """(byte offset, line number - 1) of the first event of the interaction still running, if any."""
        current = self._current
        if current is None or current.start_offset < 0:
            return None
        return current.start_offset, current.start_line - 1

    # ------------------------------------------------------------ helpers

    def _metric(self, name: str, value: float = 1.0, *, observe: bool = False, **labels: str) -> None:
        if self._metrics or name in ANOMALIES:
            self._out.append(MetricUpdate(name, tuple(labels.items()), value, observe))

    def _content(self, value: Any) -> str | None:
        if not self.capture_content or value is None:
            return None
        text = value if isinstance(value, str) else to_json(value)
        return text[: self.content_max_chars]

    def _base_attrs(self, operation: str) -> dict[str, Any]:
        return {
            A.GEN_AI_OPERATION_NAME: operation,
            A.GEN_AI_PROVIDER_NAME: A.PROVIDER,
            A.GEN_AI_CONVERSATION_ID: self.session_id,
        }

    def _agent(self, event: Event) -> Agent:
        """The agent an event belongs to, creating a sub-agent's context on first sight."""
        agent = self._agents.get(event.agent_id)
        if agent is None:
            parent_call = event.data.get("parentToolCallId")
            span = self._subagents.get(parent_call) if isinstance(parent_call, str) else None
            name = str(span.attributes.get(A.GEN_AI_AGENT_NAME, "subagent")) if span else "subagent"
            agent = Agent(name, span)
            self._agents[event.agent_id] = agent
        return agent

    def _interaction_for(self, event: Event) -> Interaction:
        """The running interaction, or one opened implicitly when the log starts mid-way."""
        current = self._current
        if current is None:
            current = self._open_interaction(event, event.interaction_id or f"implicit-{event.id}", implicit=True)
        return current

    def _open_interaction(self, event: Event, interaction_id: str, *, implicit: bool = False) -> Interaction:
        attributes = self._base_attrs(A.OP_INVOKE_AGENT)
        attributes[A.GEN_AI_AGENT_NAME] = A.AGENT_NAME
        attributes[A.COPILOT_INTERACTION_ID] = interaction_id
        if self.model:
            attributes[A.GEN_AI_REQUEST_MODEL] = self.model
        if self.cwd:
            attributes[A.COPILOT_CWD] = self.cwd
        if self.cli_version:
            attributes[A.COPILOT_CLI_VERSION] = self.cli_version
        prompt = self._content(event.data.get("content")) if event.type == "user.message" else None
        if prompt is not None:
            attributes[A.GEN_AI_INPUT_MESSAGES] = prompt
        trace_id = trace_id_for(self.session_id, interaction_id)
        # Opened by another span's event (a log read from the middle): keep the ids apart.
        first = f"interaction\x00{event.id}" if implicit else event.id
        root = OpenSpan(trace_id, span_id_for(self.session_id, first), None, f"{A.OP_INVOKE_AGENT} {A.AGENT_NAME}",
                         KIND_INTERNAL, event.timestamp_ns, attributes)
        interaction = Interaction(interaction_id, root, event.offset, event.line, event.timestamp_ns)
        self._current = interaction
        self._agents[None].invoke_span = root
        return interaction

    def _end_interaction(self, how: str) -> None:
        current = self._current
        if current is None:
            return
        self._current = None
        root = current.root
        root.attributes[A.COPILOT_INTERACTION_END] = how
        if how in (END_IDLE, END_TASK_COMPLETE, END_ERROR, END_ABORTED):
            self._metric("completion_signals", signal=END_IDLE)
        if how == END_ABORTED:  # stopped by the user: not a failure of the agent, so no error status
            self._out.append(root.close(current.last_end_ns))
        elif how == END_ERROR:
            self._out.append(root.close(current.last_end_ns, error_type=current.error_type or "session_error"))
        elif how == END_INCOMPLETE:
            self._out.append(root.close(max(current.last_end_ns, self.last_event_ns), error_type=INCOMPLETE))
        else:
            self._out.append(root.close(current.last_end_ns, status=STATUS_OK))
        if self._summaries:
            self.interactions.append(InteractionSummary(current.id, root.trace_id, root.start_ns, how, current.autopilot,
                                                        current.summary))

    def _release_held(self, errored: Agent | None = None, error_type: str | None = None,
                      status: Any = None) -> None:
        """Export the held turns; the one of agent ``errored`` as failed with ``error_type``."""
        held, self._held = self._held, []
        for agent, turn in held:
            if agent is errored:
                turn.errored = error_type
                if isinstance(status, int):
                    turn.span.attributes[A.HTTP_RESPONSE_STATUS_CODE] = status
            self._out.append(_close_turn(turn))

    def _close_everything(self, reason: str) -> None:
        end_ns = self.last_event_ns
        self._release_held()
        had_open = self._work_open
        self._cut_off(end_ns, INCOMPLETE)
        for agent in self._agents.values():
            if agent.turn is not None:
                self._out.append(agent.turn.span.close(end_ns, error_type=INCOMPLETE))
                agent.turn = None
        self._permissions.clear()
        if self._current is not None:
            # Work cut off (a shutdown or a crash mid-turn) makes the interaction incomplete too.
            self._end_interaction(END_INCOMPLETE if reason == END_INCOMPLETE or had_open else reason)
        self.ended = reason
        # _seen and _calls stay: a log copied into itself after its shutdown is still a duplicate.

    # ------------------------------------------------------------ handlers

    def _on_session_start(self, event: Event) -> None:
        data = event.data
        self.model = as_str(data.get("selectedModel")) or self.model
        context = data.get("context")
        if isinstance(context, dict):
            self.cwd = as_str(context.get("cwd")) or self.cwd
        self.cli_version = as_str(data.get("copilotVersion")) or self.cli_version
        if event.type == "session.start":
            self._metric("sessions_started")

    def _on_model_change(self, event: Event) -> None:
        if event.agent_id is not None:
            return
        self.model = as_str(event.data.get("newModel")) or as_str(event.data.get("model")) or self.model

    def _on_user_message(self, event: Event) -> None:
        if event.agent_id is not None or (as_str(event.data.get("source")) or "").startswith("agent-"):
            return  # a sub-agent's prompt: its work hangs under the task call, not a new interaction
        nudge = event.data.get("isAutopilotContinuation") is True or event.data.get("source") == "autopilot"
        interaction_id = event.interaction_id or f"implicit-{event.id}"
        current = self._current
        if current is not None:
            if current.id == interaction_id:
                return
            # A new message (a nudge included: the CLI gives it its own interaction) ends the previous loop.
            self._end_interaction(current.pending_end or END_INCOMPLETE)
        interaction = self._open_interaction(event, interaction_id)
        if nudge:
            self._metric("autopilot_nudges")
            interaction.autopilot = True
            interaction.root.attributes[A.COPILOT_AUTOPILOT_CONTINUATION] = True

    def _on_turn_start(self, event: Event) -> None:
        agent = self._agent(event)
        interaction = self._interaction_for(event)
        if agent.turn is not None:  # a turn that never ended
            self._out.append(agent.turn.span.close(event.timestamp_ns, error_type=INCOMPLETE))
        if event.agent_id is None:
            interaction.pending_end = None
        parent = agent.invoke_span or interaction.root
        turn_id = event.turn_id or "?"
        attributes = {
            A.GEN_AI_CONVERSATION_ID: self.session_id,
            A.GEN_AI_AGENT_NAME: A.AGENT_NAME if agent.name == MAIN_AGENT else agent.name,
            A.COPILOT_TURN_ID: turn_id,
            A.COPILOT_INTERACTION_ID: event.interaction_id or interaction.id,
        }
        if interaction.autopilot and event.agent_id is None:
            attributes[A.COPILOT_AUTOPILOT_CONTINUATION] = True
        span = OpenSpan(parent.trace_id, span_id_for(self.session_id, event.id), parent.span_id,
                         f"turn {turn_id}", KIND_INTERNAL, event.timestamp_ns, attributes)
        agent.turn = Turn(span, agent.name)
        self._metric("turns", agent=agent.name)

    def _on_turn_end(self, event: Event) -> None:
        agent = self._agent(event)
        turn = agent.turn
        if turn is None or (event.turn_id is not None and event.turn_id != turn.span.attributes[A.COPILOT_TURN_ID]):
            self._metric("out_of_order", type=event.type)
            return
        agent.turn = None
        turn.end_ns = event.timestamp_ns
        if turn.llm_calls or turn.errored:
            self._out.append(_close_turn(turn))
        else:
            self._held.append((agent, turn))
        seconds = max(0, event.timestamp_ns - turn.span.start_ns) / 1e9
        self._metric("turn_duration", seconds, observe=True, agent=agent.name)
        current = self._current
        if event.agent_id is None and current is not None:
            current.last_end_ns = max(current.last_end_ns, event.timestamp_ns)
            if not turn.requested_tools and current.pending_end is None:
                current.pending_end = END_IDLE

    def _on_usage_record(self, event: Event) -> None:
        """One LLM call from the file (session.usage_record) or the live stream (assistant.usage)."""
        usage = event.data.get("usage") if event.type == "session.usage_record" else event.data
        if not isinstance(usage, dict):
            return
        call_id = as_str(usage.get("apiCallId"))
        if call_id is not None:
            if call_id in self._calls:
                return  # the same call seen through both sources
            self._calls.add(call_id)
        self._call_accounted = True
        self._llm_call(event, usage)

    def _on_call_start(self, event: Event) -> None:
        self._call_accounted = False
        self._call_model = as_str(event.data.get("model")) or self._call_model

    def _on_call_finished(self, event: Event) -> None:
        """The headless stream has no usage events: its calls are known from model.call_finished alone."""
        if self._call_accounted or event.data.get("outcome") != "success":
            return
        self._call_accounted = True
        self._llm_call(event, {"model": self._call_model, "duration": event.data.get("dispatchDurationMs")})

    def _on_call_failure(self, event: Event) -> None:
        """A failed attempt the CLI will retry (live only: the file holds just the final session.error)."""
        self._call_accounted = True
        self._llm_call(event, {"model": as_str(event.data.get("model")) or self._call_model,
                               "duration": event.data.get("durationMs")},
                       error=str(event.data.get("statusCode") or event.data.get("errorType") or "call_failed"))

    def _llm_call(self, event: Event, usage: dict, *, error: str | None = None) -> None:
        agent = self._agent(event)
        model = as_str(usage.get("model")) or self.model or "unknown"
        duration_ms = as_num(usage.get("duration"))
        parent = agent.turn.span if agent.turn else (agent.invoke_span or self._interaction_for(event).root)
        attributes = self._base_attrs(A.OP_CHAT)
        if agent.name != MAIN_AGENT:
            attributes[A.GEN_AI_AGENT_NAME] = agent.name
        tokens = chat_attributes(attributes, usage, model)
        if agent.turn is not None:
            attributes[A.COPILOT_TURN_ID] = agent.turn.span.attributes[A.COPILOT_TURN_ID]
        # The CLI times the call from before it logs turn_start; never start before the parent.
        start = max(event.timestamp_ns - int(min(max(duration_ms, 0.0) * 1_000_000, event.timestamp_ns)), parent.start_ns)
        span = OpenSpan(parent.trace_id, span_id_for(self.session_id, event.id), parent.span_id,
                         f"{A.OP_CHAT} {model}", KIND_CLIENT, start, attributes)
        self._out.append(span.close(event.timestamp_ns, error_type=error))
        if agent.turn is not None and error is None:
            agent.turn.llm_calls += 1
        self._metric("llm_calls", model=model, outcome="error" if error else "success")
        self._metric("llm_call_duration", max(duration_ms, 0.0) / 1000.0, observe=True, model=model)
        for label, value in tokens.items():
            if value > 0:
                self._metric("tokens", value, model=model, type=label)

    def _on_assistant_message(self, event: Event) -> None:
        agent = self._agent(event)
        if agent.turn is None:
            return
        requests = event.data.get("toolRequests")
        if isinstance(requests, list) and requests:
            agent.turn.requested_tools = True
        text = self._content(event.data.get("content"))
        if text:
            agent.turn.span.attributes[A.GEN_AI_OUTPUT_MESSAGES] = text

    def _on_tool_start(self, event: Event) -> None:
        call_id = event.tool_call_id
        if call_id is None:
            return
        agent = self._agent(event)
        parent = agent.turn.span if agent.turn else (agent.invoke_span or self._interaction_for(event).root)
        tool = as_str(event.data.get("toolName")) or "unknown"
        attributes = self._base_attrs(A.OP_EXECUTE_TOOL)
        attributes[A.GEN_AI_TOOL_NAME] = tool
        attributes[A.GEN_AI_TOOL_CALL_ID] = call_id
        attributes[A.GEN_AI_TOOL_TYPE] = "function"
        if agent.name != MAIN_AGENT:
            attributes[A.GEN_AI_AGENT_NAME] = agent.name
        arguments = self._content(event.data.get("arguments"))
        if arguments is not None:
            attributes[A.GEN_AI_TOOL_CALL_ARGUMENTS] = arguments
        span = OpenSpan(parent.trace_id, span_id_for(self.session_id, event.id), parent.span_id,
                         f"{A.OP_EXECUTE_TOOL} {tool}", KIND_INTERNAL, event.timestamp_ns, attributes)
        previous = self._tools.pop(call_id, None)
        if previous is not None:  # started twice: the first never completed
            self._out.append(previous[0].close(event.timestamp_ns, error_type=INCOMPLETE))
        self._tools[call_id] = (span, agent.name)

    def _on_tool_complete(self, event: Event) -> None:
        call_id = event.tool_call_id
        entry = self._tools.pop(call_id, None) if call_id else None
        if entry is None:
            self._metric("out_of_order", type=event.type)
            return
        span, _agent_name = entry
        data = event.data
        tool = str(span.attributes[A.GEN_AI_TOOL_NAME])
        shell = data.get("shellExecution")
        if isinstance(shell, dict) and isinstance(shell.get("exitCode"), int):
            span.attributes[A.PROCESS_EXIT_CODE] = shell["exitCode"]
        result = self._content(data.get("result"))
        if result is not None:
            span.attributes[A.GEN_AI_TOOL_CALL_RESULT] = result
        success = data.get("success") is not False
        if success:
            self._out.append(span.close(event.timestamp_ns, status=STATUS_OK))
        else:
            error = data.get("error")
            code = as_str(error.get("code")) if isinstance(error, dict) else None
            message = self._content(error.get("message")) if isinstance(error, dict) else None
            self._out.append(span.close(event.timestamp_ns, message=message or "", error_type=code or "tool_error"))
        self._metric("tool_calls", tool=tool, outcome="success" if success else "failure")
        self._metric("tool_duration", max(0, event.timestamp_ns - span.start_ns) / 1e9, observe=True, tool=tool)

    def _on_subagent_started(self, event: Event) -> None:
        call_id = event.tool_call_id
        if call_id is None:
            return
        tool = self._tools.get(call_id)
        name = as_str(event.data.get("agentName")) or as_str(event.data.get("agentDisplayName")) or "subagent"
        if tool is not None:
            parent = tool[0]
        else:
            interaction = self._interaction_for(event)
            parent = interaction.root
        attributes = self._base_attrs(A.OP_INVOKE_AGENT)
        attributes[A.GEN_AI_AGENT_NAME] = name
        attributes[A.GEN_AI_TOOL_CALL_ID] = call_id
        span = OpenSpan(parent.trace_id, span_id_for(self.session_id, event.id), parent.span_id,
                         f"{A.OP_INVOKE_AGENT} {name}", KIND_INTERNAL, event.timestamp_ns, attributes)
        previous = self._subagents.pop(call_id, None)
        if previous is not None:  # started twice: the first never ended
            self._close_agent_turns(previous, event.timestamp_ns)
            self._out.append(previous.close(event.timestamp_ns, error_type=INCOMPLETE))
        self._subagents[call_id] = span
        if event.agent_id is not None:
            known = self._agents.get(event.agent_id)
            if known is None:
                self._agents[event.agent_id] = Agent(name, span)
            else:  # its events came first
                known.invoke_span, known.name = span, name

    def _on_subagent_end(self, event: Event) -> None:
        call_id = event.tool_call_id
        span = self._subagents.pop(call_id, None) if call_id else None
        if span is None:
            self._metric("out_of_order", type=event.type)
            return
        for key, attr in (("totalTokens", A.COPILOT_SUBAGENT_TOTAL_TOKENS), ("totalToolCalls", A.COPILOT_SUBAGENT_TOOL_CALLS)):
            value = event.data.get(key)
            if isinstance(value, int):
                span.attributes[attr] = value
        self._close_agent_turns(span, event.timestamp_ns)
        if event.type == "subagent.failed":
            self._out.append(span.close(event.timestamp_ns, message=self._content(event.data.get("error")) or "",
                                        error_type=as_str(event.data.get("errorType")) or "subagent_failed"))
        else:
            self._out.append(span.close(event.timestamp_ns, status=STATUS_OK))

    def _cut_off(self, end_ns: int, error_type: str, message: str = "") -> None:
        """End every running tool and sub-agent as ``error_type`` (a sub-agent's open turn as incomplete)."""
        for span, _agent in self._tools.values():
            self._out.append(span.close(end_ns, message=message, error_type=error_type))
        self._tools.clear()
        for span in self._subagents.values():
            self._close_agent_turns(span, end_ns)
            self._out.append(span.close(end_ns, message=message, error_type=error_type))
        self._subagents.clear()

    def _close_agent_turns(self, invoke_span: OpenSpan, end_ns: int) -> None:
        """Forget the sub-agent under ``invoke_span``, ending a turn it left open."""
        for agent_id, agent in list(self._agents.items()):
            if agent_id is not None and agent.invoke_span is invoke_span:
                if agent.turn is not None:
                    self._out.append(agent.turn.span.close(end_ns, error_type=INCOMPLETE))
                del self._agents[agent_id]

    def _on_task_complete(self, event: Event) -> None:
        if event.agent_id is not None:
            return
        self._metric("completion_signals", signal=END_TASK_COMPLETE)
        current = self._current
        if current is not None:
            current.pending_end = END_TASK_COMPLETE
            current.summary = as_str(event.data.get("summary"))
            summary = self._content(current.summary)
            if summary is not None:
                current.root.attributes[A.COPILOT_TASK_SUMMARY] = summary
            if event.data.get("success") is False:
                current.root.attributes[A.COPILOT_TASK_SUCCESS] = False

    def _on_session_error(self, event: Event) -> None:
        data = event.data
        error_type = as_str(data.get("errorType")) or "session_error"
        status = data.get("statusCode")
        agent = self._agent(event)
        if not self.live_idle:  # live, each failed attempt arrives as model.call_failure
            self._metric("llm_calls", model=self.model or "unknown", outcome="error")
        if event.agent_id is None:  # a sub-agent's error is its parent's failed task call, not a loop end
            self._metric("completion_signals", signal=END_ERROR)
        if agent.turn is not None:
            agent.turn.errored = error_type
            if isinstance(status, int):
                agent.turn.span.attributes[A.HTTP_RESPONSE_STATUS_CODE] = status
        self._release_held(agent, error_type, status)
        current = self._current
        if current is not None and event.agent_id is None:
            current.pending_end = END_ERROR
            current.error_type = error_type
            current.last_end_ns = max(current.last_end_ns, event.timestamp_ns)
            if isinstance(status, int):
                current.root.attributes[A.HTTP_RESPONSE_STATUS_CODE] = status

    def _on_abort(self, event: Event) -> None:
        """The user stopped the loop: what is still running was cut off; the loop ends (the CLI goes idle)."""
        if event.agent_id is not None:
            return
        reason = as_str(event.data.get("reason")) or END_ABORTED
        self._cut_off(event.timestamp_ns, END_ABORTED, reason)
        current = self._current
        if current is not None:
            current.pending_end = END_ABORTED
            current.last_end_ns = max(current.last_end_ns, event.timestamp_ns)
            current.root.attributes[A.COPILOT_ABORT_REASON] = reason

    def _on_user_request(self, event: Event) -> None:
        request_id = as_str(event.data.get("requestId")) or event.id
        self._permissions.add(request_id)

    def _on_user_answer(self, event: Event) -> None:
        request_id = as_str(event.data.get("requestId"))
        if request_id:
            self._permissions.discard(request_id)
        else:
            self._permissions.clear()

    def _on_shutdown(self, event: Event) -> None:
        if self.awaiting_confirmation:
            self._end_interaction(self._current.pending_end)
        self._metric("completion_signals", signal=END_SHUTDOWN)
        self._close_everything(END_SHUTDOWN)

    def _on_live_idle(self, event: Event) -> None:
        if not self.live_idle or event.agent_id is not None:
            return
        current = self._current
        if current is not None:
            self._end_interaction(current.pending_end or END_IDLE)


_HANDLERS = {
    "session.start": SessionModel._on_session_start,
    "session.resume": SessionModel._on_session_start,
    "session.model_change": SessionModel._on_model_change,
    "user.message": SessionModel._on_user_message,
    "assistant.turn_start": SessionModel._on_turn_start,
    "assistant.turn_end": SessionModel._on_turn_end,
    "session.usage_record": SessionModel._on_usage_record,
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
    "session.task_complete": SessionModel._on_task_complete,
    "session.error": SessionModel._on_session_error,
    **{f"{kind}.requested": SessionModel._on_user_request for kind in USER_REQUESTS},
    **{f"{kind}.completed": SessionModel._on_user_answer for kind in USER_REQUESTS},
    "session.shutdown": SessionModel._on_shutdown,
    "abort": SessionModel._on_abort,
    "session.idle": SessionModel._on_live_idle,
    "assistant.idle": SessionModel._on_live_idle,
}


def _close_turn(turn: Turn) -> SpanRecord:
    """The finished span of a turn whose turn_end came."""
    return turn.span.close(turn.end_ns, error_type=turn.errored)


def replay_events(session_id: str, events: Iterable[Event], **options: Any) -> tuple[SessionModel, list[Output]]:
    """Run a whole finished log through a fresh model, closing what is left open at the end."""
    model = SessionModel(session_id, **options)
    out: list[Output] = []
    for event in events:
        out.extend(model.feed(event))
    out.extend(model.finish())
    return model, out
