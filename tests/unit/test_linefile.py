"""linefile.py: whole lines only, after a crash mid-write and after a write the disk refused."""

from __future__ import annotations

import resource
import signal

import pytest

from copilot_otel.delivery.linefile import LineFile


def test_a_torn_last_line_is_cut_off_when_the_file_is_opened(tmp_path):
    """A line left without its newline (kill -9 during a write) is removed; the complete lines stay."""
    path = tmp_path / "traces.jsonl"
    path.write_bytes(b'{"a":1}\n{"b":2}\n{"c":')
    LineFile(path).close()
    assert path.read_bytes() == b'{"a":1}\n{"b":2}\n'


def test_a_file_of_one_torn_line_is_emptied(tmp_path):
    """With no complete line at all, nothing is left."""
    path = tmp_path / "traces.jsonl"
    path.write_bytes(b"x" * 200_000)
    with_file = LineFile(path)
    with_file.write(b"{}\n")
    with_file.close()
    assert path.read_bytes() == b"{}\n"


def test_a_write_the_filesystem_refuses_half_way_leaves_no_fragment(tmp_path):
    """A write cut short by a size limit (as by a full disk) is taken back whole: the file holds only whole lines."""
    path = tmp_path / "traces.jsonl"
    lines = LineFile(path)
    lines.write(b"first\n")
    previous = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (4096, hard))
    try:
        with pytest.raises(OSError):
            lines.write(b"y" * 10_000 + b"\n")
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, previous)
    lines.write(b"third\n")
    lines.close()
    assert path.read_bytes() == b"first\nthird\n"


def test_a_new_file_is_created_private(tmp_path):
    """The trace and dead-letter files are created private (0600)."""
    path = tmp_path / "dead.jsonl"
    LineFile(path).close()
    assert path.stat().st_mode & 0o777 == 0o600
