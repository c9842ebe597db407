"""What one session amounts to, at a glance: the record `sessions`, the web view and scrapes read.

The model keeps a :class:`Tally` as events arrive (cheap counters, no spans); ``summary()``
freezes it with the session's facts and live state into a :class:`SessionSummary`, a plain
value any thread may read.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from msgspec import Struct, field

from .usage import AMOUNTS, SLOT_NS, UsageSlot, bounded, frozen_slots, new_amounts

if TYPE_CHECKING:
    from ..decode.payloads import SessionFacts


class Tally(Struct):
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
    cache_write_tokens: int = 0
    premium_requests: float = 0.0  # sum of usage.cost over user-initiated calls (Copilot subscriptions)
    nudge_premium_requests: float = 0.0  # the part of it spent on autopilot nudges
    nano_aiu: int = 0  # AI credits in nano AIU: the calls' amounts, then what the CLI's totals add
    nudge_nano_aiu: int = 0  # the part of it spent in interactions autopilot started
    priced_calls: int = 0  # LLM calls that reported an amount of AI credits
    unpriced_calls: int = 0  # and those that did not
    credits_status: str | None = None  # the CLI's own aiCreditsStatus of its totals, once it wrote one
    last_end: str | None = None  # how the last interaction ended (an END_* value)
    lines_added: int = 0  # lines of code changed (session.shutdown's codeChanges)
    lines_removed: int = 0
    at_ns: int = 0  # the timestamp of the event being applied: what is counted now is counted in its slot
    slots: dict = field(default_factory=dict)  # (quarter hour, model) -> amounts, in usage.AMOUNTS order

    def add(self, model: str, what: int, value: int | float) -> None:
        """Count ``value`` of one amount (a usage.AMOUNTS index) of ``model``: into the session's total and
        into the slot of the event being applied. Every amount a report adds up is counted here."""
        name = AMOUNTS[what]
        setattr(self, name, getattr(self, name) + value)
        key = (self.at_ns // SLOT_NS, model)
        amounts = self.slots.get(key)
        if amounts is None:
            amounts = self.slots[key] = new_amounts()
        amounts[what] += value


class SessionSummary(Struct, frozen=True):
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
    nano_aiu: int = 0
    nudge_nano_aiu: int = 0
    credits_status: str | None = None  # complete, partial, unavailable; None: no call yet
    name: str | None = None  # what the CLI calls the session (workspace.yaml: its first prompt, or a name given)
    confirms: str | None = None  # how its interaction ends once a quiet period confirms the loop went idle
    cut_off_end: str | None = None  # how its open interaction ends if the session ends now (None: none open)
    asking: str | None = None  # what it waits for a person to answer: "permission for bash", "input"
    asking_since_ns: int = 0
    cache_write_tokens: int = 0
    lines_added: int = 0
    lines_removed: int = 0
    slots: tuple[UsageSlot, ...] = ()  # the amounts above by UTC quarter hour and model (usage.py)
    rejected: int = 0  # lines of its log that could not be read (read from the files only)
    rejected_lines: tuple[tuple[int, str], ...] = ()  # the first of them: (line number, why)

    @property
    def ai_credits(self) -> float:
        """AI credits (1 credit = 1e9 nano AIU)."""
        return self.nano_aiu / 1e9

    @property
    def tokens(self) -> int:
        """Input and output tokens (cache reads are part of the input)."""
        return self.input_tokens + self.output_tokens


CREDITS_UNKNOWN = "unknown"  # no call reported an amount: no sum to show (zero would be no zero cost)
CREDITS_LEGEND = "CREDITS: AI credits; 8.67+: some calls reported no amount, unknown: none did"
PARTIAL_NOTE = "+: some LLM calls reported no AI credits; the sum is the others'"


def credits_unknown(nano_aiu: int, status: str | None) -> bool:
    """No call reported an amount of AI credits: the amount is unknown (null in JSON, empty in CSV, "unknown" or
    "?" in a table), not zero."""
    return status in ("partial", "unavailable") and not nano_aiu


def credits_text(nano_aiu: int, status: str | None = None) -> str:
    """'8.67' AI credits (two decimals; '<0.01' for less), '8.67+' when some calls reported no amount, 'unknown'
    when no call reported one."""
    if credits_unknown(nano_aiu, status):
        return CREDITS_UNKNOWN
    text = f"{nano_aiu / 1e9:,.2f}" if nano_aiu >= 10_000_000 or not nano_aiu else "<0.01"
    return text + "+" if status in ("partial", "unavailable") else text


def credits_noted(text: str) -> bool:
    """Whether a credits_text needs CREDITS_LEGEND to be read."""
    return text.endswith("+") or text == CREDITS_UNKNOWN


def make_summary(session_id: str, state: str, ended: str | None, facts: SessionFacts, tally: Tally,
                 last_event_ns: int, waiting: tuple[str | None, int], *, running_tools: int = 0,
                 confirms: str | None = None, cut_off_end: str | None = None,
                 asking: tuple[str, int] | None = None) -> SessionSummary:
    """Freeze a session's tally with its facts and state; ``waiting``: (oldest running tool, its start). Tools
    still running count as tool calls (as the spans of `inspect` and the web view's waterfall show them);
    ``asking``: (what a person is asked, since when)."""
    return SessionSummary(
        session_id, state, ended, facts.model, facts.cwd, facts.cli_version, facts.repository, facts.branch,
        tally.first_event_ns, last_event_ns, waiting[0], waiting[1], tally.interactions, tally.nudges, tally.turns,
        tally.llm_calls, tally.tool_calls + running_tools, tally.tool_failures, bounded(tally.input_tokens),
        bounded(tally.output_tokens), bounded(tally.cache_read_tokens), bounded(tally.premium_requests),
        bounded(tally.nudge_premium_requests), tally.last_end, bounded(tally.nano_aiu), bounded(tally.nudge_nano_aiu),
        tally.credits_status or status_of(tally.priced_calls, tally.unpriced_calls), None, confirms, cut_off_end,
        asking[0] if asking else None, asking[1] if asking else 0, bounded(tally.cache_write_tokens),
        bounded(tally.lines_added), bounded(tally.lines_removed), frozen_slots(tally.slots))


def status_of(priced: int, unpriced: int) -> str | None:
    """complete, partial or unavailable for calls of which ``priced`` reported an amount; None: no calls."""
    if unpriced == 0:
        return "complete" if priced else None
    return "partial" if priced else "unavailable"
