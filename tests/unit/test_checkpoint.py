"""checkpoint.py: file positions committed to SQLite, loaded after a restart, forgotten; a corrupt file set aside."""

from __future__ import annotations

import logging

from copilot_otel.checkpoint import Checkpoint, FilePosition
from copilot_otel.tail import FileIdentity


def position(path: str, offset: int, *, inode: int = 11, resume: int | None = None) -> FilePosition:
    resume_offset = offset if resume is None else resume
    return FilePosition(path, FileIdentity(2049, inode, "0123456789abcdef", 256), offset, offset // 100,
                        resume_offset, resume_offset // 100)


def test_commit_then_load_in_a_new_process(tmp_path):
    """What was committed is what a checkpoint opened later (a restart) loads, field for field."""
    db = tmp_path / "state" / "checkpoint.sqlite"
    committed = [position("/a/events.jsonl", 1200, resume=800), position("/b/events.jsonl", 300, inode=12)]
    checkpoint = Checkpoint(db)
    checkpoint.commit(committed)
    checkpoint.close()
    reopened = Checkpoint(db)
    try:
        assert reopened.load() == {p.path: p for p in committed}
    finally:
        reopened.close()


def test_a_later_commit_replaces_the_position(tmp_path):
    """Committing a file again moves its position (and identity); other files stay."""
    checkpoint = Checkpoint(tmp_path / "checkpoint.sqlite")
    try:
        checkpoint.commit([position("/a", 100), position("/b", 50)])
        checkpoint.commit([position("/a", 900, inode=99)])
        loaded = checkpoint.load()
        assert loaded["/a"] == position("/a", 900, inode=99)
        assert loaded["/b"] == position("/b", 50)
    finally:
        checkpoint.close()


def test_forget(tmp_path):
    """A deleted file's position is dropped."""
    checkpoint = Checkpoint(tmp_path / "checkpoint.sqlite")
    try:
        checkpoint.commit([position("/a", 100), position("/b", 50)])
        checkpoint.forget("/a")
        assert set(checkpoint.load()) == {"/b"}
    finally:
        checkpoint.close()


def test_an_empty_commit_writes_nothing(tmp_path):
    """No positions, no transaction: an empty store stays empty."""
    checkpoint = Checkpoint(tmp_path / "checkpoint.sqlite")
    try:
        checkpoint.commit([])
        assert checkpoint.load() == {}
    finally:
        checkpoint.close()


def test_a_corrupt_checkpoint_is_set_aside(tmp_path, caplog):
    """A file that is no database is moved aside with a warning; the new store starts empty and works."""
    db = tmp_path / "checkpoint.sqlite"
    garbage = b"this is not a database" * 100
    db.write_bytes(garbage)
    caplog.set_level(logging.WARNING, logger="copilot_otel.checkpoint")
    checkpoint = Checkpoint(db)
    try:
        assert checkpoint.load() == {}
        checkpoint.commit([position("/a", 10)])
        assert set(checkpoint.load()) == {"/a"}
    finally:
        checkpoint.close()
    (moved,) = tmp_path.glob("checkpoint.sqlite.corrupt-*")
    assert moved.read_bytes() == garbage
    assert "is unreadable" in caplog.text and str(moved) in caplog.text
