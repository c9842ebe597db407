"""checkpoint.py: file positions committed to SQLite, loaded after a restart, forgotten; a corrupt file set aside."""

from __future__ import annotations

import logging
import os
import sqlite3

import pytest

from copilot_otel.source.tail import FileIdentity
from copilot_otel.state.checkpoint import Checkpoint, CheckpointError, FilePosition, StateLock


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


def test_a_path_that_is_not_utf8_is_kept_and_loaded_back(tmp_path):
    """A session folder another program named with bytes that are no UTF-8 (os.fsdecode keeps them as lone
    surrogates, which SQLite refuses): its position is committed, loaded back as the same path, forgotten;
    it once failed every commit, the other logs' too, for good."""
    odd = os.fsdecode(b"/home/session-state/\xff\x1b[2J/events.jsonl")
    checkpoint = Checkpoint(tmp_path / "checkpoint.sqlite")
    try:
        checkpoint.commit([position(odd, 500), position("/a", 100), position("/bytes:41", 7)])
        assert checkpoint.load() == {odd: position(odd, 500), "/a": position("/a", 100),
                                     "/bytes:41": position("/bytes:41", 7)}
        checkpoint.forget(odd)
        assert set(checkpoint.load()) == {"/a", "/bytes:41"}
    finally:
        checkpoint.close()


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
    caplog.set_level(logging.WARNING, logger="copilot_otel.state.checkpoint")
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


def test_a_corrupt_checkpoint_is_refused_when_starting_afresh_would_count_twice(tmp_path):
    """start_afresh=False (the daemon reading from the start): one error saying what to do, the file kept."""
    db = tmp_path / "checkpoint.sqlite"
    garbage = b"this is not a database" * 100
    db.write_bytes(garbage)
    with pytest.raises(CheckpointError, match=r"is damaged .* move it aside .* --from-end"):
        Checkpoint(db, start_afresh=False)
    assert db.read_bytes() == garbage and list(tmp_path.glob("*.corrupt-*")) == []


def test_a_locked_checkpoint_is_an_error_not_corruption(tmp_path):
    """A database another process holds locked is reported as such, and nothing is moved aside."""
    db = tmp_path / "checkpoint.sqlite"
    Checkpoint(db).close()
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("PRAGMA locking_mode=EXCLUSIVE")
    holder.execute("BEGIN EXCLUSIVE")
    try:
        with pytest.raises(CheckpointError, match="locked"):
            Checkpoint(db, busy_timeout=0.1)
    finally:
        holder.close()
    assert list(tmp_path.glob("*.corrupt-*")) == []


def test_a_folder_in_the_way_is_an_error_not_corruption(tmp_path):
    """A checkpoint path that cannot be opened at all says so; nothing is renamed."""
    db = tmp_path / "checkpoint.sqlite"
    db.mkdir()
    with pytest.raises(CheckpointError, match="cannot open the checkpoint"):
        Checkpoint(db)
    assert db.is_dir() and list(tmp_path.glob("*.corrupt-*")) == []


def test_a_failed_commit_says_why_and_stores_nothing(tmp_path):
    """A commit that fails (here: another process holds the write lock) raises the real reason, not a
    failed rollback, and leaves the stored positions as they were; the next commit works."""
    db = tmp_path / "checkpoint.sqlite"
    checkpoint = Checkpoint(db, busy_timeout=0.1)
    try:
        checkpoint.commit([position("/a", 100)])
        holder = sqlite3.connect(db, isolation_level=None)
        holder.execute("BEGIN IMMEDIATE")
        try:
            with pytest.raises(CheckpointError) as raised:
                checkpoint.commit([position("/a", 200)])
        finally:
            holder.close()
        assert "locked" in str(raised.value) and "rollback" not in str(raised.value)
        assert checkpoint.load()["/a"].offset == 100
        checkpoint.commit([position("/a", 300)])
        assert checkpoint.load()["/a"].offset == 300
    finally:
        checkpoint.close()


def test_a_checkpoint_without_generations_is_upgraded(tmp_path):
    """A checkpoint written before file generations were kept opens, with generation 0 for each file."""
    db = tmp_path / "checkpoint.sqlite"
    old = sqlite3.connect(db)
    old.execute("CREATE TABLE files (path TEXT PRIMARY KEY, device INTEGER NOT NULL, inode INTEGER NOT NULL, "
                "fingerprint TEXT NOT NULL, fingerprint_len INTEGER NOT NULL, offset INTEGER NOT NULL, "
                "line INTEGER NOT NULL, resume_offset INTEGER NOT NULL, resume_line INTEGER NOT NULL, "
                "updated REAL NOT NULL)")
    old.execute("INSERT INTO files VALUES ('/a', 1, 2, 'f', 3, 40, 4, 40, 4, 0)")
    old.commit()
    old.close()
    checkpoint = Checkpoint(db)
    try:
        assert checkpoint.load()["/a"].generation == 0
        checkpoint.commit([FilePosition("/a", FileIdentity(1, 2, "f", 3), 50, 5, 50, 5, generation=2)])
        assert checkpoint.load()["/a"].generation == 2
    finally:
        checkpoint.close()


def test_a_second_daemon_cannot_take_the_state_directory(tmp_path):
    """The state lock is exclusive: a second holder is refused, naming the first's pid; released, it is free."""
    first = StateLock(tmp_path)
    first.acquire()
    try:
        with pytest.raises(CheckpointError, match=f"pid {os.getpid()}"):
            StateLock(tmp_path).acquire()
    finally:
        first.release()
    again = StateLock(tmp_path)
    again.acquire()
    again.release()


def test_the_state_directory_stays_taken_when_its_lock_file_is_deleted_or_reached_by_a_link(tmp_path):
    """The lock is the folder's own: with daemon.lock unlinked under the holder (a tmp cleaner), or the folder
    reached through a symlink, a second holder is refused all the same, naming the first's pid (the kernel's
    table of locks says it when the file that held it is gone)."""
    state = tmp_path / "state"
    first = StateLock(state)
    first.acquire()
    try:
        (state / StateLock.NAME).unlink()
        with pytest.raises(CheckpointError, match=f"pid {os.getpid()}"):
            StateLock(state).acquire()
        (tmp_path / "alias").symlink_to(state, target_is_directory=True)
        with pytest.raises(CheckpointError, match=f"pid {os.getpid()}"):
            StateLock(tmp_path / "alias").acquire()
    finally:
        first.release()
    again = StateLock(state)
    again.acquire()
    again.release()
