"""A trace file that rotates by size, in the OpenTelemetry Collector file exporter's style.

Like the Collector's ``rotation`` settings (``max_megabytes``, ``max_backups``, UTC
timestamps), when the next record (line) would take the file past ``max_bytes`` it is renamed to
``<name>-<UTC time>.<ext>`` (``traces-2026-12-03T13-04-53.123.jsonl``) and a new file is
started; only the newest ``backups`` renamed files are kept. Writes are whole records
(``linefile.LineFile``: never torn), so a record never straddles two files. Every file is
created 0600.

Only backups this file's rotations wrote are counted and deleted: each is recorded (name, inode,
size and modification time) in ``.<name>.backups`` beside the file, and deleted only while it is
still that file of ours. A file that merely looks like a backup (``traces-2999-...jsonl``, planted in a shared
folder, or left by an older copilot-otel) is never counted nor deleted.
"""

from __future__ import annotations

import logging
import os
import re
import stat
import time
from collections.abc import Callable
from pathlib import Path

import orjson
from msgspec import Struct

from ..base.private_files import read_private, write_private
from .linefile import LineFile

log = logging.getLogger(__name__)

TIME_FORMAT = "%Y-%m-%dT%H-%M-%S"  # then ".mmm": the Collector's (lumberjack's) 2006-01-02T15-04-05.000
_STAMP = re.compile(r"\d{4}-\d\d-\d\dT\d\d-\d\d-\d\d\.\d{3}")


class Rotation(Struct, frozen=True):
    """When a trace file rotates: past ``max_bytes`` (0: never), keeping ``backups`` old files."""

    max_bytes: int = 0
    backups: int = 0


def backup_name(path: Path, when: float) -> Path:
    """``traces.jsonl`` -> ``traces-2026-12-03T13-04-53.123.jsonl`` (UTC)."""
    stamp = time.strftime(TIME_FORMAT, time.gmtime(when)) + f".{int(when * 1000) % 1000:03d}"
    return path.with_name(f"{path.stem}-{stamp}{path.suffix}")


def manifest_of(path: Path) -> Path:
    """Where the backups of ``path`` are recorded: ``.traces.jsonl.backups`` beside it."""
    return path.with_name(f".{path.name}.backups")


def _is_backup_name(path: Path, name: str) -> bool:
    prefix, suffix = f"{path.stem}-", path.suffix
    return (name.startswith(prefix) and name.endswith(suffix)
            and bool(_STAMP.fullmatch(name[len(prefix):len(name) - len(suffix)])))


def _identity(st: os.stat_result) -> list[int]:
    return [st.st_ino, st.st_size, st.st_mtime_ns]


def _recorded(path: Path) -> list[tuple[str, list[int]]]:
    """The name and identity of each backup the rotations of ``path`` wrote, oldest first."""
    try:
        data = read_private(manifest_of(path))
        entries = orjson.loads(data) if data is not None else []
        return [(name, identity) for name, identity in entries if isinstance(name, str) and _is_backup_name(path, name)
                and isinstance(identity, list) and len(identity) == 3 and all(type(x) is int for x in identity)]
    except (OSError, ValueError, TypeError) as exc:
        log.warning("cannot read the backups recorded in %s (%s): none is deleted until it is written again",
                    manifest_of(path), exc)
        return []


def _still_ours(path: Path, identity: list[int]) -> bool:
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid() and _identity(st) == identity


def backups_of(path: Path) -> list[Path]:
    """The backups the rotations of ``path`` wrote that are still there, oldest first."""
    return [path.with_name(name) for name, identity in _recorded(path)
            if _still_ours(path.with_name(name), identity)]


class RotatingFile:
    """Appends whole records to ``path``, rotating it as ``rotation`` says."""

    def __init__(self, path: Path, rotation: Rotation = Rotation(), *, clock: Callable[[], float] = time.time) -> None:
        self.path = Path(path)
        self.rotation = rotation
        self._clock = clock
        self._file = self._open()

    def _open(self) -> LineFile:
        line_file = LineFile(self.path, exclusive=True)  # created 0600; refused if it is a link, not ours, or busy
        self.size = line_file.size  # after LineFile cut a torn last line off
        return line_file

    def write(self, data: bytes) -> None:
        """Append ``data`` (whole lines), rotating before a line that would take the file past the limit: each
        file gets its part of ``data`` all or none (a part written to a file that then rotated stays if a later
        part cannot be written; the retry writes its records again, the same records)."""
        limit = self.rotation.max_bytes
        start, size = 0, len(data)
        while start < size:
            end = size
            if limit and self.size + size - start > limit:
                end = data.rfind(b"\n", start, start + max(0, limit - self.size)) + 1  # the lines that fit
                if end <= start:  # not one more line fits
                    if self.size:
                        self.rotate()
                        continue
                    end = data.find(b"\n", start) + 1 or size  # a line longer than the limit: a file of its own
            self._file.write(data[start:end] if start or end < size else data)
            self.size += end - start
            start = end

    def sync(self) -> None:
        """Make what was written durable."""
        self._file.sync()

    def rotate(self) -> Path:
        """Rename the file to its timestamped backup, start a new one, drop the oldest backups it wrote."""
        self._file.sync()
        identity = _identity(self._file.stat())  # its last write is done: as it will stay, renamed
        self._file.close()
        when = self._clock()
        target = backup_name(self.path, when)
        while os.path.lexists(target):  # two rotations within a millisecond (or a name taken)
            when += 0.001
            target = backup_name(self.path, when)
        os.replace(self.path, target)
        self._file = self._open()
        entries = [*_recorded(self.path), (target.name, identity)]
        keep = len(entries) - self.rotation.backups
        for name, old in entries[:max(keep, 0)]:
            if _still_ours(self.path.with_name(name), old):
                self.path.with_name(name).unlink(missing_ok=True)
        write_private(manifest_of(self.path), orjson.dumps(entries[max(keep, 0):]))
        return target

    def close(self) -> None:
        """Sync and close."""
        self._file.close()
