"""Every known session at a glance, for the web view and its JSON API (``/api/sessions``).

A source says which sessions exist and how each stands now: :class:`DaemonSessions` reads the
frozen values the daemon's reader publishes (one :class:`Published`, swapped whole);
:class:`HistorySessions` replays session logs without a daemon (``copilot-otel view PATH``).
Both name a session's state with the daemon's own rule (``liveness.live_state``), and both hand
out a :class:`Board`: the rows sorted live first, counted by state and repository, from which
``board.page`` cuts a filtered page. A board is rebuilt only when its source changed.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from msgspec.structs import replace

from ..catalog.board import Board, Live, make_board
from ..catalog.history import history_liveness, now_live, summarize_log
from ..catalog.published import Published
from ..catalog.settled import settled
from ..config import DEFAULT_MAX_LINE_BYTES, Config
from ..model.options import ModelOptions
from ..model.summary import SessionSummary
from ..source.liveness import Liveness, StuckPolicy, live_state, pid_alive, silence
from ..source.sources import SourceError, UnreadableLog

if TYPE_CHECKING:
    from ..catalog.cache import Catalog

LIVE_EVERY = 1.0  # seconds between re-evaluations of the live states (stuck comes with time)


class Source(Protocol):
    """What the web view reads: the sessions, how they stand, and what the traces hold."""

    options: ModelOptions
    max_line_bytes: int

    def change_key(self) -> tuple:
        """Cheap; differs whenever the board would."""

    def board(self) -> Board:
        """The board now (rebuilt only when ``change_key`` moved); may block: call from a worker."""

    def stale(self) -> bool:
        """True when ``scan`` should run before the board is read again."""

    def scan(self) -> None:
        """Look at the session logs again (a source that reads files; may block)."""


class _Probe:
    """kill(0) once per pid per evaluation."""

    def __init__(self) -> None:
        self.known: dict[int, bool] = {}

    def __call__(self, pid: int) -> bool:
        alive = self.known.get(pid)
        if alive is None:
            alive = self.known[pid] = pid_alive(pid)
        return alive


class _LiveStates:
    """The live states of the sessions' liveness records, re-evaluated at most every LIVE_EVERY seconds."""

    def __init__(self, policy: StuckPolicy, clock: Callable[[], float]) -> None:
        self.policy = policy
        self.clock = clock
        self._lock = threading.Lock()
        self._at = -LIVE_EVERY
        self._token: object = None
        self.states: dict[str, Live] = {}
        self.fingerprint: frozenset = frozenset()

    @property
    def at(self) -> float:
        """time.monotonic() when the states were last measured."""
        return self._at

    def of(self, token: object, liveness: tuple[Liveness, ...]) -> dict[str, Live]:
        """session id -> state of the live ones; ``token`` moves when the records do."""
        with self._lock:
            monotonic = time.monotonic()
            if token != self._token or monotonic - self._at >= LIVE_EVERY:
                now, probe = self.clock(), _Probe()
                states = {}
                for session in liveness:
                    live = live_state(session, now=now, policy=self.policy, alive=probe, monotonic=monotonic)
                    if live is not None:
                        quiet = max(0.0, silence(session, now=now, monotonic=monotonic))
                        states[session.session_id] = Live(live[0], live[1], quiet, session.state)
                self.states, self._token, self._at = states, token, monotonic
                self.fingerprint = frozenset((sid, live.state, live.activity) for sid, live in states.items())
            return self.states


class _Boarded:
    """What both sources share: a change key, and a board rebuilt from the previous one when it moved."""

    def __init__(self, policy: StuckPolicy, clock: Callable[[], float], hide_names: bool = False) -> None:
        self._live = _LiveStates(policy, clock)
        self._hide_names = hide_names  # --hide-names: the rows (pages, /api) carry no session's name
        self._board: Board | None = None
        self._board_lock = threading.Lock()

    def _published(self) -> tuple[Hashable, tuple[Liveness, ...]]:
        """(generation, liveness) as they were published together: the generation moves when the records do."""
        raise NotImplementedError

    def _summaries(self) -> list[tuple[Path, SessionSummary]]:
        raise NotImplementedError

    def change_key(self) -> tuple:
        generation, liveness = self._published()
        self._live.of(generation, liveness)
        return (generation, self._live.fingerprint)

    def board(self) -> Board:
        with self._board_lock:
            key = self.change_key()
            if self._board is not None and self._board.key == key:
                return self._board
            summaries = self._summaries()
            if self._hide_names:
                summaries = [(path, replace(s, name=None) if s.name else s) for path, s in summaries]
            self._board = make_board(key, summaries, self._live.states, self._board, at=self._live.at)
            return self._board


class DaemonSessions(_Boarded):
    """The daemon's sessions, read from what its reader publishes (never a model).

    The reader knows a session whole only when it read the log from its first line; after a
    restart it resumes from the checkpoint, and a log it resumed mid-file (or has no reason to read
    again) is summed up from the files by ``catalog`` (cached by file identity), every
    ``rescan_every`` seconds in the web view's workers.
    """

    def __init__(self, config: Config, published: Callable[[], Published], *, catalog: Catalog | None = None,
                 problem: Callable[[], str | None] = lambda: None, rescan_every: float = 5.0,
                 clock: Callable[[], float] = time.time) -> None:
        super().__init__(config.stuck_policy, clock, config.hide_names)
        self._published_now = published
        self._problem = problem
        self._catalog = catalog
        self._idle_quiet = config.idle_quiet
        self._rescan_every = rescan_every
        self._scanned = -rescan_every
        self._from_files: dict[Path, SessionSummary] = {}
        self._files_generation = 0
        self._walked = False  # the first scan walks the files whatever the reader knows (it may not have started)
        self.options: ModelOptions = config.model
        self.max_line_bytes: int = config.max_line_bytes
        self.copilot_home: Path = config.copilot_home

    def stale(self) -> bool:
        return self._catalog is not None and time.monotonic() - self._scanned >= self._rescan_every

    def problem(self) -> str | None:
        """Why no session can be seen now (COPILOT_HOME missing, unreadable), as /healthz says it; None if none."""
        return self._problem()

    def scan(self) -> None:
        """Sum up from the files the sessions the reader does not know whole."""
        if self._catalog is None:
            return
        published = self._published_now()
        partial = published.partial
        if self._walked and not partial and not self._from_files:
            # Since the first walk, the reader read every log it follows from its first line, and one it
            # has not met yet it meets within a pass: nothing to sum up (a walk of 10,000 logs saved).
            self._scanned = time.monotonic()
            return
        whole = {path: summary for path, summary in published.summaries.items() if path not in partial}
        try:
            found = self._catalog.scan(known=whole, workers=1)
        except SourceError:  # no session-state folder yet: /healthz says why, when it matters
            found = []
        from_files = {item.path: settled(item.summary, item.path.parent, idle_quiet=self._idle_quiet)
                      for item in found if item.summary is not None and item.path not in whole}
        if from_files != self._from_files:
            self._from_files = from_files
            self._files_generation += 1
        self._scanned = time.monotonic()
        self._walked = True

    def _published(self) -> tuple[tuple[int, int], tuple[Liveness, ...]]:
        published = self._published_now()
        return (published.generation, self._files_generation), published.liveness

    def _summaries(self) -> list[tuple[Path, SessionSummary]]:
        summaries = self._published_now().summaries
        if not self._from_files:  # the usual case: no copy of 10,000 entries to merge into
            return list(summaries.items())
        merged = dict(summaries)
        merged.update(self._from_files)
        return list(merged.items())


class HistorySessions(_Boarded):
    """Session logs replayed without a daemon; files that changed are replayed again when asked."""

    def __init__(self, files: Callable[[], list[Path]], options: ModelOptions, *, policy: StuckPolicy,
                 max_line_bytes: int = DEFAULT_MAX_LINE_BYTES, rescan_every: float = 2.0,
                 clock: Callable[[], float] = time.time, hide_names: bool = False) -> None:
        super().__init__(policy, clock, hide_names)
        self._files = files
        self.options = options
        self.max_line_bytes = max_line_bytes
        self._rescan_every = rescan_every
        self._clock = clock
        self._known: dict[Path, tuple[tuple[int, int, int], SessionSummary]] = {}
        self._generation = 0
        self._scanned = -rescan_every
        self._lock = threading.Lock()
        self.liveness: tuple[Liveness, ...] = ()
        self._shown: dict[Path, SessionSummary] = {}  # the summaries settled as the daemon would hold them

    def scan(self) -> None:
        """Replay the logs that are new or changed since the last scan; forget deleted ones."""
        with self._lock:
            seen = set()
            changed = False
            for path in self._files():
                seen.add(path)
                try:
                    st = path.stat()
                except OSError:
                    continue
                stamp = (st.st_ino, st.st_size, st.st_mtime_ns)
                known = self._known.get(path)
                if known is None or known[0] != stamp:
                    try:
                        self._known[path] = (stamp, summarize_log(path, self.options, self.max_line_bytes))
                    except UnreadableLog:
                        continue  # unreadable now (it says why where it is read: replay, inspect, sessions)
                    changed = True
            for path in set(self._known) - seen:
                del self._known[path]
                changed = True
            now = self._clock()
            liveness = tuple(history_liveness(path, summary) for path, (_stamp, summary) in self._known.items()
                             if now_live(summary, now))  # again each time: a process may have died since
            shown = {path: settled(summary, path.parent, now=now) for path, (_stamp, summary) in self._known.items()}
            if changed or liveness != self.liveness or shown != self._shown:
                self.liveness, self._shown = liveness, shown
                self._generation += 1
            self._scanned = time.monotonic()

    def stale(self) -> bool:
        """True when a rescan is due (the web view runs it in a worker)."""
        return time.monotonic() - self._scanned >= self._rescan_every

    def _published(self) -> tuple[int, tuple[Liveness, ...]]:
        return self._generation, self.liveness

    def _summaries(self) -> list[tuple[Path, SessionSummary]]:
        return list(self._shown.items())
