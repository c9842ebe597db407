"""What a session used, by when and by model: the amounts of its summary, kept per quarter hour.

Every amount the model counts into a session's totals (an LLM call, its tokens, premium requests, AI
credits, lines changed) is also kept in the slot of the event that told it: the UTC quarter hour of its
timestamp, and the model. A usage report then groups any session by day, week or month in any time zone
(every zone's offset from UTC is a whole number of quarter hours), and the slots of a session add up to
its totals exactly. An amount the CLI wrote only in a total (``session.shutdown``: the tokens of CLIs
before 1.0.93, lines changed, what a call did not report) is in the slot of the event that holds it.
"""

from __future__ import annotations

from typing import TypeVar

from msgspec import Struct

from .records import INT64_LIMIT

SLOT_SECONDS = 900  # a quarter hour
SLOT_NS = SLOT_SECONDS * 1_000_000_000

# The amounts, in the order a slot keeps them, and the Tally's total each one adds to.
AMOUNTS = ("llm_calls", "input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens",
           "premium_requests", "nano_aiu", "lines_added", "lines_removed")
CALLS, INPUT, OUTPUT, CACHE_READ, CACHE_WRITE, PREMIUM, NANO_AIU, LINES_ADDED, LINES_REMOVED = range(len(AMOUNTS))
TOKEN_INDEX = {"input": INPUT, "output": OUTPUT, "cache_read": CACHE_READ, "cache_write": CACHE_WRITE}


class UsageSlot(Struct, frozen=True, array_like=True):
    """What one session used of one model in one UTC quarter hour."""

    slot: int  # the quarter hour: epoch seconds // SLOT_SECONDS
    model: str
    llm_calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    premium_requests: float = 0.0
    nano_aiu: int = 0
    lines_added: int = 0
    lines_removed: int = 0

    @property
    def start(self) -> int:
        """The slot's start, in epoch seconds."""
        return self.slot * SLOT_SECONDS


def new_amounts() -> list:
    """A slot's amounts, all zero (premium requests are fractional: multipliers such as 0.33)."""
    row: list = [0] * len(AMOUNTS)
    row[PREMIUM] = 0.0
    return row


INT64_MAX = (1 << 63) - 1


Amount = TypeVar("Amount", int, float)


def bounded(value: Amount) -> Amount:
    """An amount within int64's range (a log's 400-digit token count would make a summary, or a report, that no
    JSON encoder writes)."""
    if isinstance(value, int):
        return max(-INT64_MAX, min(INT64_MAX, value))
    return max(-INT64_LIMIT, min(INT64_LIMIT, value))


def frozen_slots(slots: dict[tuple[int, str], list]) -> tuple[UsageSlot, ...]:
    """A tally's slots, frozen in order of time, then model, each amount within int64."""
    return tuple(UsageSlot(bounded(slot), model, *map(bounded, amounts))
                 for (slot, model), amounts in sorted(slots.items()))
