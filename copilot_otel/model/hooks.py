"""User hooks (hook.start .. hook.end): a span per run, with its outcome; what a hook denied or blocked says so.

The CLI's own export keeps hooks as span events of its invoke_agent span; the GenAI conventions name no hook
operation, so each run is a span of its own here (``hook <hookType>``, the CLI's ``github.copilot.hook.*`` keys),
under the work it ran in. A hook that runs before a prompt's interaction exists (sessionStart,
userPromptTransformed) waits for that interaction and hangs under its root, which starts when the prompt was
submitted; one outside any interaction (sessionStart, sessionEnd) is a root of its own.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from msgspec import Struct

from ..decode.events import Event
from ..vocab import INCOMPLETE, OUT_OF_ORDER
from . import attrs as A
from .open_spans import OpenSpan, Outbox
from .records import KIND_INTERNAL, STATUS_OK, span_id_for, trace_id_for
from .spanattrs import Capture

# Hooks that run on a prompt before its interaction starts: they belong to the interaction that follows.
BEFORE_PROMPT = frozenset({"userPromptSubmitted", "userPromptTransformed"})
ALLOW, DENY, BLOCK, SUCCESS, FAILURE = "allow", "deny", "block", "success", "failure"


class OpenHook(Struct):
    """A hook run: its span once it has a parent, or what it will need to make one."""

    invocation_id: str
    hook_type: str
    start_ns: int
    span_id: int
    span: OpenSpan | None = None
    end_ns: int | None = None  # ended before it had a parent (kept for the next interaction)
    end_event: str | None = None  # the id of its hook.end


def outcome(data: Mapping[str, Any], tools: set[str]) -> tuple[str, list[str], str | None]:
    """A hook.end's outcome, the running tool calls it denied, and the reason it gave (hook-written text)."""
    output = data.get("output")
    if data.get("success") is False:
        return FAILURE, [], None
    if not isinstance(output, dict):
        return SUCCESS, [], None
    if output.get("decision") == "block":
        reason = output.get("reason")
        return BLOCK, [], reason if isinstance(reason, str) else None
    decision = output.get("permissionDecision")
    denied = [key for key, value in output.items() if key in tools and isinstance(value, str)]
    if denied:  # the CLI's record of a batch of tool calls: call id -> "Denied by preToolUse hook: <reason>"
        return DENY, denied, str(output[denied[0]])
    if decision in (ALLOW, DENY):
        reason = output.get("permissionDecisionReason")
        return str(decision), [], reason if isinstance(reason, str) else None
    return SUCCESS, [], None


class HookBook:
    """The hook runs open now, and those that ended waiting for an interaction."""

    def __init__(self, session_id: str, out: Outbox, capture: Capture) -> None:
        self.session_id = session_id
        self.out = out
        self.capture = capture
        self.open: dict[str, OpenHook] = {}
        self.waiting: list[OpenHook] = []  # ended before the interaction they belong to started
        # Each hook.end's place, once final: (its event id, (trace id, span id) of the hook's span, or None when
        # no run of that hook was open). A waiting hook's place is known when it is adopted or the session ends.
        self.placed: list[tuple[str, tuple[int, int] | None]] = []

    def take_placed(self) -> list[tuple[str, tuple[int, int] | None]]:
        """The places found since the last take."""
        placed, self.placed = self.placed, []
        return placed

    def _attributes(self, hook: OpenHook) -> dict[str, Any]:
        return {A.GEN_AI_CONVERSATION_ID: self.session_id, A.COPILOT_HOOK_TYPE: hook.hook_type,
                A.COPILOT_HOOK_INVOCATION_ID: hook.invocation_id}

    def _span(self, hook: OpenHook, parent: OpenSpan | None) -> OpenSpan:
        name = f"{A.HOOK_SPAN} {hook.hook_type}"
        if parent is not None:
            return parent.child(hook.span_id, name, KIND_INTERNAL, hook.start_ns, self._attributes(hook))
        return OpenSpan(trace_id_for(self.session_id, f"hook\x00{hook.invocation_id}"), hook.span_id, None, name,
                        KIND_INTERNAL, hook.start_ns, self._attributes(hook))

    @staticmethod
    def before_prompt(event: Event) -> bool:
        """A main-agent hook that runs on a prompt before its interaction starts."""
        hook_type = event.data.get("hookType")
        return event.agent_id is None and isinstance(hook_type, str) and hook_type in BEFORE_PROMPT

    def start(self, event: Event, parent: OpenSpan | None, *, wait: bool) -> None:
        """hook.start under ``parent``; with none, it waits for the next interaction's root (``wait``) or is a
        root of its own."""
        invocation = event.data.get("hookInvocationId")
        if not isinstance(invocation, str):
            self.out.anomaly(OUT_OF_ORDER, event)
            return
        hook_type = event.data.get("hookType")
        hook = OpenHook(invocation, hook_type if isinstance(hook_type, str) else "unknown", event.timestamp_ns,
                        span_id_for(self.session_id, event.id))
        if parent is not None or not wait:
            hook.span = self._span(hook, parent)
        self.open[invocation] = hook

    def end(self, event: Event, tools: dict[str, OpenSpan], agent_span: OpenSpan | None) -> str | None:
        """hook.end: its span ends with its outcome; the tool calls it denied, and the agent span whose stop it
        blocked (``agent_span``), say so. Returns the outcome (None: no such run was open)."""
        invocation = event.data.get("hookInvocationId")
        hook = self.open.pop(invocation, None) if isinstance(invocation, str) else None
        if hook is None:
            self.out.anomaly(OUT_OF_ORDER, event)
            self.placed.append((event.id, None))
            return None
        hook.end_event = event.id
        how, denied, reason = outcome(event.data, set(tools))
        for call_id in denied:
            tools[call_id].attributes[A.COPILOT_HOOK_DENIED_BY] = hook.hook_type
            tools[call_id].attributes[A.COPILOT_HOOK_INVOCATION_ID] = hook.invocation_id
        if how == BLOCK and agent_span is not None:
            agent_span.attributes[A.COPILOT_HOOK_BLOCKED_BY] = hook.hook_type
        attributes = {A.COPILOT_HOOK_OUTCOME: how}
        shown = self.capture.text(reason)
        if shown is not None:
            attributes[A.COPILOT_HOOK_REASON] = shown
        if hook.span is None:
            hook.end_ns = event.timestamp_ns
            hook.span = self._span(hook, None)
            hook.span.attributes.update(attributes)
            self.waiting.append(hook)
            return how
        hook.span.attributes.update(attributes)
        self._close(hook, hook.span, event.timestamp_ns, how, event.data.get("error"))
        return how

    def _close(self, hook: OpenHook, span: OpenSpan, end_ns: int, how: str, error: Any) -> None:
        if hook.end_event is not None:
            self.placed.append((hook.end_event, (span.trace_id, span.span_id)))
        if how == FAILURE:
            message = error.get("message") if isinstance(error, dict) else None
            self.out.span(span.close(end_ns, message=self.capture.text(message) or "", error_type="hook_failed"))
        else:
            self.out.span(span.close(end_ns, status=STATUS_OK))

    def adopt(self, root: OpenSpan) -> None:
        """A new interaction's root: the hooks that ran on its prompt hang under it (it starts with them)."""
        for hook in [*self.waiting, *self.open.values()]:
            if hook.span is None or hook.end_ns is not None:
                root.start_ns = min(root.start_ns, hook.start_ns)
        for hook in self.waiting:
            assert hook.span is not None and hook.end_ns is not None  # set when it ended waiting
            span = root.child(hook.span_id, hook.span.name, KIND_INTERNAL, hook.start_ns, hook.span.attributes)
            self._close(hook, span, hook.end_ns, str(hook.span.attributes.get(A.COPILOT_HOOK_OUTCOME)), None)
        self.waiting = []
        for hook in self.open.values():
            if hook.span is None:
                hook.span = self._span(hook, root)

    def finish(self, end_ns: int) -> None:
        """The session ended: the hooks still waiting are roots of their own; those still running are cut off."""
        for hook in self.waiting:
            assert hook.span is not None and hook.end_ns is not None
            self._close(hook, hook.span, hook.end_ns, str(hook.span.attributes.get(A.COPILOT_HOOK_OUTCOME)), None)
        self.waiting = []
        for hook in self.open.values():
            span = hook.span or self._span(hook, None)
            self.out.span(span.close(max(end_ns, hook.start_ns), error_type=INCOMPLETE))
        self.open.clear()

    def running(self) -> list[OpenSpan]:
        """The spans of the hook runs still open."""
        return [hook.span for hook in self.open.values() if hook.span is not None]
