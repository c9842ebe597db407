"""What the daemon's other threads read (scrapes, /api/sessions, a web view): the frozen values the
reader publishes, turned into live states at the moment they are asked for.

The reader thread replaces ``views`` (the live sessions) and the entries of ``summaries`` (the
sessions it read whole) with new frozen values; nothing here touches a session model.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Callable

from .catalog import Catalog
from .liveness import SessionView, StuckPolicy, live_state, lock_pids, pid_alive
from .metrics import LiveSession
from .sources import SourceError
from .status import SessionStatus, api_document, status_of
from .summary import SessionSummary
from .vocab import WAITING_TOOL, WORKING


class Readout:
    """The daemon's published state and the questions other threads ask of it."""

    def __init__(self, catalog: Catalog, policy: StuckPolicy, *, copilot_home: Path,
                 clock: Callable[[], float] = time.time) -> None:
        self.catalog = catalog
        self.policy = policy
        self.copilot_home = copilot_home
        self.clock = clock
        self.views: tuple[SessionView, ...] = ()  # live (or recently abandoned) sessions, replaced whole
        # The sessions the daemon read whole (from their first line); each entry replaced whole, never changed.
        # A session resumed from the checkpoint mid-file is not here: its summary comes from the files.
        self.summaries: dict[Path, SessionSummary] = {}

    def live_sessions(self) -> list[LiveSession]:
        """Scrape-time states of the sessions that are live now (or recently abandoned)."""
        now = self.clock()
        alive: dict[int, bool] = {}  # one kill(0) per pid per scrape

        def probe(pid: int) -> bool:
            known = alive.get(pid)
            if known is None:
                known = alive[pid] = pid_alive(pid)
            return known

        out = []
        for view in self.views:
            live = live_state(view, now=now, policy=self.policy, alive=probe)
            if live is not None:
                out.append(LiveSession(view.session_id, *live, view.waiting_on or "", view.repository or ""))
        return out

    def statuses(self) -> list[SessionStatus]:
        """Every session under COPILOT_HOME now: the summaries of the logs the daemon read whole, the others'
        from the files (cached), each in its state by the rules of the scrapes."""
        now = self.clock()
        views = {view.session_id: view for view in self.views}
        try:
            scanned = self.catalog.scan(known=dict(self.summaries), workers=1)
        except SourceError:  # no session-state folder (yet): /healthz says why, when it matters
            return []
        statuses = []
        for item in scanned:
            if item.summary is None:
                continue
            view = views.get(item.summary.session_id)
            pids = view.pids if view is not None else lock_pids(item.path.parent) if item.summary.ended is None else ()
            statuses.append(status_of(item.summary, pids, policy=self.policy, now=now, view=view, path=str(item.path)))
        return statuses

    def api_sessions(self) -> dict:
        """The body of /api/sessions."""
        return api_document(self.statuses(), copilot_home=str(self.copilot_home))

    def sessions_at_work(self) -> bool:
        """Some session is mid-turn (working or waiting on a tool) and not abandoned: lag means something."""
        return any(view.state in (WORKING, WAITING_TOOL) and view.abandoned_at is None for view in self.views)
