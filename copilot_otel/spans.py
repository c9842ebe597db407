"""Span builders and the records the session model keeps while spans are open."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson

from . import attrs as A
from .records import STATUS_ERROR, SpanEvent, SpanRecord


@dataclass(slots=True)
class OpenSpan:
    """A span whose end has not come yet."""

    trace_id: int
    span_id: int
    parent_span_id: int | None
    name: str
    kind: int
    start_ns: int
    attributes: dict[str, Any]
    events: list[SpanEvent] = field(default_factory=list)

    def close(self, end_ns: int, *, status: int = 0, message: str = "", error_type: str | None = None) -> SpanRecord:
        """The finished span; an ``error_type`` makes it an error."""
        if error_type is not None:
            self.attributes[A.ERROR_TYPE] = error_type
            status = STATUS_ERROR
        return SpanRecord(
            trace_id=self.trace_id,
            span_id=self.span_id,
            parent_span_id=self.parent_span_id,
            name=self.name,
            kind=self.kind,
            start_ns=self.start_ns,
            end_ns=max(end_ns, self.start_ns),
            attributes=self.attributes,
            status=status,
            status_message=message,
            events=tuple(self.events),
        )


@dataclass(slots=True)
class Turn:
    """An open turn of one agent."""

    span: OpenSpan
    agent: str
    requested_tools: bool = False
    errored: str | None = None
    llm_calls: int = 0
    end_ns: int = 0  # set when its turn_end came


@dataclass(slots=True)
class Agent:
    """The main agent or one sub-agent: where its turns hang, and its open turn."""

    name: str  # "main" or the sub-agent's name (a metric label)
    invoke_span: OpenSpan | None  # the span its turns hang under
    turn: Turn | None = None


@dataclass(slots=True)
class Interaction:
    """The running interaction: its root span and how it seems to be ending."""

    id: str
    root: OpenSpan
    start_offset: int
    start_line: int
    last_end_ns: int
    autopilot: bool = False  # opened by an autopilot nudge
    # Set when the loop looks finished (final answer, task_complete, error); confirmed later.
    pending_end: str | None = None
    error_type: str | None = None
    summary: str | None = None


@dataclass(frozen=True, slots=True)
class InteractionSummary:
    """What `inspect` and the daemon need to know about a finished or running interaction."""

    interaction_id: str
    trace_id: int
    start_ns: int
    end: str | None  # one of the END_* values, None while running
    autopilot: bool
    summary: str | None


def chat_attributes(attributes: dict[str, Any], usage: dict[str, Any], model: str) -> dict[str, int]:
    """Fill a chat span's attributes from a usage record; return its token counts by type."""
    attributes[A.GEN_AI_REQUEST_MODEL] = model
    attributes[A.GEN_AI_RESPONSE_MODEL] = model
    tokens = {}
    for key, attr, label in A.USAGE_TOKENS:
        value = usage.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            attributes[attr] = int(value)
            tokens[label] = int(value)
    finish = usage.get("finishReason")
    if isinstance(finish, str):
        attributes[A.GEN_AI_RESPONSE_FINISH_REASONS] = (finish,)
    for key, attr in A.USAGE_EXTRAS:
        value = usage.get(key)
        if isinstance(value, (int, float, str)) and not isinstance(value, bool):
            attributes[attr] = value
    return tokens


def as_str(value: Any) -> str | None:
    """A non-empty string, or None."""
    return value if isinstance(value, str) and value else None


def as_num(value: Any) -> float:
    """A number (not a bool), or 0."""
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0.0


def to_json(value: Any) -> str:
    """Compact JSON of any value (content capture of non-string fields)."""
    try:
        return orjson.dumps(value, default=str).decode()
    except TypeError:
        return str(value)
