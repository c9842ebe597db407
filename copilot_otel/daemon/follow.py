"""Follows one session's events.jsonl for the daemon: position, model, compaction and rebuild.

A :class:`Follower` reads what was appended, drives its model through the pipeline and says
where the checkpoint may move once the spans are exported. A finished session is compacted
to its file position (thousands of old sessions cost almost nothing); when its file grows
again the model is rebuilt from the file and only what lies past the old position is
delivered. A restart resumes the same way from the checkpoint.

A file truncated or replaced by another log starts a new *generation*: what the old one left
open ends as incomplete, and the spans of the new one get ids of their own (records.salted), so
no span id is ever exported twice with different content. A copy of the log moved over it
reads on; a rewrite of lines already read (the same first event, other bytes: an edit, a log
truncated and written again past the position) is said once and read again from the start as a
new generation too, with the delivered lines below the floor: nothing is counted twice, and what
the rewrite changed never reaches the backend under an id already sent.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

from msgspec import Struct, field
from msgspec.structs import replace

from ..base.display import duration
from ..base.pause import PAUSE
from ..base.regular_files import open_regular
from ..decode.events import DecodeError, Event
from ..decode.lines import decode_line
from ..decode.normalize import parse_version
from ..logreader import LogReader
from ..model.options import ModelOptions
from ..model.pipeline import Outputs, Warn, finish
from ..model.records import salted, salted_ids
from ..model.sessions import READ_TYPES, SessionModel
from ..model.summary import SessionSummary
from ..source.identity import EDITED
from ..source.liveness import Liveness, locks_expected
from ..source.sources import session_id_of
from ..source.tail import CHUNK, FileTail, ReadResult
from ..source.workspace import NameCache
from ..state.checkpoint import FilePosition
from ..vocab import END_INCOMPLETE, IDLE

log = logging.getLogger(__name__)

READ_BYTES = 4 << 20  # what one read takes from a file before the daemon turns to the other files
# An event stamped further ahead of the machine's clock than this says that one of the clocks is wrong: it is
# kept and exported as stamped, counted (copilot_otel_events_ahead_of_clock_total) and said once per log.
AHEAD_S = 3600.0


class Follower(Struct):
    """One followed session log and everything the daemon knows about it."""

    path: Path
    # Its tail and model (``tail``, ``model``). The model is None while the session is compacted: it had ended
    # (or its process was gone) with nothing open, so only its position is kept; new lines rebuild the model
    # from the start of the file.
    reader: LogReader
    floor_line: int = 0  # outputs of the events on lines up to this one were already delivered (restart, compaction)
    # A --backfill sending history left out before: the lines up to this one were never delivered (those past it,
    # up to floor_line, were). Carried in the checkpoint (FilePosition.history_line) while it lasts.
    floor_from: int = 0
    history_line: int = 0  # the lines up to this one were left out as history (skipped), not delivered
    # A position to commit before the spans of this read are queued: a --backfill began sending history (the next
    # start, with the flag or not, goes on with it rather than take the log for history again), or a new generation
    # began (a restart, even after a kill -9 once its first spans were delivered, goes on with it: its ids are
    # never made again for other content).
    commit_now: FilePosition | None = None
    pids: list[int] = field(default_factory=list)
    last_read: float = 0.0  # monotonic time new events were last read
    # Monotonic time the reader last saw an event of the session arrive: stuck and abandoned are measured from
    # it, so that a clock step (or a writer's wrong clock) neither hides nor invents one. Events of a log written
    # before the daemon started (``history``) did not arrive under its eyes: their own age stands in.
    seen_at: float = 0.0
    history: bool = False
    abandoned_at: float | None = None  # monotonic time the session was found dead mid-turn
    locks_seen: bool = False  # a lock file was seen in the folder at some point
    cut_off_tool: str | None = None  # the tool it waited on when it was found abandoned
    whole: bool = True  # the model read the file from its first line (so its summary counts everything)
    # Rebuilt after compaction: the model had nothing open at the floor, so what the re-read leaves
    # open there (work a crash cut off, ended when the process was found dead) is ended quietly.
    settle_at_floor: bool = False
    generation: int = 0  # how many times the file was truncated or replaced under us (salts its span ids)
    told_ahead: bool = False  # its events stamped ahead of our clock were reported
    session_id: str = ""  # its spans' session id: its folder's (session_id_of), or the first folder's of a moved log
    moved_from: tuple[str, ...] = ()  # the paths it was followed at before a move (their checkpoint rows go)
    names: NameCache | None = None  # the session's name, from its workspace.yaml (made by __post_init__)
    skipped: bool = False  # started at its end, its history left out: its position is committed at once

    def __post_init__(self) -> None:
        self.session_id = self.session_id or self.reader.session_id
        self.names = self.names or NameCache()

    @property
    def tail(self) -> FileTail:
        """Where the log was read up to (its reader's)."""
        return self.reader.tail

    @property
    def model(self) -> SessionModel | None:
        """The session model (its reader's); None while compacted."""
        return self.reader.model

    @model.setter
    def model(self, model: SessionModel | None) -> None:
        self.reader.model = model

    @property
    def live_model(self) -> SessionModel:
        """The session model, where it cannot be compacted: while the log is read, or the session is open."""
        return self.reader.live_model

    @classmethod
    def start(cls, path: Path, options: ModelOptions, *, max_line_bytes: int, restored: FilePosition | None = None,
              skip_history: bool = False, pids: list[int] | None = None, within: Path | None = None,
              generation: int = 0, history: bool = False, history_before_ns: int = 0,
              backfill: bool = False) -> Follower:
        """Follow ``path`` from its checkpoint (``restored``, perhaps committed at another path: a moved log),
        from its end (``skip_history``, or a log whose last event is older than ``history_before_ns``: see
        ``skipped``), or from the start. ``backfill``: history is sent instead, also history a run before left
        out (a restored row's ``history_line``).

        ``within``: the tree the file must stay inside, checked on every open."""
        floor_line, floor_from, history_line, session_id = 0, 0, 0, session_id_of(path)
        backfilled = False
        moved_from: tuple[str, ...] = ()
        commit_now = None
        if restored is not None and backfill and restored.history_line and not restored.backfilling:
            # History left out by a run before: read from the first line, the lines followed since below the floor.
            restored = commit_now = replace(restored, resume_offset=0, resume_line=0)
            log.info("%s: sending the history left out before (--backfill), %d line(s)", path, restored.history_line)
        if restored is not None:
            session_id = restored.session_id or session_id_of(Path(restored.path))
        reader = LogReader(path, options, session_id=session_id, max_line_bytes=max_line_bytes, keep=READ_TYPES,
                           within=within, summaries=False, pause=PAUSE)
        tail = reader.tail
        if restored is not None:
            tail.resume(restored.resume_offset, restored.resume_line, restored.identity, end=restored.offset,
                        crc=restored.crc)
            floor_line = restored.line
            if restored.backfilling:
                floor_from = history_line = restored.history_line
            generation = restored.generation
            moved_from = (restored.path,) if restored.path != str(path) else ()
        elif skip_history:
            tail.skip_history()
            floor_line = tail.line
        elif history_before_ns and (tail.newest_event_ns() or history_before_ns) < history_before_ns:
            if backfill:
                backfilled = tail.identify()  # sent from its start: a run after this one goes on sending it
            else:
                tail.skip_history()
                floor_line = history_line = tail.line
        follower = cls(path, reader, floor_line=floor_line, pids=pids or [], generation=generation,
                       whole=tail.offset == 0, session_id=session_id, moved_from=moved_from, history=history,
                       floor_from=floor_from, history_line=history_line, commit_now=commit_now)
        follower.skipped = restored is None and tail.offset > 0
        if backfilled:
            follower.commit_now = follower.marker()
        if tail.offset > 0:
            _prime(follower.live_model, path, tail.offset, max_line_bytes)
        return follower

    def new_model(self) -> SessionModel:
        return self.reader.new_model()

    # ------------------------------------------------------------ reading

    def read(self, out: Outputs, *, warn: Warn) -> ReadResult:
        """Read what was appended (up to READ_BYTES) and drive the model with it into ``out``.

        The result says whether the file is gone, unreadable, restarted or had nothing new.
        """
        delivered = max(self.floor_line, self.tail.line)
        result = self.tail.read(max_bytes=READ_BYTES)
        if result.gone or result.error:
            return result
        if result.copied:
            log.info("%s is another file now, holding the bytes already read (a copy moved over it); read on, "
                     "nothing counted again", self.path)
        renewed = self._restart(result, out, delivered) if result.restarted else False
        if result.items:
            self._drive(result, out, warn)
        if renewed:
            self.commit_now = self._generation_row()
        return result

    def _restart(self, result: ReadResult, out: Outputs, delivered: int) -> bool:
        """The file restarted (truncated, replaced, edited): a new generation, read from its start (True)."""
        assert result.restarted is not None
        out.restarts[result.restarted] = out.restarts.get(result.restarted, 0) + 1
        if result.restarted == EDITED and result.lines >= delivered:
            # The same ids would carry the rewritten content: a new generation. What the old one left open is not
            # ended (it was never exported; the rewrite holds its lines, under the new generation's ids).
            log.warning("%s: lines already read changed (the log was edited or rewritten); read again as generation "
                        "%d, with span ids of its own; what was delivered up to line %d is not counted or exported "
                        "again", self.path, self.generation + 1, delivered)
            self.generation += 1
            self.model = self.new_model()
            self.floor_line = delivered
            self.floor_from = self.history_line = 0  # what it held before, history or not, is not sent now
        else:
            # An edit that left fewer lines than were read (an older copy put back, lines deleted) is a truncation:
            # which of its lines were delivered cannot be told.
            how = "replaced by a shorter copy of itself" if result.restarted == EDITED else result.restarted
            log.info("%s was %s; reading it again from the start as a new generation", self.path, how)
            self.finish(out)
            self.generation += 1
            self.model = self.new_model()
            self.floor_line = self.floor_from = self.history_line = 0  # another log now: its history is not ours
            self.settle_at_floor = False
        self.whole = True
        return True

    def _drive(self, result: ReadResult, out: Outputs, warn: Warn) -> None:
        """Drive the model with the lines read into ``out``: the floor's lines settle it, exporting nothing again."""
        start, log_start = len(out.spans), len(out.logs)
        items = result.items
        if self.floor_from:  # backfilling: the history is delivered now, the lines after it were before
            sent = _below(items, self.floor_from)
            self.reader.drive(items[:sent], out, warn=warn)
            self._ahead(items[:sent], out)
            items = items[sent:]
            if self.tail.line >= self.floor_from:
                self.floor_from = self.history_line = 0
        cut = _below(items, self.floor_line)
        if self.settle_at_floor:
            before, items = items[:cut], items[cut:]
            self.reader.drive(before, out, warn=warn, floor=_floor(before, len(before)))
            cut = 0
            if items:
                self.settle_at_floor = False
                if not self.live_model.quiescent:
                    self.live_model.finish()  # delivered when it happened: nothing to export again
        self.reader.drive(items, out, warn=warn, floor=_floor(items, cut))
        self._salt(out, start)
        self._salt_logs(out, log_start)
        self._ahead(items[cut:], out)
        self.abandoned_at = None
        self.last_read = self.seen_at = time.monotonic()
        if self.history:
            age = time.time() - self.live_model.last_event_ns / 1e9
            self.seen_at -= max(0.0, age)
            self.history = result.more  # a backlog read on: still history

    def _generation_row(self) -> FilePosition | None:
        """The position of a new generation before any of its spans is delivered: read from the first line again,
        the floor where it is, the bytes read so far checked."""
        tail = self.tail
        if tail.identity is None or tail.expect is not None:
            return None
        session_id = self.session_id if self.session_id != session_id_of(self.path) else ""
        return FilePosition(str(self.path), tail.identity, tail.offset, self.floor_line, 0, 0, self.generation,
                            tail.crc, session_id, self.moved_from, self.history_line)

    def _ahead(self, items: list, out: Outputs) -> None:
        """Count the events stamped more than AHEAD_S ahead of our clock; say it once per log."""
        limit = int((time.time() + AHEAD_S) * 1e9)
        ahead = [item for item in items if type(item) is Event and item.timestamp_ns > limit]
        if ahead:
            out.ahead += len(ahead)
            if not self.told_ahead:
                self.told_ahead = True
                log.warning("%s:%d: events stamped %s ahead of this machine's clock (this clock or the writer's is "
                            "wrong); kept and exported as stamped", self.path, ahead[0].line,
                            duration(ahead[0].timestamp_ns / 1e9 - time.time()))

    def _salt(self, out: Outputs, start: int) -> None:
        """Give the spans added to ``out`` since ``start`` the ids of this file generation."""
        if self.generation:
            out.spans[start:] = [salted(record, self.generation) for record in out.spans[start:]]

    def _salt_logs(self, out: Outputs, start: int) -> None:
        """Link the log records added to ``out`` since ``start`` to the spans of this file generation."""
        if self.generation:
            out.logs[start:] = [replace(record, trace_id=ids[0], span_id=ids[1]) for record in out.logs[start:]
                                for ids in (salted_ids(record.trace_id, record.span_id, self.generation),)]

    def confirm_end(self, out: Outputs) -> None:
        """A quiet period confirmed that the agent loop went idle: what that closes goes into ``out``."""
        start = len(out.spans)
        out.add(self.live_model.confirm_end())
        self._salt(out, start)

    def wake(self) -> bool:
        """A compacted session's file changed: rebuild its model by re-reading the file, delivering
        only what is past the old position. False if the file did not really change."""
        tail = self.tail
        try:
            st = os.stat(self.path)
        except OSError:
            st = None  # gone or unreadable: the read says which
        if st is not None and tail.identity is not None and st.st_size == tail.offset \
                and st.st_ino == tail.identity.inode:
            return False
        self.model = self.new_model()
        self.whole = True  # read again from the first line, one way or the other
        if st is not None and st.st_size < tail.offset and st.st_ino == getattr(tail.identity, "inode", None):
            return True  # truncated: the read sees it and starts a new generation from 0
        self.reread()
        return True

    def reread(self) -> None:
        """Read the log again from its first line, delivering only what lies past the position reached; what
        the re-read leaves open there was closed before (settle_at_floor). A compacted session that woke, or a
        restored one whose checkpoint held nothing open (a run before found its process gone mid-turn)."""
        tail = self.tail
        self.model = self.new_model()
        self.whole = True
        self.floor_line = max(self.floor_line, tail.line)
        # The next read checks that what was read is still there (else: edited); a position just restored keeps
        # the CRC its checkpoint row holds (the tail's own is not known until that check).
        expect = tail.expect if tail.expect is not None else (tail.offset, tail.crc)
        tail.rewind()
        tail.expect = expect
        self.settle_at_floor = True

    def close_at_floor(self) -> SessionSummary | None:
        """After a re-read that stopped at the position reached: end quietly what it left open (a run before
        ended it, as incomplete, and delivered its spans). The summary from before, or None if nothing was open."""
        if not self.settle_at_floor or self.model is None or self.model.quiescent:
            return None
        before = self.model.summary()
        self.cut_off_tool = before.waiting_on
        self.model.finish(END_INCOMPLETE)  # its spans were exported when it was found abandoned
        self.settle_at_floor = False
        return before

    def summary(self) -> SessionSummary:
        """The model's summary, with the session's name."""
        assert self.names is not None  # made by __post_init__
        summary, name = self.live_model.summary(), self.names.of(self.path.parent)
        return summary if name == summary.name else replace(summary, name=name)  # most have none to show

    def compact(self) -> bool:
        """Drop the model of a session with nothing open; keep its position. True if it was dropped."""
        if self.model is not None and self.model.quiescent and self.tail.line >= self.floor_line:
            self.model = None
            return True
        return False

    def finish(self, out: Outputs, reason: str = END_INCOMPLETE) -> None:
        """The session is over (its process died, its file was deleted): close what is open into ``out``."""
        if self.model is not None:
            self.cut_off_tool = self.model.summary().waiting_on
            start = len(out.spans)
            finish(self.model, out, reason)
            self._salt(out, start)

    # ------------------------------------------------------------ what others read

    def marker(self) -> FilePosition | None:
        """Where the checkpoint may move once everything queued before it is exported (None: not yet)."""
        tail = self.tail
        if tail.identity is None or tail.expect is not None:
            return None
        # Below the floor (a log read again: rewritten, or its model rebuilt), the floor stays where it was and the
        # position goes with the generation, so that a restart goes on with the same ids over the same bytes (and
        # finds a change made meanwhile: yet another generation). A rebuilt model's re-read is re-read again.
        # Sending history (floor_from), the position says how far: a restart reads on from there (what is open
        # there is not rebuilt; an interaction start before it would send the history read since again).
        rereading = tail.line < self.floor_line and (self.settle_at_floor or bool(self.floor_from))
        resume = self.model.open_interaction_start if self.model is not None and not rereading else None
        resume_offset, resume_line = resume if resume is not None else (tail.offset, tail.line)
        session_id = self.session_id if self.session_id != session_id_of(self.path) else ""
        return FilePosition(str(self.path), tail.identity, tail.offset, max(tail.line, self.floor_line), resume_offset,
                            resume_line, self.generation, tail.crc, session_id, self.moved_from, self.history_line)

    def move(self, path: Path) -> None:
        """Follow the same log at another path (its folder was renamed): the same session, position and ids."""
        self.moved_from = (*self.moved_from, str(self.path))
        self.path = self.reader.path = self.tail.path = Path(path)

    @property
    def locks_expected(self) -> bool:
        """Does this session's CLI write lock files (so that a missing process means it is gone)?"""
        if self.pids:
            self.locks_seen = True
        if self.model is None:
            return True
        return locks_expected(self.pids, parse_version(self.model.cli_version), seen=self.locks_seen)

    def liveness(self) -> Liveness:
        """A frozen snapshot for the scrape thread (which never touches the model)."""
        model = self.model
        if model is None:
            return Liveness(self.session_id, IDLE, 0, tuple(self.pids), self.abandoned_at, self.locks_expected,
                               seen_at=self.seen_at)
        summary = model.summary()
        tool = summary.waiting_on or (self.cut_off_tool if self.abandoned_at is not None else None)
        trace = model.trace_id
        return Liveness(self.session_id, summary.state, summary.last_event_ns, tuple(self.pids), self.abandoned_at,
                           self.locks_expected, tool, summary.repository, self.seen_at,
                           f"{trace:032x}" if trace else "")


_SESSION_FACTS = (b'"session.start"', b'"session.resume"', b'"session.model_change"')


def _prime(model: SessionModel, path: Path, end: int, max_line_bytes: int) -> None:
    """Teach a model resuming mid-file the session facts (model, cwd, CLI version) written before ``end``.

    The file is scanned a chunk at a time: a long log costs no more memory than one line."""
    try:
        handle = os.fdopen(open_regular(path, follow=False), "rb")  # what the tail refuses is not read here either
    except OSError:
        return
    with handle:
        position, rest, skipping = 0, b"", False
        while position < end:
            try:
                chunk = handle.read(min(CHUNK, end - position))
            except OSError:
                return
            if not chunk:
                break
            position += len(chunk)
            lines = (rest + chunk).split(b"\n")
            rest = lines.pop()
            for raw in lines:
                if skipping:  # the end of a line too long to keep
                    skipping = False
                elif any(marker in raw for marker in _SESSION_FACTS):
                    event = decode_line(raw.rstrip(b"\r"), max_bytes=max_line_bytes)
                    if not isinstance(event, DecodeError) and event.type.startswith("session."):
                        model.feed(event)
            if len(rest) > max_line_bytes:
                rest, skipping = b"", True


def _below(items: list, floor_line: int) -> int:
    """How many of ``items`` (in line order) lie on lines up to ``floor_line``."""
    if not items or items[0].line > floor_line:
        return 0
    if items[-1].line <= floor_line:
        return len(items)
    return next(i for i, item in enumerate(items) if item.line > floor_line)


def _floor(items: list, cut: int) -> int:
    """``drive``'s byte floor that leaves out the first ``cut`` items (offsets follow the lines of one read)."""
    if cut <= 0:
        return 0
    return items[cut].offset if cut < len(items) else items[-1].offset + 1
