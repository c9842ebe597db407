"""The daemon: wiring, scheduling, health and shutdown. Discover -> follow -> pipeline -> export / metrics.

One reader thread (``run``) owns every session model. After each pass it publishes one frozen
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
from functools import partial
from pathlib import Path
from stat import S_ISREG
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from msgspec.structs import replace

from ..base.logs import RateLimitedLog, ReportedOnce
from ..base.regular_files import NOT_REGULAR
from ..catalog.published import Published
from ..config import Config
from ..metrics.registry import Metrics
from ..model.logs import LogRecord
from ..model.pipeline import Outputs
from ..model.summary import SessionSummary
from ..otlp.contract import RecordSink, SpanSink
from ..otlp.resource import resource_attributes
from ..source import trust
from ..source.discover import Discoverer, Tree
from ..source.liveness import ABANDON, ABANDONED_RETENTION, DORMANT, Liveness, live_state, lock_pids, pid_alive, verdict
from ..source.sources import SESSION_STATE
from ..state.checkpoint import Checkpoint, StateLock
from ..vocab import END_INCOMPLETE, END_SHUTDOWN
from .admission import Admission
from .collector import ReaderCollection
from .exports import ExportSide, daemon_metrics
from .follow import Follower
from .history import History
from .moves import Moves
from .notices import SessionNotices
from .outbox import Outbox
from .rounds import Rounds
from .scrape_view import Readout

if TYPE_CHECKING:  # the OTel SDK is imported only when the push is on
    from ..metrics.otlp_push import MetricsPusher

log = logging.getLogger(__name__)

# The backlog is read only while fewer spans than this wait for export: what a new session sends is queued behind
# at most these (a few seconds of export at most), not behind the whole history read at start.
BACKLOG_LEAD = 4096
LIVENESS_EVERY = 1.0


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
        self.readout = Readout(self.policy, liveness=lambda: self.published.liveness, clock=clock)
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
                                     live=lambda: self._open.keys())
        self._init_sessions()
        self._init_reading(config)
        # the OTLP metrics pusher (OTEL_METRICS_EXPORTER=otlp): /healthz says its failures
        self.metrics_push: MetricsPusher | None = None
        # own_gc: this daemon owns the process's garbage collector (daemon/collector.py).
        self._collection = ReaderCollection() if own_gc else None

    def _init_sessions(self) -> None:
        """The followed sessions, and what the reader publishes of them."""
        self.sessions: dict[Path, Follower] = {}
        # The sessions whose state can change without a new event (an idle loop to confirm, a process
        # that may die) or that a scrape reports. Housekeeping and scrapes visit only these, so
        # thousands of finished sessions cost nothing between their writes.
        self._open: dict[Path, Follower] = {}
        self._abandoned: dict[Path, Follower] = {}
        # The reader's own copies, published in ``self.published`` after each pass: the live sessions, every
        # known session at a glance (kept when its model is compacted away), and the logs whose summary counts
        # only what followed the checkpoint it resumed from.
        self._liveness: dict[Path, Liveness] = {}
        self._summaries: dict[Path, SessionSummary] = {}
        self._partial: set[Path] = set()
        self._changed = False  # a summary or the set of logs changed since the last publication
        self.published = Published()  # what other threads read: replaced whole, never changed
        self.notices = SessionNotices(self.policy)
        # The generation a deleted log would start again at, were it written anew.
        self._generations: dict[Path, int] = {}

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
        self._next_liveness = 0.0

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
        self._housekeeping()
        self.outbox.send()
        self._publish()
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
                self._watch(follower)  # a CLI took it up again
            self._rename(follower)

    def _publish(self) -> None:
        """Swap in what other threads read: the sessions' liveness every pass, summaries when one changed (a copy)."""
        liveness, before = tuple(self._liveness.values()), self.published
        if self._changed or len(liveness) != len(before.liveness):
            self._changed = False
            self.published = Published(before.generation + 1, liveness, MappingProxyType(dict(self._summaries)),
                                       frozenset(self._partial))
        else:
            self.published = replace(before, liveness=liveness)

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
                                  restored=restored, within=self._root_real, generation=self._generations.pop(path, 0),
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
        self.sessions.pop(path, None)
        self._open.pop(path, None)
        self._abandoned.pop(path, None)
        self._liveness.pop(path, None)
        self._summaries.pop(path, None)
        self._partial.discard(path)
        self.rounds.drop(path)
        self.admission.disown(path, follower.tail)
        self.moves.forget(path)
        self._generations[path] = follower.generation + 1
        self.notices.forget(follower, "its log is not yours")
        self._changed = True

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
        by_path: tuple[dict[Path, Any], ...] = (self.sessions, self._open, self._abandoned, self._liveness,
                                                self._summaries)
        for keyed in by_path:
            if old in keyed:
                keyed[path] = keyed.pop(old)
        self.admission.moved(old, path, follower.tail)
        if old in self._partial:
            self._partial.symmetric_difference_update((old, path))
        self.rounds.moved(old, path)
        self.notices.moved(old, path)
        self._changed = True
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
            self._abandoned.pop(path, None)
            if follower.live_model.ended is None:  # learn the pid of a process that writes it (a finished one has none)
                self._alive(follower)
            cut_off = None if result.more else follower.close_at_floor()
            if cut_off is not None:
                self._found_abandoned(follower, cut_off)
        if result.items or result.restarted or result.copied:  # copied: the position's new identity
            self._deliver(follower, out)
        if cut_off is not None:  # what it was doing when it died stays in its summary, as _abandon keeps it
            self._summaries[path] = replace(self._summaries[path], waiting_on=cut_off.waiting_on,
                                            waiting_since_ns=cut_off.waiting_since_ns)
        if result.more:
            self.rounds.more(path)
        elif follower.live_model.ended is not None and follower.abandoned_at is None:
            self._compact(follower)

    def _rename(self, follower: Follower) -> None:
        """Its name again, if its workspace.yaml changed with no new event (a rename): the views show it."""
        summary = self._summaries.get(follower.path)
        names = follower.names
        assert names is not None  # made by Follower.__post_init__
        if summary is not None and (name := names.of(follower.path.parent)) != summary.name:
            self._summaries[follower.path] = replace(summary, name=name)
            self._changed = True

    def _deliver(self, follower: Follower, out: Outputs) -> None:
        """Count what a read produced, queue its spans, then the checkpoint position behind them."""
        self.outbox.outputs(out)
        if follower.live_model.ended is None:
            self._watch(follower, resumed=bool(out.events.get("session.resume")))
        else:
            self._unwatch(follower)
        marker = follower.marker()
        if marker is not None:
            self.outbox.marker(marker)
        self._summaries[follower.path] = follower.summary()
        if follower.whole:
            self._partial.discard(follower.path)
        else:
            self._partial.add(follower.path)
        self._changed = True

    def _watch(self, follower: Follower, *, resumed: bool = False) -> None:
        if follower.path not in self._open and self._alive(follower):
            self.notices.started(follower, resumed=resumed)
        self._open[follower.path] = follower
        self._liveness[follower.path] = follower.liveness()

    def _unwatch(self, follower: Follower) -> None:
        if follower.model is not None and follower.model.ended == END_SHUTDOWN:
            self.notices.ended(follower, "shut down")
        self._open.pop(follower.path, None)
        if follower.abandoned_at is None:
            self._liveness.pop(follower.path, None)
        else:
            self._liveness[follower.path] = follower.liveness()

    def _compact(self, follower: Follower) -> None:
        if follower.compact():
            self._open.pop(follower.path, None)
            self._liveness.pop(follower.path, None)

    def _forget(self, path: Path) -> None:
        follower = self.sessions.pop(path, None)
        self.admission.disown(path, None if follower is None else follower.tail)
        self._open.pop(path, None)
        self._abandoned.pop(path, None)
        self._liveness.pop(path, None)
        self._summaries.pop(path, None)
        self._partial.discard(path)
        self._changed = True
        self.rounds.drop(path)
        if follower is not None and follower.tail.identity is not None:
            self._generations[path] = follower.generation + 1  # if it is written anew: a new generation
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

    # ------------------------------------------------------------ housekeeping

    def _housekeeping(self) -> None:
        now = self.clock()
        monotonic = time.monotonic()
        check_liveness = monotonic >= self._next_liveness
        if check_liveness:
            self._next_liveness = monotonic + LIVENESS_EVERY
            for path, follower in list(self._abandoned.items()):
                if follower.abandoned_at is None or monotonic - follower.seen_at >= ABANDONED_RETENTION:
                    del self._abandoned[path]
                    follower.abandoned_at = None
                    self._liveness.pop(path, None)
                    self._compact(follower)
        for follower in list(self._open.values()):
            model = follower.live_model
            # Quiet is measured on our clock: a backlog read late must not look quiet.
            quiet = monotonic - follower.last_read
            if model.awaiting_confirmation and quiet >= self.config.idle_quiet:
                out = Outputs()
                follower.confirm_end(out)
                self._deliver(follower, out)
            if not check_liveness or follower.path in self.rounds:
                continue  # a log with more waiting to be read: its last event read is not its last one
            decision = verdict(mid_turn=model.mid_turn, awaiting_confirmation=model.awaiting_confirmation,
                               since_event=monotonic - follower.seen_at, quiet=quiet,
                               alive=partial(self._alive, follower), locks_expected=follower.locks_expected)
            if decision == ABANDON:
                self._abandon(follower, monotonic)
            elif decision == DORMANT:  # its process is gone and nothing is open: set aside until it grows
                self.notices.ended(follower, "its CLI process exited")
                self._open.pop(follower.path, None)
                self._liveness.pop(follower.path, None)
                self._compact(follower)
            elif model.mid_turn or self.notices.is_stuck(follower):
                live = live_state(follower.liveness(), now=now, policy=self.policy, alive=pid_alive,
                                  monotonic=monotonic)
                self.outbox.queue_spans(self.notices.check_stuck(follower, live, now))
        if check_liveness:
            self.notices.sweep(self._open)

    def _alive(self, follower: Follower) -> bool:
        """Is a process holding the session? The known lock pids first, the folder listed again if none lives."""
        if any(pid_alive(pid) for pid in follower.pids):
            return True
        pids = lock_pids(follower.path.parent)
        if pids != follower.pids:
            follower.pids = pids
            if follower.path in self._liveness:
                self._liveness[follower.path] = follower.liveness()
        return any(pid_alive(pid) for pid in pids)

    def _found_abandoned(self, follower: Follower, before: SessionSummary) -> None:
        """A log re-read after a restart ends mid-turn where a run before closed its work: that run found its
        process gone. Abandoned it stays, by the rule `inspect` and `sessions --from-files` apply (no live
        process, within ABANDONED_RETENTION of its last event): a restart changes no state."""
        monotonic = time.monotonic()
        if monotonic - follower.seen_at < ABANDONED_RETENTION and not self._alive(follower) \
                and (follower.pids or follower.locks_expected):
            follower.abandoned_at = monotonic
            self._abandoned[follower.path] = follower
            log.info("session %s was abandoned mid-turn before this start (waiting on %s)", follower.session_id,
                     before.waiting_on or "the model")

    def _abandon(self, follower: Follower, monotonic: float) -> None:
        """The process that held a session died mid-turn: end its open spans as incomplete."""
        self.notices.forget(follower, "abandoned")
        if monotonic - follower.seen_at < ABANDONED_RETENTION:
            follower.abandoned_at = monotonic
            self._abandoned[follower.path] = follower
            log.warning("session %s was abandoned mid-turn (its CLI process is gone)", follower.session_id)
        before = follower.live_model.summary()
        out = Outputs()
        follower.finish(out, END_INCOMPLETE)
        self._deliver(follower, out)
        # What it was doing when it died stays in its summary (the web view and `sessions` show it).
        self._summaries[follower.path] = replace(self._summaries[follower.path], waiting_on=before.waiting_on,
                                                 waiting_since_ns=before.waiting_since_ns)
        self._changed = True
