"""The session model's state, mirrored for the summary alone: what `catalog/quick.py` feeds each event to.

:class:`QuickSession` follows the model (sessions.py, interactions.py, tools.py, calls.py) step by step, keeping
only what ``SessionModel.summary()`` reads: the running interaction and how it would end, each agent's open turn,
the tools, sub-agents and requests running, and the tally. Spans stand in as plain objects, compared by identity
as the model compares its spans. Amounts are counted with the model's own CallCounts (its CreditBook with it) and
CodeChanges, and the CLI-version layer is the model's Normalizer. A step this does not mirror raises :class:`Unsure`.
"""

from __future__ import annotations

from typing import Any

from msgspec.structs import replace

from ..decode.events import Event
from ..decode.normalize import Normalizer
from ..decode.payloads import (
    SessionFacts,
    SubagentEnd,
    SubagentStart,
    ToolEnd,
    ToolStart,
    Usage,
    UserMessage,
    as_num,
    as_str,
    request_id,
    requested_tools,
    user_request,
)
from ..model.attrs import USAGE_TOKENS
from ..model.changes import CodeChanges
from ..model.counts import CallCounts
from ..model.open_spans import Outbox, Totals
from ..model.summary import SessionSummary, Tally, make_summary
from ..model.usage import CALLS
from ..vocab import (
    END_ERROR,
    END_IDLE,
    END_INCOMPLETE,
    END_SHUTDOWN,
    END_TASK_COMPLETE,
    IDLE,
    INCOMPLETE,
    SUCCESS,
    UNKNOWN_MODEL,
    USER_REQUESTS,
    WAITING_TOOL,
    WAITING_USER,
    WORKING,
)


class _Turn:
    __slots__ = ("llm_calls", "requested_tools", "truncated", "turn_id")

    def __init__(self, turn_id: str) -> None:
        self.turn_id = turn_id
        self.llm_calls = 0
        self.requested_tools = False
        self.truncated = False


class _Agent:
    """An agent: its open turn, and where its work hangs (a span of ours: any object, compared by identity)."""

    __slots__ = ("invoke", "turn")

    def __init__(self, invoke: object | None) -> None:
        self.invoke = invoke
        self.turn: _Turn | None = None


class _Interaction:
    __slots__ = ("autopilot", "id", "pending_end")

    def __init__(self, interaction_id: str) -> None:
        self.id = interaction_id
        self.pending_end: str | None = None
        self.autopilot = False


class _Tool:
    __slots__ = ("agent", "name", "start_ns", "turn")

    def __init__(self, name: str, start_ns: int, agent: _Agent) -> None:
        self.name, self.start_ns, self.agent = name, start_ns, agent
        self.turn = agent.turn  # the turn it runs under, if any


class Unsure(Exception):
    """The log holds something this does not mirror: the model must read it."""


class QuickSession:
    """What the model keeps of one session for its summary, fed the same events (see SessionModel)."""

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        self.facts = SessionFacts(None, None, None)
        self.last_event_ns = 0
        self.ended: str | None = None
        self.tally = Tally()
        out = Outbox(keep_metrics=False)
        self.counts = CallCounts(out, self.tally)
        self.credits = self.counts.credits
        self.changes = CodeChanges(out, self.tally)
        self.normalize = Normalizer()
        self.seen: set[int] = set()  # hashes of event ids
        self.current: _Interaction | None = None
        self.main = _Agent(None)
        self.agents: dict[str | None, _Agent] = {None: self.main}
        self.last_ended: str | None = None  # the id of the interaction that ended last
        self.tools: dict[str, _Tool] = {}
        self.subagents: dict[str, object] = {}
        self.cut_tools: set[str] = set()
        self.cut_subagents: set[str] = set()
        self.held_tools: dict[str, tuple[_Tool, ToolEnd]] = {}
        self.requests: dict[str, tuple[str, int, str | None]] = {}

    # ------------------------------------------------------------ the model's generic steps (SessionModel.feed)

    def feed(self, event: Event) -> None:
        key = hash(event.id)  # as the model keeps them
        if key in self.seen:  # the model counts and skips it (DUPLICATE_ID): not mirrored
            raise Unsure("a duplicate event id")
        self.seen.add(key)
        for canonical in self.normalize(event):
            kind = canonical.type
            if self.ended is not None or kind == "session.resume":
                self._ending(kind)
            stamp = canonical.timestamp_ns
            self.tally.at_ns = stamp
            if stamp > self.last_event_ns:
                if not self.last_event_ns:
                    self.tally.first_event_ns = stamp
                self.last_event_ns = stamp
            handler = _HANDLERS.get(kind)
            if handler is not None:
                handler(self, canonical)

    def _ending(self, kind: str) -> None:
        """A resume settles what a crash left open; any event but a shutdown reopens an ended session."""
        if kind == "session.resume" and self.ended is None and not self.quiescent:
            self._settle(END_INCOMPLETE)
        if self.ended is not None and kind != "session.shutdown":
            self.ended = None

    @property
    def quiescent(self) -> bool:
        return self.current is None and not self._work_open

    @property
    def _work_open(self) -> bool:
        return bool(self.tools or self.subagents) or self.turns_open()

    def turns_open(self) -> bool:
        return any(agent.turn is not None for agent in self.agents.values())

    @property
    def confirmable_end(self) -> str | None:
        current = self.current
        if current is None or self.tools or self.main.turn is not None:
            return None
        if self.subagents:  # a loop that looks finished while a sub-agent runs: models before and after main's
            raise Unsure("a loop that looks finished while a sub-agent runs")  # merge of background agents differ
        return current.pending_end

    @property
    def state(self) -> str:
        if self.requests:
            return WAITING_USER
        if self.tools:
            return WAITING_TOOL
        if self.turns_open():
            return WORKING
        return IDLE

    def summary(self) -> SessionSummary:
        """As SessionModel.summary."""
        oldest = min(self.tools.values(), key=lambda tool: tool.start_ns, default=None)
        waiting = (oldest.name, oldest.start_ns) if oldest is not None else (None, 0)
        current = self.current
        first = min(self.requests.values(), key=lambda r: r[1], default=None)
        return make_summary(self.session_id, self.state, self.ended, self.facts, self.tally, self.last_event_ns,
                            waiting, running_tools=len(self.tools), confirms=self.confirmable_end,
                            cut_off_end=(current.pending_end or END_INCOMPLETE) if current is not None else None,
                            asking=(first[0], first[1]) if first is not None else None)

    def _settle(self, reason: str) -> None:
        if (how := self.confirmable_end) is not None:
            self._end(how)
        self._close_everything(reason)

    def _close_everything(self, reason: str) -> None:
        had_open = self._work_open
        self._cut_off()
        for agent in self.agents.values():
            agent.turn = None
        self.requests.clear()
        if self.current is not None:
            self._end(END_INCOMPLETE if reason == END_INCOMPLETE or had_open else reason)
        self.ended = reason

    # ------------------------------------------------------------ the agent loop (AgentLoop)

    def _agent(self, event: Event) -> _Agent:
        agent = self.agents.get(event.agent_id)
        if agent is None:
            parent_call = event.data.get("parentToolCallId")
            if not isinstance(parent_call, str):
                parent_call = None
            span: object | None = self.subagents.get(parent_call) if parent_call is not None else None
            if span is None and parent_call is not None and parent_call in self.tools:
                span = self.tools[parent_call]
            agent = self.agents[event.agent_id] = _Agent(span)
        return agent

    def _interaction_for(self, event: Event) -> _Interaction:
        current = self.current
        if current is None:
            if self.last_ended is not None and event.agent_id is None and event.interaction_id == self.last_ended:
                return self._continue_after()
            current = self._open(event.interaction_id or f"implicit-{event.id}")
        return current

    def _work_parent(self, event: Event, agent: _Agent) -> None:
        """Where the model hangs a call or tool: it opens an interaction when there is nowhere else."""
        if agent.turn is None and agent.invoke is None:
            self._interaction_for(event)

    def _continue_after(self) -> _Interaction:
        if self.current is not None:
            self._end(self.current.pending_end or END_IDLE)
        assert self.last_ended is not None
        interaction = self.current = _Interaction(self.last_ended)
        self.main.invoke = interaction
        return interaction

    def _open(self, interaction_id: str) -> _Interaction:
        interaction = self.current = _Interaction(interaction_id)
        self.main.invoke = interaction
        self.tally.interactions += 1
        return interaction

    def _end(self, how: str) -> None:
        current = self.current
        if current is None:
            return
        self.current = None
        self.last_ended = current.id
        self.tally.last_end = how

    def _cut_off(self) -> None:
        for _tool in self.tools.values():
            self._count_tool(INCOMPLETE)
        self.cut_tools.update(self.tools)
        self.tools.clear()
        spans = list(self.subagents.values())
        self.cut_subagents.update(self.subagents)
        self.subagents.clear()
        for span in spans:
            self._close_agent_turns(span)
        for call_id in list(self.held_tools):
            self._release_held(call_id)

    def _close_agent_turns(self, span: object) -> None:
        for agent_id, agent in list(self.agents.items()):
            if agent_id is not None and agent.invoke is span:
                del self.agents[agent_id]

    # ------------------------------------------------------------ handlers (SessionModel._on_*)

    def _on_session_start(self, event: Event) -> None:
        self.facts = self.facts.merged(SessionFacts.of(event))
        if event.type != "session.start":
            self.counts.new_process()
            self.changes.new_process()

    def _on_model_change(self, event: Event) -> None:
        model = as_str(event.data.get("newModel")) or as_str(event.data.get("model"))
        if event.agent_id is None and model:
            self.facts = replace(self.facts, model=model)

    def _on_user_message(self, event: Event) -> None:
        message = UserMessage.of(event)
        if message.for_subagent:
            return
        interaction_id = message.interaction_id or f"implicit-{event.id}"
        current = self.current
        if current is not None:
            if current.id == interaction_id:
                return  # steering
            self._end(current.pending_end or END_INCOMPLETE)
        interaction = self._open(interaction_id)
        if message.nudge:
            self.tally.nudges += 1
            interaction.autopilot = True

    def _on_nothing(self, event: Event) -> None:
        """system.message: read only with content capture, which this never has."""

    def _on_turn_start(self, event: Event) -> None:
        agent = self._agent(event)
        interaction = self._interaction_for(event)
        if event.agent_id is None and interaction.pending_end is not None:
            self._continue_after()
        agent.turn = _Turn(event.turn_id or "?")
        self.tally.turns += 1

    def _on_turn_end(self, event: Event) -> None:
        agent = self._agent(event)
        turn = agent.turn
        if turn is None or (event.turn_id is not None and event.turn_id != turn.turn_id):
            return
        if any(tool.turn is turn for tool, _view in self.held_tools.values()):
            # Its task call returned while the sub-agent runs on (a background sub-agent): the model keeps such a
            # turn open until the sub-agent ends. Not mirrored.
            raise Unsure("a turn that ends before its sub-agent")
        agent.turn = None
        current = self.current
        if (event.agent_id is None and current is not None and not turn.requested_tools and not turn.truncated
                and current.pending_end is None):
            current.pending_end = END_IDLE

    def _on_assistant_message(self, event: Event) -> None:
        turn = self._agent(event).turn
        if turn is None:
            return
        if not any(key in event.data for key in _ANSWER_KEYS):
            raise Unsure("a message that is no model's answer")  # the model reads it apart (after a notification)
        turn.truncated = False
        if requested_tools(event):
            turn.requested_tools = True

    def _on_usage_record(self, event: Event) -> None:
        usage = Usage.of(event)
        if usage is None:
            return
        agent = self._agent(event)
        current = self.current
        self._work_parent(event, agent)
        nudge = current is not None and current.autopilot
        fields = usage.fields
        model = usage.model or self.facts.model or UNKNOWN_MODEL
        turn = agent.turn
        tokens = {}
        for key, _attr, label in USAGE_TOKENS:
            value = fields.get(key)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                tokens[label] = int(value)
        tally = self.tally
        tally.add(model, CALLS, 1)
        cost = as_num(fields.get("cost"))
        if fields.get("initiator") == "user" and cost > 0:
            if nudge:
                tally.nudge_premium_requests += cost
            self.counts.count_premium(model, cost)
        self.credits.call(usage, model, Totals(), nudge=nudge)
        if turn is not None:
            turn.llm_calls += 1
            turn.truncated = fields.get("finishReason") == "length"
        for label, value in tokens.items():
            if value > 0:
                self.counts.count_tokens(model, label, value)

    def _on_usage_checkpoint(self, event: Event) -> None:
        self.credits.checkpoint(event.data)

    def _on_tool_start(self, event: Event) -> None:
        view = ToolStart.of(event)
        if view.call_id is None:
            return
        agent = self._agent(event)
        self._work_parent(event, agent)
        previous = self.tools.pop(view.call_id, None)
        if previous is not None:
            self._count_tool(INCOMPLETE)
            self.cut_tools.add(view.call_id)
        self.tools[view.call_id] = _Tool(view.name, event.timestamp_ns, agent)

    def _on_tool_complete(self, event: Event) -> None:
        view = ToolEnd.of(event)
        tool = self.tools.pop(view.call_id, None) if view.call_id else None
        if tool is None:
            self.cut_tools.discard(view.call_id)
            return
        if view.call_id in self.subagents:
            self.held_tools[view.call_id] = (tool, view)
            return
        self._count_tool("failure" if view.failed else SUCCESS)

    def _release_held(self, call_id: str | None) -> None:
        held = self.held_tools.pop(call_id, None) if call_id else None
        if held is not None:
            self._count_tool("failure" if held[1].failed else SUCCESS)

    def _count_tool(self, outcome: str) -> None:
        self.tally.tool_calls += 1
        if outcome not in (SUCCESS, INCOMPLETE):
            self.tally.tool_failures += 1

    def _on_subagent_started(self, event: Event) -> None:
        view = SubagentStart.of(event)
        call_id = view.call_id
        if call_id is None:
            return
        if call_id not in self.tools:
            self._interaction_for(event)
        if event.agent_id is not None and self.current is None:
            raise Unsure("a sub-agent started outside any interaction")  # the model opens one for it: not mirrored
        previous = self.subagents.pop(call_id, None)
        span = self.subagents[call_id] = object()
        if previous is not None:
            self._close_agent_turns(previous)
        if event.agent_id is not None:
            known = self.agents.get(event.agent_id)
            if known is None:
                self.agents[event.agent_id] = _Agent(span)
            else:
                known.invoke = span

    def _on_subagent_end(self, event: Event) -> None:
        view = SubagentEnd.of(event)
        span = self.subagents.pop(view.call_id, None) if view.call_id else None
        if span is None:
            self.cut_subagents.discard(view.call_id)
            return
        self._close_agent_turns(span)
        self._release_held(view.call_id)

    def _on_task_complete(self, event: Event) -> None:
        if event.agent_id is None and self.current is not None:
            self.current.pending_end = END_TASK_COMPLETE

    def _on_session_error(self, event: Event) -> None:
        self._agent(event)
        if event.agent_id is None and self.current is not None:
            self.current.pending_end = END_ERROR

    def _on_user_request(self, event: Event) -> None:
        asked = user_request(event)
        tool = self.tools.get(asked.call_id) if asked.call_id else None
        self.requests[request_id(event) or event.id] = (asked.describe(tool.name if tool is not None else None),
                                                        event.timestamp_ns, asked.call_id)

    def _on_user_answer(self, event: Event) -> None:
        answered = request_id(event)
        if answered in self.requests:
            del self.requests[answered]
        if not answered:
            self.requests = {}

    def _on_shutdown(self, event: Event) -> None:
        metrics = event.data.get("modelMetrics")
        cumulative = self.normalize.cumulative_totals
        self.counts.reconcile(metrics, cumulative=cumulative, tokens=self.normalize.synthesizes_calls)
        self.credits.shutdown(metrics, cumulative=cumulative)
        self.changes.shutdown(event.data, cumulative=cumulative, model=self.facts.model or UNKNOWN_MODEL)
        self.counts.new_process()
        self.changes.new_process()
        if (how := self.confirmable_end) is not None:
            self._end(how)
        self._close_everything(END_SHUTDOWN)


_ANSWER_KEYS = ("turnId", "interactionId", "model")  # an assistant.message with none of them answers no turn
_HANDLERS: dict[str, Any] = {
    "session.start": QuickSession._on_session_start,
    "session.resume": QuickSession._on_session_start,
    "session.model_change": QuickSession._on_model_change,
    "user.message": QuickSession._on_user_message,
    "system.message": QuickSession._on_nothing,
    "assistant.turn_start": QuickSession._on_turn_start,
    "assistant.turn_end": QuickSession._on_turn_end,
    "session.usage_record": QuickSession._on_usage_record,
    "session.usage_checkpoint": QuickSession._on_usage_checkpoint,
    "assistant.message": QuickSession._on_assistant_message,
    "tool.execution_start": QuickSession._on_tool_start,
    "tool.execution_complete": QuickSession._on_tool_complete,
    "subagent.started": QuickSession._on_subagent_started,
    "subagent.completed": QuickSession._on_subagent_end,
    "subagent.failed": QuickSession._on_subagent_end,
    "session.task_complete": QuickSession._on_task_complete,
    "session.error": QuickSession._on_session_error,
    **{f"{kind}.requested": QuickSession._on_user_request for kind in USER_REQUESTS},
    **{f"{kind}.completed": QuickSession._on_user_answer for kind in USER_REQUESTS},
    "session.shutdown": QuickSession._on_shutdown,
}


MIRRORED = frozenset(_HANDLERS)  # the event types whose handlers this mirrors
