"""The CLI-version layer: any Copilot CLI version's events -> the one shape the session model reads.

Each difference between CLI versions is one small rule here, applied by :class:`Normalizer`
before the model sees an event. A rule fires on what the log itself shows (the version in
``session.start``, or the fields an event has or lacks), never on a guess, so an unknown
future shape passes through unchanged: it loses detail, it never gains wrong detail.

The differences (measured with the real CLI; see README "CLI versions"):

- Before USAGE_RECORD_SINCE there is no ``session.usage_record``: each ``assistant.message``
  stands for one LLM call (``model``; ``apiCallId`` from 1.0.70; ``outputTokens`` 0.0.423-1.0.70).
  It becomes a usage record whose duration runs from the turn's start to the message.
- Up to 1.0.24 sub-agent events have no ``agentId``, only ``data.parentToolCallId``: the agent
  gets the id ``task:<parentToolCallId>``.
- Up to 1.0.24 autopilot nudges are not flagged: only ``transformedContent`` says so.
- ``session.shutdown`` totals are per process up to 1.0.50, for the whole session from 1.0.70.
"""

from __future__ import annotations

from msgspec.structs import replace

from .events import Event

# The first CLI version that writes session.usage_record (one per LLM call).
USAGE_RECORD_SINCE = (1, 0, 93)  # 1.0.92 writes none, 1.0.102 does; none was published between
# How the CLI words an autopilot nudge (the text older versions leave unflagged).
NUDGE_PREFIX = "You have not yet marked the task as complete"
NUDGE_WINDOW = 200  # it follows a "<current_datetime>...</current_datetime>" preamble
SUBAGENT_PREFIX = "task:"
# session.shutdown's modelMetrics count the whole session from this version on (1.0.70 does; up to
# 1.0.50 they count only the process that wrote them, so a resumed session's add up).
CUMULATIVE_TOTALS_SINCE = (1, 0, 70)


def parse_version(text: object) -> tuple[int, ...] | None:
    """'1.0.24' (or '1.0.24-3') -> (1, 0, 24); None when it is not a version."""
    if not isinstance(text, str):
        return None
    parts = text.split("-", 1)[0].split(".")
    # ASCII digits only: str.isdigit() also takes '¹', which int() refuses
    if not parts or not all(part.isascii() and part.isdigit() for part in parts):
        return None
    return tuple(int(part) for part in parts)


class Normalizer:
    """Per session: rewrites one CLI version's events into the shape the model reads."""

    __slots__ = ("_turn_start", "cumulative_totals", "synthesizes_calls", "version")

    def __init__(self) -> None:
        self.version: tuple[int, ...] | None = None
        self.synthesizes_calls = False  # True for CLIs that write no usage records
        self.cumulative_totals = True  # session.shutdown totals cover every process of the session, not the last
        self._turn_start: dict[str | None, int] = {}  # agent -> timestamp of its open turn's start

    def __call__(self, event: Event) -> tuple[Event, ...]:
        """The events the model should apply for ``event`` (usually just ``event``)."""
        kind = event.type
        if kind == "session.start" or kind == "session.resume":
            self._learn_version(event)
        data = event.data
        if event.agent_id is None:
            parent_call = data.get("parentToolCallId")
            if isinstance(parent_call, str) and parent_call:
                event = replace(event, agent_id=SUBAGENT_PREFIX + parent_call)
        if kind == "user.message":
            return (_flag_nudge(event),)
        if not self.synthesizes_calls:
            return (event,)
        if kind == "assistant.turn_start":
            self._turn_start[event.agent_id] = event.timestamp_ns
        elif kind == "assistant.message":
            return self._call_of(event), event
        return (event,)

    def _learn_version(self, event: Event) -> None:
        version = parse_version(event.data.get("copilotVersion"))
        if version is not None:
            self.version = version
            self.synthesizes_calls = version < USAGE_RECORD_SINCE
            self.cumulative_totals = version >= CUMULATIVE_TOTALS_SINCE

    def _call_of(self, message: Event) -> Event:
        """The usage record an older CLI would have written for the LLM call behind ``message``."""
        data = message.data
        usage: dict = {}
        for key in ("model", "apiCallId", "outputTokens"):
            if key in data:
                usage[key] = data[key]
        started = self._turn_start.get(message.agent_id)
        if started is not None and started <= message.timestamp_ns:
            usage["duration"] = (message.timestamp_ns - started) / 1e6
        call = {"usage": usage}
        if "parentToolCallId" in data:  # a sub-agent's call: where its agent hangs
            call["parentToolCallId"] = data["parentToolCallId"]
        return Event("session.usage_record", message.timestamp_ns, f"{message.id}\x00call", call,
                     message.parent_id, message.agent_id, False, message.offset, message.line)


def _flag_nudge(event: Event) -> Event:
    """An unflagged nudge: no text typed by anyone, and the CLI's nudge wording after its date preamble."""
    data = event.data
    if data.get("isAutopilotContinuation") is True or data.get("content"):
        return event
    text = data.get("transformedContent")
    if isinstance(text, str) and NUDGE_PREFIX in text[:NUDGE_WINDOW]:
        return replace(event, data={**data, "isAutopilotContinuation": True})
    return event
