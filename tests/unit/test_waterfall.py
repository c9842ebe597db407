"""The viewed sessions' spans (waterfall.py): the same spans as replay, read as the log grows, under a cap."""

from __future__ import annotations

import json
from pathlib import Path

from copilot_otel.config import ModelOptions
from copilot_otel.replay import ReplayStats, replay_session
from copilot_otel.waterfall import SessionTrace, TraceCache, span_json
from tests.support.events import SessionLog
from tests.support.files import append

REAL = Path(__file__).resolve().parent.parent / "fixtures" / "cli" / "1.0.102" / "subagent"


def subagent_log() -> Path:
    """The stored real log of a session whose main agent spawned a sub-agent."""
    return next(REAL.rglob("events.jsonl"))


def replayed(path: Path, options: ModelOptions = ModelOptions()) -> list[dict]:
    """What replay exports for the whole file, as the page would read it."""
    from copilot_otel.tail import read_all

    spans = replay_session(path.parent.name, read_all(path), ReplayStats(), source=str(path), options=options)
    return [json.loads(json.dumps(span_json(s))) for s in spans]


def snapshot(trace: SessionTrace, since: int = 0, token: str | None = None) -> dict:
    body, _position = trace.snapshot(since, token)
    return json.loads(body)


def test_a_finished_session_shows_exactly_the_spans_replay_exports(tmp_path):
    """Every span of a real sub-agent session, with its ids, times and attributes, as replay makes them."""
    path = subagent_log()
    trace = SessionTrace(path, path.parent.name, ModelOptions())
    trace.refresh()
    shown = snapshot(trace)
    assert shown["open"] == [] and shown["reset"] is True
    assert shown["spans"] == replayed(path)
    names = {s["name"] for s in shown["spans"]}
    assert {"execute_tool task", "invoke_agent copilot"} <= names


def test_a_growing_log_is_read_on_and_open_spans_are_snapshots(tmp_path):
    """Lines appended later are read from where the last refresh stopped; what is still open is shown
    running, and a client that asks from its last index gets only what is new."""
    log = SessionLog("grow")
    log.start()
    log.user()
    log.turn_start()
    log.usage()
    log.message(tools=["bash"])
    log.tool_start("bash", "call-1")
    path = tmp_path / "grow" / "events.jsonl"
    path.parent.mkdir()
    path.write_bytes(log.jsonl())
    trace = SessionTrace(path, "grow", ModelOptions())
    trace.refresh()
    first = snapshot(trace)
    assert [s["name"] for s in first["spans"]] == ["chat test-model"]
    running = {s["name"]: s["running"] for s in first["open"]}
    assert running == {"execute_tool bash": True, "turn": True, "invoke_agent copilot": True}
    written = len(log.lines())
    log.tool_complete("call-1")
    log.turn_end()
    log.shutdown()
    append(path, log.jsonl(written))
    trace.refresh()
    second = snapshot(trace, first["next"], first["token"])
    assert second["reset"] is False and second["from"] == first["next"] == 1
    assert sorted(s["name"] for s in second["spans"]) == ["execute_tool bash", "invoke_agent copilot", "turn"]
    assert second["open"] == []
    assert snapshot(trace)["spans"] == replayed(path)


def test_a_truncated_log_starts_the_spans_over_under_a_new_token(tmp_path):
    """A log truncated and written again gives a new token: a client holding the old one gets everything anew."""
    path = tmp_path / "s" / "events.jsonl"
    path.parent.mkdir()
    path.write_bytes(subagent_log().read_bytes())
    trace = SessionTrace(path, "s", ModelOptions())
    trace.refresh()
    before = snapshot(trace)
    log = SessionLog("s")
    log.start()
    log.user()
    log.turn_start()
    log.answer()
    path.write_bytes(log.jsonl())
    trace.refresh()
    after = snapshot(trace, before["next"], before["token"])
    assert after["token"] != before["token"] and after["reset"] is True and after["from"] == 0
    replay_ids = {s["id"]: s for s in replayed(path)}
    assert after["spans"] and all(replay_ids[s["id"]] == s for s in after["spans"])  # only the new content's


def test_content_shows_only_as_the_traces_carry_it(tmp_path):
    """With capture off no prompt or tool text is in the spans; with it on, exactly what replay exports."""
    path = subagent_log()
    off = SessionTrace(path, path.parent.name, ModelOptions())
    off.refresh()
    on = SessionTrace(path, path.parent.name, ModelOptions(capture_content=True, content_max_chars=50))
    on.refresh()
    keys = {key for s in snapshot(off)["spans"] for key in s["attrs"]}
    assert not {"gen_ai.input.messages", "gen_ai.tool.call.arguments"} & keys
    captured = snapshot(on)["spans"]
    assert captured == replayed(path, ModelOptions(capture_content=True, content_max_chars=50))
    assert any("gen_ai.input.messages" in s["attrs"] for s in captured)


def test_the_cache_keeps_few_sessions_and_few_spans(tmp_path):
    """Past max_sessions the least recently viewed goes; past max_spans whole other traces go first, then
    the oldest spans of the one being viewed, counted so that indexes stay valid."""
    paths = []
    for name in "abc":
        path = tmp_path / name / "events.jsonl"
        path.parent.mkdir()
        path.write_bytes(subagent_log().read_bytes())
        paths.append(path)
    count = len(replayed(paths[0]))
    cache = TraceCache(ModelOptions(), max_sessions=2, max_spans=10 * count)
    for path in paths:
        cache.trace(path, path.parent.name)
    assert len(cache) == 2
    small = TraceCache(ModelOptions(), max_spans=count + 3)
    small.trace(paths[0], "a")
    viewed = small.trace(paths[1], "b")
    assert len(small) == 1 and viewed.held == count
    tiny = TraceCache(ModelOptions(), max_spans=3)
    trace = tiny.trace(paths[2], "c")
    shown = snapshot(trace)
    assert trace.held == 3 and shown["dropped"] == count - 3 and shown["from"] == count - 3
    assert shown["spans"] == replayed(paths[2])[-3:]


def test_a_deleted_log_leaves_the_cache(tmp_path):
    """A session whose log was deleted is dropped at the next sweep."""
    path = tmp_path / "d" / "events.jsonl"
    path.parent.mkdir()
    path.write_bytes(subagent_log().read_bytes())
    cache = TraceCache(ModelOptions())
    trace = cache.trace(path, "d")
    path.unlink()
    trace.refresh()
    cache.sweep()
    assert len(cache) == 0
