"""What scrapes read from the daemon: the live states of the sessions whose liveness its reader publishes, at
the moment they are asked for (the reader replaces them whole; nothing here touches a model)."""

from __future__ import annotations

import time
from collections.abc import Callable

from ..metrics.collectors import LiveSession
from ..source.liveness import Liveness, StuckPolicy, live_state, pid_alive
from ..vocab import WAITING_TOOL, WORKING


class Readout:
    """Scrape-time questions about the sessions in ``liveness()``."""

    def __init__(self, policy: StuckPolicy, *, liveness: Callable[[], tuple[Liveness, ...]],
                 clock: Callable[[], float] = time.time) -> None:
        self.policy = policy
        self.liveness = liveness
        self.clock = clock

    def live_sessions(self) -> list[LiveSession]:
        """Scrape-time states of the sessions that are live now (or recently abandoned)."""
        now, monotonic = self.clock(), time.monotonic()
        alive: dict[int, bool] = {}  # one kill(0) per pid per scrape

        def probe(pid: int) -> bool:
            known = alive.get(pid)
            if known is None:
                known = alive[pid] = pid_alive(pid)
            return known

        out = []
        for session in self.liveness():
            live = live_state(session, now=now, policy=self.policy, alive=probe, monotonic=monotonic)
            if live is not None:
                out.append(LiveSession(session.session_id, *live, session.waiting_on or "", session.repository or "",
                                       session.trace_id))
        return out

    def sessions_at_work(self) -> bool:
        """Some session is mid-turn (working or waiting on a tool) and not abandoned: lag means something."""
        return any(session.state in (WORKING, WAITING_TOOL) and session.abandoned_at is None
                   for session in self.liveness())
