"""The sessions page's board: every known session sorted live first, counted by state, repository and
folder, and the filtered pages cut from it (``/api/sessions``). Pure values: the sources in overview.py
say which sessions exist and how each stands; this sorts, counts and renders them.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import NamedTuple

from msgspec import Struct

from ..model.summary import SessionSummary, credits_unknown
from ..vocab import ABANDONED, ENDED, IDLE, STUCK, WAITING_TOOL, WAITING_USER, WORKING

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
    silent_s: float = 0.0  # a live session: seconds since its last event (as the daemon measures it)
    activity: str = ""  # a live session: what its log says it does (working, waiting_tool, ...), before thresholds
    at: float = 0.0  # time.monotonic() when stalled_s and silent_s were measured (0: now)


class Live(NamedTuple):
    """A live session's state now, its seconds stalled and silent, and its activity (what its log says)."""

    state: str
    stalled_s: float
    silent_s: float = 0.0
    activity: str = ""


_RANK = {state: i for i, state in enumerate(STATE_ORDER)}


class Board(Struct, frozen=True):
    """Every known session, sorted live first (by STATE_ORDER) then by last activity, with counts."""

    key: tuple
    rows: tuple[Row, ...]
    by_id: dict[str, Row]
    states: dict[str, int]
    repositories: dict[str, int]  # sessions by repository ("": in none)
    built_at: float
    folders: dict[str, int]  # sessions in no repository, by working folder ("": unknown)


def row_json(row: Row, *, monotonic: float | None = None, now: float | None = None) -> dict:
    """A row as the page reads it (times in milliseconds since the epoch). Durations are as of now: a board
    is rebuilt only when a state changes, the seconds since it was measured are added."""
    s = row.summary
    elapsed = max(0.0, (time.monotonic() if monotonic is None else monotonic) - row.at) if row.at else 0.0
    stalled = row.stalled_s + elapsed if row.state in (STUCK, ABANDONED) else 0.0
    now_ms = int((time.time() if now is None else now) * 1000)
    unknown = credits_unknown(s.nano_aiu, s.credits_status)
    return {
        "id": s.session_id, "name": s.name, "state": row.state, "stalled_s": round(stalled, 1),
        "stalled_since_ms": now_ms - round(stalled * 1000) if stalled else 0,
        "activity": row.activity or None, "silent_s": round(row.silent_s + elapsed, 1) if row.activity else None,
        "ended": s.ended,
        "model": s.model, "repository": s.repository, "branch": s.branch, "cwd": s.cwd,
        "cli_version": s.cli_version, "started_ms": s.started_ns // 1_000_000,
        "last_ms": s.last_event_ns // 1_000_000, "waiting_on": s.waiting_on,
        "waiting_since_ms": s.waiting_since_ns // 1_000_000, "interactions": s.interactions, "nudges": s.nudges,
        "turns": s.turns, "llm_calls": s.llm_calls, "tool_calls": s.tool_calls, "tool_failures": s.tool_failures,
        "input_tokens": s.input_tokens, "output_tokens": s.output_tokens, "tokens": s.tokens,
        "cache_read_tokens": s.cache_read_tokens, "cache_write_tokens": s.cache_write_tokens,
        "lines_added": s.lines_added, "lines_removed": s.lines_removed,
        "premium_requests": round(s.premium_requests, 2),
        "nudge_premium_requests": round(s.nudge_premium_requests, 2), "last_end": s.last_end,
        # Unknown (no call reported an amount) is null, never a zero a script would add up; partly known keeps
        # its floor, and credits_status says "partial".
        "nano_aiu": None if unknown else s.nano_aiu, "nudge_nano_aiu": None if unknown else s.nudge_nano_aiu,
        "ai_credits": None if unknown else s.nano_aiu / 1e9,
        "credits_status": s.credits_status, "asking": s.asking, "asking_since_ms": s.asking_since_ns // 1_000_000,
    }


NO_REPOSITORY = "none"  # the repository filter that selects the sessions in no repository


def in_place(summary: SessionSummary, place: str) -> bool:
    """Is the session in this repository, or (in none) in this working folder? NO_REPOSITORY: in none."""
    if place == NO_REPOSITORY:
        return not summary.repository
    if summary.repository:
        return summary.repository == place
    return (summary.cwd or "") == place


def page(board: Board, *, state: str | None = None, repository: str | None = None, offset: int = 0,
         limit: int = PAGE_SIZE) -> dict:
    """One page of the board, filtered by state and by repository (or folder, or NO_REPOSITORY), as JSON-ready
    values; the states are counted among the sessions of that repository."""
    rows: Iterable[Row] = board.rows
    states = board.states
    if repository:
        rows = [r for r in rows if in_place(r.summary, repository)]
        states = dict.fromkeys(STATE_ORDER, 0)
        states.update(Counter(r.state for r in rows))
    if state:
        rows = [r for r in rows if r.state == state]
    if not isinstance(rows, list):
        rows = list(rows)
    limit = max(1, min(limit, MAX_PAGE_SIZE))
    offset = max(0, min(offset, len(rows)))
    return {"total": len(board.rows), "matching": len(rows), "offset": offset, "limit": limit,
            "states": states, "repositories": board.repositories, "folders": board.folders,
            "now_ms": int(time.time() * 1000), "sessions": [row_json(r) for r in rows[offset:offset + limit]]}


NOT_LIVE = Live(ENDED, 0.0)  # a session with no live state


def make_board(key: tuple, summaries: Iterable[tuple[Path, SessionSummary]],
               live: Mapping[str, Live], previous: Board | None = None, *, at: float = 0.0) -> Board:
    """Sort and count the (path, summary) of every session, each in its ``live`` state (measured at ``at``,
    time.monotonic()), or ended.

    With the ``previous`` board, only what changed is redone: its rows are reused, its order is the
    start of the sort (nearly sorted: a linear pass) and its counts are adjusted. 10,000 sessions
    of which a few changed take a few milliseconds instead of tens.
    """
    summaries = list(summaries)
    by_id: dict[str, Row] = dict(previous.by_id) if previous is not None else {}
    states = Counter(previous.states) if previous is not None else Counter()
    repositories = Counter(previous.repositories) if previous is not None else Counter()
    folders = Counter(previous.folders) if previous is not None else Counter()
    changed: list[Row] = []
    count = 0
    for path, summary in summaries:
        count += 1
        state, stalled, silent, activity = Live(*live.get(summary.session_id, NOT_LIVE))
        old = by_id.get(summary.session_id)
        if old is not None and (old.summary is summary or old.summary == summary) and old.state == state \
                and old.stalled_s == stalled and old.activity == activity:
            continue  # the same row: a summary made again with the same values moves nothing (no page, no push)
        row = by_id[summary.session_id] = Row(_RANK.get(state, len(_RANK)), -summary.last_event_ns,
                                              summary.session_id, path, summary, state, stalled, silent, activity, at)
        changed.append(row)
        states[state] += 1
        repositories[summary.repository or ""] += 1
        if not summary.repository:
            folders[summary.cwd or ""] += 1
        if old is not None:
            states[old.state] -= 1
            repositories[old.summary.repository or ""] -= 1
            if not old.summary.repository:
                folders[old.summary.cwd or ""] -= 1
    if previous is not None and count != len(by_id):  # some went away: count again from scratch
        return make_board(key, summaries, live, at=at)
    if previous is not None and not changed:
        return Board(key, previous.rows, previous.by_id, previous.states, previous.repositories, time.time(),
                     previous.folders)
    if previous is None:
        rows = list(by_id.values())
    else:  # the old order with the changed rows in place, the new ones at the end: nearly sorted
        rows = [by_id[r.session_id] for r in previous.rows]
        rows += [r for r in changed if r.session_id not in previous.by_id]
    rows.sort()
    counted = dict.fromkeys(STATE_ORDER, 0)
    counted.update((state, n) for state, n in states.items() if n)
    return Board(key, tuple(rows), by_id, counted, dict(sorted((k, n) for k, n in repositories.items() if n)),
                 time.time(), dict(sorted((k, n) for k, n in folders.items() if n)))
