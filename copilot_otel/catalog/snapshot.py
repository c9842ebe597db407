"""One session's log read so far, and what it looks like now: for `inspect`, `inspect --follow` and the web view.

A :class:`SessionReader` follows the log through the session model (new lines only, at each
``update``). A :class:`Snapshot` is the session at one moment: every span, the open ones
ending *now* while the CLI process lives (their durations grow) or closed as the daemon would
close them once it is gone, and the session's state named by the daemon's rules.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path

from msgspec import Struct

from ..config import DEFAULT_MAX_LINE_BYTES
from ..logreader import LogReader
from ..model.open_spans import InteractionSummary
from ..model.options import ModelOptions
from ..model.pipeline import Warn
from ..model.records import SpanRecord
from ..model.sessions import SessionModel
from ..model.summary import SessionSummary
from ..source.liveness import StuckPolicy, pid_alive
from ..source.sources import UnreadableLog, session_id_of
from ..source.workspace import named
from ..vocab import ABANDONED, ENDED
from .status import SessionStatus, status_of

log = logging.getLogger(__name__)


class Snapshot(Struct, frozen=True):
    """A session at one moment."""

    status: SessionStatus
    spans: list[SpanRecord]  # finished, then the open ones (marked github.copilot.running) or their cut-off ends
    interactions: list[InteractionSummary]  # the interactions that ended (autopilot, task summary, how)
    running: bool  # its CLI process lives and the session is not over: open spans end now
    now_ns: int
    rejected: int  # malformed lines skipped


class SessionReader:
    """Reads one session log incrementally through the model."""

    def __init__(self, path: Path, *, options: ModelOptions = ModelOptions(),
                 max_line_bytes: int = DEFAULT_MAX_LINE_BYTES, warn: Warn = log.warning, names: bool = True) -> None:
        self.path = Path(path)
        self.names = names  # the session's name shown (not with --hide-names)
        self.session_id = session_id_of(self.path)
        self.options = options
        self.max_line_bytes = max_line_bytes
        self.warn = warn
        self._reset()

    def _reset(self, reader: LogReader | None = None) -> None:
        self.reader = reader or LogReader(self.path, self.options, session_id=self.session_id,
                                          max_line_bytes=self.max_line_bytes, warn=self.warn)
        self.spans: list[SpanRecord] = []
        self.rejected = 0
        self.events = 0  # lines that were session events
        # Once its process is gone: what finish() closed, and the summary from before (what it was doing).
        self._closed: tuple[list[SpanRecord], SessionSummary] | None = None

    def update(self) -> bool:
        """Read what was appended; True if there were new lines. Raises UnreadableLog."""
        result, out = self.reader.read(max_bytes=1 << 62)
        if result.failure:
            raise UnreadableLog(self.path, result.failure)
        if result.restarted:  # truncated or replaced: read from the start, into a new model
            self._reset(self.reader)
        elif result.items and self._closed is not None:  # resumed after we closed it: read it again whole
            self._reset()
            return self.update()
        if not result.items:
            return False
        self.spans.extend(out.spans)
        self.rejected += sum(out.rejected.values())
        self.events += sum(out.events.values())
        return True

    def not_a_log(self) -> str | None:
        """Why the file read so far is no session log (lines, and none of them an event), or None."""
        if self.events or not self.rejected:
            return None
        return f"{self.path}: not a Copilot session log (none of its {self.rejected} line(s) is a session event)"

    @property
    def model(self) -> SessionModel:
        """The session model, as read so far."""
        return self.reader.live_model

    def snapshot(self, *, policy: StuckPolicy, now: float | None = None,
                 alive: Callable[[int], bool] = pid_alive) -> Snapshot:
        """The session now: its state by the daemon's rules, and its spans."""
        now = time.time() if now is None else now
        now_ns = int(now * 1e9)
        summary = self._closed[1] if self._closed is not None else self.model.summary()
        if self.names:
            summary = named(summary, self.path.parent)
        status = status_of(summary, self.path, policy=policy, now=now, alive=alive)
        running = self._closed is None and self.model.ended is None and status.state not in (ENDED, ABANDONED)
        if running:
            spans = self.spans + self.model.open_spans(max(now_ns, self.model.last_event_ns))
        else:
            if self._closed is None:
                self._closed = (list(self.model.finish().spans), summary)  # closed as the daemon closes them
            spans = self.spans + self._closed[0]
        return Snapshot(status, spans, list(self.model.interactions), running, now_ns, self.rejected)
