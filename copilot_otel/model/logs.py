"""The session's events as OpenTelemetry log records: what happened, when, and the span it happened in.

Claude Code, Codex and Gemini CLI export events like these (a prompt submitted, an API request or error,
a tool's decision and result) for Loki, Elasticsearch or any OTLP logs backend. :class:`EventLog` makes one
:class:`LogRecord` per event worth one, from the event and the span the model holds open for it
(``SessionModel.span_context``); it touches no clock, file or socket. A hook's record carries its hook span's ids,
which the model may settle only later (a hook that ran before its prompt's interaction existed hangs under that
interaction's root once it starts): the record is held until the model places it (:meth:`EventLog.place`).

A log record has no id of its own: its time is the event's timestamp and the event's id is an attribute
(``github.copilot.event.id``), so a replay makes the same records and a backend can merge them. Prompt,
output and error text appear only with content capture on, as on spans.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

from msgspec import Struct
from msgspec.structs import replace

from ..decode.events import Event
from ..decode.payloads import SessionError, ToolEnd, Usage, UserMessage, as_int, as_str, permission_result, user_request
from ..vocab import USER_REQUESTS
from . import attrs as A
from .records import span_id_for
from .spanattrs import Capture

# Severity numbers of the OpenTelemetry log data model.
SEVERITY_INFO = 9
SEVERITY_WARN = 13
SEVERITY_ERROR = 17
SEVERITY_TEXT = {SEVERITY_INFO: "INFO", SEVERITY_WARN: "WARN", SEVERITY_ERROR: "ERROR"}

# event.name of each record: Claude Code's and Codex's names (user_prompt, tool_decision, tool_result,
# api_request, api_error) under this project's one custom namespace (attrs.py).
USER_PROMPT = "github.copilot.user_prompt"
PERMISSION_REQUEST = "github.copilot.permission_request"
TOOL_DECISION = "github.copilot.tool_decision"
TOOL_RESULT = "github.copilot.tool_result"
API_REQUEST = "github.copilot.api_request"
API_ERROR = "github.copilot.api_error"
HOOK = "github.copilot.hook"
COMPACTION = "github.copilot.compaction"
SESSION_END = "github.copilot.session_end"
EVENT_NAMES = (USER_PROMPT, PERMISSION_REQUEST, TOOL_DECISION, TOOL_RESULT, API_REQUEST, API_ERROR, HOOK,
               COMPACTION, SESSION_END)

EVENT_NAME = "event.name"
EVENT_ID = "github.copilot.event.id"
EVENT_TYPE = "github.copilot.event.type"
PROMPT = "github.copilot.prompt"  # the prompt's text: with content capture only
PROMPT_LENGTH = "github.copilot.prompt.length"
DECISION = "github.copilot.decision"  # accept or reject
DECISION_SOURCE = "github.copilot.decision.source"  # who decided (the CLI's decisionSource)
PERMISSION_KIND = "github.copilot.permission.kind"
REQUEST_KIND = "github.copilot.request.kind"  # permission, user_input, elicitation, exit_plan_mode
REQUEST_ID = "github.copilot.request.id"
TOOL_SUCCESS = "github.copilot.tool.success"
TOOL_DENIED = "github.copilot.tool.denied"
DURATION = "github.copilot.duration"  # seconds, where the record ends something that started
HOOK_TYPE = "github.copilot.hook.type"
HOOK_SUCCESS = "github.copilot.hook.success"
HOOK_DECISION = "github.copilot.hook.decision"  # what a hook's output decided (deny, block, ...), when it says
SHUTDOWN_TYPE = "github.copilot.shutdown.type"
API_DURATION = "github.copilot.api.duration"  # seconds the session's LLM calls took, as its shutdown says
ERROR_MESSAGE = "github.copilot.error.message"  # with content capture only: a provider's text may echo the prompt

log = logging.getLogger(__name__)

LOG_EVENT_TYPES = ("hook.start", "hook.end")  # read for logs alone (the model skims them otherwise)
_DENIED_CODES = ("denied", "rejected")
_DECISION_KEYS = ("permissionDecision", "decision")
_MAX_WORD = 64  # a decision or kind taken from the log: a word, not a text


class LogRecord(Struct, frozen=True):
    """One log record, ready to be encoded for OTLP: the event's time, the span it belongs to (0: none)."""

    time_ns: int
    event_name: str
    severity: int
    attributes: Mapping[str, Any]
    trace_id: int = 0
    span_id: int = 0
    body: str | None = None


Context = tuple[int, int, int, str | None]  # (trace id, span id, start ns, tool name) of an open span


def _word(value: Any) -> str | None:
    text = as_str(value)
    return text[:_MAX_WORD] if text else None


class EventLog:
    """Makes the log records of one session's events: ``before`` reads the span an event is about while it is
    still open, ``after`` makes the records once the model applied it; ``take`` hands them over."""

    def __init__(self, session_id: str, capture: Capture) -> None:
        self.session_id = session_id
        self.capture = capture
        self._records: list[LogRecord] = []
        self._hooks: dict[str, int] = {}  # hookInvocationId -> hook.start's time, while the hook runs
        self._source: Event | None = None  # the logged event whose records are being made
        self._failed: set[str] = set()  # event types whose record could not be made (said once each)
        self._unplaced: dict[str, LogRecord] = {}  # hook.end's event id -> its record, until its span is placed

    @property
    def pending(self) -> bool:
        return bool(self._records)

    def place(self, placed: Iterable[tuple[str, tuple[int, int] | None]]) -> None:
        """The model settled where hook runs' spans are: each (hook.end's event id, (trace id, span id) of its span,
        or None when it made no span: the record keeps the span it was logged in) releases that event's record."""
        for event_id, ids in placed:
            record = self._unplaced.pop(event_id, None)
            if record is not None:
                self._records.append(record if ids is None else replace(record, trace_id=ids[0], span_id=ids[1]))

    def take(self) -> tuple[LogRecord, ...]:
        """The records made since the last take."""
        records, self._records = tuple(self._records), []
        return records

    def after(self, event: Event, before: Context | None, now: Context | None, source: Event | None = None, *,
              made_call: bool = False) -> None:
        """Make ``event``'s records: ``before`` is the span it was about before the model applied it, ``now``
        after (a prompt opens its interaction's root). ``source``: the event as the log holds it, when ``event`` is
        what an older CLI's event reads as (decode/normalize.py): the records name the logged one. ``made_call``:
        the model made an LLM call's span from ``event`` (a usage report the other source gave first makes none)."""
        self._source = source if source is not None else event
        maker = _MAKERS.get(event.type)
        if event.type in _USAGE_TYPES:
            maker = EventLog._api_request if made_call else None
        elif maker is None and event.type.endswith(".requested") and event.type.split(".", 1)[0] in USER_REQUESTS:
            maker = EventLog._asked
        if maker is None:
            return
        try:
            maker(self, event, before, now)
        except Exception:  # a bug here must cost one record, never the event's spans or the reader
            if event.type not in self._failed:
                self._failed.add(event.type)
                log.exception("session %s, line %d: cannot make the log record of a %s event; it goes without "
                              "(said once per type and session)", self.session_id, self._source.line, event.type)

    def _add(self, event: Event, name: str, severity: int, context: Context | None, attributes: dict[str, Any],
             body: str | None = None, *, held: bool = False) -> None:
        source = self._source if self._source is not None else event
        head: dict[str, Any] = {EVENT_NAME: name, A.GEN_AI_CONVERSATION_ID: self.session_id, EVENT_ID: source.id,
                                EVENT_TYPE: source.type}
        interaction = event.interaction_id
        if interaction:
            head[A.COPILOT_INTERACTION_ID] = interaction
        head.update((key, value) for key, value in attributes.items() if value is not None)
        trace_id, span_id = (context[0], context[1]) if context is not None else (0, 0)
        record = LogRecord(event.timestamp_ns, name, severity, head, trace_id, span_id, body)
        if held:
            self._unplaced[event.id] = record
        else:
            self._records.append(record)

    def _since(self, start_ns: int, end_ns: int) -> float:
        return max(0, end_ns - start_ns) / 1e9

    # ------------------------------------------------------------ one maker per event type

    def _prompt(self, event: Event, _before: Context | None, now: Context | None) -> None:
        message = UserMessage.of(event)
        if message.for_subagent:  # a sub-agent's prompt is its parent's tool call, not a user's
            return
        content = message.content if isinstance(message.content, str) else None
        text = self.capture.text(content)
        self._add(event, USER_PROMPT, SEVERITY_INFO, now, {
            PROMPT_LENGTH: len(content) if content is not None else None,
            A.COPILOT_AUTOPILOT_CONTINUATION: message.nudge,
            PROMPT: text,
        }, body=text)

    def _asked(self, event: Event, before: Context | None, _now: Context | None) -> None:
        asked = user_request(event)
        self._add(event, PERMISSION_REQUEST, SEVERITY_INFO, before, {
            REQUEST_KIND: _word(asked.kind), PERMISSION_KIND: _word(asked.permission),
            REQUEST_ID: as_str(event.data.get("requestId")), A.GEN_AI_TOOL_CALL_ID: asked.call_id,
            A.GEN_AI_TOOL_NAME: before[3] if before is not None and asked.call_id else None,
        })

    def _answered(self, event: Event, before: Context | None, _now: Context | None) -> None:
        result = _word(permission_result(event)) or "unknown"
        denied = result.startswith(("denied", "reject"))
        self._add(event, TOOL_DECISION, SEVERITY_WARN if denied else SEVERITY_INFO, before, {
            DECISION: "reject" if denied else "accept", A.COPILOT_PERMISSION_RESULT: result,
            DECISION_SOURCE: _word(event.data.get("decisionSource")), REQUEST_ID: as_str(event.data.get("requestId")),
            A.GEN_AI_TOOL_CALL_ID: as_str(event.data.get("toolCallId")),
        })

    def _tool_result(self, event: Event, before: Context | None, _now: Context | None) -> None:
        view = ToolEnd.of(event)
        denied = view.error_code in _DENIED_CODES
        attributes: dict[str, Any] = {
            A.GEN_AI_TOOL_NAME: (before[3] if before is not None else None) or _word(event.data.get("toolName")),
            A.GEN_AI_TOOL_CALL_ID: view.call_id,
            TOOL_SUCCESS: view.success, TOOL_DENIED: denied or None,
            A.ERROR_TYPE: None if view.success else _word(view.error_code) or "tool_error",
            A.PROCESS_EXIT_CODE: view.exit_code,
            DURATION: self._since(before[2], event.timestamp_ns) if before is not None and view.call_id else None,
            ERROR_MESSAGE: None if view.success else self.capture.text(view.error_message),
        }
        self._add(event, TOOL_RESULT, SEVERITY_INFO if view.success else SEVERITY_WARN, before, attributes)

    def _api_request(self, event: Event, before: Context | None, now: Context | None) -> None:
        view = Usage.of(event)
        if view is None:
            return
        usage = view.fields
        attributes: dict[str, Any] = {A.GEN_AI_REQUEST_MODEL: as_str(usage.get("model"))}
        for key, attribute, _label in A.USAGE_TOKENS:
            attributes[attribute] = _count(usage.get(key))
        duration = usage.get("duration")
        if isinstance(duration, (int, float)) and not isinstance(duration, bool) and 0 <= duration < 1e12:
            attributes[DURATION] = duration / 1000
        cost = usage.get("cost")
        if isinstance(cost, (int, float)) and not isinstance(cost, bool) and 0 <= cost < 1e12:
            attributes[A.COPILOT_COST] = float(cost)
        attributes[A.COPILOT_INITIATOR] = _word(usage.get("initiator"))
        # The chat span was made from this event (calls.py): its id is this event's, in the trace of its turn.
        turn = before or now  # the trace the call ran in (``now``: an interaction the call itself opened)
        context = (turn[0], span_id_for(self.session_id, event.id), 0, None) if turn is not None else None
        self._add(event, API_REQUEST, SEVERITY_INFO, context, attributes)

    def _api_error(self, event: Event, before: Context | None, _now: Context | None) -> None:
        if event.type == "model.call_failure":  # live: one failed attempt
            error = SessionError(_word(event.data.get("errorType")) or "llm_call_failed",
                                 as_int(event.data.get("statusCode")), event.data.get("error"))
        else:
            error = SessionError.of(event)
        self._add(event, API_ERROR, SEVERITY_ERROR, before, {
            A.ERROR_TYPE: _word(error.error_type), A.HTTP_RESPONSE_STATUS_CODE: error.status_code,
            A.COPILOT_ERROR_CODE: _word(error.error_code), ERROR_MESSAGE: self.capture.text(error.message),
        })

    def _hook_start(self, event: Event, _before: Context | None, _now: Context | None) -> None:
        invocation = as_str(event.data.get("hookInvocationId"))
        if invocation and len(self._hooks) < 10_000:  # a hook that never ends must not hold memory for good
            self._hooks[invocation] = event.timestamp_ns

    def _hook_end(self, event: Event, before: Context | None, _now: Context | None) -> None:
        data = event.data
        started = self._hooks.pop(as_str(data.get("hookInvocationId")) or "", None)
        success = data.get("success") is not False
        output = data.get("output")
        decision = None
        if isinstance(output, dict):
            decision = next((_word(output[key]) for key in _DECISION_KEYS if _word(output.get(key))), None)
        error = data.get("error")
        self._add(event, HOOK, SEVERITY_INFO if success else SEVERITY_WARN, before, {
            HOOK_TYPE: _word(data.get("hookType")) or "unknown", HOOK_SUCCESS: success, HOOK_DECISION: decision,
            A.GEN_AI_TOOL_CALL_ID: as_str(data.get("toolCallId")),
            DURATION: self._since(started, event.timestamp_ns) if started is not None else None,
            A.ERROR_TYPE: None if success else "hook_failed",
            ERROR_MESSAGE: self.capture.text(error.get("message") if isinstance(error, dict) else error),
        }, held=True)  # the model places it on its hook's span (place)

    def _compaction(self, event: Event, before: Context | None, _now: Context | None) -> None:
        data = event.data
        used = data.get("compactionTokensUsed")
        used = used if isinstance(used, dict) else {}
        failed = data.get("success") is False
        outcome = _word(data.get("outcome"))
        self._add(event, COMPACTION, SEVERITY_WARN if failed else SEVERITY_INFO, before, {
            A.COPILOT_COMPACTION_OUTCOME: outcome, A.GEN_AI_REQUEST_MODEL: _word(used.get("model")),
            A.GEN_AI_USAGE_INPUT_TOKENS: _count(used.get("inputTokens")),
            A.GEN_AI_USAGE_OUTPUT_TOKENS: _count(used.get("outputTokens")),
            A.ERROR_TYPE: (outcome or "compaction_failed") if failed else None,
            DURATION: self._since(before[2], event.timestamp_ns) if before is not None else None,
        })

    def _session_end(self, event: Event, before: Context | None, _now: Context | None) -> None:
        data = event.data
        self._add(event, SESSION_END, SEVERITY_INFO, before, {
            SHUTDOWN_TYPE: _word(data.get("shutdownType")),
            A.COPILOT_PREMIUM_REQUESTS: _number(data.get("totalPremiumRequests")),
            API_DURATION: _number(data.get("totalApiDurationMs"), scale=1e-3),
        })


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 1 << 63 else None


def _number(value: Any, *, scale: float = 1.0) -> float | None:
    if isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value < 1e15:
        return value * scale
    return None


_USAGE_TYPES = frozenset({"session.usage_record", "assistant.usage"})  # one LLM call each, from the file or live
_MAKERS = {
    "user.message": EventLog._prompt,
    "permission.completed": EventLog._answered,
    "tool.execution_complete": EventLog._tool_result,
    "session.error": EventLog._api_error,
    "model.call_failure": EventLog._api_error,
    "hook.start": EventLog._hook_start,
    "hook.end": EventLog._hook_end,
    "session.compaction_complete": EventLog._compaction,
    "session.shutdown": EventLog._session_end,
}
