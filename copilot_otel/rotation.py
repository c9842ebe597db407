"""A trace file that rotates by size, in the OpenTelemetry Collector file exporter's style.

Like the Collector's ``rotation`` settings (``max_megabytes``, ``max_backups``, UTC
timestamps), when the next write would take the file past ``max_bytes`` it is renamed to
``<name>-<UTC time>.<ext>`` (``traces-2026-12-03T13-04-53.123.jsonl``) and a new file is
started; only the newest ``backups`` renamed files are kept. Writes are whole records
(``linefile.LineFile``: never torn), so a record never straddles two files. Every file is
created 0600.
"""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from .linefile import LineFile
from .private import touch_private

TIME_FORMAT = "%Y-%m-%dT%H-%M-%S"  # then ".mmm": the Collector's (lumberjack's) 2006-01-02T15-04-05.000
_STAMP = re.compile(r"\d{4}-\d\d-\d\dT\d\d-\d\d-\d\d\.\d{3}")


@dataclass(frozen=True, slots=True)
class Rotation:
    """When a trace file rotates: past ``max_bytes`` (0: never), keeping ``backups`` old files."""

    max_bytes: int = 0
    backups: int = 0


def backup_name(path: Path, when: float) -> Path:
    """``traces.jsonl`` -> ``traces-2026-12-03T13-04-53.123.jsonl`` (UTC)."""
    stamp = time.strftime(TIME_FORMAT, time.gmtime(when)) + f".{int(when * 1000) % 1000:03d}"
    return path.with_name(f"{path.stem}-{stamp}{path.suffix}")


def backups_of(path: Path) -> list[Path]:
    """The rotated files of ``path``, oldest first."""
    prefix, suffix = f"{path.stem}-", path.suffix
    try:
        names = os.listdir(path.parent)
    except OSError:
        return []
    found = [name for name in names if name.startswith(prefix) and name.endswith(suffix)
             and _STAMP.fullmatch(name[len(prefix):len(name) - len(suffix)])]
    return [path.with_name(name) for name in sorted(found)]


class RotatingFile:
    """Appends whole records to ``path``, rotating it as ``rotation`` says."""

    def __init__(self, path: Path, rotation: Rotation = Rotation(), *, clock: Callable[[], float] = time.time) -> None:
        self.path = Path(path)
        self.rotation = rotation
        self._clock = clock
        self._file = self._open()

    def _open(self) -> LineFile:
        touch_private(self.path)  # created 0600 here: LineFile's own mode would go through the umask
        line_file = LineFile(self.path)
        self.size = os.stat(self.path).st_size  # after LineFile cut a torn last line off
        return line_file

    def write(self, data: bytes) -> None:
        """Append ``data`` (whole lines): all of it or none; rotate first if it would not fit."""
        limit = self.rotation.max_bytes
        if limit and self.size and self.size + len(data) > limit:
            self.rotate()
        self._file.write(data)
        self.size += len(data)

    def sync(self) -> None:
        """Make what was written durable."""
        self._file.sync()

    def rotate(self) -> Path:
        """Rename the file to its timestamped backup, start a new one, drop the oldest backups."""
        self._file.close()
        when = self._clock()
        target = backup_name(self.path, when)
        while target.exists():  # two rotations within a millisecond
            when += 0.001
            target = backup_name(self.path, when)
        os.replace(self.path, target)
        self._file = self._open()
        for old in backups_of(self.path)[:-self.rotation.backups or None]:
            old.unlink(missing_ok=True)
        return target

    def close(self) -> None:
        """Sync and close."""
        self._file.close()
