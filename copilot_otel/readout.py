"""What scrapes read from the daemon: the live states of the views its reader publishes, at the
moment they are asked for (the reader replaces the views whole; nothing here touches a model)."""

from __future__ import annotations

import time
from typing import Callable

from .liveness import SessionView, StuckPolicy, live_state, pid_alive
from .metrics import LiveSession
from .vocab import WAITING_TOOL, WORKING


class Readout:
    """Scrape-time questions about the sessions in ``views()``."""

    def __init__(self, policy: StuckPolicy, *, views: Callable[[], tuple[SessionView, ...]],
                 clock: Callable[[], float] = time.time) -> None:
        self.policy = policy
        self.views = views
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
        for view in self.views():
            live = live_state(view, now=now, policy=self.policy, alive=probe, monotonic=monotonic)
            if live is not None:
                out.append(LiveSession(view.session_id, *live, view.waiting_on or "", view.repository or ""))
        return out

    def sessions_at_work(self) -> bool:
        """Some session is mid-turn (working or waiting on a tool) and not abandoned: lag means something."""
        return any(view.state in (WORKING, WAITING_TOOL) and view.abandoned_at is None for view in self.views())
