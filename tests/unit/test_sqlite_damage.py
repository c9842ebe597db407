"""The daemon's checkpoint and a replay's ledger judge damage by one rule (base/sqlitestore.py): each real store,
written with rows and then truncated, given a garbage header, replaced by a database of another schema or by a
file that is no database, is judged damaged alike (the checkpoint refuses it, or sets it aside and starts empty;
the ledger is rebuilt empty); a database another program holds locked is damage to neither."""

from __future__ import annotations

import logging
import os
import sqlite3
from pathlib import Path

import pytest

from copilot_otel.replay.ledger import Ledger, LedgerBusy
from copilot_otel.source.identity import FileIdentity
from copilot_otel.state.checkpoint import Checkpoint, CheckpointError, FilePosition

ROWS = 300  # enough rows to span many pages: a cut in the middle of the file cuts one


def _checkpoint(folder: Path) -> Path:
    path = folder / "checkpoint.sqlite"
    store = Checkpoint(path)
    store.commit([FilePosition(f"/logs/{n}/events.jsonl" * 8, FileIdentity(2049, n, "0123456789abcdef", 256, "e"),
                               100, 1, 100, 1) for n in range(ROWS)])
    store.close()
    return path


def _ledger(folder: Path) -> Path:
    path = folder / "ledger.sqlite"
    store = Ledger(path)
    store.record([(f"/logs/{n}/events.jsonl" * 8, "crc32:100:0badcafe", 5, False) for n in range(ROWS)])
    store.close()
    return path


STORES = {"checkpoint": (_checkpoint, "files"), "ledger": (_ledger, "logs")}


def _truncated(path: Path, _table: str) -> None:
    os.truncate(path, path.stat().st_size // 2 + 100)


def _garbage_header(path: Path, _table: str) -> None:
    with open(path, "r+b") as handle:
        handle.write(b"\xff" * 100)  # SQLite's 100-byte header: magic string, page size, counts


def _another_schema(path: Path, table: str) -> None:
    path.unlink()
    with sqlite3.connect(path) as db:  # the store's table name, none of its columns
        db.execute(f"CREATE TABLE {table} (name TEXT, size INTEGER)")
        db.execute(f"INSERT INTO {table} VALUES ('x', 1)")
    db.close()


def _not_a_database(path: Path, _table: str) -> None:
    path.write_bytes(b"this is no database\n" * 300)


DAMAGE = [_truncated, _garbage_header, _another_schema, _not_a_database]


def _damaged_store(tmp_path: Path, store: str, damage) -> Path:
    make, table = STORES[store]
    path = make(tmp_path)
    for suffix in ("-wal", "-shm"):  # closed cleanly: whatever is left of them is not the damage under test
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    damage(path, table)
    return path


@pytest.mark.parametrize("damage", DAMAGE, ids=lambda f: f.__name__.strip("_"))
def test_the_checkpoint_refuses_each_damaged_file_as_it_is_then_sets_it_aside(tmp_path, damage, caplog):
    """The daemon reading from the start: one CheckpointError saying it is damaged and what to do, the file left
    byte for byte as it was (another schema included: nothing is added to it); with start_afresh it is moved aside
    whole with one warning and the checkpoint starts empty."""
    path = _damaged_store(tmp_path, "checkpoint", damage)
    before = path.read_bytes()
    with pytest.raises(CheckpointError, match=r"is damaged .* move it aside"):
        Checkpoint(path, start_afresh=False)
    assert path.read_bytes() == before and not list(tmp_path.glob("*.corrupt-*"))
    caplog.set_level(logging.WARNING, logger="copilot_otel.state.checkpoint")
    store = Checkpoint(path)
    try:
        assert store.load() == {}
    finally:
        store.close()
    (moved,) = tmp_path.glob("checkpoint.sqlite.corrupt-*")
    assert moved.read_bytes() == before and str(moved) in caplog.text


@pytest.mark.parametrize("damage", DAMAGE, ids=lambda f: f.__name__.strip("_"))
def test_the_ledger_rebuilds_each_damaged_file_empty(tmp_path, damage, caplog):
    """A replay's ledger damaged the same way: one warning naming it, rebuilt empty, and it records again."""
    path = _damaged_store(tmp_path, "ledger", damage)
    caplog.set_level(logging.WARNING, logger="copilot_otel.replay.ledger")
    store = Ledger(path)
    try:
        assert store.load() == {}
        store.record([("/logs/a/events.jsonl", "crc32:1:00000000", 1, True)])
        assert set(store.load()) == {"/logs/a/events.jsonl"}
    finally:
        store.close()
    (warning,) = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert str(path) in warning and "is damaged" in warning


@pytest.mark.parametrize("store", sorted(STORES))
def test_a_locked_database_is_damage_to_neither(tmp_path, store):
    """A whole store another program holds locked: an error of the moment for both (CheckpointError, LedgerBusy),
    never judged damage; the file stays where it is, whole."""
    make, _table = STORES[store]
    path = make(tmp_path)
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("PRAGMA locking_mode=EXCLUSIVE")
    holder.execute("BEGIN EXCLUSIVE")
    try:
        with pytest.raises(CheckpointError if store == "checkpoint" else LedgerBusy, match="locked"):
            Checkpoint(path, busy_timeout=0.1) if store == "checkpoint" else Ledger(path)
    finally:
        holder.close()
    assert not list(tmp_path.glob("*.corrupt-*"))
    reopened = Checkpoint(path) if store == "checkpoint" else Ledger(path)
    try:
        assert len(reopened.load()) == ROWS
    finally:
        reopened.close()
