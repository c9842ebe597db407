"""identity.py and its users: a log known by its first event and a CRC-32 of what was read, so that a copy
moved over it, a renamed folder or an edit is told from another log, live and after a restart."""

from __future__ import annotations

import os
import shutil
import sqlite3
import zlib
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st
from msgspec.structs import replace

from copilot_otel.config import DEFAULT_MAX_LINE_BYTES, ModelOptions
from copilot_otel.daemon.follow import Follower
from copilot_otel.daemon.moves import Moves
from copilot_otel.model.pipeline import Outputs
from copilot_otel.model.records import salted
from copilot_otel.source.identity import EDITED, REPLACED, TRUNCATED, crc32, first_event_id, prefix_crc
from copilot_otel.source.tail import FileTail
from copilot_otel.state.checkpoint import Checkpoint
from copilot_otel.vocab import Metric
from tests.support.events import SessionLog
from tests.support.files import append


def session(session_id: str = "s-1", answers: int = 2) -> SessionLog:
    log = SessionLog(session_id)
    log.start()
    log.user()
    for _ in range(answers):
        log.answer()
    return log


def read_to_end(path: Path) -> FileTail:
    tail = FileTail(path)
    assert tail.read().restarted is None
    return tail


def moved_over(path: Path, data: bytes) -> None:
    """``data`` written to a new file, moved over ``path`` (a new inode: what rsync, a restore or sed -i do)."""
    fresh = path.with_name(".fresh")
    fresh.write_bytes(data)
    os.replace(fresh, path)


# ------------------------------------------------------------------------ the pure parts

def test_prefix_crc_is_the_crc_of_the_first_bytes_and_counts_their_lines(tmp_path):
    """prefix_crc: the CRC-32 of bytes [0, end) and of [0, at), and the newlines before end; None past the end."""
    data = b"".join(b"line %d\n" % n for n in range(300_000))  # more than one read chunk
    path = tmp_path / "f"
    path.write_bytes(data)
    with open(path, "rb") as handle:
        assert prefix_crc(handle, len(data), 7) == (zlib.crc32(data), zlib.crc32(data[:7]), 300_000)
        assert prefix_crc(handle, 1_500_000, 1_200_000) == (zlib.crc32(data[:1_500_000]),
                                                            zlib.crc32(data[:1_200_000]),
                                                            data[:1_500_000].count(b"\n"))
        assert prefix_crc(handle, 0) == (0, 0, 0)
        assert prefix_crc(handle, len(data) + 1) is None


def test_first_event_id_names_a_log_by_its_first_line():
    """The id of the first line's event; '' for a first line incomplete, not JSON or without an id."""
    log = session()
    assert first_event_id(log.jsonl()) == log.entries[0]["id"]
    assert first_event_id(log.lines()[0]) == ""  # no newline yet
    assert first_event_id(b"not json\n" + log.jsonl()) == ""
    assert first_event_id(b'{"type":"x"}\n') == ""


# ------------------------------------------------------------------------ FileTail's verdicts

def test_a_copy_moved_over_the_log_reads_on(tmp_path):
    """The same bytes in a new file: COPIED, no line again, then what is appended."""
    log = session()
    path = tmp_path / "events.jsonl"
    path.write_bytes(log.jsonl(0, 3))
    tail = read_to_end(path)
    inode = tail.identity.inode
    moved_over(path, log.jsonl())
    result = tail.read()
    assert (result.restarted, result.copied) == (None, True)
    assert [e.id for e in result.items] == [e["id"] for e in log.entries[3:]]
    assert tail.identity.inode != inode and tail.crc == zlib.crc32(log.jsonl())


def test_an_edit_of_lines_already_read_is_told_and_read_again(tmp_path):
    """The same first event, other bytes before the position (sed -i): EDITED, read again from the start."""
    log = session()
    path = tmp_path / "events.jsonl"
    path.write_bytes(log.jsonl())
    tail = read_to_end(path)
    moved_over(path, log.jsonl().replace(b"test-model", b"best-model"))
    result = tail.read()
    assert result.restarted == EDITED
    assert [e.line for e in result.items] == list(range(1, len(log.entries) + 1))


def test_another_logs_file_is_a_replacement_and_a_cut_is_a_truncation(tmp_path):
    """Another first event in a new file: REPLACED. The same file cut back: TRUNCATED, as before."""
    path = tmp_path / "events.jsonl"
    path.write_bytes(session("a").jsonl())
    tail = read_to_end(path)
    moved_over(path, session("b").jsonl())
    assert tail.read().restarted == REPLACED
    with open(path, "r+b") as handle:
        handle.truncate(len(session("b").jsonl(0, 2)))
    assert tail.read().restarted == TRUNCATED


def test_a_restored_position_is_checked_against_the_file_whatever_its_inode(tmp_path):
    """After a restart the CRC committed with the position is checked: the same bytes in another file read on
    from the resume position; an edit (same inode or not) is EDITED; a wrong CRC is never believed."""
    log = session()
    path = tmp_path / "events.jsonl"
    path.write_bytes(log.jsonl())
    before = read_to_end(path)
    resume = len(log.jsonl(0, 2))
    st = path.stat()
    unhashed = FileTail(path)  # a position of an older checkpoint, which kept no CRC
    unhashed.resume(resume, 2, replace(before.identity, device=st.st_dev, inode=st.st_ino), end=before.offset,
                    crc=None)
    assert unhashed.read().restarted is None  # the same file: believed
    moved_over(path, log.jsonl())
    unhashed = FileTail(path)
    unhashed.resume(resume, 2, before.identity, end=before.offset, crc=None)
    assert unhashed.read().restarted == EDITED  # another file it cannot compare: nothing delivered again

    def restored() -> FileTail:
        tail = FileTail(path)
        tail.resume(resume, 2, before.identity, end=before.offset, crc=before.crc)
        return tail

    moved_over(path, log.jsonl())
    result = restored().read()
    assert result.restarted is None  # (copied, unless the new file was given the first one's freed inode)
    assert [e.line for e in result.items] == list(range(3, len(log.entries) + 1))
    with open(path, "r+b") as handle:  # in place, the same length, past the first line: only the CRC can tell
        handle.write(log.jsonl().replace(b"All done.", b"All gone."))
    assert restored().read().restarted == EDITED


def test_the_crc_follows_reads_across_an_over_long_line(tmp_path, monkeypatch):
    """Read a little at a time, through a line too long to keep, the CRC is still that of the bytes read."""
    from copilot_otel.source import tail as tail_module

    monkeypatch.setattr(tail_module, "CHUNK", 64)
    log = session()
    path = tmp_path / "events.jsonl"
    path.write_bytes(log.jsonl(0, 2) + b'{"pad":"' + b"x" * 5000)
    tail = FileTail(path, max_line_bytes=1000)
    while tail.read(max_bytes=64).more:
        pass
    append(path, b'"}\n' + log.jsonl(2))
    while tail.read(max_bytes=64).more:
        pass
    assert tail.crc == zlib.crc32(path.read_bytes()) and tail.offset == path.stat().st_size


# ------------------------------------------------------------------------ the follower and the checkpoint

def follower_of(path: Path, **kwargs) -> Follower:
    return Follower.start(path, ModelOptions(), max_line_bytes=DEFAULT_MAX_LINE_BYTES, **kwargs)


def followed(tmp_path: Path, out: Outputs | None = None) -> tuple[Path, SessionLog, Follower]:
    """A session's log written whole in its folder and read once by a follower (into ``out``)."""
    folder = tmp_path / "s-1"
    folder.mkdir()
    path = folder / "events.jsonl"
    log = session()
    path.write_bytes(log.jsonl())
    follower = follower_of(path)
    follower.read(Outputs() if out is None else out, warn=lambda *a: None)
    return path, log, follower


def test_an_edited_log_counts_and_exports_only_what_follows_what_was_delivered(tmp_path):
    """An edit that changes the token counts of lines already read: nothing of them counted or exported again;
    lines appended after are, under the ids of a new generation (the unedited log's spans, salted once): no span id
    already sent comes again, with the edited content or any other."""
    first = Outputs()
    path, log, follower = followed(tmp_path, first)
    old = len(log.entries)
    log.user("again")
    log.answer()
    edited = log.jsonl(0, old).replace(b'"inputTokens":4700', b'"inputTokens":999999')
    assert edited != log.jsonl(0, old)
    moved_over(path, edited + log.jsonl(old))
    out = Outputs()
    assert follower.read(out, warn=lambda *a: None).restarted == EDITED
    assert sum(out.events.values()) == len(log.entries) - old
    assert sum(u.value for u in out.metrics if u.metric is Metric.TOKENS) == sum(
        u.value for u in first.metrics if u.metric is Metric.TOKENS) / 2  # one answer of two, unedited
    reference = tmp_path / "clean" / "s-1" / "events.jsonl"
    reference.parent.mkdir(parents=True)
    reference.write_bytes(log.jsonl())
    clean = follower_of(reference)
    every = Outputs()
    clean.read(every, warn=lambda *a: None)
    sent = {s.span_id for s in first.spans}
    assert follower.generation == 1
    assert {s.span_id for s in out.spans} == {salted(s, 1).span_id for s in every.spans if s.span_id not in sent}
    assert not sent & {s.span_id for s in out.spans}


def test_a_new_generations_row_is_committed_first_and_a_rewrite_after_it_is_yet_another(tmp_path):
    """A rewrite found gives a row to commit before the new generation's spans are queued (read again from the
    first line, the floor kept, the bytes read so far checked); a stale position queued before it cannot take
    the row back to the old generation. A daemon killed then, whose log is rewritten again while it is stopped,
    restarts from that row and finds the second rewrite: generation 2, never generation 1 again."""
    path, log, follower = followed(tmp_path)
    stale = follower.marker()
    checkpoint = Checkpoint(tmp_path / "state" / "checkpoint.sqlite")
    moved_over(path, log.jsonl().replace(b'"inputTokens":4700', b'"inputTokens":4701'))
    assert follower.read(Outputs(), warn=lambda *a: None).restarted == EDITED
    row = follower.commit_now
    assert row is not None
    assert (row.generation, row.resume_offset, row.line, row.offset) == (1, 0, len(log.entries), len(log.jsonl()))
    checkpoint.commit([row])
    checkpoint.commit([stale])  # queued before the rewrite was found, committed after its row
    restored = checkpoint.load()[str(path)]
    assert (restored.generation, restored.offset) == (1, len(log.jsonl()))
    moved_over(path, log.jsonl().replace(b'"inputTokens":4700', b'"inputTokens":4702'))
    again = follower_of(path, restored=restored)
    assert again.read(Outputs(), warn=lambda *a: None).restarted == EDITED
    assert again.generation == 2
    checkpoint.close()


def test_a_moved_log_keeps_its_session_and_its_checkpoint_row_moves(tmp_path):
    """A follower moved to a renamed folder keeps its session id (its span ids); its position, committed at
    the new path, takes the old row's place; a restart there resumes under the first session id."""
    path = tmp_path / "first" / "events.jsonl"
    path.parent.mkdir()
    log = session("first")
    path.write_bytes(log.jsonl())
    follower = follower_of(path)
    follower.read(Outputs(), warn=lambda *a: None)
    checkpoint = Checkpoint(tmp_path / "state" / "checkpoint.sqlite")
    checkpoint.commit([follower.marker()])
    new = tmp_path / "renamed" / "events.jsonl"
    shutil.move(path.parent, new.parent)
    follower.move(new)
    marker = follower.marker()
    assert (follower.session_id, marker.session_id, marker.moved_from) == ("first", "first", (str(path),))
    checkpoint.commit([marker])
    rows = checkpoint.load()
    assert set(rows) == {str(new)} and rows[str(new)].session_id == "first"
    resumed = follower_of(new, restored=rows[str(new)])
    assert resumed.session_id == "first"
    checkpoint.close()


def test_moves_find_a_log_by_its_first_event_only_where_its_old_path_is_gone(tmp_path):
    """Moves: a new path holding a followed log's first event is its move only if the old path is gone; a
    checkpoint row of a gone path is taken up once."""
    old, new = tmp_path / "a" / "events.jsonl", tmp_path / "b" / "events.jsonl"
    for path in (old, new):
        path.parent.mkdir()
        path.write_bytes(session("a").jsonl())
    moves = Moves({})
    moves.note("a-e001", old)
    followers = {old: "the follower at a"}
    assert moves.origin(new, followers, within=None) == ("a-e001", None, None)  # a copy: a still exists
    shutil.rmtree(old.parent)
    assert moves.origin(new, followers, within=None) == ("a-e001", "the follower at a", None)
    checkpoint = Checkpoint(tmp_path / "checkpoint.sqlite")
    follower = follower_of(new)
    follower.read(Outputs(), warn=lambda *a: None)
    checkpoint.commit([replace(follower.marker(), path=str(old))])  # committed while the log was at a
    restored = checkpoint.load()
    later = Moves(restored)
    assert later.origin(new, {}, within=None)[2].path == str(old)
    assert later.origin(new, {}, within=None)[2] is None  # taken up once
    checkpoint.close()


def test_a_checkpoint_of_an_older_version_gains_the_new_columns(tmp_path):
    """A checkpoint written before identities were kept opens, keeps its rows (no CRC: believed), and
    stores CRC, first event and session id from then on."""
    db = tmp_path / "checkpoint.sqlite"
    old = sqlite3.connect(db)
    old.execute("CREATE TABLE files (path TEXT PRIMARY KEY, device INTEGER NOT NULL, inode INTEGER NOT NULL, "
                "fingerprint TEXT NOT NULL, fingerprint_len INTEGER NOT NULL, offset INTEGER NOT NULL, "
                "line INTEGER NOT NULL, resume_offset INTEGER NOT NULL, resume_line INTEGER NOT NULL, "
                "updated REAL NOT NULL)")
    old.execute("INSERT INTO files VALUES ('/a', 1, 2, 'ff', 256, 100, 3, 50, 2, 0)")
    old.commit()
    old.close()
    checkpoint = Checkpoint(db)
    (row,) = checkpoint.load().values()
    assert (row.offset, row.crc, row.identity.first_id, row.session_id, row.generation) == (100, None, "", "", 0)
    checkpoint.commit([replace(row, crc=7, session_id="s", identity=replace(row.identity, first_id="e1"))])
    (row,) = checkpoint.load().values()
    assert (row.crc, row.identity.first_id, row.session_id) == (7, "e1", "s")
    checkpoint.close()


def test_an_older_shorter_copy_put_back_is_a_new_generation(tmp_path):
    """The same log with fewer lines than were read, in another file (an older copy restored): which of its
    lines were delivered cannot be told, so it is read as a truncation is, a new generation."""
    path, log, follower = followed(tmp_path)
    moved_over(path, log.jsonl(0, 3))
    out = Outputs()
    result = follower.read(out, warn=lambda *a: None)
    assert (result.restarted, result.lines, follower.generation) == (EDITED, 3, 1)
    assert out.events["session.start"] == 1


@given(st.lists(st.binary(max_size=3000), max_size=6), st.integers(0, 2**32 - 1))
@settings(max_examples=300, deadline=None)
def test_the_crc_of_a_log_is_zlib_s_crc_32(chunks, start):
    """The content identities written by earlier versions (zlib's CRC-32) are the ones read now: zlib-ng's CRC of
    the same bytes, continued chunk by chunk from any value and over memoryviews, is zlib's."""
    ours, theirs = start, start
    for chunk in chunks:
        ours, theirs = crc32(memoryview(chunk), ours), zlib.crc32(chunk, theirs)
    assert ours == theirs
