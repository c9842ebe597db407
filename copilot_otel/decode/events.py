"""Typed, frozen records for Copilot CLI session events.

Every line of an ``events.jsonl`` becomes one :class:`Event`. Only the fields that
the session model keys on are lifted out of ``data``; everything else stays in
``data`` untouched, so unknown event types and new fields are ordinary input.
"""

from __future__ import annotations

from typing import Any, Mapping

from msgspec import Struct

from ..base.structs import repr_without

MAIN_AGENT = "main"


# msgspec structs: built in C (a frozen dataclass's __init__ sets each field through object.__setattr__, and its
# class is compiled with exec at import); equal, hashable and picklable as the dataclass was.
# gc=False: an event holds plain JSON values, never itself, so it can form no cycle.
class Event(Struct, frozen=True, gc=False):
    """One session event, as written by the CLI (or streamed live)."""

    type: str
    timestamp_ns: int
    id: str
    data: Mapping[str, Any]
    parent_id: str | None = None
    agent_id: str | None = None
    ephemeral: bool = False
    # Where the event came from: byte offset of its line and its 1-based line number.
    offset: int = -1
    line: int = 0
    cut: bool = False  # JSON nested deeper than MAX_DEPTH: the deeper values were read as "..." (decode/lines.py)

    def __repr__(self) -> str:  # without ``data``: what a log holds must not reach our own log through a repr
        return repr_without(self, "data")

    @property
    def interaction_id(self) -> str | None:
        """The interaction the event belongs to, when the CLI says so."""
        value = self.data.get("interactionId")
        return value if isinstance(value, str) else None

    @property
    def turn_id(self) -> str | None:
        """The turn id within its (agent, interaction), when present."""
        value = self.data.get("turnId")
        return str(value) if isinstance(value, (str, int)) else None

    @property
    def tool_call_id(self) -> str | None:
        """The tool call this event is about, when present."""
        value = self.data.get("toolCallId")
        return value if isinstance(value, str) else None


class DecodeError(Struct, frozen=True, gc=False):
    """A line that is not a usable event, with the reason it was rejected."""

    reason: str
    detail: str
    offset: int = -1
    line: int = 0
