"""lanes.py: two export queues share one SQLite checkpoint; a file's position (and the metric totals with it)
is committed only once both lanes delivered everything queued before it."""

from __future__ import annotations

import sqlite3

import pytest

from copilot_otel.source.tail import FileIdentity
from copilot_otel.state.checkpoint import Checkpoint, CheckpointError, FilePosition
from copilot_otel.state.lanes import SharedCheckpoint

SPANS, LOGS = 0, 1


def position(path: str, offset: int) -> FilePosition:
    return FilePosition(path, FileIdentity(2049, 11, "0123456789abcdef", 256), offset, offset // 100, offset,
                        offset // 100)


@pytest.fixture
def checkpoint(tmp_path):
    checkpoint = Checkpoint(tmp_path / "checkpoint.sqlite")
    yield checkpoint
    checkpoint.close()


def offsets(checkpoint: Checkpoint) -> dict[str, int]:
    return {path: p.offset for path, p in checkpoint.load().items()}


def test_a_position_is_committed_once_both_lanes_passed_it(checkpoint):
    """The spans' lane running ahead commits nothing; the logs' lane catching up commits the position both
    reached (its own, the lower), then the next once the slower lane gets there too."""
    shared = SharedCheckpoint(checkpoint)
    (first,), totals_1 = shared.number([position("/a", 100)], b"totals-1")
    (second,), totals_2 = shared.number([position("/a", 200)], b"totals-2")
    shared.lane(SPANS).commit([first], totals_1)
    shared.lane(SPANS).commit([second], totals_2)
    assert offsets(checkpoint) == {} and checkpoint.load_totals() is None
    shared.lane(LOGS).commit([first], totals_1)
    assert offsets(checkpoint) == {"/a": 100} and checkpoint.load_totals() == b"totals-1"
    shared.lane(LOGS).commit([second], totals_2)
    assert offsets(checkpoint) == {"/a": 200} and checkpoint.load_totals() == b"totals-2"


def test_a_lane_that_skipped_positions_it_coalesced_still_moves_the_checkpoint(checkpoint):
    """A queue keeps only a file's last position between two batches: the lane that commits the third position
    without the second moves the checkpoint to the lower of the two lanes' last ones; each file on its own."""
    shared = SharedCheckpoint(checkpoint)
    numbered = [shared.number([position("/a", offset), position("/b", offset * 10)])[0] for offset in (1, 2, 3)]
    shared.lane(LOGS).commit(numbered[2])
    shared.lane(SPANS).commit(numbered[0])
    assert offsets(checkpoint) == {"/a": 1, "/b": 10}
    shared.lane(SPANS).commit([numbered[2][1]])  # only /b's
    assert offsets(checkpoint) == {"/a": 1, "/b": 30}
    shared.lane(SPANS).commit(numbered[1])  # an older one, committed again late: nothing goes back
    assert offsets(checkpoint) == {"/a": 2, "/b": 30}


def test_a_failed_commit_is_raised_to_the_lane_and_done_when_it_retries(tmp_path):
    """When SQLite cannot commit, the lane that completed the position gets the CheckpointError (its queue keeps
    the position and retries); the retry commits it."""
    path = tmp_path / "checkpoint.sqlite"
    checkpoint = Checkpoint(path, busy_timeout=0.05)
    shared = SharedCheckpoint(checkpoint)
    (numbered,), _ = shared.number([position("/a", 100)])
    shared.lane(SPANS).commit([numbered])
    other = sqlite3.connect(path)
    other.execute("BEGIN EXCLUSIVE")  # another process holds the database
    try:
        with pytest.raises(CheckpointError):
            shared.lane(LOGS).commit([numbered])
    finally:
        other.rollback()
        other.close()
    assert offsets(checkpoint) == {}
    shared.lane(LOGS).commit([numbered])
    assert offsets(checkpoint) == {"/a": 100}
    checkpoint.close()


def test_forgotten_files_start_over(checkpoint):
    """A deleted log's progress is dropped: a new log at the same path is committed from its own positions."""
    shared = SharedCheckpoint(checkpoint)
    (old,), _ = shared.number([position("/a", 900)])
    for lane in (SPANS, LOGS):
        shared.lane(lane).commit([old])
    checkpoint.forget("/a")
    shared.forget("/a")
    (new,), _ = shared.number([position("/a", 50)])
    for lane in (SPANS, LOGS):
        shared.lane(lane).commit([new])
    assert offsets(checkpoint) == {"/a": 50}
