"""pipeline.py: drive() feeds a model every decoded line and gathers what came out, what was
rejected and why, guarding against bugs of the model."""

from __future__ import annotations

import logging

from copilot_otel.decode.lines import INTERNAL_ERROR, NOT_JSON
from copilot_otel.model.pipeline import Outputs, drive, finish
from copilot_otel.model.sessions import SessionModel
from copilot_otel.vocab import DUPLICATE_ID, END_INCOMPLETE, Metric
from tests.support.events import SessionLog
from tests.support.model import label

SID = "session-1"


class Warnings:
    """Stands in for logger.warning: keeps each message, formatted."""

    def __init__(self) -> None:
        self.messages: list[str] = []

    def __call__(self, message: str, *args) -> None:
        self.messages.append(message % args)


def session_with_bad_lines() -> SessionLog:
    log = SessionLog(SID)
    log.start()
    log.user()
    log.line(b"this is not json")
    tool = log.calling(("bash", "call-1"))
    log.repeat(tool)
    log.tool_complete("never-started")
    log.tool_complete("call-1")
    log.turn_end()
    return log


def test_what_drive_gathers():
    """Events read by type (a duplicate is read, then rejected), the newest timestamp, rejected lines
    by reason and out-of-order ends by type."""
    log = session_with_bad_lines()
    out = drive(SessionModel(SID), log.decoded(), Outputs(), source="events.jsonl", warn=Warnings())
    types = [e["type"] for e in log.entries]
    assert dict(out.events) == {t: types.count(t) for t in set(types)}
    assert dict(out.rejected) == {NOT_JSON: 1, DUPLICATE_ID: 1}
    assert dict(out.out_of_order) == {"tool.execution_complete": 1}
    assert out.newest_ns == log.ns(log.entries[-1])
    assert [label(s) for s in out.spans] == ["chat test-model", "execute_tool bash", "turn 0"]
    assert sum(u.value for u in out.metrics if u.metric is Metric.TURNS) == 1


def test_each_bad_line_is_warned_about_with_its_source_and_line():
    """A rejected line, a duplicate and an out-of-order end each name the source and the line number."""
    log = session_with_bad_lines()
    warnings = Warnings()
    drive(SessionModel(SID), log.decoded(), Outputs(), source="events.jsonl", warn=warnings)
    assert [m.split(": ", 1)[0] for m in warnings.messages] == ["events.jsonl:3", "events.jsonl:8", "events.jsonl:9"]
    assert "skipped line (not_json)" in warnings.messages[0]
    assert "skipped line (duplicate_id)" in warnings.messages[1]
    assert "tool.execution_complete out of order" in warnings.messages[2]


def test_lines_below_the_floor_rebuild_the_model_but_are_not_delivered_again():
    """Below the floor (delivered before a restart) lines are applied but neither counted nor exported."""
    log = SessionLog(SID)
    log.start()
    log.user()
    log.line(b"not json, and delivered before")
    log.calling(("bash", "call-1"))
    log.tool_complete("call-1")
    log.turn_end()
    items = log.decoded()
    floor = items[7].offset  # the tool's completion and what follows are new
    model = SessionModel(SID)
    out = drive(model, items, Outputs(), source="x", warn=Warnings(), floor=floor)
    assert dict(out.events) == {"tool.execution_complete": 1, "assistant.turn_end": 1}
    assert out.rejected == {}
    assert [label(s) for s in out.spans] == ["execute_tool bash", "turn 0"]  # opened below the floor, closed above
    assert not [u for u in out.metrics if u.metric in (Metric.SESSIONS_STARTED, Metric.TURNS, Metric.LLM_CALLS)]


class BrokenModel(SessionModel):
    """A model with a bug: it raises on tool starts."""

    def feed(self, event):
        if event.type == "tool.execution_start":
            raise KeyError("a bug")
        return super().feed(event)


def test_a_bug_of_the_model_costs_one_event(caplog):
    """An exception in the model is logged with the source line and counted as internal_error; the rest goes on."""
    log = SessionLog(SID)
    log.start()
    log.user()
    log.tool_turn(("bash", "call-1"))
    caplog.set_level(logging.ERROR, logger="copilot_otel.model.pipeline")
    out = drive(BrokenModel(SID), log.decoded(), Outputs(), source="events.jsonl", warn=Warnings())
    assert out.rejected[INTERNAL_ERROR] == 1
    assert "events.jsonl:6: could not apply tool.execution_start" in caplog.text
    assert out.out_of_order == {"tool.execution_complete": 1}  # its start never applied
    assert "turn 0" in [label(s) for s in out.spans]


def test_finish_closes_into_the_outputs():
    """finish() puts what the end of the session closed into the same Outputs."""
    log = SessionLog(SID)
    log.start()
    log.user()
    log.turn_start()
    model = SessionModel(SID)
    out = finish(model, drive(model, log.decoded(), Outputs(), source="x"))
    assert sorted(label(s) for s in out.spans) == ["invoke_agent copilot", "turn 0"]
    assert model.ended == END_INCOMPLETE
