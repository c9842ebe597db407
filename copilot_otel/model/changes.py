"""The code a session changed, from the totals its session.shutdown holds (``codeChanges``).

The CLI writes lines added and removed and the files it modified at each shutdown: totals of
the whole session (1.0.70 on: a resumed session's shutdown repeats what an earlier one held)
or of the process that ends (older CLIs). Each is counted once: only what a shutdown adds to
what was counted before. Files are told apart by path, so a file modified again after a resume
is not counted twice.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..decode.payloads import as_int
from ..vocab import LINES_ADDED, LINES_REMOVED, Metric
from .open_spans import Outbox
from .summary import Tally
from .usage import LINES_ADDED as ADDED
from .usage import LINES_REMOVED as REMOVED

_LINE_KEYS = (("linesAdded", LINES_ADDED, ADDED), ("linesRemoved", LINES_REMOVED, REMOVED))


class CodeChanges:
    """copilot_code_lines_total{change} and copilot_files_modified_total of one session."""

    __slots__ = ("file_count", "files", "lines", "out", "process_lines", "tally")

    def __init__(self, out: Outbox, tally: Tally) -> None:
        self.out = out
        self.tally = tally
        self.lines = dict.fromkeys((LINES_ADDED, LINES_REMOVED), 0)  # counted so far
        self.process_lines = dict(self.lines)  # the same, since the session's last start or resume
        self.files: set[str] = set()  # the paths counted so far
        self.file_count = 0  # files counted (from paths, or from a bare count)

    def new_process(self) -> None:
        """A session.start or resume: per-process totals count from here."""
        self.process_lines = dict.fromkeys(self.process_lines, 0)

    def shutdown(self, data: Mapping[str, Any], *, cumulative: bool, model: str) -> None:
        """Count what a session.shutdown's ``codeChanges`` adds (``accountingSnapshot.codeChanges`` gives
        the file count when the list is missing); the CLI does not say which model changed them: the lines
        are the session's ``model``'s (its model at that shutdown) in the summary's slots."""
        changes = data.get("codeChanges")
        snapshot = data.get("accountingSnapshot")
        if not isinstance(changes, dict) and isinstance(snapshot, dict):
            changes = snapshot.get("codeChanges")
        if not isinstance(changes, dict):
            return
        for key, change, amount in _LINE_KEYS:
            total = as_int(changes.get(key))
            if total is None:
                continue
            missing = total - (self.lines if cumulative else self.process_lines)[change]
            if missing > 0:
                self.lines[change] += missing
                self.process_lines[change] += missing
                self.tally.add(model, amount, missing)
                self.out.count(Metric.CODE_LINES, change, value=missing)
        paths = changes.get("filesModified")
        if isinstance(paths, list):
            new = {path for path in paths if isinstance(path, str)} - self.files
            self.files |= new
            self._count_files(len(new))
        else:
            total = as_int(changes.get("filesModifiedCount"))
            if total is not None:
                self._count_files(total - self.file_count if cumulative else total)

    def _count_files(self, new: int) -> None:
        if new > 0:
            self.file_count += new
            self.out.count(Metric.FILES_MODIFIED, value=new)
