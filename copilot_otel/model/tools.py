"""The tools and sub-agents running now: their spans, from start to completion or cut-off."""

from __future__ import annotations

from ..decode.events import Event
from ..decode.payloads import SubagentEnd, SubagentStart, ToolEnd, ToolStart
from ..vocab import CANCELLED, FAILURE, INCOMPLETE, OUT_OF_ORDER, SUCCESS, Metric
from . import attrs as A
from . import spanattrs
from .messages import Transcript, result_text
from .open_spans import Agent, OpenSpan, Outbox
from .records import KIND_INTERNAL, STATUS_OK, SpanEvent, span_id_for, trace_id_for
from .spanattrs import Capture
from .summary import Tally


class ToolBook:
    """Open tool spans by toolCallId, and open sub-agent spans by the toolCallId of their task call."""

    def __init__(self, session_id: str, capture: Capture, out: Outbox, tally: Tally, talk: Transcript) -> None:
        self.session_id = session_id
        self.tally = tally
        self.capture = capture
        self.out = out
        self.talk = talk
        self.tools: dict[str, tuple[OpenSpan, Agent]] = {}  # toolCallId -> (span, the agent that called it)
        self.subagents: dict[str, OpenSpan] = {}  # toolCallId of the task call -> invoke_agent span
        # Call ids of tools and sub-agents cut off (abort, crash): their late completion is expected, not an anomaly.
        self.cut_tools: set[str] = set()
        self.cut_subagents: set[str] = set()
        # Task calls that completed while their sub-agent had not yet (its subagent.completed comes a few ms
        # later): held, then ended with it, so that the sub-agent ends at its own event inside its parent.
        self.held_tools: dict[str, tuple[OpenSpan, Agent, int, ToolEnd]] = {}

    def __bool__(self) -> bool:
        """True while a tool or a sub-agent runs."""
        return bool(self.tools or self.subagents)

    def oldest_tool(self) -> OpenSpan | None:
        """The tool that has run longest, of those running now."""
        return min((span for span, _agent in self.tools.values()), key=lambda s: s.start_ns, default=None)

    def open_spans(self) -> list[OpenSpan]:
        """The spans still running."""
        return [span for span, _agent in self.tools.values()] + list(self.subagents.values())

    def start_tool(self, event: Event, view: ToolStart, agent: Agent, parent: OpenSpan | None) -> None:
        """A tool started under ``parent`` (its agent's turn, else where that agent's work hangs; None: a
        command the user ran outside any interaction, a root of its own)."""
        call_id = view.call_id
        assert call_id is not None  # the model hands in only tools with a call id
        attributes = spanattrs.tool(self.session_id, agent.shown, view.name, call_id,
                                    self.capture.text(view.arguments))
        if view.mcp_server is not None:
            attributes[A.COPILOT_MCP_SERVER_NAME] = view.mcp_server
        skill = view.arguments.get("skill") if view.name == "skill" and isinstance(view.arguments, dict) else None
        if isinstance(skill, str):  # the conventions' skill-loading tool call (a name, not content)
            attributes[A.GEN_AI_SKILL_NAME] = skill
        if event.type == "tool.user_requested":
            attributes[A.COPILOT_TOOL_USER_REQUESTED] = True
        name, span_id = f"{A.OP_EXECUTE_TOOL} {view.name}", span_id_for(self.session_id, event.id)
        if parent is None:
            span = OpenSpan(trace_id_for(self.session_id, f"tool\x00{call_id}"), span_id, None, name, KIND_INTERNAL,
                            event.timestamp_ns, attributes)
        else:
            span = parent.child(span_id, name, KIND_INTERNAL, event.timestamp_ns, attributes)
        previous = self.tools.pop(call_id, None)
        if previous is not None:  # started twice: the first never completed
            self._cut(*previous, event.timestamp_ns, INCOMPLETE)
        self.tools[call_id] = (span, agent)

    def complete_tool(self, event: Event, view: ToolEnd) -> None:
        """A tool completed, or failed."""
        entry = self.tools.pop(view.call_id, None) if view.call_id else None
        if entry is None:
            if view.call_id in self.cut_tools:  # e.g. the CLI's "interrupted" record after a resume
                self.cut_tools.discard(view.call_id)
            else:
                self.out.anomaly(OUT_OF_ORDER, event)
            return
        span, agent = entry
        if view.call_id in self.subagents:
            self.held_tools[view.call_id] = (span, agent, event.timestamp_ns, view)
            return
        self._finish(span, agent, event.timestamp_ns, view)

    def _finish(self, span: OpenSpan, agent: Agent, end_ns: int, view: ToolEnd) -> None:
        if view.exit_code is not None:
            span.attributes[A.PROCESS_EXIT_CODE] = view.exit_code
        result = self.capture.text(result_text(view.result))
        if result is not None:
            span.attributes[A.GEN_AI_TOOL_CALL_RESULT] = result
        self.talk.tool_done(agent.talk, str(span.attributes[A.GEN_AI_TOOL_CALL_ID]), view.result,
                            None if view.success else view.error_message or "failed")
        span.attributes[A.COPILOT_TOOL_SUCCESS] = view.success  # the CLI's own flag, true for a failed command
        if not view.failed:
            self.out.span(span.close(end_ns, status=STATUS_OK))
        elif not view.success:
            message = self.capture.text(view.error_message)
            self.out.span(span.close(end_ns, message=message or "", error_type=view.failure_type))
        else:  # a command that exited non-zero: the exit code is no content, it is said with content capture off
            self.out.span(span.close(end_ns, message=view.failure_message, error_type=view.failure_type))
        self._count(span, agent, FAILURE if view.failed else SUCCESS)

    def release_held(self, call_id: str | None, end_ns: int) -> None:
        """End the task call held for its sub-agent, which ended at ``end_ns`` (it ends then, or at its own end)."""
        held = self.held_tools.pop(call_id, None) if call_id else None
        if held is not None:
            span, agent, completed_ns, view = held
            self._finish(span, agent, max(completed_ns, end_ns), view)

    def name_of(self, call_id: str | None) -> str | None:
        """The name of the running tool ``call_id``, if it runs."""
        entry = self.tools.get(call_id) if call_id else None
        return str(entry[0].attributes[A.GEN_AI_TOOL_NAME]) if entry is not None else None

    def waited_on_user(self, call_id: str | None, asked_ns: int, answered_ns: int, result: str | None) -> None:
        """The running tool ``call_id`` waited from ``asked_ns`` to ``answered_ns`` on a person's permission: an
        event on its span, and the wait kept out of its run time (``github.copilot.tool.user_wait.duration``)."""
        entry = self.tools.get(call_id) if call_id else None
        if entry is None:
            return
        span = entry[0]
        wait = max(0, answered_ns - asked_ns) / 1e9
        span.attributes[A.COPILOT_TOOL_USER_WAIT] = span.attributes.get(A.COPILOT_TOOL_USER_WAIT, 0.0) + wait
        span.events.append(SpanEvent(A.COPILOT_PERMISSION_EVENT, answered_ns,
                                     {A.COPILOT_PERMISSION_RESULT: result or "unknown",
                                      A.COPILOT_PERMISSION_WAIT: wait}))

    def _count(self, span: OpenSpan, agent: Agent, outcome: str) -> None:
        tool = str(span.attributes[A.GEN_AI_TOOL_NAME])
        agent.totals.tool_calls += 1
        self.tally.tool_calls += 1
        if outcome not in (SUCCESS, INCOMPLETE):  # cut off by the end of its session: no failure it reported
            self.tally.tool_failures += 1
        self.out.count(Metric.TOOL_CALLS, tool, outcome, span=span)
        server = span.attributes.get(A.COPILOT_MCP_SERVER_NAME)
        if isinstance(server, str):
            self.out.count(Metric.MCP_TOOL_CALLS, server, outcome, span=span)
        waited_ns = int(span.attributes.get(A.COPILOT_TOOL_USER_WAIT, 0.0) * 1e9)  # a person's, not the tool's
        assert span.end_ns is not None  # closed before it counts
        self.out.count(Metric.TOOL_DURATION, tool, value=max(0, span.end_ns - span.start_ns - waited_ns) / 1e9,
                       span=span)

    def _cut(self, span: OpenSpan, agent: Agent, end_ns: int, error_type: str, message: str = "") -> None:
        """End a tool that never completed; it counts with ``error_type`` as its outcome."""
        self.out.span(span.close(end_ns, message=message, error_type=error_type))
        self._count(span, agent, error_type)
        self.cut_tools.add(str(span.attributes[A.GEN_AI_TOOL_CALL_ID]))

    def start_subagent(self, event: Event, view: SubagentStart, fallback_parent: OpenSpan | None) -> OpenSpan | None:
        """A sub-agent started: its span hangs under the task call (or ``fallback_parent``).

        Returns the span of an earlier start of the same call that never ended (now closed), if any.
        """
        assert view.call_id is not None  # the model hands in only sub-agents with a call id
        tool = self.tools.get(view.call_id)
        parent = tool[0] if tool is not None else fallback_parent
        assert parent is not None  # the caller gives a fallback unless the task call runs
        attributes = spanattrs.subagent(self.session_id, view.name, view.call_id)
        span = parent.child(span_id_for(self.session_id, event.id), f"{A.OP_INVOKE_AGENT} {view.name}",
                            KIND_INTERNAL, event.timestamp_ns, attributes)
        previous = self.subagents.pop(view.call_id, None)
        self.subagents[view.call_id] = span
        return previous

    def end_subagent(self, event: Event, view: SubagentEnd) -> OpenSpan | None:
        """The sub-agent's span, taken out of the running ones (None, and an anomaly, if not running)."""
        span = self.subagents.pop(view.call_id, None) if view.call_id else None
        if span is None:
            if view.call_id in self.cut_subagents:  # cut off by an abort; its cancelled end comes after
                self.cut_subagents.discard(view.call_id)
            else:
                self.out.anomaly(OUT_OF_ORDER, event)
            return None
        if view.total_tokens is not None:
            span.attributes[A.COPILOT_SUBAGENT_TOTAL_TOKENS] = view.total_tokens
        if view.tool_calls is not None:
            span.attributes[A.COPILOT_SUBAGENT_TOOL_CALLS] = view.tool_calls
        return span

    def close_subagent(self, span: OpenSpan, event: Event, view: SubagentEnd) -> None:
        """Export a sub-agent's span as its end event says (failed, or done)."""
        if view.failed:
            self.out.span(span.close(event.timestamp_ns, message=self.capture.text(view.error) or "",
                                     error_type=view.error_type or "subagent_failed"))
        elif view.cancelled:
            self.out.span(span.close(event.timestamp_ns, error_type=CANCELLED))
        else:
            self.out.span(span.close(event.timestamp_ns, status=STATUS_OK))
        self.release_held(view.call_id, event.timestamp_ns)

    def cut_off_tools(self, end_ns: int, error_type: str, message: str = "") -> None:
        """End every running tool as ``error_type``."""
        for span, agent in self.tools.values():
            self._cut(span, agent, end_ns, error_type, message)
        self.tools.clear()

    def take_subagents(self) -> list[OpenSpan]:
        """Every running sub-agent span, no longer running (its end event, if it comes, is expected)."""
        spans = list(self.subagents.values())
        self.cut_subagents.update(self.subagents)
        self.subagents.clear()
        return spans

    def background_under(self, turn: OpenSpan) -> bool:
        """A task call of this turn returned while its sub-agent runs on (``mode: background``)."""
        return any(span.parent_span_id == turn.span_id for span, _agent, _ns, _view in self.held_tools.values())

    def release_all_held(self, end_ns: int) -> None:
        """End every task call still held for a sub-agent that was cut off at ``end_ns``."""
        for call_id in list(self.held_tools):
            self.release_held(call_id, end_ns)
