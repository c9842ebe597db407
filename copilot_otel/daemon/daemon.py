"""The daemon: wiring, scheduling, health and shutdown. Discover -> follow -> pipeline -> export / metrics.

One reader thread (``run``) owns every session model and the table of sessions (table.py). Each pass reads what
changed, does the housekeeping (housekeeping.py), hands the outputs to the export side, then publishes one frozen
:class:`~copilot_otel.catalog.published.Published` (a Liveness per live session, every summary), swapped
whole; the scrape and web threads read only that, never a model.
"""

from __future__ import annotations

import errno
import logging
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from stat import S_ISREG
from typing import TYPE_CHECKING

from msgspec.structs import replace

from ..base.logs import RateLimitedLog, ReportedOnce
from ..base.regular_files import NOT_REGULAR
from ..catalog.published import Published
from ..config import Config
from ..metrics.registry import Metrics
from ..model.logs import LogRecord
from ..model.pipeline import Outputs
from ..otlp.contract import RecordSink, SpanSink
from ..otlp.resource import resource_attributes
from ..source import trust
from ..source.discover import Discoverer, Tree
from ..source.liveness import ABANDONED_RETENTION, lock_pids
from ..source.sources import SESSION_STATE
from ..state.checkpoint import Checkpoint, StateLock
from .admission import Admission
from .collector import ReaderCollection
from .exports import ExportSide, daemon_metrics
from .follow import Follower
from .history import History
from .housekeeping import Housekeeping
from .moves import Moves
from .notices import SessionNotices
from .outbox import Outbox
from .rounds import Rounds
from .scrape_view import Readout
from .table import SessionTable

if TYPE_CHECKING:  # the OTel SDK is imported only when the push is on
    from ..metrics.otlp_push import MetricsPusher

log = logging.getLogger(__name__)

# The backlog is read only while fewer spans than this wait for export: what a new session sends is queued behind
# at most these (a few seconds of export at most), not behind the whole history read at start.
BACKLOG_LEAD = 4096


class Daemon:
    """Follows every session under COPILOT_HOME/session-state; exports spans; keeps metrics."""

    def __init__(self, config: Config, *, sink: SpanSink | None = None, metrics: Metrics | None = None,
                 clock: Callable[[], float] = time.time, own_gc: bool = False,
                 log_sink: RecordSink[LogRecord] | None = None) -> None:
        if log_sink is not None and not config.model.logs:  # a logs sink handed in: the models make log records
            config = replace(config, model=replace(config.model, logs=True))
        self.config = config
        self.root = config.copilot_home / SESSION_STATE
        self.clock = clock
        self.policy = config.stuck_policy
        self.table = SessionTable()
        self.sessions = self.table.followers
        self.readout = Readout(self.policy, liveness=lambda: self.table.published.liveness, clock=clock)
        # One daemon per checkpoint (raises CheckpointError); a state folder others could change is refused.
        self.lock = StateLock(config.state_dir, strict=not config.no_strict_modes)
        self.lock.acquire()
        # Who speaks: this machine and this state folder's instance id, on every span, push and target_info.
        self.resource = resource_attributes(state_dir=config.state_dir, strict=not config.no_strict_modes)
        self.metrics = daemon_metrics(config, self.resource, self.readout, metrics)
        # A damaged checkpoint is set aside only when starting afresh re-counts nothing (--from-end skips the history).
        self.checkpoint = Checkpoint(config.state_dir / "checkpoint.sqlite", start_afresh=not config.from_start)
        self.exports = ExportSide(config, self.checkpoint, self.metrics, self.resource, sink=sink, log_sink=log_sink)
        self.sink, self.queue = self.exports.sink, self.exports.queue
        self._stop = threading.Event()
        # What this pass read, handed to the exporter once a batch of spans waits and at the end of the pass.
        self.outbox = Outbox(self.exports, self.checkpoint, self.metrics, stopping=self._stop.is_set)
        # Read when scraped, so they stay true while the reader waits on a full queue.
        self.metrics.files_watched.set_function(lambda: len(self.sessions))
        self.metrics.export_queue.set_function(lambda: self.outbox.waiting)
        self.discoverer = Discoverer(self.root, poll=config.poll, rescan_interval=config.rescan_interval,
                                     live=lambda: self.table.open.keys())
        self.notices = SessionNotices(self.policy)
        self._init_reading(config)
        self.housekeeping = Housekeeping(config, self.table, self.notices, self.outbox, self.rounds, clock=clock,
                                         deliver=self._deliver)
        # the OTLP metrics pusher (OTEL_METRICS_EXPORTER=otlp): /healthz says its failures
        self.metrics_push: MetricsPusher | None = None
        # own_gc: this daemon owns the process's garbage collector (daemon/collector.py).
        self._collection = ReaderCollection() if own_gc else None

    def _init_reading(self, config: Config) -> None:
        """Where the reader resumes, and what it reads or leaves out."""
        self._restored = self.checkpoint.load()
        # The session metrics resume at the totals committed with these positions (metrics/totals.py).
        resumed = self.metrics.resume(self.checkpoint.load_totals())
        if resumed:
            log.info("resumed %d metric samples from the checkpoint", resumed)
        self.moves = Moves(self._restored)
        started = self.clock()
        self.tree = Tree(self.root)
        # Taken here, before /healthz answers: a session created once the daemon is up is not history.
        # --from-end: history present at the first start is skipped (a checkpoint still wins).
        self.history = History(first_start=self.checkpoint.first_start, started=started,
                               skip=set() if config.from_start else self.tree.logs())
        self._unreadable = ReportedOnce(log)  # retried at every rescan
        self._root_real = self.tree.real
        self.admission = Admission(self.root, self._root_real, self.metrics, open_said=config.no_strict_modes)
        self.rounds = Rounds()
        self._bad_lines = RateLimitedLog(log)
        self._last_loop = time.monotonic()

    @property
    def published(self) -> Published:
        """What the reader published after its last pass (the only thing other threads read)."""
        return self.table.published

    # ------------------------------------------------------------ lifecycle

    def request_stop(self, *_args) -> None:
        """Ask the loop to stop (signal handler): at once, not after the pass's wait for changes."""
        self._stop.set()
        self.discoverer.wake()

    def health(self) -> tuple[bool, str]:
        """Healthy while the reader loop turns and sessions can be seen; says whether exports succeed, and what
        was set aside."""
        stalled = time.monotonic() - self._last_loop
        if stalled > 30 and not self.exports.blocked:  # a reader paused by back-pressure is not hung
            return False, f"reader loop stalled for {stalled:.0f} s"
        problem = self.discoverer.problem()
        if problem is not None:
            return False, problem
        notes = self.exports.notes()
        waiting = self.discoverer.waiting()
        if waiting is not None:
            notes.insert(0, waiting)
        pushing = self.metrics_push.note() if self.metrics_push is not None else None
        if pushing is not None:
            notes.append(pushing)
        return True, f"ok ({'; '.join(notes)})" if notes else "ok"

    def run(self, ready: threading.Event | None = None) -> None:
        """Run until stopped; flush and commit before returning."""
        if self._collection is not None:
            self._collection.start()
        self.exports.start()
        self.discoverer.start()
        if ready is not None:
            ready.set()
        try:
            while not self._stop.is_set():
                self._pass()
        finally:
            self.outbox.send(final=True)
            if self._collection is not None:
                self._collection.stop()
            self.discoverer.stop()
            self.exports.stop()
            self.checkpoint.close()
            self.exports.shutdown()
            self.lock.release()

    def _pass(self) -> None:
        """One turn of the reader loop: read what changed, housekeeping, publish the sessions' liveness."""
        rescans = self.discoverer.rescans
        files, lock_dirs = self.discoverer.wait(self.rounds.wait())
        if self.discoverer.rescans != rescans:
            files |= self._unreadable.paths
        self._last_loop = time.monotonic()
        queue, fresh = self.rounds.take(files, self.sessions)
        if self._collection is not None and queue:
            self._collection.reading(True)
        self.rounds.read(queue, fresh, self._read_or_report, behind=lambda: self.outbox.waiting >= BACKLOG_LEAD,
                         stopping=self._stop.is_set)
        for folder in lock_dirs:
            self._locks_changed(folder)
        self.housekeeping.run()
        self.outbox.send()
        self.table.publish()
        self.history.say()
        if self._collection is not None:  # a backlog: the next pass reads at once
            self._collection.rested(more=bool(self.rounds.backlog), read=bool(queue))

    def _read_or_report(self, path: Path) -> None:
        try:
            self._read(path)
        except OSError as exc:  # a path that cannot even be looked at (permissions): said once, retried
            self._unreadable.report(path, f"cannot look at {path}: {exc.strerror or exc}; will retry")

    def _locks_changed(self, folder: Path) -> None:
        """A session folder's lock files changed: its process ids, and maybe its name, again."""
        follower = self.sessions.get(folder / "events.jsonl")
        if follower is not None:
            follower.pids = lock_pids(folder)
            if follower.model is not None and follower.model.ended is None:
                self.housekeeping.watch(follower)  # a CLI took it up again
            self.table.rename(follower)

    # ------------------------------------------------------------ reading

    def _follower_for(self, path: Path) -> Follower | None:
        follower = self.sessions.get(path)
        if follower is not None:
            return follower
        try:
            st = os.stat(path)  # one look at a log seen here first: a file? written before this start?
        except OSError as exc:
            if exc.errno in (errno.ENOENT, errno.ENOTDIR, errno.ELOOP):  # not there (as Path.is_file says)
                return None
            raise
        if not S_ISREG(st.st_mode):
            # Said as the tail says it of a followed log swapped for a FIFO: the same line whether the swap was
            # seen as one change or as a deletion, then a new path (retried at each rescan, said once).
            self._unreadable.report(path, f"cannot read {path}: {NOT_REGULAR}; will retry")
            return None
        if not self.tree.inside(path):  # said by the tree
            self.admission.refuse(path, trust.OUTSIDE, None)
            return None
        if not self.admission.admit(path, st):
            return None
        restored = self._restored.pop(str(path), None)
        if restored is None:  # a log seen here first: did it move here?
            first_id, moved, restored = self.moves.origin(path, self.sessions, within=self._root_real)
            if moved is not None:
                self._move(moved, path, first_id)
                return moved
        follower = Follower.start(path, self.config.model, max_line_bytes=self.config.max_line_bytes,
                                  restored=restored, within=self._root_real,
                                  generation=self.table.generations.pop(path, 0),
                                  backfill=self.config.backfill, **self.history.of(path, st))
        if restored is not None and restored.resume_offset == restored.offset \
                and self.clock() - st.st_mtime < ABANDONED_RETENTION:
            # Nothing was open at its checkpoint, yet it was written lately: a run before may have found it
            # abandoned. Read again from the first line (nothing delivered twice) to know, and to know it whole.
            follower.reread()
        self.sessions[path] = follower
        self._commit_first(follower)
        if follower.skipped:  # remembered as read to its end: what is appended later is followed, not the history
            self.history.skipped += 1
            marker = follower.marker()
            if marker is not None:
                self.outbox.marker(marker)
        return follower

    def _drop(self, follower: Follower) -> None:
        """Stop following a log whose file is not the user's any more: nothing read from it is delivered, and its
        open spans are left as they are (they may be another user's); were it the user's again, a new
        generation."""
        path = follower.path
        self.table.remove(path)
        self.rounds.drop(path)
        self.admission.disown(path, follower.tail)
        self.moves.forget(path)
        self.table.generations[path] = follower.generation + 1
        self.notices.forget(follower, "its log is not yours")

    def _commit_first(self, follower: Follower) -> None:
        """A backfill or a new generation began: its position is committed before its spans are queued (Outbox.send)."""
        if follower.commit_now is not None:
            self.outbox.first_row(follower.commit_now)
            follower.commit_now = None

    def _move(self, follower: Follower, path: Path, first_id: str) -> None:
        """Follow a log at the path it moved to (its folder was renamed): the same session, position and ids."""
        old = follower.path
        log.info("%s moved to %s; following it there as the same session %s", old, path, follower.session_id)
        follower.move(path)
        self.moves.moved(first_id, old, path)
        self.table.move(old, path)
        self.admission.moved(old, path, follower.tail)
        self.rounds.moved(old, path)
        self.notices.moved(old, path)
        marker = follower.marker()
        if marker is not None:  # the row moves to the new path once what is queued before it is exported
            self.outbox.marker(marker)

    def _read(self, path: Path) -> None:
        """One read of at most follow.READ_BYTES from one file; a file with more waiting joins the backlog."""
        follower = self._follower_for(path)
        if follower is None:
            self._forget(path)
            return
        if follower.model is None and not follower.wake():
            return
        out = Outputs()
        result = follower.read(out, warn=self._bad_lines.warning)
        self._commit_first(follower)
        if result.gone:
            self._forget(path)
            return
        if result.error:
            self._unreadable.report(path, f"cannot read {path}: {result.error}; will retry")
            return
        self._unreadable.recovered(path)
        if not self.admission.still_owned(path, follower.tail):
            self._drop(follower)
            return
        if follower.tail.identity is not None:
            self.moves.note(follower.tail.identity.first_id, path)
        cut_off = None
        if result.items:
            self.table.abandoned.pop(path, None)
            if follower.live_model.ended is None:  # learn the pid of a process that writes it (a finished one has none)
                self.housekeeping.alive(follower)
            cut_off = None if result.more else follower.close_at_floor()
            if cut_off is not None:
                self.housekeeping.found_abandoned(follower, cut_off)
        if result.items or result.restarted or result.copied:  # copied: the position's new identity
            self._deliver(follower, out)
        if cut_off is not None:  # what it was doing when it died stays in its summary, as abandon keeps it
            self.table.keep_waiting(path, cut_off)
        if result.more:
            self.rounds.more(path)
        elif follower.live_model.ended is not None and follower.abandoned_at is None:
            self.table.compact(follower)

    def _deliver(self, follower: Follower, out: Outputs) -> None:
        """Count what a read produced, queue its spans, then the checkpoint position behind them."""
        self.outbox.outputs(out)
        if follower.live_model.ended is None:
            self.housekeeping.watch(follower, resumed=bool(out.events.get("session.resume")))
        else:
            self.housekeeping.unwatch(follower)
        marker = follower.marker()
        if marker is not None:
            self.outbox.marker(marker)
        self.table.summarize(follower)

    def _forget(self, path: Path) -> None:
        follower = self.table.remove(path)
        self.admission.disown(path, None if follower is None else follower.tail)
        self.rounds.drop(path)
        if follower is not None and follower.tail.identity is not None:
            self.table.generations[path] = follower.generation + 1  # if it is written anew: a new generation
            self.moves.forget(path)
        if follower is not None:
            self.notices.forget(follower, "its log was deleted")
        if follower is not None and follower.model is not None:
            log.info("%s was deleted; finishing session %s", path, follower.session_id)
            out = Outputs()
            follower.finish(out)
            self.outbox.outputs(out)
        self._restored.pop(str(path), None)
        if str(path) not in self.moves.moved_away:  # a moved log's row goes when its new path's row is committed
            self.checkpoint.forget(str(path))
            if self.exports.shared is not None:
                self.exports.shared.forget(str(path))
