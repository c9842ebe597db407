"""The current state of one session, for `sessions` and `inspect`: its summary and its state now, named
by the daemon's rule, the same the web view applies (``history.history_liveness``: the daemon's view of a
log read to its end; then ``liveness.live_state``).

Its JSON form is a row of the web view's ``/api/sessions`` (``rows.row_json``), so that
`sessions --json` prints the same whether a daemon answered or the files were read.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from msgspec import Struct
from msgspec.structs import replace

from ..model.summary import SessionSummary
from ..source.liveness import Liveness, StuckPolicy, live_state, pid_alive, silence
from ..vocab import ENDED, IDLE, STUCK, WAITING_TOOL, WORKING
from .board import Row, row_json
from .history import history_liveness
from .settled import settled

_MS = 1_000_000
_NO_PATH = Path()  # row_json reads no path: one Path for all rows, not one parsed per row


class SessionStatus(Struct, frozen=True):
    """One session now: its summary, its state (one of vocab.SESSION_STATES) and where its log is."""

    summary: SessionSummary
    state: str
    stalled_seconds: float = 0.0  # stuck or abandoned: seconds since its last event
    path: str | None = None  # its events.jsonl
    activity: str = ""  # live: what its log says it does (working, waiting_tool, ...) before any threshold
    silent_seconds: float = 0.0  # live: seconds since its last event

    @property
    def session_id(self) -> str:
        return self.summary.session_id

    @property
    def waiting_on(self) -> str | None:
        """The tool it waits on (or waited on when its process died)."""
        return self.summary.waiting_on

    def to_json(self, *, now: float | None = None) -> dict[str, Any]:
        """The session as a row of /api/sessions (``now``: the clock its stalled_since_ms counts back from)."""
        return row_json(Row(0, 0, self.session_id, _NO_PATH, self.summary, self.state,
                            self.stalled_seconds, self.silent_seconds, self.activity), now=now)

    def nameless(self) -> SessionStatus:
        """The same without the session's name (--hide-names)."""
        return replace(self, summary=replace(self.summary, name=None)) if self.summary.name else self

    def under(self, policy: StuckPolicy) -> SessionStatus:
        """The same session named by other thresholds (those given to `sessions`, over the daemon's): at work
        and silent past the threshold of what it does is stuck, else what it does."""
        if self.state not in (STUCK, WORKING, WAITING_TOOL) or self.activity not in (WORKING, WAITING_TOOL):
            return self
        threshold = policy.threshold(self.activity, self.waiting_on)
        if threshold is not None and self.silent_seconds > threshold:
            return replace(self, state=STUCK, stalled_seconds=self.silent_seconds)
        return replace(self, state=self.activity, stalled_seconds=0.0)

    @classmethod
    def from_json(cls, row: dict[str, Any]) -> SessionStatus:
        """A row of /api/sessions back as a status (times to the millisecond; the log's own state unknown)."""
        summary = SessionSummary(
            row["id"], IDLE, row.get("ended"), row.get("model"), row.get("cwd"), row.get("cli_version"),
            row.get("repository"), row.get("branch"), row.get("started_ms", 0) * _MS, row.get("last_ms", 0) * _MS,
            row.get("waiting_on"), row.get("waiting_since_ms", 0) * _MS, row.get("interactions", 0),
            row.get("nudges", 0), row.get("turns", 0), row.get("llm_calls", 0), row.get("tool_calls", 0),
            row.get("tool_failures", 0), row.get("input_tokens", 0), row.get("output_tokens", 0),
            row.get("cache_read_tokens", 0), float(row.get("premium_requests", 0.0)),
            float(row.get("nudge_premium_requests", 0.0)), row.get("last_end"), int(row.get("nano_aiu") or 0),
            int(row.get("nudge_nano_aiu") or 0), row.get("credits_status"), row.get("name"),
            asking=row.get("asking"), asking_since_ns=(row.get("asking_since_ms") or 0) * _MS,
            cache_write_tokens=row.get("cache_write_tokens", 0), lines_added=row.get("lines_added", 0),
            lines_removed=row.get("lines_removed", 0))
        return cls(summary, row.get("state") or ENDED, float(row.get("stalled_s") or 0.0),
                   activity=row.get("activity") or "", silent_seconds=float(row.get("silent_s") or 0.0))


def status_of(summary: SessionSummary, path: Path, *, policy: StuckPolicy, now: float | None = None,
              alive: Callable[[int], bool] = pid_alive, liveness: Liveness | None = None,
              monotonic: float | None = None) -> SessionStatus:
    """A session's status now. ``liveness``: the daemon's own record, when it follows the session (its silence measured
    on the monotonic clock); without one, the record the daemon would hold of the log read to its end (its lock
    files, whether it died mid-turn), its silence measured from the last event's timestamp."""
    now = time.time() if now is None else now
    if liveness is None:  # read from the files: named by the daemon's record of the log, summed up as it would be
        path = path if isinstance(path, Path) else Path(path)
        liveness = history_liveness(path, summary)
        summary = settled(summary, path.parent, now=now, alive=alive)
    live = live_state(liveness, now=now, policy=policy, alive=alive, monotonic=monotonic)
    if live is None:
        return SessionStatus(summary, ENDED, 0.0, str(path))
    return SessionStatus(summary, live[0], live[1], str(path), liveness.state,
                         max(0.0, silence(liveness, now=now, monotonic=monotonic)))
