"""private.py and rotation.py: what copilot-otel creates is 0700/0600 whatever the umask, and the trace
file rotates by size in the Collector file exporter's style."""

from __future__ import annotations

import os
import stat
from contextlib import contextmanager

import pytest

from copilot_otel.private import open_private, private_dir, touch_private, write_private
from copilot_otel.rotation import RotatingFile, Rotation, backup_name, backups_of


@contextmanager
def umask(value: int):
    old = os.umask(value)
    try:
        yield
    finally:
        os.umask(old)


def mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.mark.parametrize("mask", [0o000, 0o022, 0o277])
def test_created_folders_and_files_are_private_whatever_the_umask(tmp_path, mask):
    """Folders made (parents included) are 0700 and files 0600, under a lax, the usual and a strange umask."""
    with umask(mask):
        folder = private_dir(tmp_path / "a" / "b")
        os.close(open_private(folder / "f"))
        touch_private(folder / "g")
        write_private(folder / "h", b"data")
    assert [mode(p) for p in (tmp_path / "a", folder)] == [0o700, 0o700]
    assert [mode(folder / name) for name in ("f", "g", "h")] == [0o600, 0o600, 0o600]
    assert (folder / "h").read_bytes() == b"data"


def test_what_exists_keeps_its_mode(tmp_path):
    """An existing folder or file is the user's: it is used as it is."""
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o755)
    os.chmod(shared, 0o755)
    existing = shared / "traces.jsonl"
    existing.write_bytes(b"")
    os.chmod(existing, 0o644)
    private_dir(shared)
    os.close(open_private(existing))
    assert (mode(shared), mode(existing)) == (0o755, 0o644)


def test_write_private_replaces_whole(tmp_path):
    """The new content replaces the old in one rename; no temporary file is left."""
    target = tmp_path / "cache.json"
    write_private(target, b"old")
    write_private(target, b"new")
    assert target.read_bytes() == b"new" and os.listdir(tmp_path) == ["cache.json"]


class Clock:
    def __init__(self, start: float) -> None:
        self.now = start

    def __call__(self) -> float:
        self.now += 1.5
        return self.now


def test_backup_names_are_the_collectors():
    """traces.jsonl rotates to traces-2026-12-03T13-04-53.123.jsonl (UTC, milliseconds), as lumberjack names them."""
    from pathlib import Path

    assert backup_name(Path("/s/traces.jsonl"), 1796303093.123).name == "traces-2026-12-03T13-04-53.123.jsonl"


def test_a_file_rotates_before_a_record_would_take_it_past_the_limit(tmp_path):
    """Whole records only: the file is renamed when the next record would not fit, records never split,
    the newest backups are kept, and each file is 0600."""
    target = tmp_path / "traces.jsonl"
    record = b"x" * 39 + b"\n"  # 40 bytes
    with umask(0o022):
        sink = RotatingFile(target, Rotation(max_bytes=100, backups=2), clock=Clock(1796303093.0))
        for _ in range(10):
            sink.write(record)
        sink.close()
    backups = backups_of(target)
    assert len(backups) == 2  # 10 records of 40 bytes: 2 per file, 5 files, the oldest 2 dropped
    assert [p.stat().st_size for p in [*backups, target]] == [80, 80, 80]
    assert all(mode(p) == 0o600 for p in [*backups, target])
    assert [p.name for p in backups] == sorted(p.name for p in backups)


def test_a_record_larger_than_the_limit_is_written_whole(tmp_path):
    """A record longer than max_bytes gets a file of its own rather than being cut."""
    target = tmp_path / "traces.jsonl"
    sink = RotatingFile(target, Rotation(max_bytes=10, backups=5), clock=Clock(1796303093.0))
    sink.write(b"short\n")
    sink.write(b"a much longer record\n")
    sink.close()
    assert target.read_bytes() == b"a much longer record\n"
    assert [p.read_bytes() for p in backups_of(target)] == [b"short\n"]


def test_no_limit_never_rotates(tmp_path):
    """max_bytes 0: one file, appended to."""
    target = tmp_path / "traces.jsonl"
    sink = RotatingFile(target, Rotation())
    for _ in range(100):
        sink.write(b"0123456789\n")
    sink.close()
    assert target.stat().st_size == 1100 and backups_of(target) == []


def test_appending_to_an_existing_file_counts_its_size(tmp_path):
    """A restart appends to the current file, and rotates it as if it had never stopped."""
    target = tmp_path / "traces.jsonl"
    target.write_bytes(b"y" * 89 + b"\n")
    sink = RotatingFile(target, Rotation(max_bytes=100, backups=1), clock=Clock(1796303093.0))
    sink.write(b"z" * 19 + b"\n")
    sink.close()
    assert [p.read_bytes() for p in backups_of(target)] == [b"y" * 89 + b"\n"]
    assert target.read_bytes() == b"z" * 19 + b"\n"
