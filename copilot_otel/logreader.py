"""One session log read through its own model: a tail that keeps its place, the model, and ``drive`` between them.

The daemon's followers, replay, `inspect`, the history summary and the waterfall read a log through a
:class:`LogReader`, so they skim the same event types (``keep``) and build the model the same way. ``read``
rebuilds the model when the file starts over; the daemon's follower, which must first close what the old
file left open, reads the tail itself and drives what it read with ``drive``.
"""

from __future__ import annotations

from pathlib import Path

from .config import DEFAULT_MAX_LINE_BYTES
from .model.options import ModelOptions
from .model.pipeline import Outputs, Pause, Warn, drive, finish
from .model.sessions import READ_TYPES, SessionModel, read_types
from .source.sources import UnreadableLog, session_id_of
from .source.tail import FileTail, ReadResult

READ_BYTES = 4 << 20  # what is read of a log at a time


class LogReader:
    """Reads one session log into spans and metric updates, a read at a time.

    ``keep``: the event types whose payload is decoded (the rest are skimmed); the model reads no others
    (READ_TYPES: those the model reads with these options, the system prompt only with content capture).
    ``within``: the tree the file must stay inside, checked on every open (the daemon's); None reads any file.
    ``summaries``, ``metrics``, ``live_idle``: what the model keeps (see SessionModel).
    """

    def __init__(self, path: Path, options: ModelOptions = ModelOptions(), *, session_id: str | None = None,
                 max_line_bytes: int = DEFAULT_MAX_LINE_BYTES, keep: frozenset[bytes] | None = READ_TYPES,
                 within: Path | None = None, summaries: bool = True, metrics: bool = True, live_idle: bool = False,
                 warn: Warn | None = None, pause: Pause | None = None) -> None:
        self.path = path if isinstance(path, Path) else Path(path)  # a Path is kept: parsing one again is half the cost
        self.session_id = session_id_of(self.path) if session_id is None else session_id
        self.options = options
        self.max_line_bytes = max_line_bytes
        self.keep = keep = read_types(options) if keep is READ_TYPES else keep
        self._warn = {} if warn is None else {"warn": warn}  # None: drive's own (the pipeline's logger)
        self._pause = pause  # the daemon's reader gives way to /metrics renders; the commands need not
        self._model_args = {"summaries": summaries, "metrics": metrics, "live_idle": live_idle}
        self.within = within
        self.tail = FileTail(self.path, max_line_bytes=max_line_bytes, keep=keep, within=within)
        self.model: SessionModel | None = self.new_model()  # None: dropped while nothing is open (the daemon's)

    @property
    def live_model(self) -> SessionModel:
        """The model, which is there whenever the log is read: only the daemon drops it (compaction), and it
        rebuilds the model before it reads on (Follower.wake)."""
        assert self.model is not None, f"{self.path}: the session model was dropped (compacted)"
        return self.model

    def new_model(self) -> SessionModel:
        """A model for this log with nothing read yet."""
        return SessionModel(self.session_id, self.options, **self._model_args)

    def start_over(self) -> None:
        """Read the log again from its start (the same file), with a new model."""
        self.tail = FileTail(self.path, identity=self.tail.identity, max_line_bytes=self.max_line_bytes,
                             keep=self.keep, within=self.within)
        self.model = self.new_model()

    def read(self, out: Outputs | None = None, *, max_bytes: int = READ_BYTES) -> tuple[ReadResult, Outputs]:
        """Read what was appended (up to ``max_bytes``) and drive the model with it into ``out``. A file that
        restarted (truncated, replaced) gets a new model first; one gone or unreadable drives nothing."""
        out = Outputs() if out is None else out
        result = self.tail.read(max_bytes=max_bytes)
        if result.gone or result.error:
            return result, out
        if result.restarted:
            self.model = self.new_model()
        if result.items:
            self.drive(result.items, out)
        return result, out

    def drive(self, items: list, out: Outputs, *, warn: Warn | None = None, floor: int = -1) -> Outputs:
        """Apply read items to the model into ``out`` (``floor``: see pipeline.drive)."""
        warned = self._warn if warn is None else {"warn": warn}
        return drive(self.live_model, items, out, source=str(self.path), floor=floor, pause=self._pause, **warned)

    def read_to_end(self, out: Outputs | None = None) -> Outputs:
        """Every complete line there is now, driven into ``out``; raises UnreadableLog when it cannot be read."""
        result, out = self.read(out, max_bytes=1 << 62)
        if result.failure:
            raise UnreadableLog(self.path, result.failure)
        return out

    def finish(self, out: Outputs | None = None) -> Outputs:
        """The log is over: close what is still open into ``out``."""
        return finish(self.live_model, Outputs() if out is None else out)


def quiet(*_args) -> None:
    """A ``warn`` that says nothing (the caller counts what was skipped)."""
