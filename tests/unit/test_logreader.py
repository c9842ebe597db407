"""One log read through its model (logreader.py): in pieces or whole, skimmed or not, the same spans; a log that
starts over gets a new model; a log that is gone says so."""

from __future__ import annotations

from pathlib import Path

import pytest

from copilot_otel.logreader import LogReader
from copilot_otel.replay.runner import ReplayStats, replay_session
from copilot_otel.source.sources import UnreadableLog
from copilot_otel.source.tail import read_all
from tests.support.events import SessionLog
from tests.support.files import append

REAL = Path(__file__).resolve().parent.parent / "fixtures" / "cli" / "1.0.102" / "subagent"


def real_log() -> Path:
    """The stored real log of a session whose main agent spawned a sub-agent."""
    return next(REAL.rglob("events.jsonl"))


def test_a_log_read_as_it_grows_makes_the_spans_replay_makes_from_every_line_in_full(tmp_path):
    """A real log read half, then the rest once appended, with the skim (payloads of the types the model does not
    read left undecoded), gives span for span what replay makes from the whole log decoded in full."""
    real = real_log()
    lines = real.read_bytes().splitlines(keepends=True)
    path = tmp_path / real.parent.name / "events.jsonl"
    path.parent.mkdir()
    path.write_bytes(b"".join(lines[:len(lines) // 2]))
    reader = LogReader(path)
    _result, out = reader.read()
    append(path, b"".join(lines[len(lines) // 2:]))
    result, out = reader.read(out)
    reader.finish(out)
    full = replay_session(real.parent.name, read_all(real, keep=None), ReplayStats(), source=str(path))
    assert result.items and not result.restarted and len(full) > 5 and out.spans == full


def test_a_log_replaced_by_a_shorter_one_is_read_from_its_start_into_a_new_model(tmp_path):
    """The file truncated and written anew: the model counts only what the new file holds."""
    path = tmp_path / "s1" / "events.jsonl"
    path.parent.mkdir()
    first = SessionLog("s1")
    first.start()
    for _ in range(3):
        first.user()
        first.turn_start()
        first.turn_end()
    path.write_bytes(first.jsonl())
    reader = LogReader(path)
    reader.read_to_end()
    assert reader.model.summary().interactions == 3
    again = SessionLog("s1")
    again.start()
    again.user()
    path.write_bytes(again.jsonl())  # shorter than what was read: truncated
    result, _out = reader.read()
    assert result.restarted and reader.model.summary().interactions == 1


def test_a_log_that_is_gone_names_itself_and_why(tmp_path):
    """Reading a log that is not there raises UnreadableLog with the file and the reason."""
    reader = LogReader(tmp_path / "gone" / "events.jsonl")
    with pytest.raises(UnreadableLog) as raised:
        reader.read_to_end()
    assert raised.value.reason == "no such file" and raised.value.path == tmp_path / "gone" / "events.jsonl"
