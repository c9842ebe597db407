"""The agent loop in progress: the running interaction, each agent's open turn, held turns.

The session model decides what an event means; this keeps the spans that interactions and
turns hold open, and closes them. Tools and sub-agents are kept by the ToolBook it is given.
"""

from __future__ import annotations

from ..decode.events import Event
from ..decode.payloads import SessionError, SessionFacts, SubagentStart, TaskComplete, UserMessage
from ..vocab import (
    CANCELLED,
    END_ABORTED,
    END_ERROR,
    END_IDLE,
    END_INCOMPLETE,
    END_TASK_COMPLETE,
    INCOMPLETE,
    LOOP_ENDS,
    MAIN_AGENT,
    OUT_OF_ORDER,
    SIGNAL_IDLE,
    Metric,
)
from . import attrs as A
from . import spanattrs
from .messages import Transcript
from .open_spans import Agent, Interaction, InteractionSummary, OpenSpan, Outbox, Totals, Turn
from .records import KIND_INTERNAL, STATUS_OK, SpanEvent, SpanRecord, span_id_for, trace_id_for
from .summary import Tally
from .tools import ToolBook


class AgentLoop:
    """The interaction in progress and the agents working in it."""

    def __init__(self, session_id: str, out: Outbox, book: ToolBook, tally: Tally, talk: Transcript, *,
                 summaries: bool) -> None:
        self.session_id = session_id
        self.tally = tally
        self.out = out
        self.book = book
        self.talk = talk
        self.current: Interaction | None = None
        self.agents: dict[str | None, Agent] = {None: Agent(MAIN_AGENT, None)}
        # Ended turns that made no successful LLM call: the CLI writes turn_end before the
        # session.error that explains it, so they wait for the next event before they are exported.
        self.held: list[tuple[Agent, Turn]] = []
        # Ended turns whose background work (a `task` in background mode) runs on: they end with it.
        self.lingering: list[tuple[Agent, Turn]] = []
        self.started_agents: dict[str, str] = {}  # a sub-agent's agentId -> the interaction it was started in
        self.notified = False  # a system.notification came, and no main-agent answer since
        self.summaries: list[InteractionSummary] | None = [] if summaries else None  # for `inspect`
        self.last_ended: tuple[str, int, int] | None = None  # (interaction id, trace id, root span id)
        self.facts = SessionFacts(None, None, None)  # the session's model, cwd and CLI version (set by the model)

    @property
    def main(self) -> Agent:
        return self.agents[None]

    def turns_open(self) -> bool:
        """Some agent's turn is open."""
        return any(agent.turn is not None for agent in self.agents.values())

    def open_turn_spans(self) -> list[OpenSpan]:
        return ([agent.turn.span for agent in self.agents.values() if agent.turn is not None]
                + [turn.span for _agent, turn in self.lingering])

    def root_name(self) -> str:
        """The name of the main agent on its roots: the custom agent the CLI runs (--agent), else copilot."""
        return self.main.custom or A.AGENT_NAME

    def select_agent(self, event: Event) -> None:
        """subagent.selected / .deselected of the main agent: the custom agent the next interactions run as."""
        if event.agent_id is not None:
            return
        name = event.data.get("agentName") if event.type == "subagent.selected" else None
        self.main.custom = name if isinstance(name, str) and name and name != A.AGENT_NAME else None

    def agent(self, event: Event) -> Agent:
        """The agent an event belongs to, creating a sub-agent's context on first sight."""
        agent = self.agents.get(event.agent_id)
        if agent is None:
            parent_call = event.data.get("parentToolCallId")
            if not isinstance(parent_call, str):
                parent_call = None  # a hostile log's list or object: no parent to find
            span = self.book.subagents.get(parent_call) if parent_call is not None else None
            name = str(span.attributes.get(A.GEN_AI_AGENT_NAME, "subagent")) if span else "subagent"
            if span is None and parent_call is not None and parent_call in self.book.tools:
                span = self.book.tools[parent_call][0]  # a CLI (0.0.400) that logs no subagent.started
            agent = Agent(name, span)
            self.agents[event.agent_id] = agent
        return agent

    def start_subagent(self, event: Event, view: SubagentStart) -> None:
        """subagent.started: its span, under the task call; its agent named (its events may have come first)."""
        assert view.call_id is not None  # the model hands in only sub-agents with a call id
        fallback = None if view.call_id in self.book.tools else self.interaction_for(event).root
        previous = self.book.start_subagent(event, view, fallback)
        if previous is not None:  # started twice: the first never ended
            self.close_agent_turns(previous, event.timestamp_ns)
            self.out.span(previous.close(event.timestamp_ns, error_type=INCOMPLETE))
        if event.agent_id is not None:
            self.started_agents[event.agent_id] = self.interaction_for(event).id
            span = self.book.subagents[view.call_id]
            known = self.agents.get(event.agent_id)
            if known is None:
                self.agents[event.agent_id] = Agent(view.name, span)
            else:
                known.invoke_span, known.name = span, view.name

    def snapshots(self, last_event_ns: int) -> list[SpanRecord]:
        """The spans still open (and turns held), as records ending at the last event, marked as running."""
        spans = self.book.open_spans() + self.open_turn_spans()
        if self.current is not None:
            spans.append(self.current.root)
        held = [turn.close() for _agent, turn in self.held]
        held += [agent.talk.held for agent in self.agents.values() if agent.talk.held is not None]
        return held + [SpanRecord(s.trace_id, s.span_id, s.parent_span_id, s.name, s.kind, s.start_ns,
                                  max(s.start_ns, last_event_ns), {**s.attributes, A.COPILOT_RUNNING: True})
                       for s in spans]

    def work_parent(self, event: Event, agent: Agent) -> OpenSpan:
        """Where a call or tool of ``agent`` hangs: its open turn, else its invoke span, else the interaction."""
        if agent.turn is not None:
            return agent.turn.span
        return agent.invoke_span or self.interaction_for(event).root

    def interaction_for(self, event: Event) -> Interaction:
        """The running interaction; else new work of the interaction that ended last (same id), or
        one opened implicitly when the log starts mid-way."""
        current = self.current
        if current is None:
            ended = self.last_ended
            if ended is not None and event.agent_id is None and event.interaction_id == ended[0]:
                return self.continue_after(event)
            current = self.open(event, event.interaction_id or f"implicit-{event.id}", implicit=True)
        return current

    def continue_after(self, event: Event) -> Interaction:
        """Open a root for work the CLI started by itself after the loop of the last interaction ended
        (e.g. ``system.notification`` of a background shell): same interaction id, its own trace,
        linked to that interaction's root. The running one, if any, ends first."""
        if self.current is not None:
            self.end(self.current.pending_end or END_IDLE, self.current.last_end_ns)
        assert self.last_ended is not None  # called only after an interaction ended
        interaction_id, trace_id, span_id = self.last_ended
        attributes = spanattrs.interaction(self.session_id, interaction_id, self.facts, self.root_name())
        attributes[A.COPILOT_TRIGGER] = event.type
        root = OpenSpan(trace_id_for(self.session_id, f"{interaction_id}\x00{event.id}"),
                        span_id_for(self.session_id, f"interaction\x00{event.id}"), None,
                        f"{A.OP_INVOKE_AGENT} {self.root_name()}", KIND_INTERNAL, event.timestamp_ns, attributes,
                        links=((trace_id, span_id),))
        interaction = Interaction(interaction_id, root, event.offset, event.line, event.timestamp_ns)
        self.current = interaction
        self.main.invoke_span, self.main.totals = root, Totals()
        self.main.talk.prompt = self.main.talk.answer = None
        return interaction

    def open(self, event: Event, interaction_id: str, *, implicit: bool = False) -> Interaction:
        """Start an interaction at ``event``."""
        attributes = spanattrs.interaction(self.session_id, interaction_id, self.facts, self.root_name())
        # Opened by another span's event (a log read from the middle): keep the ids apart.
        first = f"interaction\x00{event.id}" if implicit else event.id
        root = OpenSpan(trace_id_for(self.session_id, interaction_id), span_id_for(self.session_id, first), None,
                        f"{A.OP_INVOKE_AGENT} {self.root_name()}", KIND_INTERNAL, event.timestamp_ns, attributes)
        interaction = Interaction(interaction_id, root, event.offset, event.line, event.timestamp_ns)
        self.current = interaction
        self.main.invoke_span, self.main.totals = root, Totals()
        self.main.talk.prompt = self.main.talk.answer = None
        self.tally.interactions += 1
        return interaction

    def prompt(self, event: Event, message: UserMessage, last_event_ns: int) -> None:
        """user.message: a new interaction (a nudge too: the CLI gives it its own), unless it is steering
        within the running one; a new one ends the previous loop. With content capture, the prompt is the
        root's input and goes to the next LLM call."""
        interaction_id = message.interaction_id or f"implicit-{event.id}"
        current = self.current
        if current is not None:
            if current.id == interaction_id:
                self.talk.user(self.main.talk, message.text, opening=False)  # steering: the next call gets it
                return
            self.end(current.pending_end or END_INCOMPLETE, last_event_ns)
        interaction = self.open(event, interaction_id)
        if self.talk.user(self.main.talk, message.text, opening=True) is not None:
            self.talk.invocation(self.main.talk, interaction.root.attributes)
        if message.nudge:
            self.tally.nudges += 1
            self.out.count(Metric.AUTOPILOT_NUDGES)
            interaction.autopilot = True
            interaction.root.attributes[A.COPILOT_AUTOPILOT_CONTINUATION] = True

    def answer(self, event: Event, asks_for_tools: bool) -> None:
        """assistant.message: the agent's turn answered (and asked for tools, or not)."""
        turn = self.agent(event).turn
        # Right after a notification, a message with no turnId, interactionId or model is the CLI's own request
        # (read_agent, read_bash), not the model's answer. CLIs before 1.0 write no such keys on any message.
        cli_own = self.notified and not any(key in event.data for key in ("turnId", "interactionId", "model"))
        if event.agent_id is None:
            self.notified = False
        if turn is None or cli_own:
            return
        turn.truncated = False  # cut off at the length limit, yet kept as the answer
        if asks_for_tools:
            turn.requested_tools = True

    def start_turn(self, event: Event) -> None:
        """assistant.turn_start: the agent's new turn hangs under its invoke span (or the interaction)."""
        agent = self.agent(event)
        interaction = self.interaction_for(event)
        if agent.turn is not None:  # a turn that never ended
            self.out.span(agent.turn.span.close(event.timestamp_ns, error_type=INCOMPLETE))
        if event.agent_id is None and interaction.pending_end is not None:
            # The loop had ended (a final answer, task_complete): a turn the CLI starts by itself now
            # (after a background shell's notification) is new work of that interaction, in a trace of its own.
            interaction = self.continue_after(event)
        parent = agent.invoke_span or interaction.root
        turn_id = event.turn_id or "?"
        attributes = spanattrs.turn(self.session_id, agent.shown, turn_id, event.interaction_id or interaction.id,
                                    autopilot=interaction.autopilot and event.agent_id is None)
        span = parent.child(span_id_for(self.session_id, event.id), A.TURN_SPAN, KIND_INTERNAL,
                            event.timestamp_ns, attributes)
        agent.turn = Turn(span, agent.name)
        agent.totals.turns += 1
        self.tally.turns += 1
        self.out.count(Metric.TURNS, agent.name, span=span)

    def end_turn(self, event: Event) -> None:
        """assistant.turn_end: a turn with no successful LLM call is held for a session.error to explain it;
        a main-agent turn that asked for no tool makes the loop look finished."""
        agent = self.agent(event)
        turn = agent.turn
        if turn is None or (event.turn_id is not None and event.turn_id != turn.turn_id):
            self.out.anomaly(OUT_OF_ORDER, event)
            return
        agent.turn = None
        turn.end_ns = event.timestamp_ns
        if self.book.background_under(turn.span):  # its background sub-agent runs on: the turn ends with it
            self.lingering.append((agent, turn))
        elif turn.errored or (turn.llm_calls and (turn.requested_tools or turn.truncated)):
            self.out.span(turn.close())
        else:  # a turn that made no call, or gave the final answer, waits for a session.error explaining it
            self.held.append((agent, turn))
        if not self.lingering or self.lingering[-1][1] is not turn:
            self._count_duration(agent, turn)
        current = self.current
        if event.agent_id is None and current is not None:
            current.last_end_ns = max(current.last_end_ns, event.timestamp_ns)
            if not turn.requested_tools and not turn.truncated and current.pending_end is None:
                current.pending_end = END_IDLE

    def _count_duration(self, agent: Agent, turn: Turn) -> None:
        self.out.count(Metric.TURN_DURATION, agent.name, value=max(0, turn.end_ns - turn.span.start_ns) / 1e9,
                       span=turn.span)

    def background_done(self, agent_id: str | None, end_ns: int) -> None:
        """A sub-agent ended at ``end_ns``: the turns that waited only for it end now, and the interaction it
        was started in (if it still runs) does not end before it."""
        self.release_lingering(end_ns, every=False)
        current = self.current
        if current is not None and agent_id is not None and self.started_agents.get(agent_id) == current.id:
            current.last_end_ns = max(current.last_end_ns, end_ns)

    def release_lingering(self, end_ns: int, *, every: bool = True) -> None:
        """End the lingering turns whose background work is over (``every``: all of them) at ``end_ns``."""
        keep = []
        for agent, turn in self.lingering:
            if not every and self.book.background_under(turn.span):
                keep.append((agent, turn))
                continue
            turn.end_ns = max(turn.end_ns, end_ns)
            self.out.span(turn.close())
            self._count_duration(agent, turn)
        self.lingering = keep

    def resume_for(self, agent_id: str) -> bool:
        """A notification about sub-agent ``agent_id``: True when it was started in the running interaction,
        whose loop then goes on (the CLI reads the agent and answers in it); False when it is not known."""
        interaction_id = self.started_agents.get(agent_id)
        current = self.current
        if interaction_id is None:
            return False
        if current is not None and current.id == interaction_id:
            current.pending_end = None
        return True

    def end(self, how: str, last_event_ns: int) -> None:
        """End the running interaction as ``how`` (one of the END_* values)."""
        current = self.current
        if current is None:
            return
        self.current = None
        root = current.root
        self.last_ended = (current.id, root.trace_id, root.span_id)
        self.tally.last_end = how
        root.attributes[A.COPILOT_INTERACTION_END] = how
        root.attributes.update(spanattrs.invocation_totals(self.main.totals))
        for agent in self.agents.values():  # calls whose answer did not come go before their root ends
            self.talk.release(agent.talk)
        self.talk.invocation(self.main.talk, root.attributes, prompt=False)
        self.out.count(Metric.INTERACTIONS, how)
        if how in LOOP_ENDS:
            self.out.count(Metric.COMPLETION_SIGNALS, SIGNAL_IDLE)
        if how == END_ABORTED:  # stopped by the user: not a failure of the agent, so no error status
            self.out.span(root.close(current.last_end_ns))
        elif how == END_ERROR:
            self.out.span(root.close(current.last_end_ns, error_type=current.error_type or "session_error",
                                     message=current.error_message))
        elif how == END_INCOMPLETE:
            self.out.span(root.close(max(current.last_end_ns, last_event_ns), error_type=INCOMPLETE))
        else:
            self.out.span(root.close(current.last_end_ns, status=STATUS_OK))
        if self.summaries is not None:
            self.summaries.append(InteractionSummary(current.id, root.trace_id, root.start_ns, how, current.autopilot,
                                                     current.summary))

    def task_complete(self, task: TaskComplete, summary: str | None) -> None:
        """session.task_complete: the loop ends once this turn does."""
        current = self.current
        if current is not None:
            current.pending_end = END_TASK_COMPLETE
            current.summary = task.summary
            if summary is not None:
                current.root.attributes[A.COPILOT_TASK_SUMMARY] = summary
            if task.failed:
                current.root.attributes[A.COPILOT_TASK_SUCCESS] = False

    def fail(self, event: Event, agent: Agent, error: SessionError) -> None:
        """session.error: the agent's open (or just ended) turn failed; a main-agent error ends the loop.
        Each span it fails gets a status description and its exception event (with the error's message
        only when content capture is on)."""
        exception = SpanEvent(A.EXCEPTION_EVENT, event.timestamp_ns, spanattrs.session_error(error))
        if agent.turn is not None:
            _failed(agent.turn, error, exception)
        self.release_held(agent, error, exception)
        current = self.current
        if current is not None and event.agent_id is None:
            current.pending_end = END_ERROR
            current.error_type, current.error_message = error.error_type, _description(error)
            current.last_end_ns = max(current.last_end_ns, event.timestamp_ns)
            current.root.events.append(exception)
            if error.status_code is not None:
                current.root.attributes[A.HTTP_RESPONSE_STATUS_CODE] = error.status_code

    def abort(self, event: Event, reason: str) -> None:
        """The user stopped the loop: what is still running was cut off; the loop ends (the CLI goes idle)."""
        self.cut_off(event.timestamp_ns, END_ABORTED, reason)
        current = self.current
        if current is not None:
            current.pending_end = END_ABORTED
            current.last_end_ns = max(current.last_end_ns, event.timestamp_ns)
            current.root.attributes[A.COPILOT_ABORT_REASON] = reason

    def release_held(self, errored: Agent | None = None, error: SessionError | None = None,
                     exception: SpanEvent | None = None) -> None:
        """Export the held turns; the one of agent ``errored`` as failed with ``error``."""
        held, self.held = self.held, []
        for agent, turn in held:
            if agent is errored:
                assert error is not None and exception is not None  # given with ``errored``
                _failed(turn, error, exception)
            self.out.span(turn.close())

    def cut_off(self, end_ns: int, error_type: str, message: str = "") -> None:
        """End every running tool and sub-agent as ``error_type`` (a sub-agent's open turn as incomplete)."""
        self.book.cut_off_tools(end_ns, error_type, message)
        # A sub-agent the user's abort cut off is cancelled, as its own subagent.completed says.
        subagent_error = CANCELLED if error_type == END_ABORTED else error_type
        for span in self.book.take_subagents():
            self.close_agent_turns(span, end_ns)
            self.out.span(span.close(end_ns, message=message, error_type=subagent_error))
        self.book.release_all_held(end_ns)
        self.release_lingering(end_ns)

    def close_agent_turns(self, invoke_span: OpenSpan, end_ns: int) -> None:
        """Forget the sub-agent under ``invoke_span``, ending a turn it left open."""
        for agent_id, agent in list(self.agents.items()):
            if agent_id is not None and agent.invoke_span is invoke_span:
                if agent.turn is not None:
                    self.out.span(agent.turn.span.close(end_ns, error_type=INCOMPLETE))
                self.talk.release(agent.talk)
                if invoke_span.attributes.get(A.GEN_AI_OPERATION_NAME) == A.OP_INVOKE_AGENT:
                    invoke_span.attributes.update(spanattrs.invocation_totals(agent.totals))
                    self.talk.invocation(agent.talk, invoke_span.attributes)
                del self.agents[agent_id]

    def close_all(self, end_ns: int) -> None:
        """Cut off every tool, sub-agent and turn still open, as incomplete."""
        self.release_held()
        for agent in self.agents.values():
            self.talk.release(agent.talk)
        self.cut_off(end_ns, INCOMPLETE)
        for agent in self.agents.values():
            if agent.turn is not None:
                self.out.span(agent.turn.span.close(end_ns, error_type=INCOMPLETE))
                agent.turn = None


def _description(error: SessionError) -> str:
    """The status description of a span a session.error failed: its type and HTTP status (the message, which
    may echo content, is only ever in the exception event)."""
    return error.error_type if error.status_code is None else f"{error.error_type} (HTTP {error.status_code})"


def _failed(turn: Turn, error: SessionError, exception: SpanEvent) -> None:
    """Mark a turn as failed by a session.error."""
    turn.errored, turn.error_message = error.error_type, _description(error)
    turn.span.events.append(exception)
    if error.status_code is not None:
        turn.span.attributes[A.HTTP_RESPONSE_STATUS_CODE] = error.status_code
