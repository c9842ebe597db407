"""Stateful property test of FileTail against a real file that is appended to, split, truncated,
replaced, deleted and re-read after a restart from its checkpointed position.

A reference model keeps the bytes the file should hold and which of its complete lines have been
handed out. After every read, what the tail delivered must be exactly the next complete lines of
the current file generation (a generation starts when the file is created, truncated or
replaced), in order, each once, with its own byte offset and line number; a partial line is
never delivered before its newline. A restart builds a new tail from what the daemon's
checkpoint stores (identity, offset, line): lines delivered before that commit are never
delivered again, and nothing after it is lost.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import orjson
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, precondition, rule

from copilot_otel.decode.events import DecodeError, Event
from copilot_otel.decode.lines import TOO_LONG
from copilot_otel.source.tail import CHUNK, FileTail

LIMIT = 512  # the tail's max_line_bytes: small, so over-long lines are cheap to write
BLANKS = (b"\n", b"\r\n", b"  \n", b"\t \r\n")
ENDINGS = st.sampled_from([b"\n", b"\r\n"])


def _token(item: Event | DecodeError) -> tuple[str, int, int]:
    """What identifies one delivered line: its event id (or rejection reason), offset and line number."""
    if isinstance(item, Event):
        return item.id, item.offset, item.line
    return item.reason, item.offset, item.line


def expected_tokens(content: bytes) -> tuple[list[tuple[str, int, int]], int, int]:
    """The tokens of every complete non-blank line of ``content``, the end of the last complete
    line, and the number of complete lines (blank ones included)."""
    tokens = []
    offset = 0
    number = 0
    for piece in content.split(b"\n")[:-1]:  # the last element is a partial line (or b"")
        number += 1
        raw = piece[:-1] if piece.endswith(b"\r") else piece
        if raw.strip():
            tokens.append((TOO_LONG, offset, number) if len(raw) > LIMIT else (json.loads(raw)["id"], offset, number))
        offset += len(piece) + 1
    return tokens, offset, number


class TailMachine(RuleBasedStateMachine):
    """A real file under a temp dir, a FileTail following it, and the model of both."""

    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="tail-props-"))
        self.path = self.dir / "events.jsonl"
        self.counter = 0
        self.gen = 0  # the model's file generation
        self.exists = False
        self.content = b""  # what the file holds
        self.pending = b""  # the rest of a line begun by a partial write
        self.tail = FileTail(self.path, max_line_bytes=LIMIT)
        self.tail_gen: int | None = None  # the generation the tail last read
        self.delivered: list[tuple[str, int, int]] = []  # tokens handed out from generation tail_gen
        self.committed: tuple | None = None  # (offset, line, identity, crc, gen, delivered) as checkpointed

    def teardown(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)

    # ------------------------------------------------------------ building lines

    def _line(self, ending: bytes, oversized: bool = False) -> bytes:
        self.counter += 1
        data = {"n": self.counter, "s": "é✓"}  # multi-byte UTF-8, so splits can fall inside a character
        if oversized:
            data["pad"] = "x" * (LIMIT + 1)
        event = {"type": "t", "id": f"e{self.counter}", "timestamp": "2026-01-01T00:00:00.000Z", "data": data}
        return orjson.dumps(event) + ending

    def _lines(self, endings: list[bytes]) -> bytes:
        return b"".join(self._line(ending) for ending in endings)

    def _append(self, data: bytes) -> None:
        with open(self.path, "ab") as handle:
            handle.write(data)
        self.content += data

    def _new_generation(self, content: bytes) -> None:
        self.gen += 1
        self.exists = True
        self.content = content
        self.pending = b""

    # ------------------------------------------------------------ rules that write

    @initialize(endings=st.lists(ENDINGS, max_size=3))
    def create(self, endings):
        content = self._lines(endings)
        self.path.write_bytes(content)
        self._new_generation(content)

    @precondition(lambda self: self.exists and not self.pending)
    @rule(endings=st.lists(ENDINGS, min_size=1, max_size=3))
    def append_lines(self, endings):
        self._append(self._lines(endings))

    @precondition(lambda self: self.exists and not self.pending)
    @rule(blank=st.sampled_from(BLANKS))
    def append_blank(self, blank):
        self._append(blank)

    @precondition(lambda self: self.exists and not self.pending)
    @rule(ending=ENDINGS)
    def append_oversized(self, ending):
        self._append(self._line(ending, oversized=True))

    @precondition(lambda self: self.exists and not self.pending)
    @rule(ending=ENDINGS, oversized=st.booleans(), cut=st.floats(0, 1, exclude_min=True, exclude_max=True))
    def begin_partial(self, ending, oversized, cut):
        line = self._line(ending, oversized)
        at = min(max(1, int(len(line) * cut)), len(line) - 1)
        self._append(line[:at])
        self.pending = line[at:]

    @precondition(lambda self: self.exists and len(self.pending) > 1)
    @rule(cut=st.floats(0, 1, exclude_min=True, exclude_max=True))
    def continue_partial(self, cut):
        at = min(max(1, int(len(self.pending) * cut)), len(self.pending) - 1)
        piece, self.pending = self.pending[:at], self.pending[at:]
        self._append(piece)

    @precondition(lambda self: self.exists and self.pending)
    @rule()
    def finish_partial(self):
        piece, self.pending = self.pending, b""
        self._append(piece)

    @precondition(lambda self: self.exists)
    @rule(endings=st.lists(ENDINGS, max_size=3))
    def truncate_and_write(self, endings):
        content = self._lines(endings)
        with open(self.path, "r+b") as handle:
            handle.truncate(0)
            handle.write(content)
        self._new_generation(content)

    @precondition(lambda self: self.exists)
    @rule(endings=st.lists(ENDINGS, max_size=3))
    def replace(self, endings):
        content = self._lines(endings)
        temp = self.dir / "events.jsonl.tmp"
        temp.write_bytes(content)
        os.replace(temp, self.path)
        self._new_generation(content)

    @precondition(lambda self: self.exists)
    @rule()
    def delete(self):
        self.path.unlink()
        self.exists = False
        self.content = b""
        self.pending = b""

    @precondition(lambda self: not self.exists)
    @rule(endings=st.lists(ENDINGS, max_size=3))
    def recreate(self, endings):
        content = self._lines(endings)
        self.path.write_bytes(content)
        self._new_generation(content)

    # ------------------------------------------------------------ rules that read

    @rule(small=st.booleans())
    def read(self, small):
        changed = self.tail_gen != self.gen
        result = self.tail.read(max_bytes=1) if small else self.tail.read()
        if not self.exists:
            assert result.gone and result.items == []
            return
        assert not result.gone
        if not changed:
            assert result.restarted is None, "restarted although the file is the same generation"
        else:
            self.tail_gen, self.delivered = self.gen, []
        expected, end, lines = expected_tokens(self.content)
        got = [_token(item) for item in result.items]
        so_far = self.delivered + got
        # Exactly once, in order, with the right positions; partial lines are not in `expected`.
        assert so_far == expected[: len(so_far)], (so_far, expected)
        if small:
            assert got or self.delivered == expected, "a bounded read made no progress"
        else:
            assert so_far == expected
            assert (self.tail.offset, self.tail.line) == (end, lines)
        self.delivered = so_far

    @rule()
    def commit(self):
        if self.tail.identity is None:
            return  # the daemon has nothing to commit before the first read (daemon._mark)
        self.committed = (self.tail.offset, self.tail.line, self.tail.identity, self.tail.crc, self.tail_gen,
                          list(self.delivered))

    @rule()
    def restart(self):
        """A new process: a fresh FileTail from the checkpoint (as daemon._session_for restores it)."""
        self.tail = FileTail(self.path, max_line_bytes=LIMIT)
        if self.committed is None:
            self.tail_gen, self.delivered = None, []
            return
        offset, line, identity, crc, gen, delivered = self.committed
        self.tail.resume(offset, line, identity, end=offset, crc=crc)
        self.tail_gen, self.delivered = gen, list(delivered)


TailMachine.TestCase.settings = settings(
    max_examples=100, stateful_step_count=30, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
test_file_tail_delivers_each_line_once = TailMachine.TestCase


def test_lines_straddling_the_read_chunk_are_reassembled(tmp_path):
    """A line that crosses the 1 MiB read chunk, and one too long that crosses it, come out whole."""
    path = tmp_path / "events.jsonl"
    first = orjson.dumps({"type": "t", "id": "a", "timestamp": "2026-01-01T00:00:00.000Z",
                          "data": {"pad": "x" * (CHUNK - 40)}}) + b"\n"
    second = orjson.dumps({"type": "t", "id": "b", "timestamp": "2026-01-01T00:00:00.000Z",
                           "data": {"pad": "y" * 100}}) + b"\r\n"
    big = orjson.dumps({"type": "t", "id": "c", "timestamp": "2026-01-01T00:00:00.000Z",
                        "data": {"pad": "z" * (2 * CHUNK)}}) + b"\n"
    path.write_bytes(first + second + big + b"{partial")
    tail = FileTail(path, max_line_bytes=CHUNK + 1000)
    items = tail.read().items
    assert [_token(i) for i in items] == [
        ("a", 0, 1), ("b", len(first), 2), (TOO_LONG, len(first) + len(second), 3)]
    assert tail.offset == len(first + second + big) and tail.line == 3
