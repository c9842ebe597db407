"""Two export queues behind one checkpoint: the spans' and the log records'.

Each queue (delivery/queue.py) delivers on its own thread, retries with its own backoff and commits what it delivered,
so a logs backend that is down never holds the spans back, nor the other way round. Each commits here, to its
own lane; a file's position (and the metric totals that go with it) reaches the SQLite checkpoint only once
*both* lanes delivered everything queued before it. A restart then reads again from where the slower signal
stopped: the faster one sends those records again, with the same ids and timestamps (records.py, model/logs.py),
which its backend merges.

Positions are numbered when they are queued (:meth:`SharedCheckpoint.number`), so the lanes' progress compares
without keeping a history: per file, each lane's last committed position, and the lower of the two is due.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable

from .checkpoint import Checkpoint, FilePosition


class NumberedPosition(FilePosition, frozen=True):
    """A file position with the order it was queued in."""

    seq: int = 0


class NumberedTotals(bytes):
    """The metric totals with the order they were queued in (``seq``)."""

    seq: int = 0


class SharedCheckpoint:
    """The checkpoint as ``lanes`` export queues share it: each gets a :meth:`lane` to commit to."""

    def __init__(self, checkpoint: Checkpoint, lanes: int = 2) -> None:
        self.checkpoint = checkpoint
        self._lock = threading.Lock()
        self._seq = 0
        self._done: list[dict[str, NumberedPosition]] = [{} for _ in range(lanes)]  # per lane: path -> last committed
        self._totals_done: list[NumberedTotals | None] = [None] * lanes
        self._committed: dict[str, int] = {}  # path -> seq of the position in the checkpoint
        self._committed_totals = 0

    def number(self, positions: Iterable[FilePosition], totals: bytes | None = None
               ) -> tuple[list[NumberedPosition], NumberedTotals | None]:
        """The positions (and totals) to queue on every lane, numbered in the order they are queued."""
        with self._lock:
            self._seq += 1
            seq = self._seq
        numbered = [NumberedPosition(p.path, p.identity, p.offset, p.line, p.resume_offset, p.resume_line,
                                     p.generation, p.crc, p.session_id, p.moved_from, history_line=p.history_line,
                                     seq=seq) for p in positions]
        if totals is None:
            return numbered, None
        stamped = NumberedTotals(totals)
        stamped.seq = seq
        return numbered, stamped

    def lane(self, index: int) -> Lane:
        """What queue ``index`` commits to."""
        return Lane(self, index)

    def forget(self, path: str) -> None:
        """A file that is gone: its progress goes too (the checkpoint's row is the caller's to drop)."""
        with self._lock:
            for done in self._done:
                done.pop(path, None)
            self._committed.pop(path, None)

    def _commit(self, index: int, positions: list[FilePosition], totals: bytes | None) -> None:
        with self._lock:
            done = self._done[index]
            for position in positions:
                if isinstance(position, NumberedPosition):
                    known = done.get(position.path)
                    if known is None or known.seq < position.seq:
                        done[position.path] = position
            if isinstance(totals, NumberedTotals):
                known_totals = self._totals_done[index]
                if known_totals is None or known_totals.seq < totals.seq:
                    self._totals_done[index] = totals
            due: list[NumberedPosition] = []
            for path in {p.path for p in positions}:  # only what this commit moved can have become due
                reached = [lane.get(path) for lane in self._done]
                if any(p is None for p in reached):
                    continue
                slowest = min((p for p in reached if p is not None), key=lambda p: p.seq)
                if slowest.seq > self._committed.get(path, 0):
                    due.append(slowest)
            due_totals = None
            if all(t is not None for t in self._totals_done):
                slowest_totals = min((t for t in self._totals_done if t is not None), key=lambda t: t.seq)
                if slowest_totals.seq > self._committed_totals:
                    due_totals = slowest_totals
            if not due and due_totals is None:
                return
            # Raises CheckpointError when it fails: the queue keeps its positions and commits them again.
            self.checkpoint.commit([*due], bytes(due_totals) if due_totals is not None else None)
            for position in due:
                self._committed[position.path] = position.seq
            if due_totals is not None:
                self._committed_totals = due_totals.seq


class Lane:
    """One export queue's view of the shared checkpoint: ``commit`` records what that queue delivered."""

    def __init__(self, shared: SharedCheckpoint, index: int) -> None:
        self._shared = shared
        self._index = index

    def commit(self, positions: list[FilePosition], totals: bytes | None = None) -> None:
        """This lane delivered everything queued before ``positions``: commit what every lane has now reached."""
        self._shared._commit(self._index, positions, totals)
