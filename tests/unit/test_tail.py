"""tail.py: following one file (appends, partial lines, truncation, replacement, deletion) in tmp_path."""

from __future__ import annotations

import os

import orjson

from copilot_otel.decode.events import DecodeError, Event
from copilot_otel.decode.lines import TOO_LONG
from copilot_otel.source import tail as tail_module
from copilot_otel.source.tail import FileTail, read_all
from tests.support.events import SessionLog
from tests.support.files import append


def session(n_answers: int = 1, session_id: str = "session-1") -> SessionLog:
    log = SessionLog(session_id)
    log.start()
    log.user()
    for _ in range(n_answers):
        log.answer()
    return log


def ids(items) -> list[str]:
    return [item.id for item in items]


def tailing(tmp_path, log: SessionLog):
    """The log written to a file that a FileTail has read to its end."""
    path = tmp_path / "events.jsonl"
    path.write_bytes(log.jsonl())
    tail = FileTail(path)
    tail.read()
    return path, tail


def test_appends_are_read_once_each(tmp_path):
    """Each read returns the lines appended since the last one, with their offsets and line numbers."""
    log = session(2)
    lines = log.lines()
    path = tmp_path / "events.jsonl"
    path.write_bytes(log.jsonl(0, 4))
    tail = FileTail(path)
    first = tail.read()
    append(path, log.jsonl(4))
    second = tail.read()
    assert ids(first.items) + ids(second.items) == [e["id"] for e in log.entries]
    assert (first.restarted, second.restarted) == (None, None)
    assert (second.items[0].offset, second.items[0].line) == (sum(len(line) + 1 for line in lines[:4]), 5)
    assert (tail.offset, tail.line) == (path.stat().st_size, len(lines))
    assert tail.read().items == []


def test_a_partial_line_waits_for_its_newline(tmp_path):
    """A line without its newline is not read; once completed it is read whole, once."""
    log = session()
    lines = log.lines()
    path = tmp_path / "events.jsonl"
    path.write_bytes(lines[0] + b"\n" + lines[1][:25])
    tail = FileTail(path)
    assert ids(tail.read().items) == [log.entries[0]["id"]]
    assert tail.offset == len(lines[0]) + 1
    assert tail.read().items == []
    append(path, lines[1][25:] + b"\n")
    (event,) = tail.read().items
    assert (event.id, event.offset, event.line) == (log.entries[1]["id"], len(lines[0]) + 1, 2)


def test_blank_lines_and_crlf(tmp_path):
    """Blank lines are skipped but counted in line numbers; a CRLF ending is not part of the event."""
    log = session()
    a, b = log.lines()[:2]
    path = tmp_path / "events.jsonl"
    path.write_bytes(b"\n" + a + b"\r\n\r\n" + b + b"\n")
    items = FileTail(path).read().items
    assert [(type(i), i.line) for i in items] == [(Event, 2), (Event, 4)]
    assert ids(items) == [log.entries[0]["id"], log.entries[1]["id"]]


def test_truncated_to_nothing_then_written(tmp_path):
    """A file truncated and written again is read again from its start, as a new generation."""
    first, second = session(session_id="first"), session(session_id="second")
    path, tail = tailing(tmp_path, first)
    with open(path, "r+b") as handle:
        handle.truncate(0)
    append(path, second.jsonl())
    result = tail.read()
    assert result.restarted == "truncated"
    assert ids(result.items) == [e["id"] for e in second.entries]
    assert result.items[0].offset == 0 and result.items[0].line == 1


def test_truncated_to_its_own_first_half(tmp_path):
    """A file cut back to a prefix of itself (same first bytes, shorter than where we were) restarts."""
    log = session(2)
    path, tail = tailing(tmp_path, log)
    half = log.jsonl(0, 3)
    with open(path, "r+b") as handle:
        handle.truncate(len(half))
    result = tail.read()
    assert result.restarted == "truncated"
    assert ids(result.items) == [e["id"] for e in log.entries[:3]]


def test_rewritten_in_place_with_other_first_bytes(tmp_path):
    """The same inode, longer than before, but other first bytes: another log, read from the start."""
    first, second = session(session_id="a"), session(3, session_id="other-session")
    path, tail = tailing(tmp_path, first)
    with open(path, "r+b") as handle:
        handle.write(second.jsonl())
    result = tail.read()
    assert result.restarted == "truncated"
    assert ids(result.items) == [e["id"] for e in second.entries]


def test_replaced_by_a_new_file(tmp_path):
    """A new file (new inode) under the same name is read from its start."""
    first, second = session(session_id="a"), session(session_id="b")
    path, tail = tailing(tmp_path, first)
    fresh = tmp_path / "events.jsonl.new"
    fresh.write_bytes(second.jsonl())
    os.replace(fresh, path)
    result = tail.read()
    assert result.restarted == "replaced"
    assert ids(result.items) == [e["id"] for e in second.entries]


def test_deleted(tmp_path):
    """A deleted file says it is gone; nothing is read and nothing raises."""
    path = tmp_path / "events.jsonl"
    path.write_bytes(session().jsonl())
    tail = FileTail(path)
    tail.read()
    path.unlink()
    result = tail.read()
    assert (result.gone, result.items, result.error) == (True, [], None)


def test_unreadable(tmp_path):
    """A path that exists but cannot be read as a file reports the error, not gone."""
    path = tmp_path / "events.jsonl"
    path.mkdir()
    result = FileTail(path).read()
    assert (result.gone, result.items) == (False, [])
    assert result.error


def test_a_line_over_the_limit_is_skipped(tmp_path):
    """An oversized line is one too_long error with its line number; the lines around it are read."""
    log = session()
    lines = log.lines()
    path = tmp_path / "events.jsonl"
    big = b'{"type":"session.info","pad":"' + b"x" * 5000 + b'"}'
    path.write_bytes(lines[0] + b"\n" + big + b"\n" + lines[1] + b"\n")
    items = FileTail(path, max_line_bytes=1024).read().items
    assert [type(i) for i in items] == [Event, DecodeError, Event]
    assert (items[1].reason, items[1].line, items[2].line) == (TOO_LONG, 2, 3)


def test_a_line_longer_than_a_read_chunk_is_skipped_without_holding_it(tmp_path, monkeypatch):
    """Past the limit a line is skipped chunk by chunk, its size still reported; the next line is read."""
    monkeypatch.setattr(tail_module, "CHUNK", 256)
    log = session()
    lines = log.lines()
    path = tmp_path / "events.jsonl"
    big = b"y" * 3000
    path.write_bytes(big + b"\n" + lines[0] + b"\n")
    items = FileTail(path, max_line_bytes=1024).read().items
    assert (items[0].reason, f"{len(big)} bytes" in items[0].detail) == (TOO_LONG, True)
    assert (items[1].id, items[1].offset, items[1].line) == (log.entries[0]["id"], len(big) + 1, 2)


def test_a_read_stops_between_lines_after_about_max_bytes(tmp_path):
    """A backlog of several chunks is read in parts of about max_bytes, each ending at a line's end."""
    log = SessionLog("session-1")
    log.start()
    while len(log.jsonl()) < 4 * tail_module.CHUNK:
        log.add("session.info", {"pad": "x" * 5000})
    path = tmp_path / "events.jsonl"
    path.write_bytes(log.jsonl())
    tail = FileTail(path)
    parts = []
    while items := tail.read(max_bytes=tail_module.CHUNK).items:
        parts.append(items)
    assert [i.id for part in parts for i in part] == [e["id"] for e in log.entries]
    assert len(parts) >= 2
    assert max(sum(len(orjson.dumps(e.data)) for e in part) for part in parts) < 2 * tail_module.CHUNK


def test_a_read_that_stops_at_its_budget_says_there_is_more(tmp_path):
    """A bounded read reports ``more`` while a backlog remains; the read that reaches the end does not."""
    log = SessionLog("session-1")
    log.start()
    while len(log.jsonl()) < 3 * tail_module.CHUNK:
        log.add("session.info", {"pad": "x" * 5000})
    path = tmp_path / "events.jsonl"
    path.write_bytes(log.jsonl())
    tail = FileTail(path)
    flags = []
    while True:
        result = tail.read(max_bytes=tail_module.CHUNK)
        flags.append(result.more)
        if not result.more:
            break
    assert flags[0] and not flags[-1] and len(flags) >= 3
    assert tail.offset == path.stat().st_size


def test_an_unfinished_over_long_line_is_not_scanned_again(tmp_path, monkeypatch):
    """A too-long line still being written is scanned once: later reads go on from where the last stopped."""
    monkeypatch.setattr(tail_module, "CHUNK", 1024)
    path = tmp_path / "events.jsonl"
    path.write_bytes(b"z" * 8192)
    tail = FileTail(path, max_line_bytes=2048)
    assert tail.read(max_bytes=4096).items == []
    assert (tail.offset, tail.scanned) == (0, 4096)
    assert tail.read(max_bytes=4096).items == []
    assert tail.scanned == 8192
    with open(path, "r+b") as handle:  # a newline where the scan has been: seen only by a read from the start
        handle.seek(1000)
        handle.write(b"\n")
    append(path, b"z" * 100 + b"\n" + session().jsonl())
    items = tail.read().items
    assert (items[0].reason, items[0].offset, f"{8192 + 100} bytes" in items[0].detail) == (TOO_LONG, 0, True)
    assert [i.id for i in items[1:]] == [e["id"] for e in session().entries]


def test_a_sparse_over_long_line_is_skipped_without_reading_its_holes(tmp_path):
    """A line that is a 1 GiB hole costs no read of the hole: the scan jumps to the data after it."""
    path = tmp_path / "events.jsonl"
    with open(path, "wb") as handle:
        handle.write(b"x" * 4096)
        handle.seek(1 << 30)
        handle.write(b"\n" + session().jsonl())
    tail = FileTail(path, max_line_bytes=2048)
    first = tail.read(max_bytes=8192)  # enters the long line
    items = first.items
    while first.more:
        first = tail.read(max_bytes=8192)
        items += first.items
    assert items[0].reason == TOO_LONG and [i.id for i in items[1:]] == [e["id"] for e in session().entries]


def test_a_fifo_is_refused_without_blocking(tmp_path):
    """A FIFO named events.jsonl (no writer) is an error at once, not a read that waits forever."""
    path = tmp_path / "events.jsonl"
    os.mkfifo(path)
    result = FileTail(path).read()
    assert (result.gone, result.items) == (False, [])
    assert "not a regular file" in result.error


def test_a_symlink_is_refused_inside_a_watched_tree(tmp_path):
    """With a watched tree, an events.jsonl that became a symlink is refused, even to a file inside the tree."""
    tree = tmp_path / "tree"
    tree.mkdir()
    real = tree / "real.jsonl"
    real.write_bytes(session().jsonl())
    link = tree / "events.jsonl"
    link.symlink_to(real)
    assert "symbolic link" in FileTail(link, within=tree).read().error
    assert len(FileTail(link).read().items) == len(session().entries)  # replay reads what it is given


def test_a_folder_swapped_for_a_link_out_of_the_tree_is_refused_on_the_next_open(tmp_path):
    """Containment is checked on every open: a session folder later replaced by a symlink out of the tree is refused."""
    tree, outside = tmp_path / "tree", tmp_path / "outside"
    (tree / "s").mkdir(parents=True)
    outside.mkdir()
    path = tree / "s" / "events.jsonl"
    path.write_bytes(session().jsonl())
    (outside / "events.jsonl").write_bytes(session(3, session_id="victim").jsonl())
    tail = FileTail(path, within=tree.resolve())
    assert tail.read().items
    (tree / "s").rename(tree / "s-old")
    (tree / "s").symlink_to(outside, target_is_directory=True)
    result = tail.read()
    assert result.items == [] and "leads outside" in result.error


def test_resume_at_a_saved_position(tmp_path):
    """A tail made with a saved offset, line and identity reads on from there, numbering on."""
    log = session(2)
    path = tmp_path / "events.jsonl"
    path.write_bytes(log.jsonl(0, 3))
    first = FileTail(path)
    first.read()
    append(path, log.jsonl(3))
    resumed = FileTail(path, offset=first.offset, line=first.line, identity=first.identity)
    result = resumed.read()
    assert result.restarted is None
    assert result.items[0].line == first.line + 1 == 4
    assert ids(result.items) == [e["id"] for e in log.entries[3:]]


def test_read_all_leaves_out_a_partial_last_line(tmp_path):
    """read_all is every complete line of a file."""
    log = session()
    path = tmp_path / "events.jsonl"
    path.write_bytes(log.jsonl() + b'{"type":"session.info"')
    assert ids(read_all(path)) == [e["id"] for e in log.entries]


def test_the_window_before_the_position_is_what_was_read_and_finds_a_rewrite_in_it(tmp_path):
    """Reads in several budgets over lines up to 300 KB (the first a short one, as a real session.start) leave
    the CRC of the 64 KiB before the position as the file holds them; appends (whole lines and half ones) pass
    the check, and a line in that window written over in place, the file not shorter, is found (EDITED) at the
    next read."""
    import random
    import zlib

    from copilot_otel.source.identity import EDITED, WINDOW_BYTES
    from copilot_otel.source.tail import CHUNK

    rng = random.Random(3)
    pads = [10] + [rng.randrange(10, 300_000) for _ in range(39)]
    lines = [orjson.dumps({"type": "x", "id": f"e{i}", "timestamp": "2026-01-01T00:00:00.000Z",
                           "data": {"pad": "a" * pad}}) + b"\n" for i, pad in enumerate(pads)]
    path = tmp_path / "events.jsonl"
    path.write_bytes(b"".join(lines[:30]) + lines[30][:100])
    tail = FileTail(path, max_line_bytes=1 << 20)
    while tail.read(max_bytes=3 * CHUNK).more:
        pass
    data = path.read_bytes()
    start, end, crc = tail.window
    assert (end, start, crc) == (tail.offset, tail.offset - WINDOW_BYTES, zlib.crc32(data[start:end]))
    append(path, lines[30][100:] + b"".join(lines[31:]))
    assert tail.read(max_bytes=1 << 30).restarted is None and tail.offset == path.stat().st_size
    with open(path, "r+b") as handle:  # the end of the last line changed in place: its length, the file's, kept
        handle.seek(tail.offset - 30)
        handle.write(b"b" * 26 + lines[-1][-4:])
    assert tail.read().restarted == EDITED
