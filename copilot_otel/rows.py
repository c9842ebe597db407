"""One session as a row: the order of the states, and the JSON form that `sessions --json` and /api/sessions share."""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

from .summary import SessionSummary
from .vocab import ABANDONED, ENDED, IDLE, STUCK, WAITING_TOOL, WAITING_USER, WORKING

# The order of the groups on the page: what needs a person first, finished sessions last.
STATE_ORDER = (STUCK, ABANDONED, WAITING_USER, WORKING, WAITING_TOOL, IDLE, ENDED)
PAGE_SIZE = 100
MAX_PAGE_SIZE = 500


class Row(NamedTuple):
    """One session on the sessions page: its summary and its state now. Rows sort as the page shows them:
    by STATE_ORDER, then newest activity first (the first three fields are the order)."""

    rank: int  # its state's place in STATE_ORDER
    newest: int  # minus the time of its last event
    session_id: str
    path: Path
    summary: SessionSummary
    state: str  # one of STATE_ORDER
    stalled_s: float  # seconds since the last event of a stuck or abandoned session, else 0


_RANK = {state: i for i, state in enumerate(STATE_ORDER)}


def rank(state: str) -> int:
    """A state's place in STATE_ORDER (an unknown state after them all)."""
    return _RANK.get(state, len(_RANK))


def row_json(row: Row) -> dict:
    """A row as the page reads it (times in milliseconds since the epoch)."""
    s = row.summary
    return {
        "id": s.session_id, "state": row.state, "stalled_s": round(row.stalled_s, 1), "ended": s.ended,
        "model": s.model, "repository": s.repository, "branch": s.branch, "cwd": s.cwd,
        "cli_version": s.cli_version, "started_ms": s.started_ns // 1_000_000,
        "last_ms": s.last_event_ns // 1_000_000, "waiting_on": s.waiting_on,
        "waiting_since_ms": s.waiting_since_ns // 1_000_000, "interactions": s.interactions, "nudges": s.nudges,
        "turns": s.turns, "llm_calls": s.llm_calls, "tool_calls": s.tool_calls, "tool_failures": s.tool_failures,
        "input_tokens": s.input_tokens, "output_tokens": s.output_tokens, "tokens": s.tokens,
        "cache_read_tokens": s.cache_read_tokens, "premium_requests": round(s.premium_requests, 2),
        "nudge_premium_requests": round(s.nudge_premium_requests, 2), "last_end": s.last_end,
    }
