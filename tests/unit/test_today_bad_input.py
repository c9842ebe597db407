"""Issue 42's new event types, broken: real CLI 1.0.102 logs (hooks, !cmd, a background sub-agent) with one event
stripped of its id, never ended, about an agent never started, or with fields of the wrong type. Each is
counted and said with its file and line, every other span is exported as from the intact log, nothing raises."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from copilot_otel.logreader import LogReader
from copilot_otel.model.options import ModelOptions
from copilot_otel.model.pipeline import Outputs
from copilot_otel.model.records import STATUS_ERROR
from copilot_otel.vocab import INCOMPLETE

SITUATIONS = Path(__file__).resolve().parent.parent / "fixtures" / "situations"


def entries(situation: str, prefix: str = "") -> list[dict]:
    path = next((SITUATIONS / situation).glob(f"session-state/{prefix}*/events.jsonl"))
    return [json.loads(line) for line in path.read_bytes().splitlines()]


def read(log: list[dict], folder: Path) -> tuple[Outputs, list[str]]:
    """The log written to ``folder``/events.jsonl and read as the daemon reads a file; what it said."""
    folder = folder / log[0]["data"]["sessionId"]  # the session id is the folder's name, as the CLI writes it
    folder.mkdir(parents=True)
    path = folder / "events.jsonl"
    path.write_bytes(b"".join(json.dumps(entry).encode() + b"\n" for entry in log))
    said: list[str] = []
    reader = LogReader(path, ModelOptions(logs=True), warn=lambda message, *args: said.append(message % args))
    out = reader.read_to_end()
    reader.finish(out)
    return out, [line.removeprefix(f"{path}") for line in said]


def ids(out: Outputs) -> set[tuple[int, int, str]]:
    return {(s.trace_id, s.span_id, s.name) for s in out.spans}


def line_of(log: list[dict], event_type: str, nth: int = 0, **data) -> int:
    """The 1-based line of the ``nth`` event of ``event_type`` whose data has ``data``."""
    found = [i for i, e in enumerate(log) if e["type"] == event_type
             and all(e["data"].get(k) == v for k, v in data.items())]
    return found[nth] + 1


def test_a_hook_end_without_its_id_is_counted_and_its_run_ends_incomplete(tmp_path):
    """hooks: the first preToolUse hook.end loses its hookInvocationId: counted as out of order, said at its line;
    the run it ended is cut off at the session's end (ERROR, incomplete), every span is still there."""
    log = entries("hooks")
    intact, _ = read(log, tmp_path / "intact")
    at = line_of(log, "hook.end", hookType="preToolUse")
    del log[at - 1]["data"]["hookInvocationId"]
    out, said = read(log, tmp_path / "broken")
    assert out.out_of_order == {"hook.end": 1} and any(s.startswith(f":{at}: hook.end") for s in said)
    assert ids(out) == ids(intact)
    cut = [s for s in out.spans if s.name == "hook preToolUse" and s.attributes.get("error.type") == INCOMPLETE]
    assert len(cut) == 1 and cut[0].status == STATUS_ERROR


def test_a_hook_that_never_ends_is_cut_off_at_the_end_and_nothing_else_changes(tmp_path):
    """hooks: the sessionEnd hook's end is never written: its span ends incomplete at the log's last event (the
    shutdown), every other span is as in the intact log."""
    log = entries("hooks")
    intact, _ = read(log, tmp_path / "intact")
    at = line_of(log, "hook.end", hookType="sessionEnd")
    del log[at - 1]
    out, said = read(log, tmp_path / "broken")
    assert ids(out) == ids(intact) and not out.out_of_order and not out.rejected and not said
    hook = next(s for s in out.spans if s.name == "hook sessionEnd")
    assert hook.attributes["error.type"] == INCOMPLETE and hook.end_ns == out.newest_ns


@pytest.mark.parametrize("call_id", [None, 5, {"id": "x"}], ids=["missing", "a number", "an object"])
def test_a_user_command_without_a_usable_id_is_counted_and_makes_no_span(call_id, tmp_path):
    """user_command: tool.user_requested whose toolCallId is missing or not a string: counted and said at its
    line, no tool span of it; its completion is an end of nothing (counted too); the interaction is intact."""
    log = entries("user_command")
    intact, _ = read(log, tmp_path / "intact")
    at = line_of(log, "tool.user_requested")
    if call_id is None:
        del log[at - 1]["data"]["toolCallId"]
    else:
        log[at - 1]["data"]["toolCallId"] = call_id
    out, said = read(log, tmp_path / "broken")
    assert out.out_of_order == {"tool.user_requested": 1, "tool.execution_complete": 1}
    assert any(s.startswith(f":{at}: tool.user_requested") for s in said)
    assert ids(out) == {key for key in ids(intact) if key[2] != "execute_tool local_shell"}


def test_a_background_sub_agent_that_never_completes_is_cut_off_and_its_interaction_kept(tmp_path):
    """background_subagent: subagent.completed never written: the sub-agent's span ends incomplete at the end,
    the notification about it still keeps the CLI's read_agent and answer in the interaction, no span is lost."""
    log = entries("background_subagent", "55e48b13")
    intact, _ = read(log, tmp_path / "intact")
    del log[line_of(log, "subagent.completed") - 1]
    out, _said = read(log, tmp_path / "broken")
    assert ids(out) == ids(intact) and not out.out_of_order
    agent = next(s for s in out.spans if s.name == "invoke_agent general-purpose")
    assert agent.attributes["error.type"] == INCOMPLETE and agent.status == STATUS_ERROR
    roots = [s for s in out.spans if s.parent_span_id is None]
    assert len(roots) == 1


def test_a_notification_about_an_agent_never_started_is_counted(tmp_path):
    """background_subagent: the system.notification names an agent id this log never started: counted as out of
    order and said at its line; the spans are those of the intact log."""
    log = entries("background_subagent", "55e48b13")
    intact, _ = read(log, tmp_path / "intact")
    at = line_of(log, "system.notification")
    log[at - 1]["data"]["kind"]["agentId"] = "00000000-0000-4000-8000-000000000000"
    out, said = read(log, tmp_path / "broken")
    assert out.out_of_order == {"system.notification": 1}
    assert any(s.startswith(f":{at}: system.notification") for s in said)
    assert {key[2] for key in ids(out)} == {key[2] for key in ids(intact)}


@pytest.mark.parametrize("event_type, data", [
    ("hook.start", {"hookInvocationId": 7, "hookType": {"a": 1}}),
    ("hook.end", {"hookInvocationId": ["x"], "hookType": None, "success": "yes", "output": [1, 2]}),
    ("tool.user_requested", {"toolCallId": {"id": 1}, "toolName": 3}),
    ("system.notification", {"kind": "agent_idle"}),
    ("system.notification", {"kind": {"type": "agent_idle", "agentId": 12}}),
    ("subagent.selected", {"agentName": ["reviewer"]}),
    ("skill.invoked", {"name": {"x": 1}, "trigger": 2}),
])
def test_known_types_with_fields_of_the_wrong_type_never_stop_the_session(event_type, data, tmp_path):
    """Each event written into the hooks log just after its first prompt, with fields of the wrong type: nothing
    raises, no line is rejected as a model error, and every span of the intact log is still exported."""
    log = entries("hooks")
    intact, _ = read(log, tmp_path / "intact")
    at = line_of(log, "user.message")
    log.insert(at, {**log[at - 1], "type": event_type, "data": data, "id": "bad-event-0000"})
    out, _said = read(log, tmp_path / "broken")
    assert not out.rejected  # a model error would be counted here (internal_error)
    assert ids(intact) <= ids(out)
