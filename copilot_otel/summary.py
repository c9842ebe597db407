"""What one session amounts to, at a glance: the record `sessions`, the web view and scrapes read.

The model keeps a :class:`Tally` as events arrive (cheap counters, no spans); ``summary()``
freezes it with the session's facts and live state into a :class:`SessionSummary`, a plain
value any thread may read.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .views import SessionFacts


@dataclass(slots=True)
class Tally:
    """Running counts of one session (kept by the model whatever it exports)."""

    first_event_ns: int = 0
    interactions: int = 0
    nudges: int = 0
    turns: int = 0
    llm_calls: int = 0
    llm_errors: int = 0
    tool_calls: int = 0
    tool_failures: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    premium_requests: float = 0.0  # sum of usage.cost over user-initiated calls (Copilot subscriptions)
    nudge_premium_requests: float = 0.0  # the part of it spent on autopilot nudges
    last_end: str | None = None  # how the last interaction ended (an END_* value)


@dataclass(frozen=True, slots=True)
class SessionSummary:
    """One session: who, where, what it is doing now, and what it has cost so far."""

    session_id: str
    state: str  # working, waiting_tool, waiting_user or idle (the daemon adds stuck and abandoned)
    ended: str | None  # shutdown or incomplete once the session is over
    model: str | None
    cwd: str | None
    cli_version: str | None
    repository: str | None
    branch: str | None
    started_ns: int
    last_event_ns: int
    waiting_on: str | None  # the name of the oldest running tool, if any
    waiting_since_ns: int  # when it started (0: nothing running)
    interactions: int
    nudges: int
    turns: int
    llm_calls: int
    tool_calls: int
    tool_failures: int
    input_tokens: int
    output_tokens: int
    cache_read_tokens: int
    premium_requests: float
    nudge_premium_requests: float
    last_end: str | None

    @property
    def tokens(self) -> int:
        """Input and output tokens (cache reads are part of the input)."""
        return self.input_tokens + self.output_tokens


def make_summary(session_id: str, state: str, ended: str | None, facts: "SessionFacts", tally: Tally,
              last_event_ns: int, waiting: tuple[str | None, int]) -> SessionSummary:
    """Freeze a session's tally with its facts and state; ``waiting``: (oldest running tool, its start)."""
    return SessionSummary(
        session_id, state, ended, facts.model, facts.cwd, facts.cli_version, facts.repository, facts.branch,
        tally.first_event_ns, last_event_ns, waiting[0], waiting[1], tally.interactions, tally.nudges, tally.turns,
        tally.llm_calls, tally.tool_calls, tally.tool_failures, tally.input_tokens, tally.output_tokens,
        tally.cache_read_tokens, tally.premium_requests, tally.nudge_premium_requests, tally.last_end)
