"""The current state of sessions: what `sessions`, `inspect`, the daemon's /api/sessions and the web
view show. One :class:`SessionStatus` per session: its summary, and its state now as the daemon
names it, by the same rules (``liveness.live_state`` after ``liveness.verdict``).

Its JSON form (``to_json`` / ``from_json``) is the record /api/sessions serves and
`sessions --json` prints: the summary's fields, the state, how long it has been stalled, and
RFC 3339 forms of its times.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, fields
from typing import Any, Callable, Iterable

from .display import iso_time
from .liveness import SessionView, StuckPolicy, abandoned_now, live_state, locks_expected, pid_alive
from .normalize import parse_version
from .summary import SessionSummary
from .vocab import IDLE, STATES

ENDED = "ended"  # its process is gone with nothing cut off, or it shut down: not live
SESSION_STATES = (*STATES, ENDED)
API_VERSION = 1
_SUMMARY_FIELDS = tuple(f.name for f in fields(SessionSummary))


@dataclass(frozen=True, slots=True)
class SessionStatus:
    """One session now: its summary, its state (one of SESSION_STATES) and where its log is."""

    summary: SessionSummary
    state: str
    stalled_seconds: float = 0.0  # stuck or abandoned: seconds since its last event
    waiting_on: str | None = None  # the tool it waits on (or waited on, when abandoned)
    path: str | None = None  # its events.jsonl

    @property
    def session_id(self) -> str:
        return self.summary.session_id

    def to_json(self) -> dict[str, Any]:
        """The JSON object of /api/sessions and `sessions --json`."""
        record = asdict(self.summary)
        record["model_state"] = record.pop("state")  # what the log alone says; "state" is the state now
        record.update(state=self.state, stalled_seconds=round(self.stalled_seconds, 3),
                      waiting_on=self.waiting_on, path=self.path, tokens=self.summary.tokens,
                      started=iso_time(self.summary.started_ns), last_event=iso_time(self.summary.last_event_ns),
                      waiting_since=iso_time(self.summary.waiting_since_ns))
        return record

    @classmethod
    def from_json(cls, record: dict[str, Any]) -> "SessionStatus":
        """The status back from its JSON object (fields it does not know are ignored)."""
        values = {name: record.get(name) for name in _SUMMARY_FIELDS}
        values["state"] = record.get("model_state") or IDLE
        summary = SessionSummary(**values)
        return cls(summary, record.get("state") or ENDED, float(record.get("stalled_seconds") or 0.0),
                   record.get("waiting_on"), record.get("path"))


def name_state(summary: SessionSummary, pids: Iterable[int], *, now: float, policy: StuckPolicy,
               alive: Callable[[int], bool] = pid_alive, view: SessionView | None = None,
               ) -> tuple[str, float, str | None]:
    """(state, seconds stalled, tool waited on) of a session now, by the daemon's rules.

    ``view``: the daemon's own view of it, when it follows the session (it knows whether it
    found the session abandoned); without one, the daemon's verdict is applied to the log's
    end as the daemon's reader would apply it.
    """
    if view is None:
        pids = tuple(pids)
        expected = locks_expected(pids, parse_version(summary.cli_version))
        mid_turn = summary.ended is None and summary.state != IDLE
        abandoned = abandoned_now(mid_turn=mid_turn, last_event_ns=summary.last_event_ns, now=now,
                                  alive=lambda: any(alive(pid) for pid in pids), locks_expected=expected)
        view = SessionView(summary.session_id, summary.state, summary.last_event_ns, pids,
                           now if abandoned else None, expected, summary.waiting_on, summary.repository)
    live = live_state(view, now=now, policy=policy, alive=alive)
    if live is None:
        return ENDED, 0.0, None
    state, stalled = live
    return state, stalled, view.waiting_on


def status_of(summary: SessionSummary, pids: Iterable[int], *, policy: StuckPolicy, now: float | None = None,
              alive: Callable[[int], bool] = pid_alive, view: SessionView | None = None,
              path: str | None = None) -> SessionStatus:
    """A session's status now (see :func:`name_state`)."""
    state, stalled, tool = name_state(summary, pids, now=time.time() if now is None else now, policy=policy,
                                      alive=alive, view=view)
    return SessionStatus(summary, state, stalled, tool, path)


def api_document(statuses: Iterable[SessionStatus], *, copilot_home: str, now: float | None = None) -> dict:
    """The body of /api/sessions: who answers, for which COPILOT_HOME, and every session, newest first."""
    ordered = sorted(statuses, key=lambda s: s.summary.last_event_ns, reverse=True)
    return {"version": API_VERSION, "copilot_home": copilot_home,
            "generated": iso_time(int((time.time() if now is None else now) * 1e9)),
            "sessions": [status.to_json() for status in ordered]}
