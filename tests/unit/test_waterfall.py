"""The viewed sessions' spans (waterfall.py): the same spans as replay, read as the log grows, under a cap."""

from __future__ import annotations

import json
from pathlib import Path

from copilot_otel.config import ModelOptions
from copilot_otel.replay.runner import ReplayStats, replay_session
from copilot_otel.web.waterfall import SessionTrace, TraceCache, span_json
from tests.support.biglog import grow
from tests.support.events import SessionLog
from tests.support.files import append

REAL = Path(__file__).resolve().parent.parent / "fixtures" / "cli" / "1.0.102" / "subagent"


def subagent_log() -> Path:
    """The stored real log of a session whose main agent spawned a sub-agent."""
    return next(REAL.rglob("events.jsonl"))


def replayed(path: Path, options: ModelOptions = ModelOptions()) -> list[dict]:
    """What replay exports for the whole file, as the page would read it."""
    from copilot_otel.source.tail import read_all

    spans = replay_session(path.parent.name, read_all(path), ReplayStats(), source=str(path), options=options)
    return [json.loads(json.dumps(span_json(s))) for s in spans]


def snapshot(trace: SessionTrace, since: int = 0, token: str | None = None, limit: int | None = None) -> dict:
    """One page as the client reads it, made piece by piece in small pieces."""
    return json.loads(b"".join(trace.page(since, token, limit, None).pieces(chunk=1000)))


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


def copies(tmp_path: Path, names: str) -> list[Path]:
    """The real sub-agent log copied into a folder per name."""
    paths = []
    for name in names:
        path = tmp_path / name / "events.jsonl"
        path.parent.mkdir()
        path.write_bytes(subagent_log().read_bytes())
        paths.append(path)
    return paths


def json_bytes(path: Path) -> list[int]:
    """The size of each finished span's JSON, in order, as a trace holds them."""
    trace = SessionTrace(path, path.parent.name, ModelOptions())
    trace.refresh()
    return [len(span) for span in trace.page(0, None, None, None).spans]


def test_the_cache_keeps_few_sessions_but_every_followed_one(tmp_path):
    """Past max_sessions the least recently viewed trace goes, unless a live view follows it."""
    paths = copies(tmp_path, "abcd")
    cache = TraceCache(ModelOptions(), max_sessions=2)
    for path in paths[:3]:
        cache.trace(path, path.parent.name)
    assert len(cache) == 2
    cache.follow(paths[1])
    cache.follow(paths[2])
    cache.trace(paths[3], "d")
    cache.trace(paths[0], "a")
    assert len(cache) == 4  # two followed, two more
    cache.unfollow(paths[1])
    cache.trace(paths[3], "d")
    assert len(cache) == 3


def test_past_the_cap_the_least_recently_viewed_lose_their_oldest_spans_first(tmp_path):
    """Over max_bytes, spans go from the front of the least recently viewed traces first, then of the one
    being read; each trace keeps its model and its token, and counts what it dropped so indexes stay valid."""
    paths = copies(tmp_path, "abc")
    sizes = json_bytes(paths[0])
    count = len(sizes)
    cache = TraceCache(ModelOptions(), max_bytes=sum(sizes) + sum(sizes[-3:]))
    a = cache.trace(paths[0], "a")
    token = a.token
    b = cache.trace(paths[1], "b")
    assert len(cache) == 2 and b.held == count and a.held == 3 and a.dropped == count - 3
    assert cache.held() <= cache.max_bytes and a.held_bytes == sum(sizes[-3:])
    assert a.token == token and snapshot(a, a.total, token)["spans"] == []  # a live view of a gets only what is new
    tiny = TraceCache(ModelOptions(), max_bytes=sum(sizes[-3:]))
    trace = tiny.trace(paths[2], "c")
    shown = snapshot(trace)
    assert trace.held == 3 and shown["dropped"] == count - 3 and shown["from"] == count - 3
    assert shown["spans"] == replayed(paths[2])[-3:]


def test_dropped_spans_asked_for_again_are_read_again_at_most_every_so_often(tmp_path):
    """A client that asks for spans dropped under the cap gets the trace read again from its start, under
    the same token, when it fits under the cap; not twice within reread_every seconds."""
    paths = copies(tmp_path, "ab")
    sizes = json_bytes(paths[0])
    count = len(sizes)
    cache = TraceCache(ModelOptions(), max_bytes=sum(sizes) + sum(sizes[-3:]), reread_every=3600)
    a = cache.trace(paths[0], "a")
    token = a.token
    cache.trace(paths[1], "b")
    assert a.dropped == count - 3 and a.reads == 1
    again = cache.trace(paths[0], "a", since=0, token=token)
    assert again is a and a.reads == 2 and a.token == token
    assert snapshot(a)["spans"] == replayed(paths[0])  # all of them, b lost its own instead
    cache.trace(paths[1], "b")
    assert a.dropped
    cache.trace(paths[0], "a", since=0, token=token)
    assert a.reads == 2 and snapshot(a)["from"] == a.dropped  # too soon: what is held, said to be partial
    cache.trace(paths[0], "a", since=a.total, token=token)
    assert a.reads == 2  # a live view asks only for what is new: never read again


def test_a_page_holds_at_most_its_limit_and_says_where_to_go_on(tmp_path):
    """Pages of a few spans (or a few bytes), followed by next and token, give every span once, in order;
    split pages of one answer give the same; a page's size is its JSON's length."""
    path = subagent_log()
    trace = SessionTrace(path, path.parent.name, ModelOptions())
    trace.refresh()
    expected = replayed(path)
    seen, since, token = [], 0, None
    while True:
        shown = snapshot(trace, since, token, limit=4)
        assert len(shown["spans"]) <= 4 and shown["total"] == len(expected)
        seen += shown["spans"]
        since, token = shown["next"], shown["token"]
        if not shown["more"]:
            break
    assert seen == expected
    sizes = json_bytes(path)
    small = json.loads(trace.page(0, None, 1000, max_bytes=sizes[0] + sizes[1]).json())
    assert len(small["spans"]) == 2 and small["next"] == 2 and small["more"] is True
    assert len(json.loads(trace.page(0, None, 1000, max_bytes=1).json())["spans"]) == 1  # one at least
    whole = trace.page(0, None, None, None)
    assert len(whole.split(1000, sum(sizes[:3]))[0].spans) == 3
    parts = whole.split(5)
    assert [len(p.spans) for p in parts[:-1]] == [5] * (len(parts) - 1) and parts[-1].head["more"] is False
    assert [s for p in parts for s in json.loads(p.json())["spans"]] == expected
    assert [p.head["reset"] for p in parts] == [True] + [False] * (len(parts) - 1)
    assert all(p.size() == len(p.json()) for p in (*parts, whole, trace.page(len(expected), trace.token)))


def test_held_spans_cost_about_their_json(tmp_path):
    """A held span takes about the bytes of its JSON (orjson's own bytes kept 8 KiB for 650)."""
    import tracemalloc

    path = tmp_path / "s" / "events.jsonl"
    path.parent.mkdir()
    path.write_bytes(grow(subagent_log().read_bytes(), 1 << 20))
    tracemalloc.start()
    try:
        trace = SessionTrace(path, "s", ModelOptions())
        trace.refresh()
        used = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    held = sum(len(span) for span in trace.page(0, None, None, None).spans)
    assert trace.held > 500 and held == trace.held_bytes and used < 1.5 * held + (2 << 20), (used, held)


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


def test_pages_are_cut_as_full_as_their_limits_allow():
    """Any spans cut into pages: in order, none empty, each within both limits (or a single span that is
    larger alone), and none could have taken the next span."""
    import random

    from copilot_otel.web.waterfall import Page

    chance = random.Random(21)
    for _ in range(500):
        spans = [b"x" * chance.randint(1, 12) for _ in range(chance.randint(0, 40))]
        max_spans, max_bytes = chance.randint(1, 9), chance.randint(1, 40)
        pages = Page({"from": 0, "reset": True, "more": False}, spans).split(max_spans, max_bytes)
        assert [s for p in pages for s in p.spans] == spans
        for page, following in zip(pages, [*pages[1:], None]):
            size = sum(map(len, page.spans))
            assert (spans == [] or page.spans) and len(page.spans) <= max_spans
            assert size <= max_bytes or len(page.spans) == 1
            if following is not None:
                assert len(page.spans) == max_spans or size + len(following.spans[0]) > max_bytes
