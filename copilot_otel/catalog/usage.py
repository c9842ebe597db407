"""The usage report: what the sessions of this machine used, by day, week or month and by model, repository,
branch or session. Pure values: the sessions' summaries (the ones `sessions` lists) in, rows out.

Each amount is counted in the period of the event that told it (model/usage.py): an LLM call on the day it
ended, so a session that runs past midnight counts on both days; what a CLI wrote only in its totals (the
tokens of CLIs before 1.0.93, lines changed) on the day of the ``session.shutdown`` that holds it. Periods are
those of the time zone asked for (local by default); weeks are ISO weeks (Monday to Sunday, named by the
Thursday's year). A session is counted in every row it used something in, and in the period of its start when
it used nothing. With no time window the totals are exactly the sessions' own (to the nano AIU).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, tzinfo
from typing import TYPE_CHECKING

from msgspec import Struct
from msgspec.structs import astuple

from ..model.usage import AMOUNTS, SLOT_SECONDS, UsageSlot, bounded
from ..vocab import ABANDONED, END_INCOMPLETE, ENDED, UNKNOWN_MODEL

if TYPE_CHECKING:
    from .status import SessionStatus

PERIODS = ("day", "week", "month")
GROUPS = ("model", "repository", "branch", "session")
NONE = "-"  # a session in no repository, on no branch
USD_PER_CREDIT = 0.01  # GitHub's published rate: 1 AI credit = $0.01
NANO_AIU_PER_CREDIT = 1_000_000_000
RUNNING, CRASHED = "running", "crashed"


class Row(Struct):
    """One period and group: what its sessions used there."""

    period: str
    group: tuple[str, ...]
    sessions: set[str]
    running: set[str]
    crashed: set[str]
    amounts: list  # in model.usage.AMOUNTS order
    unpriced: bool = False  # some session's calls reported no amount of AI credits: the credits are a floor

    def value(self, name: str) -> int | float:
        return self.amounts[AMOUNTS.index(name)]

    def to_json(self, by: str, groups: tuple[str, ...]) -> dict:
        """The row for scripts: its keys, counts of sessions, every amount, credits and dollars."""
        out: dict = {by: self.period, **dict(zip(groups, self.group))}
        out.update(sessions=len(self.sessions), running=len(self.running), crashed=len(self.crashed))
        out.update(zip(AMOUNTS, map(bounded, self.amounts)))
        out["premium_requests"] = round(out["premium_requests"], 6)
        if self.credits_unknown:  # no call reported an amount: null, not a zero a spreadsheet would add up
            out["nano_aiu"] = out["ai_credits"] = out["usd"] = None
        else:  # with credits_complete false, a floor (as the table's "+")
            out["ai_credits"] = out["nano_aiu"] / NANO_AIU_PER_CREDIT
            out["usd"] = round(out["ai_credits"] * USD_PER_CREDIT, 6)
        out["credits_complete"] = not self.unpriced
        return out

    @property
    def credits_unknown(self) -> bool:
        """Some calls reported no amount of AI credits and none reported one: the amount is unknown (the
        table's "?"), not zero."""
        return self.unpriced and not self.value("nano_aiu")


def condition(status: SessionStatus) -> str | None:
    """RUNNING while its CLI holds it, CRASHED when its process died with work open, else None (it ended)."""
    if status.state == ABANDONED or status.summary.ended == END_INCOMPLETE:
        return CRASHED
    return None if status.state == ENDED else RUNNING


class Periods:
    """Names the period (day, week or month, in one time zone) of a quarter hour; ``zone`` None: local time."""

    def __init__(self, by: str, zone: tzinfo | None) -> None:
        if by not in PERIODS:
            raise ValueError(f"--by {by!r}: expected one of {', '.join(PERIODS)}")
        self.by, self.zone = by, zone
        self._named: dict[int, str] = {}

    def of(self, seconds: int) -> str:
        slot = seconds // SLOT_SECONDS
        name = self._named.get(slot)
        if name is None:
            try:
                when = datetime.fromtimestamp(slot * SLOT_SECONDS, self.zone)  # zone None: local time, DST included
            except (OverflowError, OSError, ValueError):  # a time no calendar holds (the decoder lets few through)
                self._named[slot] = "unknown"
                return "unknown"
            if self.by == "day":
                name = when.strftime("%Y-%m-%d")
            elif self.by == "month":
                name = when.strftime("%Y-%m")
            else:
                year, week, _day = when.isocalendar()
                name = f"{year}-W{week:02d}"
            self._named[slot] = name
        return name


def _group(status: SessionStatus, slot_model: str, groups: tuple[str, ...]) -> tuple[str, ...]:
    s = status.summary
    values = {"model": slot_model, "repository": s.repository or NONE, "branch": s.branch or NONE,
              "session": s.session_id}
    return tuple(values[g] for g in groups)


def usage_rows(statuses: Iterable[SessionStatus], *, by: str = "day", groups: tuple[str, ...] = (),
               zone: tzinfo | None = None, since: float | None = None, until: float | None = None) -> list[Row]:
    """The rows of the report, in order of period then group. ``since``/``until`` (epoch seconds) keep the
    quarter hours that start in [since, until); a session counts in a row only if it used something there,
    or (used nothing at all) if it started there."""
    unknown = [g for g in groups if g not in GROUPS]
    if unknown:
        raise ValueError(f"--group {','.join(unknown)}: expected some of {', '.join(GROUPS)}")
    periods = Periods(by, zone)
    rows: dict[tuple, Row] = {}
    for status in statuses:
        s = status.summary
        slots = s.slots or (UsageSlot(s.started_ns // 1_000_000_000 // SLOT_SECONDS, s.model or UNKNOWN_MODEL),)
        state = condition(status)
        unpriced = s.credits_status in ("partial", "unavailable")
        for slot in slots:
            start = slot.start
            if (since is not None and start < since) or (until is not None and start >= until):
                continue
            key = (periods.of(start), _group(status, slot.model, groups))
            row = rows.get(key)
            if row is None:
                row = rows[key] = Row(key[0], key[1], set(), set(), set(), [0] * len(AMOUNTS))
            row.sessions.add(s.session_id)
            if state == RUNNING:
                row.running.add(s.session_id)
            elif state == CRASHED:
                row.crashed.add(s.session_id)
            row.unpriced |= unpriced and bool(slot.llm_calls)
            amounts = row.amounts
            for i, value in enumerate(astuple(slot)[2:]):  # the amounts, in AMOUNTS order
                amounts[i] += value
    return [rows[key] for key in sorted(rows)]


def total(rows: list[Row]) -> Row:
    """Every row added up (a session counted once)."""
    out = Row("total", (), set(), set(), set(), [0] * len(AMOUNTS))
    for row in rows:
        out.sessions |= row.sessions
        out.running |= row.running
        out.crashed |= row.crashed
        out.unpriced |= row.unpriced
        out.amounts = [a + b for a, b in zip(out.amounts, row.amounts)]
    return out
