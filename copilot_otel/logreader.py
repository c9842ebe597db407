"""One session log read through its own model: a tail that keeps its place, the model, and ``drive`` between them.

Replay, `inspect`, the history summary and the waterfall read a log through a :class:`LogReader`, so they
skim the same event types (``keep``) and rebuild the model the same way when the file starts over.
"""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path

from .config import DEFAULT_MAX_LINE_BYTES
from .options import ModelOptions
from .pipeline import Outputs, Warn, drive, finish
from .sessions import READ_TYPES, SessionModel
from .sources import UnreadableLog, session_id_of
from .tail import FileTail, ReadResult

READ_BYTES = 4 << 20  # what is read of a log at a time


class LogReader:
    """Reads one session log into spans and metric updates, a read at a time.

    ``keep``: the event types whose payload is decoded (the rest are skimmed); the model reads no others.
    ``summaries``, ``metrics``, ``live_idle``: what the model keeps (see SessionModel).
    """

    def __init__(self, path: Path, options: ModelOptions = ModelOptions(), *, session_id: str | None = None,
                 max_line_bytes: int = DEFAULT_MAX_LINE_BYTES, keep: Collection[str] | None = READ_TYPES,
                 summaries: bool = True, metrics: bool = True, live_idle: bool = False,
                 warn: Warn | None = None) -> None:
        self.path = Path(path)
        self.session_id = session_id_of(self.path) if session_id is None else session_id
        self.options = options
        self.max_line_bytes = max_line_bytes
        self.keep = keep
        self._warn = {} if warn is None else {"warn": warn}  # None: drive's own (the pipeline's logger)
        self._model_args = {"summaries": summaries, "metrics": metrics, "live_idle": live_idle}
        self.tail = FileTail(self.path, max_line_bytes=max_line_bytes, keep=keep)
        self.model = self.new_model()

    def new_model(self) -> SessionModel:
        """A model for this log with nothing read yet."""
        return SessionModel(self.session_id, self.options, **self._model_args)

    def start_over(self) -> None:
        """Read the log again from its start (the same file), with a new model."""
        self.tail = FileTail(self.path, identity=self.tail.identity, max_line_bytes=self.max_line_bytes,
                             keep=self.keep)
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
            drive(self.model, result.items, out, source=str(self.path), **self._warn)
        return result, out

    def read_to_end(self, out: Outputs | None = None) -> Outputs:
        """Every complete line there is now, driven into ``out``; raises UnreadableLog when it cannot be read."""
        result, out = self.read(out, max_bytes=1 << 62)
        if result.gone or result.error:
            raise UnreadableLog(self.path, "no such file" if result.gone else result.error)
        return out

    def finish(self, out: Outputs | None = None) -> Outputs:
        """The log is over: close what is still open into ``out``."""
        return finish(self.model, Outputs() if out is None else out)


def quiet(*_args) -> None:
    """A ``warn`` that says nothing (the caller counts what was skipped)."""
