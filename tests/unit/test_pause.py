"""pause.py: while a /metrics render runs, the reader stops at its next line or event, and goes on after it."""

from __future__ import annotations

import threading
import time

from copilot_otel.base import pause
from copilot_otel.base.pause import PAUSE
from copilot_otel.model.pipeline import Outputs, drive
from copilot_otel.model.sessions import SessionModel
from copilot_otel.source.tail import FileTail, read_all
from tests.support.events import SessionLog
from tests.support.net import wait_until

HELD = 0.5  # how long the test watches a held reader stay where it is, s


def a_session(path):
    log = SessionLog("s1")
    log.start()
    log.user()
    log.turn_start()
    for n in range(20):
        log.tool_start("bash", f"call-{n}")
        log.tool_complete(f"call-{n}")
    log.turn_end()
    path.write_bytes(log.jsonl())
    return path


def test_drive_stops_at_its_next_event_while_a_render_runs(tmp_path):
    """drive, handed the daemon's pause, gives way to a render before its next event."""
    items = read_all(a_session(tmp_path / "events.jsonl"))
    pulled = []

    def one_at_a_time():
        for item in items:
            pulled.append(item)
            yield item

    out = Outputs()
    reader = threading.Thread(target=drive, args=(SessionModel("s1"), one_at_a_time(), out), kwargs={"source": "t",
                                                                                                     "pause": PAUSE})
    with PAUSE.rendering():
        reader.start()
        wait_until(lambda: pulled, timeout=30, interval=0.005, what="drive to pull its first event")
        reader.join(HELD)
        assert reader.is_alive() and len(pulled) == 1 and not out.events  # held before applying the first event
    reader.join(30)
    assert not reader.is_alive() and sum(out.events.values()) == len(items)
    assert out.spans  # the tool calls, the turn and the interaction were all made


def test_a_read_stops_at_its_next_line_while_a_render_runs(tmp_path):
    tail = FileTail(a_session(tmp_path / "events.jsonl"))
    results = []
    reader = threading.Thread(target=lambda: results.append(tail.read()))
    with PAUSE.rendering():
        reader.start()
        reader.join(HELD)
        assert reader.is_alive() and not results
    reader.join(30)
    assert len(results[0].items) == len(read_all(tmp_path / "events.jsonl")) == 44  # 4 + 20 tool calls of 2 events


def test_a_render_that_hangs_holds_the_reader_only_max_wait(tmp_path, monkeypatch):
    monkeypatch.setattr(pause, "MAX_WAIT", 0.2)
    path = a_session(tmp_path / "events.jsonl")
    with PAUSE.rendering():
        started = time.monotonic()
        items = FileTail(path).read().items  # every line read, though the render never ends
        assert len(items) == 44 and time.monotonic() - started >= 0.2
    assert PAUSE.renders == 0
