"""What the daemon says about sessions: one line when each starts and ends, and when one becomes
stuck and recovers; and the snapshot spans a stuck session gets, so a trace backend shows what it
waits on.

A snapshot is every span the session holds open (its interaction, turn, tool...), ending at
the time it was found stuck and marked ``github.copilot.running=true``. Each keeps its deterministic
span id, so the final span, exported when the work ends, supersedes it.
"""

from __future__ import annotations

import logging
from pathlib import Path

from ..base.display import count, duration, plural, where
from ..model import attrs as A
from ..model.records import SpanRecord
from ..model.summary import credits_text
from ..source.liveness import StuckPolicy
from ..vocab import STUCK
from .follow import Follower

log = logging.getLogger("copilot_otel.sessions")


def waiting_on(tool: str | None) -> str:
    """What a stuck session waits on, in words."""
    return f"waiting on tool {tool}" if tool else "working (an LLM call or a turn without a tool)"


class SessionNotices:
    """The daemon's lines about the sessions it follows (reader thread only)."""

    def __init__(self, policy: StuckPolicy) -> None:
        self.policy = policy
        self._live: set[Path] = set()  # announced as started: each gets one line when it ends
        self._stuck: dict[Path, str] = {}  # session log -> what it was stuck on

    def started(self, follower: Follower, *, resumed: bool = False) -> None:
        """A session's CLI process is (newly) seen at work: one line, once."""
        if follower.path in self._live:
            return
        self._live.add(follower.path)
        summary = follower.live_model.summary()
        details = ", ".join(x for x in (summary.model, where(summary)) if x)
        verb = "resumed" if resumed else "started"
        log.info("session %s %s%s", follower.session_id, verb, f" ({details})" if details else "")

    def ended(self, follower: Follower, how: str) -> None:
        """A session announced as started is over (shut down, its process gone, deleted...): one line."""
        self._recovered(follower, how)
        if follower.path not in self._live:
            return
        self._live.discard(follower.path)
        summary = follower.model.summary() if follower.model is not None else None
        if summary is None:
            log.info("session %s ended (%s)", follower.session_id, how)
            return
        took = duration(max(0, summary.last_event_ns - summary.started_ns) / 1e9)
        premium = (f", {summary.premium_requests:g} premium request{'' if summary.premium_requests == 1 else 's'}"
                   if summary.premium_requests else "")
        if summary.nano_aiu:
            premium += f", {credits_text(summary.nano_aiu, summary.credits_status)} AI credits"
        log.info("session %s ended (%s) after %s: %s, %s, %s, %s tokens%s", follower.session_id, how, took,
                 plural(summary.interactions, "interaction"), plural(summary.turns, "turn"),
                 plural(summary.tool_calls, "tool call"), count(summary.tokens), premium)

    def forget(self, follower: Follower, how: str) -> None:
        """Said otherwise (abandoned, deleted): no 'ended' line will come."""
        self._recovered(follower, how)
        self._live.discard(follower.path)

    def moved(self, old: Path, new: Path) -> None:
        """A followed log moved: what was said about it holds at its new path."""
        if old in self._live:
            self._live.discard(old)
            self._live.add(new)
        if old in self._stuck:
            self._stuck[new] = self._stuck.pop(old)

    def is_stuck(self, follower: Follower) -> bool:
        return follower.path in self._stuck

    def _recovered(self, follower: Follower, now: str) -> None:
        what = self._stuck.pop(follower.path, None)
        if what is not None:
            log.info("session %s is no longer stuck (was %s; now %s)", follower.session_id, what, now)

    def check_stuck(self, follower: Follower, live: tuple[str, float] | None, now: float) -> list[SpanRecord]:
        """Note a session's state at a liveness pass; the snapshot spans to export if it just became stuck."""
        path = follower.path
        if live is not None and live[0] == STUCK:
            if path in self._stuck:
                return []
            liveness = follower.liveness()
            what = waiting_on(liveness.waiting_on)
            self._stuck[path] = what
            threshold = self.policy.threshold(liveness.state, liveness.waiting_on) or 0.0
            place = f" in {liveness.repository}" if liveness.repository else ""
            log.warning("session %s is stuck%s: %s, no event for %s (its threshold: %s)", follower.session_id, place,
                        what, duration(live[1]), duration(threshold))
            model = follower.live_model
            return [span for span in model.open_spans(int(now * 1e9)) if span.attributes.get(A.COPILOT_RUNNING)]
        self._recovered(follower, live[0] if live is not None else "no longer live")
        return []

    def sweep(self, open_paths) -> None:
        """Sessions that left the open set while stuck (ended, compacted): say they are no longer stuck."""
        for path in [p for p in self._stuck if p not in open_paths]:
            log.info("session %s is no longer stuck (was %s; it is no longer followed as live)", path.parent.name,
                     self._stuck.pop(path))
