"""The daemon: wiring and lifecycle. Discover -> tail -> session model -> export queue / metrics."""

from __future__ import annotations

import gc
import logging
import os
import signal
import sqlite3
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from .checkpoint import Checkpoint, FilePosition
from .config import Config, ConfigError
from .discover import Discoverer, ReportedOnce
from .decode import INTERNAL_ERROR
from .events import DecodeError
from .liveness import lock_pids, pid_alive
from .metrics import LiveSession, Metrics
from .records import MetricUpdate, SpanRecord
from .replay import SESSION_STATE, anomaly
from .sessions import END_INCOMPLETE, IDLE, WAITING_TOOL, WORKING, SessionModel
from .tail import FileTail
from .traces import SpanSink, make_sink
from .export import ExportQueue

log = logging.getLogger(__name__)

TICK = 0.2  # seconds between housekeeping passes (idle confirmation, liveness)
LIVENESS_EVERY = 1.0
ABANDONED_RETENTION = 3600.0  # how long a dead session stays visible as abandoned
DORMANT_AFTER = 5.0  # seconds of quiet before a session with no live process and nothing open is set aside


class RateLimitedLog:
    """At most ``burst`` warnings per ``window`` seconds; the rest are summarised."""

    def __init__(self, logger: logging.Logger, *, burst: int = 20, window: float = 60.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._log, self._burst, self._window, self._clock = logger, burst, window, clock
        self._start = clock()
        self._count = 0
        self._suppressed = 0

    def warning(self, message: str, *args) -> None:
        """Log, unless this window's budget is spent."""
        now = self._clock()
        if now - self._start >= self._window:
            if self._suppressed:
                self._log.warning("%d more skipped line(s) not logged in the last %.0f s", self._suppressed,
                                  self._window)
            self._start, self._count, self._suppressed = now, 0, 0
        if self._count < self._burst:
            self._count += 1
            self._log.warning(message, *args)
        else:
            self._suppressed += 1


@dataclass
class Session:
    """One followed session log and everything the daemon knows about it."""

    path: Path
    tail: FileTail
    # None while the session is compacted: it had ended (or its process was gone) with nothing open,
    # so only its position is kept; new lines rebuild the model from the start of the file.
    model: SessionModel | None
    floor: int = 0  # outputs of events before this offset were already delivered (restart, compaction)
    pids: list[int] = field(default_factory=list)
    last_read: float = 0.0  # monotonic time new events were last read
    abandoned_at: float | None = None  # wall time the session was found dead mid-turn
    session_id: str = field(init=False)  # the folder's name

    def __post_init__(self) -> None:
        self.session_id = self.path.parent.name


class Daemon:
    """Follows every session under COPILOT_HOME/session-state; exports spans; keeps metrics."""

    def __init__(self, config: Config, *, sink: SpanSink | None = None, metrics: Metrics | None = None,
                 clock: Callable[[], float] = time.time, freeze_gc: bool = False) -> None:
        self.config = config
        self.root = config.copilot_home / SESSION_STATE
        self.clock = clock
        self.metrics = metrics or Metrics()
        self.metrics.add_live_sessions(self.live_sessions)
        config.state_dir.mkdir(parents=True, exist_ok=True)
        self.checkpoint = Checkpoint(config.state_dir / "checkpoint.sqlite")
        self.sink = sink or make_sink(traces_file=config.traces_file, otlp=config.otlp,
                                      default_file=config.default_traces_file)
        self.queue = ExportQueue(
            self.sink, self.checkpoint, max_spans=config.max_buffered_spans,
            on_exported=self.metrics.spans_exported.inc, on_failed=self.metrics.spans_failed.inc,
            on_commit=self.metrics.checkpoint_commits.inc)
        # Read when scraped, so they stay true while the reader waits on a full queue.
        self.metrics.files_watched.set_function(lambda: len(self.sessions))
        self.metrics.export_queue.set_function(lambda: self.queue.depth)
        self.discoverer = Discoverer(self.root, poll=config.poll, rescan_interval=config.rescan_interval)
        self.sessions: dict[Path, Session] = {}
        # The sessions whose state can change without a new event (an idle loop to confirm, a process
        # that may die) or that a scrape reports. Housekeeping and scrapes visit only these, so
        # thousands of finished sessions cost nothing between their writes.
        self._open: dict[Path, Session] = {}
        self._abandoned: dict[Path, Session] = {}
        self._restored = self.checkpoint.load()
        self._skip_history: set[Path] = set()
        self._unreadable = ReportedOnce()  # retried at every rescan
        self._outside: set[Path] = set()  # symlinks out of the tree, reported once
        self._root_real = self.root.resolve()
        self._stop = threading.Event()
        self._bad_lines = RateLimitedLog(log)
        self._last_loop = time.monotonic()
        self._next_liveness = 0.0
        # Once the history is read, its objects live as long as the process: moving them out of the
        # collector's reach keeps full collections (100-400 ms with 10,000 sessions) off scrapes.
        self._freeze_gc = freeze_gc

    # ------------------------------------------------------------ lifecycle

    def request_stop(self, *_args) -> None:
        """Ask the loop to stop (signal handler)."""
        self._stop.set()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def health(self) -> tuple[bool, str]:
        """Healthy while the reader loop turns; says whether exports succeed."""
        stalled = time.monotonic() - self._last_loop
        if self.queue.blocked:  # back-pressure: the queue is full and reading waits for the backend
            return True, f"ok (trace export failing, {self.queue.depth} spans queued; reading paused)"
        if stalled > 30:
            return False, f"reader loop stalled for {stalled:.0f} s"
        if not self.queue.healthy:
            return True, f"ok (trace export failing, {self.queue.depth} spans queued)"
        return True, "ok"

    def run(self, ready: threading.Event | None = None) -> None:
        """Run until stopped; flush and commit before returning."""
        if not self.config.from_start and self.root.is_dir():
            # --from-end: history present at the first start is skipped (a checkpoint still wins).
            self._skip_history = set(self.root.glob("*/events.jsonl"))
        self.queue.start()
        self.discoverer.start()
        if ready is not None:
            ready.set()
        try:
            while not self._stop.is_set():
                rescans = self.discoverer.rescans
                files, lock_dirs = self.discoverer.wait(TICK)
                if self.discoverer.rescans != rescans:
                    files |= self._unreadable.paths
                self._last_loop = time.monotonic()
                for path in sorted(files):
                    if self._stop.is_set():
                        break
                    self._read(path)
                for folder in lock_dirs:
                    session = self.sessions.get(folder / "events.jsonl")
                    if session is not None:
                        session.pids = lock_pids(folder)
                        if session.model is not None and session.model.ended is None:
                            self._open[session.path] = session  # a CLI took it up again
                self._housekeeping()
                if self._freeze_gc and not files:
                    self._freeze_gc = False
                    gc.collect()
                    gc.freeze()
        finally:
            self.discoverer.stop()
            flushed = self.queue.stop(timeout=5.0)
            if not flushed:
                log.warning("stopped with %d spans not yet exported; they will be re-read on the next start",
                            self.queue.depth)
            self.checkpoint.close()
            self.sink.shutdown()

    # ------------------------------------------------------------ reading

    def _session_for(self, path: Path) -> Session | None:
        session = self.sessions.get(path)
        if session is not None:
            return session
        if not path.is_file():
            return None
        if not self._inside_tree(path):
            return None
        key = str(path)
        restored = self._restored.pop(key, None)
        tail = FileTail(path, max_line_bytes=self.config.max_line_bytes)
        floor = 0
        if restored is not None:
            tail.identity = restored.identity
            tail.offset, tail.line = restored.resume_offset, restored.resume_line
            floor = restored.offset
        elif path in self._skip_history:
            floor = _last_newline_end(path)
            tail.offset = floor
        model = self._new_model(path.parent.name)
        if tail.offset > 0:
            _prime(model, path, tail.offset, self.config.max_line_bytes)
        session = Session(path, tail, model, floor, lock_pids(path.parent))
        self.sessions[path] = session
        return session

    def _new_model(self, session_id: str) -> SessionModel:
        return SessionModel(session_id, capture_content=self.config.capture_content,
                            content_max_chars=self.config.content_max_chars, summaries=False)

    def _inside_tree(self, path: Path) -> bool:
        """False (said once) for a log that resolves outside COPILOT_HOME/session-state."""
        try:
            inside = path.resolve().is_relative_to(self._root_real)
        except OSError:
            inside = False
        if not inside and path not in self._outside:
            self._outside.add(path)
            log.warning("%s leads outside %s; not following it", path, self.root)
        return inside

    def _read(self, path: Path) -> None:
        session = self._session_for(path)
        if session is None:
            self._forget(path)
            return
        if session.model is None and not self._wake(session):
            return
        while not self._stop.is_set():
            result = session.tail.read(max_bytes=8 << 20)
            if result.gone:
                self._forget(path)
                return
            if result.error:
                self._unreadable.report(path, f"cannot read {path}: {result.error}; will retry")
                return
            self._unreadable.recovered(path)
            if result.restarted:
                log.info("%s was %s; reading it again from the start", path, result.restarted)
                self._deliver(session, session.model.finish(), None)
                session.model = self._new_model(session.session_id)
                session.floor = 0
            if not result.items:
                break
            spans: list[SpanRecord] = []
            for item in result.items:
                if isinstance(item, DecodeError):
                    if item.offset >= session.floor:
                        self.metrics.lines_rejected.labels(item.reason).inc()
                        self._bad_lines.warning("%s:%d: skipped line (%s): %s", path, item.line, item.reason,
                                                item.detail)
                    continue
                try:
                    outputs = session.model.feed(item)
                except Exception:  # a model bug must cost one event, never the daemon
                    log.exception("%s:%d: could not apply %s", path, item.line, item.type)
                    self.metrics.lines_rejected.labels(INTERNAL_ERROR).inc()
                    continue
                if item.offset < session.floor:
                    continue  # delivered before the restart; re-read only to rebuild open spans
                self.metrics.count_event(item.type)
                if item.timestamp_ns > self.metrics.newest_event_ns:
                    self.metrics.newest_event_ns = item.timestamp_ns
                for out in outputs:
                    message = None if isinstance(out, SpanRecord) else anomaly(out, item)
                    if message is not None:
                        self._bad_lines.warning("%s:%d: %s", path, item.line, message)
                self._split(outputs, spans)
            if session.abandoned_at is not None:
                session.abandoned_at = None
                self._abandoned.pop(path, None)
            session.last_read = time.monotonic()
            self._alive(session)  # learns the pid of a process that writes it and that we have not seen yet
            self.queue.put_spans(spans, should_stop=self._stop.is_set)
            self._mark(session)
        if session.model.ended is not None and session.abandoned_at is None:
            self._compact(session)

    def _compact(self, session: Session) -> None:
        """Drop the model of a session with nothing open; keep its position (thousands of old sessions)."""
        if session.model is not None and session.model.quiescent and session.tail.offset >= session.floor:
            self._open.pop(session.path, None)
            session.model = None

    def _wake(self, session: Session) -> bool:
        """A compacted session's file changed: rebuild its model by re-reading the file, delivering
        only what is past the old position. False if the file did not really change."""
        tail = session.tail
        try:
            st = os.stat(session.path)
        except OSError:
            st = None  # gone or unreadable: the read says which
        if st is not None and tail.identity is not None and st.st_size == tail.offset \
                and st.st_ino == tail.identity.inode:
            return False
        session.model = self._new_model(session.session_id)
        if st is not None and st.st_size < tail.offset:
            return True  # truncated: the read sees it and starts a new generation from 0
        session.floor = max(session.floor, tail.offset)
        tail.offset, tail.line = 0, 0
        return True

    def _split(self, outputs, spans: list[SpanRecord]) -> None:
        for out in outputs:
            if isinstance(out, SpanRecord):
                spans.append(out)
            else:
                self._apply(out)

    def _apply(self, update: MetricUpdate) -> None:
        try:
            self.metrics.apply(update)
        except Exception:  # a metric bug must not stop the reader
            log.exception("cannot apply %s", update)

    def _deliver(self, session: Session, outputs, _reason: str | None) -> None:
        spans: list[SpanRecord] = []
        self._split(outputs, spans)
        self.queue.put_spans(spans, should_stop=self._stop.is_set)
        self._mark(session)

    def _mark(self, session: Session) -> None:
        if session.model.ended is None:
            self._open[session.path] = session
        else:
            self._open.pop(session.path, None)
        tail = session.tail
        if tail.identity is None or tail.offset < session.floor:
            return
        resume = session.model.open_interaction_start
        resume_offset, resume_line = resume if resume is not None else (tail.offset, tail.line)
        self.queue.put_marker(FilePosition(str(session.path), tail.identity, tail.offset, tail.line,
                                           resume_offset, resume_line))

    def _forget(self, path: Path) -> None:
        session = self.sessions.pop(path, None)
        self._open.pop(path, None)
        self._abandoned.pop(path, None)
        if session is not None and session.model is not None:
            log.info("%s was deleted; finishing session %s", path, session.session_id)
            spans: list[SpanRecord] = []
            self._split(session.model.finish(), spans)
            self.queue.put_spans(spans, should_stop=self._stop.is_set)
        self._restored.pop(str(path), None)
        self.checkpoint.forget(str(path))

    # ------------------------------------------------------------ housekeeping

    def _housekeeping(self) -> None:
        now = self.clock()
        now_ns = int(now * 1e9)
        monotonic = time.monotonic()
        check_liveness = monotonic >= self._next_liveness
        if check_liveness:
            self._next_liveness = monotonic + LIVENESS_EVERY
            for path, session in list(self._abandoned.items()):
                if session.abandoned_at is None or now - session.abandoned_at >= ABANDONED_RETENTION:
                    del self._abandoned[path]
                    session.abandoned_at = None
                    self._compact(session)
        for session in list(self._open.values()):
            model = session.model
            # Quiet is measured on our clock: a backlog read late must not look quiet.
            quiet = monotonic - session.last_read
            if model.awaiting_confirmation and quiet >= self.config.idle_quiet:
                self._deliver(session, model.confirm_end(), "idle")
            if not check_liveness or now_ns - model.last_event_ns <= 1e9:
                continue  # a short grace period: a CLI that is starting may write before its lock exists
            if model.mid_turn:
                if not self._alive(session):
                    self._abandon(session, now)
            elif (not model.awaiting_confirmation and quiet >= DORMANT_AFTER
                  and now_ns - model.last_event_ns > DORMANT_AFTER * 1e9 and not self._alive(session)):
                # Its process is gone and nothing is open: set aside until the file grows again.
                del self._open[session.path]
                self._compact(session)

    def _alive(self, session: Session) -> bool:
        """Is a process holding the session? The known lock pids first, the folder listed again if none lives."""
        if any(pid_alive(pid) for pid in session.pids):
            return True
        session.pids = lock_pids(session.path.parent)
        return any(pid_alive(pid) for pid in session.pids)

    def _abandon(self, session: Session, now: float) -> None:
        """The process that held a session died mid-turn: end its open spans as incomplete."""
        if now - session.model.last_event_ns / 1e9 < ABANDONED_RETENTION:
            session.abandoned_at = now
            self._abandoned[session.path] = session
            log.warning("session %s was abandoned mid-turn (its CLI process is gone)", session.session_id)
        self._deliver(session, session.model.finish(END_INCOMPLETE), "abandoned")

    def live_sessions(self) -> list[LiveSession]:
        """Scrape-time states of the sessions that are live now (or recently abandoned)."""
        now = self.clock()
        stuck_after = self.config.stuck_after
        alive: dict[int, bool] = {}  # one kill(0) per pid per scrape
        out = []
        # This runs on the server's thread while the reader may compact a session (model -> None).
        for session in list(self._abandoned.values()):
            abandoned_at, model = session.abandoned_at, session.model
            if abandoned_at is not None and model is not None and now - abandoned_at < ABANDONED_RETENTION:
                out.append(LiveSession(session.session_id, "abandoned", max(0.0, now - model.last_event_ns / 1e9)))
        for session in list(self._open.values()):
            model = session.model
            if model is None or model.ended is not None:
                continue
            if not any(_pid_alive_cached(pid, alive) for pid in session.pids):
                continue
            state = model.state
            stalled = now - model.last_event_ns / 1e9
            if state in (WORKING, WAITING_TOOL) and stalled > stuck_after:
                out.append(LiveSession(session.session_id, "stuck", stalled))
            else:
                out.append(LiveSession(session.session_id, state if state else IDLE))
        return out


def _pid_alive_cached(pid: int, cache: dict[int, bool]) -> bool:
    alive = cache.get(pid)
    if alive is None:
        alive = cache[pid] = pid_alive(pid)
    return alive


_SESSION_FACTS = (b'"session.start"', b'"session.resume"', b'"session.model_change"')


def _prime(model: SessionModel, path: Path, end: int, max_line_bytes: int) -> None:
    """Teach a model resuming mid-file the session facts (model, cwd, CLI version) written before ``end``."""
    from .decode import decode_line

    try:
        with open(path, "rb") as handle:
            data = handle.read(end)
    except OSError:
        return
    for raw in data.split(b"\n"):
        if len(raw) <= max_line_bytes and any(marker in raw for marker in _SESSION_FACTS):
            event = decode_line(raw.rstrip(b"\r"))
            if not isinstance(event, DecodeError) and event.type.startswith("session."):
                model.feed(event)


def _last_newline_end(path: Path) -> int:
    """Offset just past the last newline of a file (where complete lines end)."""
    try:
        with open(path, "rb") as handle:
            handle.seek(0, 2)
            size = handle.tell()
            start = max(0, size - (1 << 20))
            handle.seek(start)
            tail = handle.read()
    except OSError:
        return 0
    index = tail.rfind(b"\n")
    return start + index + 1 if index >= 0 else 0


def _check_state_dir(state_dir: Path) -> None:
    """The state directory must exist (we create it) and be writable, or start-up stops here."""
    try:
        state_dir.mkdir(parents=True, exist_ok=True)
        probe = state_dir / f".write-test-{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise ConfigError(f"state directory {state_dir} is not writable ({exc.strerror or exc}); "
                          "choose another with --state-dir or COPILOT_OTEL_STATE_DIR") from None


def run_daemon(config: Config) -> int:
    """`copilot-otel run`: start, serve until SIGTERM/SIGINT, flush, exit 0."""
    from .server import MetricsServer

    try:
        _check_state_dir(config.state_dir)
        daemon = Daemon(config, freeze_gc=True)
        server = MetricsServer(config.metrics_address, daemon.metrics.registry, daemon.health)
    except ConfigError as exc:
        log.error("%s", exc)
        return 2
    except (OSError, sqlite3.Error) as exc:
        log.error("cannot start: %s", exc)
        return 2
    signal.signal(signal.SIGTERM, daemon.request_stop)
    signal.signal(signal.SIGINT, daemon.request_stop)
    server.start()
    host, port = server.address
    log.info("following %s; metrics on http://%s:%d/metrics; traces to %s", daemon.root, host, port,
             daemon.sink.description)
    try:
        daemon.run()
    finally:
        server.stop()
    log.info("stopped")
    return 0
