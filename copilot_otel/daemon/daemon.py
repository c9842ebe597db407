"""The daemon: wiring, scheduling, health and shutdown. Discover -> follow -> pipeline -> export / metrics.

One reader thread (``run``) owns every session model. After each pass it publishes one frozen
:class:`~copilot_otel.catalog.published.Published` (a Liveness per live session, every summary), swapped
whole; the scrape and web threads read only that, never a model.
"""

from __future__ import annotations

import errno
import gc
import logging
import os
import threading
import time
from pathlib import Path
from stat import S_ISREG
from types import MappingProxyType
from functools import partial
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from msgspec.structs import replace

from ..state.checkpoint import Checkpoint, CheckpointError, FilePosition, StateLock
from ..config import Config
from ..delivery.deadletter import FILE_NAME as DEAD_LETTER_FILE
from ..delivery.deadletter import DeadLetter
from ..source.discover import Discoverer, Tree
from ..delivery.queue import ExportQueue
from ..state.lanes import SharedCheckpoint
from .follow import Follower
from ..source.liveness import ABANDON, ABANDONED_RETENTION, DORMANT, Liveness, live_state, lock_pids, pid_alive, verdict
from ..base.collector import DeferredCollection
from ..base.logs import RateLimitedLog, ReportedOnce
from ..metrics.registry import Metrics
from .moves import Moves
from .notices import SessionNotices
from ..otlp.json_encoder import OtlpJsonEncoder
from ..model.pipeline import Outputs
from ..model.logs import LogRecord
from ..model.records import SpanRecord
from ..catalog.published import Published
from .readout import Readout
from ..otlp.resource import resource_attributes
from ..delivery.sinks import make_sink
from ..otlp.contract import RecordSink, SpanSink
from ..source.sources import SESSION_STATE
from ..source import trust
from ..base.regular import NOT_REGULAR
from ..model.summary import SessionSummary
from ..vocab import END_INCOMPLETE, END_SHUTDOWN

if TYPE_CHECKING:  # the OTel SDK is imported only when the push is on
    from ..metrics.otlp_push import MetricsPusher

log = logging.getLogger(__name__)

TICK = 0.2  # seconds between housekeeping passes (idle confirmation, liveness)
# A pass reads for about this long at most, then the rest waits in the backlog: new hints (a new session) are
# taken up within a pass even while thousands of logs are read at start.
PASS_SECONDS = 0.5
# The backlog is read only while fewer spans than this wait for export: what a new session sends is queued behind
# at most these (a few seconds of export at most), not behind the whole history read at start.
BACKLOG_LEAD = 4096
LIVENESS_EVERY = 1.0
# Seconds between two snapshots of the metric totals committed with the checkpoint (export/totals.py): one costs a
# collect of the session metrics (8 ms with 10 tools, 76 ms with 100, on a loaded 2-core machine); positions read in
# between wait for the next one (a restart then re-reads up to this much).
TOTALS_EVERY = 1.0


def _file(device: int, inode: int) -> int:
    """A file's device and inode as one int (a key that costs less than a tuple, per followed log)."""
    return device << 64 | inode


def _same_file(path: Path, file: int) -> bool:
    """Is ``path`` (links followed) the file ``file`` (_file) now?"""
    try:
        st = os.stat(path)
    except OSError:
        return False
    return _file(st.st_dev, st.st_ino) == file


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
        self.metrics = metrics or Metrics(repository_label=not config.no_repository_label,
                                          resource=self.resource, max_label_values=config.max_label_values)
        if config.budgets:
            self.metrics.add_budgets(config.budgets, self.resource)
        self.metrics.add_live_sessions(self.readout.live_sessions)
        self.metrics.measure_lag_while(self.readout.sessions_at_work)
        # A damaged checkpoint is set aside only when starting afresh re-counts nothing (--from-end skips the history).
        self.checkpoint = Checkpoint(config.state_dir / "checkpoint.sqlite", start_afresh=not config.from_start)
        self.sink = sink or make_sink(traces_file=config.traces_file, otlp=config.otlp,
                                      default_file=config.default_traces_file,
                                      max_request_bytes=config.max_request_bytes, rotation=config.traces_rotation,
                                      strict=not config.no_strict_modes, resource=self.resource)
        self.dead_letter = DeadLetter(config.state_dir / DEAD_LETTER_FILE, OtlpJsonEncoder(self.resource))
        # The session's events as log records (OTEL_LOGS_EXPORTER=otlp): a queue of their own, so that either
        # backend failing holds back only its own signal; the checkpoint moves once both delivered (lanes.py).
        if log_sink is None and config.logs_otlp is not None:
            from ..delivery.otlp_logs import OtlpLogSink

            log_sink = OtlpLogSink(config.logs_otlp, resource=self.resource,
                                   max_request_bytes=config.max_request_bytes)
        self.log_sink = log_sink
        self.shared = SharedCheckpoint(self.checkpoint) if log_sink is not None else None
        self.queue = ExportQueue(
            self.sink, self.shared.lane(0) if self.shared is not None else self.checkpoint,
            max_spans=config.max_buffered_spans, dead_letter=self.dead_letter,
            on_exported=self.metrics.spans_exported.inc, on_failed=self.metrics.spans_failed.inc,
            on_commit=self.metrics.checkpoint_commits.inc, on_dead_lettered=self.metrics.spans_dead_lettered.inc,
            on_backend_dropped=self.metrics.spans_dropped_by_backend.inc)
        self.log_queue: ExportQueue[LogRecord] | None = ExportQueue(
            log_sink, self.shared.lane(1), max_spans=config.max_buffered_spans,
            on_exported=self.metrics.logs_exported.inc, on_failed=self.metrics.logs_failed.inc,
            on_dead_lettered=self.metrics.logs_dropped.inc, on_backend_dropped=self.metrics.logs_dropped.inc,
            signal="log", item="log record") if log_sink is not None and self.shared is not None else None
        # Read when scraped, so they stay true while the reader waits on a full queue.
        self.metrics.files_watched.set_function(lambda: len(self.sessions))
        self.metrics.export_queue.set_function(lambda: self.queue.depth + len(self._outbox))
        self.discoverer = Discoverer(self.root, poll=config.poll, rescan_interval=config.rescan_interval,
                                     live=lambda: self._open.keys())
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
        self._restored = self.checkpoint.load()
        # A log this state folder never saw whose last event is older than its first start, and that was not
        # written since, is history (a restored home's, or the machine's before copilot-otel): left out unless
        # --backfill.
        self._history_before_ns = int(self.checkpoint.first_start * 1e9)
        self._history_skipped = self._history_said = 0
        # The session metrics resume at the totals committed with these positions (export/totals.py).
        resumed = self.metrics.resume(self.checkpoint.load_totals())
        if resumed:
            log.info("resumed %d metric samples from the checkpoint", resumed)
        self.moves = Moves(self._restored)
        self._started = clock()  # a log last written before this is history: its events were not seen arriving
        self.tree = Tree(self.root)
        # Taken here, before /healthz answers: a session created once the daemon is up is not history.
        # --from-end: history present at the first start is skipped (a checkpoint still wins).
        self._skip_history: set[Path] = set() if self.config.from_start else self.tree.logs()
        self._unreadable = ReportedOnce(log)  # retried at every rescan
        self._root_real = self.tree.real
        # Only the user's sessions, each real file once (source/trust.py): the logs refused now, and why; which path
        # follows each file (device and inode as one int); and the file checked of each log others could swap (its
        # folder or session-state open to them), checked again whenever another file is read there.
        self._refused: dict[Path, str] = {}
        self._files: dict[int, Path] = {}
        self._exposed: dict[Path, int] = {}
        self._root_looked: tuple[float, os.stat_result | None] = (-LIVENESS_EVERY, None)
        self._open_said = config.no_strict_modes  # session-state open to others: said (once it exists)
        self._say_open()
        # Files read up to their byte budget with more waiting, or not reached within a pass's time: read again
        # next round, in this order, after what is new.
        self._backlog: dict[Path, None] = {}
        self._held = False  # the last pass left the backlog for the exporter to catch up
        # The generation a deleted log would start again at, were it written anew.
        self._generations: dict[Path, int] = {}
        self._stop = threading.Event()
        # the OTLP metrics pusher (OTEL_METRICS_EXPORTER=otlp): /healthz says its failures
        self.metrics_push: MetricsPusher | None = None
        # What this pass read, counted and handed to the exporter once a batch of spans waits and at the end of
        # the pass: the metric updates, the spans in order, then the checkpoint positions (each behind its own
        # spans, as the exporter needs). At start-up thousands of logs bring a few spans each; a metrics update,
        # an export, a durable write and a checkpoint commit per log cost more than reading it (issue 25).
        self._outbox_outputs: list[Outputs] = []
        self._outbox: list[SpanRecord] = []
        self._log_outbox: list[LogRecord] = []
        self._outbox_markers: dict[str, FilePosition] = {}
        # Logs a --backfill began to send (their history), or that began a new generation: their rows are committed
        # before any span of theirs is queued, so that a run after this one goes on with them (Follower.commit_now).
        self._first_rows: dict[str, FilePosition] = {}
        self._counted = False  # metric updates applied since the last totals were queued
        self._next_totals = 0.0  # monotonic time the next totals may be taken
        self._bad_lines = RateLimitedLog(log)
        self._last_loop = time.monotonic()
        self._next_liveness = 0.0
        # own_gc: this daemon owns the process's garbage collector. What is built before the first read (modules,
        # wiring), and once the history is read its objects, live as long as the process: moving them out of the
        # collector's reach keeps full collections (100-400 ms with 10,000 sessions) off scrapes. While the reader
        # reads, collections wait (base/collector.py).
        self._freeze_gc = own_gc
        self._collection = DeferredCollection() if own_gc else None

    # ------------------------------------------------------------ lifecycle

    def request_stop(self, *_args) -> None:
        """Ask the loop to stop (signal handler)."""
        self._stop.set()

    def health(self) -> tuple[bool, str]:
        """Healthy while the reader loop turns and sessions can be seen; says whether exports succeed, and what
        was set aside."""
        stalled = time.monotonic() - self._last_loop
        paused = self.queue.blocked or (self.log_queue is not None and self.log_queue.blocked)
        if stalled > 30 and not paused:  # a reader paused by back-pressure is not hung
            return False, f"reader loop stalled for {stalled:.0f} s"
        problem = self.discoverer.problem()
        if problem is not None:
            return False, problem
        notes = self.queue.notes()
        if self.log_queue is not None:
            notes += self.log_queue.notes()
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
            gc.collect()
            gc.freeze()
        self.queue.start()
        if self.log_queue is not None:
            self.log_queue.start()
        self.discoverer.start()
        if ready is not None:
            ready.set()
        try:
            while not self._stop.is_set():
                self._pass()
        finally:
            self._send(final=True)
            if self._collection is not None:
                self._collection.resume()
            self.discoverer.stop()
            if not self.queue.stop(timeout=5.0):
                log.warning("stopped with %d spans not yet exported; they will be re-read on the next start",
                            self.queue.depth)
            if self.log_queue is not None and not self.log_queue.stop(timeout=5.0):
                log.warning("stopped with %d log records not yet exported; they will be re-read on the next start",
                            self.log_queue.depth)
            self.checkpoint.close()
            self.sink.shutdown()
            if self.log_sink is not None:
                self.log_sink.shutdown()
            self.dead_letter.close()
            self.lock.release()

    def _pass(self) -> None:
        """One turn of the reader loop: read what changed, housekeeping, publish the sessions' liveness."""
        rescans = self.discoverer.rescans
        files, lock_dirs = self.discoverer.wait(0.0 if self._backlog and not self._held else TICK)
        if self.discoverer.rescans != rescans:
            files |= self._unreadable.paths
        self._last_loop = time.monotonic()
        # Round robin: each changed file gets one read of at most follow.READ_BYTES per pass, so a
        # session that writes fast (or a flood) delays the others by one read, not by its backlog. New hints
        # first, then the backlog; a pass stops after PASS_SECONDS, so a new session waits one pass at most.
        backlog, self._backlog = self._backlog, {}
        if self._collection is not None and (files or backlog):
            self._collection.reading(True)
        # Paths not followed yet first: a log moved from a followed path is taken up there before the old
        # path is found gone (and its session ended).
        # parts: Path's order, compared in C. A hinted path waiting in the backlog is taken up front too.
        queue = sorted(files, key=lambda p: (p in self.sessions, p.parts))
        fresh = len(queue)
        queue += [p for p in backlog if p not in files] if files else backlog
        deadline = time.monotonic() + PASS_SECONDS
        done = 0
        self._held = False
        for path in queue:
            if self._stop.is_set() or (done and time.monotonic() >= deadline):
                break
            if done >= fresh and self.queue.depth + len(self._outbox) >= BACKLOG_LEAD:
                self._held = True  # the exporter is behind: the backlog waits, new hints do not
                break
            done += 1
            try:
                self._read(path)
            except OSError as exc:  # a path that cannot even be looked at (permissions): said once, retried
                self._unreadable.report(path, f"cannot look at {path}: {exc.strerror or exc}; will retry")
        if done < len(queue):  # not reached this pass: first in the next, before those read once already
            self._backlog = dict.fromkeys(queue[done:]) | self._backlog
        for folder in lock_dirs:
            follower = self.sessions.get(folder / "events.jsonl")
            if follower is not None:
                follower.pids = lock_pids(folder)
                if follower.model is not None and follower.model.ended is None:
                    self._watch(follower)  # a CLI took it up again
                self._rename(follower)
        self._housekeeping()
        self._send()
        self._publish()
        if self._history_skipped != self._history_said:
            log.info("%d log(s) whose last event is older than this state folder's first start (%s), and not "
                     "written since, left out as history; --backfill exports them",
                     self._history_skipped - self._history_said,
                     time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(self._history_before_ns / 1e9)))
            self._history_said = self._history_skipped
        if self._collection is not None:
            self._collection.reading(bool(self._backlog))  # a backlog: the next pass reads at once
        if self._freeze_gc and not queue:
            self._freeze_gc = False
            gc.collect()
            gc.freeze()

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
            self._refuse(path, trust.OUTSIDE, None)
            return None
        if not self._admit(path, st):
            return None
        restored = self._restored.pop(str(path), None)
        if restored is None:  # a log seen here first: did it move here?
            first_id, moved, restored = self.moves.origin(path, self.sessions, within=self._root_real)
            if moved is not None:
                self._move(moved, path, first_id)
                return moved
        # History is what was written before the first start: a log written to since (its file's time says so) is
        # followed whatever its events' timestamps say (a CLI whose clock is behind ours, or in 2001).
        history_before_ns = self._history_before_ns if st.st_mtime_ns < self._history_before_ns else 0
        follower = Follower.start(path, self.config.model, max_line_bytes=self.config.max_line_bytes,
                                  restored=restored, skip_history=path in self._skip_history, within=self._root_real,
                                  generation=self._generations.pop(path, 0), history=st.st_mtime < self._started,
                                  history_before_ns=history_before_ns, backfill=self.config.backfill)
        if restored is not None and restored.resume_offset == restored.offset \
                and self.clock() - st.st_mtime < ABANDONED_RETENTION:
            # Nothing was open at its checkpoint, yet it was written lately: a run before may have found it
            # abandoned. Read again from the first line (nothing delivered twice) to know, and to know it whole.
            follower.reread()
        self.sessions[path] = follower
        self._commit_first(follower)
        if follower.skipped:  # remembered as read to its end: what is appended later is followed, not the history
            self._history_skipped += 1
            marker = follower.marker()
            if marker is not None:
                self._queue_marker(marker)
        return follower

    def _admit(self, path: Path, st: os.stat_result) -> bool:
        """Is a log seen here first one of the user's sessions, and not another name of a followed one? Said and
        counted once when not (source/trust.py). Raises OSError when its folder cannot be looked at."""
        if not self._open_said:
            self._say_open()
        folder = os.stat(path.parent)
        why = trust.stranger(path, folder, st)
        if why is not None:
            return self._refuse(path, trust.OWNER, why)
        file = _file(st.st_dev, st.st_ino)
        real = trust.alias_of(path, str(self._root_real)) if path.parent.is_symlink() or path.is_symlink() else None
        other = self.root / real / trust.EVENTS_FILE if real is not None else self._files.get(file)
        if other is not None and other != path and (real is not None or _same_file(other, file)):
            return self._refuse(path, trust.ALIAS, f"{path} is another name of {other}: read there, once")
        self._refused.pop(path, None)
        self._files[file] = path
        if trust.exposed(folder, self._root_stat()):
            self._exposed[path] = file
        return True

    def _say_open(self) -> None:
        """Say once, as ssh says it of a group-writable ~/.ssh, that session-state is open to other users (at start,
        or when it appears)."""
        if self._open_said or not os.path.isdir(self.root):
            return
        self._open_said = True
        if (problem := trust.open_to_others(self.root)) is not None:
            log.warning("%s", problem)

    def _root_stat(self) -> os.stat_result | None:
        """session-state's stat, looked at once a second at most (thousands of logs are admitted at start)."""
        looked, st = self._root_looked
        now = time.monotonic()
        if now - looked >= LIVENESS_EVERY:
            try:
                st = os.stat(self.root)
            except OSError:
                st = None
            self._root_looked = (now, st)
        return st

    def _refuse(self, path: Path, reason: str, message: str | None) -> bool:
        """Count (and say, unless ``message`` is None) once that ``path`` is not read as the user's; False."""
        if self._refused.get(path) != reason:
            self._refused[path] = reason
            self.metrics.logs_refused.labels(reason).inc()
            if message is not None:
                trust.say_once(path, message, level=logging.INFO if reason == trust.ALIAS else logging.WARNING)
        return False

    def _still_owned(self, follower: Follower) -> bool:
        """After a read of a log others could swap (its folder or session-state open to them): is the file just
        read still the user's? If not, or if it cannot be told (swapped again meanwhile), nothing of this read is
        delivered and the log is dropped, refused until the user's file is there again (a new generation)."""
        path, ident = follower.path, follower.tail.identity
        checked = self._exposed.get(path)
        if checked is None or ident is None or checked == _file(ident.device, ident.inode):
            return True
        try:
            folder, st = os.stat(path.parent), os.stat(path)
            why = trust.stranger(path, folder, st) if (st.st_dev, st.st_ino) == (ident.device, ident.inode) \
                else f"not reading {path} as your session: it was replaced again while it was read"
        except OSError as exc:
            why = f"not reading {path} as your session: it cannot be looked at again ({exc.strerror or exc})"
        if why is None:
            self._exposed[path] = _file(ident.device, ident.inode)
            self._files[self._exposed[path]] = path
            return True
        self._refuse(path, trust.OWNER, why)
        self._drop(follower)
        return False

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
        self._backlog.pop(path, None)
        self._disown(path, follower)
        self.moves.forget(path)
        self._generations[path] = follower.generation + 1
        self.notices.forget(follower, "its log is not yours")
        self._changed = True

    def _disown(self, path: Path, follower: Follower | None) -> None:
        """Forget which file ``path`` followed."""
        files = [self._exposed.pop(path, None)]
        if follower is not None and follower.tail.identity is not None:
            files.append(_file(follower.tail.identity.device, follower.tail.identity.inode))
        for file in files:
            if file is not None and self._files.get(file) == path:
                del self._files[file]

    def _commit_first(self, follower: Follower) -> None:
        """A backfill or a new generation began: its position is committed before its spans are queued (_send)."""
        if follower.commit_now is not None:
            self._first_rows[follower.commit_now.path] = follower.commit_now
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
        if old in self._exposed:
            self._exposed[path] = self._exposed.pop(old)
        if follower.tail.identity is not None:
            self._files[_file(follower.tail.identity.device, follower.tail.identity.inode)] = path
        if old in self._partial:
            self._partial.symmetric_difference_update((old, path))
        if self._backlog.pop(old, False) is None:
            self._backlog[path] = None
        self.notices.moved(old, path)
        self._changed = True
        marker = follower.marker()
        if marker is not None:  # the row moves to the new path once what is queued before it is exported
            self._queue_marker(marker)

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
        if not self._still_owned(follower):
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
            self._backlog[path] = None
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
        self._queue_outputs(out)
        if follower.live_model.ended is None:
            self._watch(follower, resumed=bool(out.events.get("session.resume")))
        else:
            self._unwatch(follower)
        marker = follower.marker()
        if marker is not None:
            self._queue_marker(marker)
        self._summaries[follower.path] = follower.summary()
        if follower.whole:
            self._partial.discard(follower.path)
        else:
            self._partial.add(follower.path)
        self._changed = True

    def _queue_outputs(self, out: Outputs) -> None:
        """Queue what a read produced: its metric updates and its spans."""
        self._outbox_outputs.append(out)
        if out.logs and self.log_queue is not None:
            self._log_outbox.extend(out.logs)
        self._queue_spans(out.spans)

    def _queue_spans(self, spans: list[SpanRecord]) -> None:
        """Queue spans for export (sent at the end of the pass, or once a batch is waiting)."""
        self._outbox.extend(spans)
        if len(self._outbox) >= min(self.queue.batch, self.queue.max_spans):
            self._send()

    def _queue_marker(self, position: FilePosition) -> None:
        """Queue a checkpoint position, committed once everything queued before it is exported."""
        self._outbox_markers[position.path] = position

    def _send(self, *, final: bool = False) -> None:
        """Count the metrics of what was queued, then hand its spans and positions to the exporter: the positions
        with the metric totals that cover them, taken at most every TOTALS_EVERY seconds (and at the ``final`` one),
        the positions read meanwhile held back until then."""
        if self._first_rows:
            try:
                self.checkpoint.commit(list(self._first_rows.values()))
                self._first_rows = {}
            except CheckpointError as exc:  # the disk is full, say: said, and tried again before the next spans
                log.warning("%s", exc)
        totals = None
        if self._outbox_outputs:
            outputs, self._outbox_outputs = self._outbox_outputs, []
            self._counted = True
            try:
                self.metrics.apply_all(outputs)
            except Exception:  # a metric bug must not stop the reader
                log.exception("cannot count the metrics of what was read from %d log(s)", len(outputs))
        hold = False
        if self._outbox_markers and self._counted:
            now = time.monotonic()
            if final or now >= self._next_totals:
                # The totals now are those of everything read up to the positions queued below: committed with them.
                totals, self._counted, self._next_totals = self.metrics.totals(), False, now + TOTALS_EVERY
            else:
                hold = True  # a position is committed only with totals that cover it
        markers = {} if hold else self._outbox_markers
        if self._outbox or markers or self._log_outbox:
            positions: Iterable[FilePosition] = markers.values()
            if self.shared is not None and self.log_queue is not None:  # both queues carry the same positions
                positions, totals = self.shared.number(positions, totals)
                self.log_queue.put(self._log_outbox, positions, totals=totals, should_stop=self._stop.is_set)
                self._log_outbox = []
            # Emptied once queued: the export queue gauge (queue and outbox) never reads 0 while spans wait.
            self.queue.put(self._outbox, positions, totals=totals, should_stop=self._stop.is_set)
            self._outbox = []
            if not hold:
                self._outbox_markers = {}

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
        self._disown(path, follower)
        self._open.pop(path, None)
        self._abandoned.pop(path, None)
        self._liveness.pop(path, None)
        self._summaries.pop(path, None)
        self._partial.discard(path)
        self._changed = True
        self._backlog.pop(path, None)
        if follower is not None and follower.tail.identity is not None:
            self._generations[path] = follower.generation + 1  # if it is written anew: a new generation
            self.moves.forget(path)
        if follower is not None:
            self.notices.forget(follower, "its log was deleted")
        if follower is not None and follower.model is not None:
            log.info("%s was deleted; finishing session %s", path, follower.session_id)
            out = Outputs()
            follower.finish(out)
            self._queue_outputs(out)
        self._restored.pop(str(path), None)
        if str(path) not in self.moves.moved_away:  # a moved log's row goes when its new path's row is committed
            self.checkpoint.forget(str(path))
            if self.shared is not None:
                self.shared.forget(str(path))

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
            if not check_liveness or follower.path in self._backlog:
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
                self._queue_spans(self.notices.check_stuck(follower, live, now))
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
