"""The dead-letter file: spans a trace backend refused for good, kept instead of blocking the export.

A request the backend rejects as malformed (HTTP 400, gRPC INVALID_ARGUMENT), or a single span
larger than any request may be, can never be delivered as it is: retrying it would hold every
later span back forever. Its spans are written here, whole, as OTLP JSON lines (the Collector's
file format, so they can be inspected or sent again by hand), in a private file of the state
directory; the export moves on and the checkpoint with it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from pathlib import Path

from ..base.private_files import private_dir
from ..model.records import SpanRecord
from ..otlp.json_encoder import OtlpJsonEncoder
from .linefile import LineFile

log = logging.getLogger(__name__)

FILE_NAME = "dead-letter.jsonl"


class DeadLetter:
    """Appends rejected spans to ``path`` (mode 0600); counts them and keeps the last reason."""

    def __init__(self, path: Path, encoder: OtlpJsonEncoder) -> None:
        self.path = Path(path)
        self._encoder = encoder
        self._file: LineFile | None = None
        self._lock = threading.Lock()
        self.spans = 0
        self.last_reason: str | None = None

    def add(self, records: Sequence[SpanRecord], reason: str) -> None:
        """Keep ``records`` (durably) with the reason they were refused; raise OSError if they cannot be kept."""
        line = self._encoder.encode(records)
        with self._lock:
            if self._file is None:
                private_dir(self.path.parent)
                self._file = LineFile(self.path)
            self._file.write(line)
            self._file.sync()
            self.spans += len(records)
            self.last_reason = reason
        log.error("%d span(s) refused for good (%s): kept in %s, export goes on", len(records), reason, self.path)

    def close(self) -> None:
        """Close the file, if it was ever opened."""
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None
