"""What changes between reads: an idle loop confirmed after a quiet period, a session whose process died mid-turn
(abandoned) or with nothing open (dormant), a session stuck at work. Visits only the table's open sessions.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from functools import partial

from ..config import Config
from ..model.pipeline import Outputs
from ..model.summary import SessionSummary
from ..source.liveness import ABANDON, ABANDONED_RETENTION, DORMANT, live_state, lock_pids, pid_alive, verdict
from ..vocab import END_INCOMPLETE, END_SHUTDOWN
from .follow import Follower
from .notices import SessionNotices
from .outbox import Outbox
from .rounds import Rounds
from .table import SessionTable

log = logging.getLogger(__name__)

LIVENESS_EVERY = 1.0


class Housekeeping:
    """The reader's work between reads, on the sessions ``table`` holds open; ``deliver`` hands what a session's
    end produced to the daemon as a read's outputs are."""

    def __init__(self, config: Config, table: SessionTable, notices: SessionNotices, outbox: Outbox, rounds: Rounds,
                 *, clock: Callable[[], float], deliver: Callable[[Follower, Outputs], None]) -> None:
        self.idle_quiet = config.idle_quiet
        self.policy = config.stuck_policy
        self.table, self.notices, self.outbox, self.rounds = table, notices, outbox, rounds
        self.clock = clock
        self.deliver = deliver
        self._next_liveness = 0.0

    def watch(self, follower: Follower, *, resumed: bool = False) -> None:
        """A session not ended: visited by housekeeping and reported by scrapes."""
        table = self.table
        if follower.path not in table.open and self.alive(follower):
            self.notices.started(follower, resumed=resumed)
        table.open[follower.path] = follower
        table.liveness[follower.path] = follower.liveness()

    def unwatch(self, follower: Follower) -> None:
        """A session ended: left alone (an abandoned one is still reported until its retention ends)."""
        if follower.model is not None and follower.model.ended == END_SHUTDOWN:
            self.notices.ended(follower, "shut down")
        self.table.open.pop(follower.path, None)
        if follower.abandoned_at is None:
            self.table.liveness.pop(follower.path, None)
        else:
            self.table.liveness[follower.path] = follower.liveness()

    def run(self) -> None:
        """One pass's housekeeping: idle loops confirmed at once, liveness checked every LIVENESS_EVERY s."""
        now = self.clock()
        monotonic = time.monotonic()
        check_liveness = monotonic >= self._next_liveness
        if check_liveness:
            self._next_liveness = monotonic + LIVENESS_EVERY
            self._expire_abandoned(monotonic)
        for follower in list(self.table.open.values()):
            model = follower.live_model
            # Quiet is measured on our clock: a backlog read late must not look quiet.
            quiet = monotonic - follower.last_read
            if model.awaiting_confirmation and quiet >= self.idle_quiet:
                out = Outputs()
                follower.confirm_end(out)
                self.deliver(follower, out)
            if not check_liveness or follower.path in self.rounds:
                continue  # a log with more waiting to be read: its last event read is not its last one
            self._check(follower, now, monotonic, quiet)
        if check_liveness:
            self.notices.sweep(self.table.open)

    def _expire_abandoned(self, monotonic: float) -> None:
        table = self.table
        for path, follower in list(table.abandoned.items()):
            if follower.abandoned_at is None or monotonic - follower.seen_at >= ABANDONED_RETENTION:
                del table.abandoned[path]
                follower.abandoned_at = None
                table.liveness.pop(path, None)
                table.compact(follower)

    def _check(self, follower: Follower, now: float, monotonic: float, quiet: float) -> None:
        """Is its process alive, and is it stuck?"""
        model = follower.live_model
        decision = verdict(mid_turn=model.mid_turn, awaiting_confirmation=model.awaiting_confirmation,
                           since_event=monotonic - follower.seen_at, quiet=quiet,
                           alive=partial(self.alive, follower), locks_expected=follower.locks_expected)
        if decision == ABANDON:
            self.abandon(follower, monotonic)
        elif decision == DORMANT:  # its process is gone and nothing is open: set aside until it grows
            self.notices.ended(follower, "its CLI process exited")
            self.table.close(follower)
            self.table.compact(follower)
        elif model.mid_turn or self.notices.is_stuck(follower):
            live = live_state(follower.liveness(), now=now, policy=self.policy, alive=pid_alive, monotonic=monotonic)
            self.outbox.queue_spans(self.notices.check_stuck(follower, live, now))

    def alive(self, follower: Follower) -> bool:
        """Is a process holding the session? The known lock pids first, the folder listed again if none lives."""
        if any(pid_alive(pid) for pid in follower.pids):
            return True
        pids = lock_pids(follower.path.parent)
        if pids != follower.pids:
            follower.pids = pids
            if follower.path in self.table.liveness:
                self.table.liveness[follower.path] = follower.liveness()
        return any(pid_alive(pid) for pid in pids)

    def found_abandoned(self, follower: Follower, before: SessionSummary) -> None:
        """A log re-read after a restart ends mid-turn where a run before closed its work: that run found its
        process gone. Abandoned it stays, by the rule `inspect` and `sessions --from-files` apply (no live
        process, within ABANDONED_RETENTION of its last event): a restart changes no state."""
        monotonic = time.monotonic()
        if monotonic - follower.seen_at < ABANDONED_RETENTION and not self.alive(follower) \
                and (follower.pids or follower.locks_expected):
            follower.abandoned_at = monotonic
            self.table.abandoned[follower.path] = follower
            log.info("session %s was abandoned mid-turn before this start (waiting on %s)", follower.session_id,
                     before.waiting_on or "the model")

    def abandon(self, follower: Follower, monotonic: float) -> None:
        """The process that held a session died mid-turn: end its open spans as incomplete."""
        self.notices.forget(follower, "abandoned")
        if monotonic - follower.seen_at < ABANDONED_RETENTION:
            follower.abandoned_at = monotonic
            self.table.abandoned[follower.path] = follower
            log.warning("session %s was abandoned mid-turn (its CLI process is gone)", follower.session_id)
        before = follower.live_model.summary()
        out = Outputs()
        follower.finish(out, END_INCOMPLETE)
        self.deliver(follower, out)
        self.table.keep_waiting(follower.path, before)  # what it was doing when it died stays in its summary
