"""Is a session's CLI process alive, and what does that make the session?

The probes (``pid_alive``, ``lock_pids``) read the process table and the session folder's
``inuse.<pid>.lock`` files. The policy (``live_state``, ``verdict``) is pure: the clocks and
the probe are passed in, so it is tested without processes.

The daemon measures a session's silence on the monotonic clock, from when its reader last saw
an event arrive (``Liveness.seen_at``): a clock stepped back or forward, or a log written
with a wrong clock, neither hides nor invents a stuck or abandoned session. Without a daemon
(`inspect`, `sessions --from-files`) there is no such memory: the last event's own timestamp
is compared with the wall clock.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from msgspec import Struct, field

from ..vocab import ABANDONED, STUCK, WAITING_TOOL, WORKING

LOCK_PREFIX = "inuse."
LOCK_SUFFIX = ".lock"

# How long after its last event a dead session stays visible as abandoned.
ABANDONED_RETENTION = 3600.0
# After its last event a session gets this long before a missing process counts: a CLI that is
# starting may write before its lock exists.
GRACE_SECONDS = 1.0
# Seconds of quiet before a session with no live process and nothing open is set aside.
DORMANT_AFTER = 5.0
# The first CLI version known to write inuse.<pid>.lock (1.0.2 writes none; 1.0.24 does).
LOCKS_SINCE = (1, 0, 24)

ABANDON = "abandon"  # verdict: the process died mid-turn
DORMANT = "dormant"  # verdict: the process is gone and nothing is open


def pid_alive(pid: int) -> bool:
    """True if a process with this pid exists (signal 0 probes without touching it)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, owned by someone else
    return True


def lock_pids(session_dir: Path) -> list[int]:
    """The pids named by the session's lock files (from the file name)."""
    pids: list[int] = []
    try:
        names = os.listdir(session_dir)
    except OSError:
        return pids
    for name in names:
        if name.startswith(LOCK_PREFIX) and name.endswith(LOCK_SUFFIX):
            middle = name[len(LOCK_PREFIX):-len(LOCK_SUFFIX)]
            if middle.isdigit():
                pids.append(int(middle))
    return pids


def locks_expected(pids: list[int] | tuple[int, ...], cli_version: tuple[int, ...] | None, *,
                   seen: bool = False) -> bool:
    """Does a session's CLI write lock files, so that a missing process means it is gone?
    Yes once one was ``seen`` (or is there now), or when its version is unknown or LOCKS_SINCE on."""
    return bool(pids) or seen or cli_version is None or cli_version >= LOCKS_SINCE


class StuckPolicy(Struct, frozen=True):
    """How long a session at work may go without an event before it is stuck.

    Working (the model thinking, a turn open): ``stuck_after``. Waiting on a tool: that tool's
    own threshold in ``tools`` (``{"bash": 1800}``), else ``stuck_after_tool``.
    """

    stuck_after: float = 600.0
    stuck_after_tool: float = 1800.0
    tools: Mapping[str, float] = field(default_factory=dict)

    def threshold(self, state: str, tool: str | None = None) -> float | None:
        """Seconds of silence after which a session in ``state`` (waiting on ``tool``) is stuck; None: never."""
        if state == WORKING:
            return self.stuck_after
        if state == WAITING_TOOL:
            return self.tools.get(tool, self.stuck_after_tool) if tool else self.stuck_after_tool
        return None


class Liveness(Struct, frozen=True):
    """A frozen snapshot of one followed session, published by the reader for scrapes to read."""

    session_id: str
    state: str  # the model's state: working, waiting_tool, waiting_user or idle
    last_event_ns: int
    pids: tuple[int, ...]
    abandoned_at: float | None = None  # when the session was found dead mid-turn (set: it is abandoned)
    # False for a CLI that writes no lock file (up to 1.0.2) and whose folder never had one:
    # no process can be found for it, which is then no evidence that it died.
    locks_expected: bool = True
    waiting_on: str | None = None  # the tool it waits on (the oldest running), or waited on when it died
    repository: str | None = None
    seen_at: float | None = None  # monotonic time the daemon last saw one of its events (None: no daemon)
    trace_id: str = ""  # hex id of the trace of its running (else last) interaction: what a stuck alert links to


def live_state(session: Liveness, *, now: float, policy: StuckPolicy, alive: Callable[[int], bool],
               monotonic: float | None = None) -> tuple[str, float] | None:
    """(state, seconds stalled) of a session now; None when it is not live.

    Abandoned sessions stay visible until ABANDONED_RETENTION after their last event; a live
    one at work with no event for longer than ``policy`` allows is stuck. Silence is
    ``monotonic - session.seen_at`` for a daemon's view (``monotonic``: time.monotonic() now), else
    ``now`` (wall time) minus the last event's timestamp.
    """
    stalled = max(0.0, silence(session, now=now, monotonic=monotonic))
    if session.abandoned_at is not None:
        return (ABANDONED, stalled) if stalled < ABANDONED_RETENTION else None
    if not session.pids and not session.locks_expected:
        if stalled >= ABANDONED_RETENTION:
            return None  # silent this long with no process to ask: no longer shown as live
    elif not any(alive(pid) for pid in session.pids):
        return None
    threshold = policy.threshold(session.state, session.waiting_on)
    if threshold is not None and stalled > threshold:
        return STUCK, stalled
    return session.state, 0.0


def silence(session: Liveness, *, now: float, monotonic: float | None = None) -> float:
    """Seconds since the session's last event: as the daemon saw it arrive, else by its own timestamp."""
    if session.seen_at is not None:
        return (time.monotonic() if monotonic is None else monotonic) - session.seen_at
    return now - session.last_event_ns / 1e9


def verdict(*, mid_turn: bool, awaiting_confirmation: bool, since_event: float, quiet: float,
            alive: Callable[[], bool], locks_expected: bool = True) -> str | None:
    """What a session's missing process means: ABANDON (it died mid-turn), DORMANT (gone, nothing
    open: set the session aside), or None (alive, or too soon to tell). ``since_event``: seconds
    since its last event (liveness.silence); ``quiet``: seconds since the reader last read new
    events; ``alive`` is called only when the answer depends on it. Without lock files
    (``locks_expected`` False) a missing process proves nothing: only a silence of
    ABANDONED_RETENTION counts as its end."""
    if since_event <= GRACE_SECONDS:
        return None
    if not locks_expected and since_event < ABANDONED_RETENTION:
        return None
    if mid_turn:
        return None if alive() else ABANDON
    if not awaiting_confirmation and quiet >= DORMANT_AFTER and since_event > DORMANT_AFTER and not alive():
        return DORMANT
    return None
