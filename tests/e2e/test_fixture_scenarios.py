"""The fixture's own tests: each scripted scenario made the real CLI write what it claims.

Expectations come from the scripts in tests/support/provider.py (their constants, tool-call ids and
token formula), never from copying the CLI's output.
"""

from __future__ import annotations

import json
import os
import signal
import urllib.error
import urllib.request
from collections import Counter

import pytest

from tests.support.copilot_cli import (
    CLI_VERSION,
    CORPUS_SCENARIOS,
    SLEEP_TOOL_SECONDS,
    CopilotCLI,
    CopilotCLIMissing,
    descendants,
    prompt_for,
)
from tests.support.net import wait_until
from tests.support.provider import (
    AUTOPILOT_NUDGES,
    CHILD_ECHO,
    FAILING_DENIED_PATH,
    FAILING_EXIT_CODE,
    FAILING_EXPECTED_SUCCESS,
    FINAL_ANSWER,
    MODEL,
    MULTI_ECHO,
    MULTI_VIEW_TEXT,
    PLAIN_ECHO,
    RESUME_ECHO,
    SUBAGENT_NAME,
    SUBAGENT_TYPE,
    TASK_COMPLETE_SUMMARY,
    TURN_ECHO,
    ScriptedProvider,
    completion_id,
    decide,
    failing_tool_calls,
    marker,
    multi_tools_calls,
    parse_completion_id,
    tool_call_id,
    usage_for,
)

FAILING_SCENARIOS = {"provider_error", "provider_bad_request", "tool_then_error"}

# The LLM calls each scenario's script answers with a completion: (scenario, interaction, step).
SCRIPTED_CALLS = {
    "plain": [("plain", 1, 0), ("plain", 1, 1)],
    "multi_turn": [("multi_turn", 1, s) for s in range(len(TURN_ECHO) + 1)],
    "multi_tools": [("multi_tools", 1, 0), ("multi_tools", 1, 1)],
    "failing_tool": [("failing_tool", 1, 0), ("failing_tool", 1, 1)],
    "subagent": [("subagent", 1, 0), ("subagent-child", 1, 0), ("subagent-child", 1, 1), ("subagent", 1, 1)],
    "subagent_failed": [("subagent_failed", 1, 0), ("subagent_failed", 1, 1)],
    "autopilot": [("autopilot", 1, s) for s in range(AUTOPILOT_NUDGES + 1)],
    "provider_error": [],
    "provider_bad_request": [],
    "tool_then_error": [("tool_then_error", 1, 0)],
    "sleep_tool": [("sleep_tool", 1, 0), ("sleep_tool", 1, 1)],
    "resume": [("plain", 1, 0), ("plain", 1, 1), ("resume", 2, 0), ("resume", 2, 1)],
}


def of_type(events, *types):
    return [e for e in events if e["type"] in types]


def main_agent(events):
    return [e for e in events if "agentId" not in e]


def completions_by_call(events):
    return {e["data"]["toolCallId"]: e for e in of_type(events, "tool.execution_complete")}


def result_text(complete_event) -> str:
    return json.dumps(complete_event["data"].get("result", {}))


# ---------------------------------------------------------------------------------------
# Every scenario


def test_corpus_has_every_scenario(cli_corpus):
    """The corpus holds one run per scenario, each with its own session."""
    assert set(cli_corpus) == set(CORPUS_SCENARIOS) == set(SCRIPTED_CALLS)
    assert len({r.session_id for r in cli_corpus.values()}) == len(cli_corpus)


@pytest.mark.parametrize("scenario", CORPUS_SCENARIOS)
def test_session_basics(cli_corpus, scenario):
    """Each run wrote one session.start for its own session id, CLI version, model and cwd,
    and exited 0 unless the scenario scripts an error."""
    run = cli_corpus[scenario]
    events = run.events()
    starts = of_type(events, "session.start")
    assert len(starts) == 1 and events[0] is starts[0]
    data = starts[0]["data"]
    assert data["sessionId"] == run.session_id == run.session_dir.name
    assert data["copilotVersion"] == CLI_VERSION
    assert data["selectedModel"] == MODEL
    assert data["context"]["cwd"] == str(run.cwd)
    assert (run.returncode != 0) == (scenario in FAILING_SCENARIOS)
    assert all({"type", "data", "id", "timestamp"} <= e.keys() for e in events)
    assert not [e for e in events if e.get("ephemeral")], "ephemeral events are never persisted"
    assert not list(run.session_dir.glob("inuse.*")), "the lock goes away when the CLI exits"


@pytest.mark.parametrize("scenario", CORPUS_SCENARIOS)
def test_usage_records_are_the_scripted_ones(cli_corpus, scenario):
    """One session.usage_record per scripted completion, with exactly the scripted tokens
    (inputTokens = prompt_tokens, cacheReadTokens = cached_tokens)."""
    records = of_type(cli_corpus[scenario].events(), "session.usage_record")
    seen = [parse_completion_id(r["data"]["usage"]["apiCallId"]) for r in records]
    assert sorted(seen) == sorted(SCRIPTED_CALLS[scenario])
    for rec, (name, interaction, step) in zip(records, seen):
        usage, want = rec["data"]["usage"], usage_for(name, interaction, step)
        assert usage["model"] == MODEL
        assert (usage["inputTokens"], usage["outputTokens"], usage["cacheReadTokens"]) == (
            want.prompt_tokens,
            want.completion_tokens,
            want.cached_tokens,
        )
        assert usage["cacheWriteTokens"] == 0
        # a sub-agent's calls carry its agentId; the main agent's carry none
        assert ("agentId" in rec) == name.startswith("subagent-child")


@pytest.mark.parametrize("scenario", CORPUS_SCENARIOS)
def test_stdout_stream_and_otel_reference(cli_corpus, scenario):
    """--output-format json printed the live stream (same event ids as the file, plus
    ephemeral ones, ending with a `result` line), and the CLI's OTel file has spans for the
    session."""
    run = cli_corpus[scenario]
    stream = run.stdout_events()
    assert stream[-1]["type"] == "result"
    assert stream[-1]["sessionId"] == run.session_id and stream[-1]["exitCode"] == run.returncode
    file_ids = {e["id"] for e in run.events()}
    persisted = [e for e in stream[:-1] if not e.get("ephemeral")]
    assert persisted and all(e["id"] in file_ids for e in persisted)
    assert of_type(stream, "assistant.idle"), "the live stream marks the end of the loop"
    spans = [r for r in run.otel() if r["type"] == "span"]
    assert spans
    assert {s["attributes"].get("gen_ai.conversation.id") for s in spans} == {run.session_id}


def test_home_all_holds_every_session(cli_corpus):
    """home_all is one COPILOT_HOME with every corpus session folder, byte-identical."""
    state = cli_corpus.home_all / "session-state"
    assert {p.name for p in state.iterdir() if p.is_dir()} == {r.session_id for r in cli_corpus.values()}
    for run in cli_corpus.values():
        assert (state / run.session_id / "events.jsonl").read_bytes() == run.events_path.read_bytes()


# ---------------------------------------------------------------------------------------
# Scenario by scenario


def test_plain(cli_corpus):
    """plain: one interaction, turn 0 runs bash, turn 1 answers."""
    events = cli_corpus["plain"].events()
    assert len({e["data"]["interactionId"] for e in of_type(events, "user.message")}) == 1
    assert [e["data"]["turnId"] for e in of_type(events, "assistant.turn_start")] == ["0", "1"]
    (done,) = of_type(events, "tool.execution_complete")
    assert done["data"]["toolCallId"] == tool_call_id("plain", 1, 0, 0)
    assert done["data"]["success"] is True and done["data"]["shellExecution"]["exitCode"] == 0
    assert PLAIN_ECHO in result_text(done)
    assert of_type(events, "assistant.message")[-1]["data"]["content"] == FINAL_ANSWER
    assert events[-1]["type"] == "session.shutdown"


def test_multi_turn(cli_corpus):
    """multi_turn: bash in turn 0, bash in turn 1, the answer in turn 2."""
    events = cli_corpus["multi_turn"].events()
    assert [e["data"]["turnId"] for e in of_type(events, "assistant.turn_start")] == ["0", "1", "2"]
    tools = of_type(events, "tool.execution_complete")
    assert [t["data"]["turnId"] for t in tools] == ["0", "1"]
    for text, t in zip(TURN_ECHO, tools):
        assert text in result_text(t)


def test_multi_tools(cli_corpus):
    """multi_tools: one assistant.message asks for the three scripted tools at once; all
    three run in the same turn and succeed."""
    run = cli_corpus["multi_tools"]
    events = run.events()
    scripted = multi_tools_calls(str(run.cwd))
    with_tools = [m for m in of_type(events, "assistant.message") if m["data"]["toolRequests"]]
    assert len(with_tools) == 1
    requests = with_tools[0]["data"]["toolRequests"]
    assert [r["name"] for r in requests] == [c.name for c in scripted]
    assert [r["toolCallId"] for r in requests] == [tool_call_id("multi_tools", 1, 0, i) for i in range(len(scripted))]
    done = completions_by_call(events)
    assert set(done) == {r["toolCallId"] for r in requests}
    assert all(d["data"]["success"] and d["data"]["turnId"] == "0" for d in done.values())
    assert MULTI_ECHO[0] in result_text(done[tool_call_id("multi_tools", 1, 0, 0)])
    assert MULTI_ECHO[1] in result_text(done[tool_call_id("multi_tools", 1, 0, 1)])
    assert MULTI_VIEW_TEXT.strip() in result_text(done[tool_call_id("multi_tools", 1, 0, 2)])


def test_failing_tool(cli_corpus):
    """failing_tool: the missing file and the path outside cwd fail (the latter through a
    denied permission request); the non-zero bash exit still counts as success."""
    run = cli_corpus["failing_tool"]
    events = run.events()
    done = completions_by_call(events)
    ids = [tool_call_id("failing_tool", 1, 0, i) for i in range(len(failing_tool_calls(str(run.cwd))))]
    assert [done[i]["data"]["success"] for i in ids] == list(FAILING_EXPECTED_SUCCESS)
    missing, denied, nonzero, fine = (done[i]["data"] for i in ids)
    assert missing["error"]["code"] == "failure" and missing["error"]["message"]
    assert denied["error"]["code"] == "denied"
    assert nonzero["shellExecution"]["exitCode"] == FAILING_EXIT_CODE
    assert fine["shellExecution"]["exitCode"] == 0
    (asked,) = of_type(events, "permission.requested")
    (answered,) = of_type(events, "permission.completed")
    assert asked["data"]["permissionRequest"]["toolCallId"] == ids[1]
    assert asked["data"]["permissionRequest"]["path"] == FAILING_DENIED_PATH
    assert answered["data"]["requestId"] == asked["data"]["requestId"]
    assert answered["data"]["result"]["kind"].startswith("denied")


def test_subagent(cli_corpus):
    """subagent: the task call spawns a sub-agent whose events carry its agentId and the
    task's toolCallId, whose turns restart at 0, and which runs its own bash."""
    run = cli_corpus["subagent"]
    events = run.events()
    task_id = tool_call_id("subagent", 1, 0, 0)
    (started,) = of_type(events, "subagent.started")
    (completed,) = of_type(events, "subagent.completed")
    agent = started["agentId"]
    assert completed["agentId"] == agent
    for e in (started, completed):
        assert e["data"]["toolCallId"] == task_id
        assert e["data"]["agentName"] == SUBAGENT_TYPE and e["data"]["agentDisplayName"] == SUBAGENT_NAME
    assert completed["data"]["totalToolCalls"] == 1 and completed["data"]["durationMs"] > 0
    child = [e for e in events if e.get("agentId") == agent]
    (prompt,) = of_type(child, "user.message")
    assert prompt["data"]["source"] == f"agent-{run.session_id}"
    assert marker("subagent-child") in prompt["data"]["content"]
    turns = of_type(child, "assistant.turn_start", "assistant.turn_end")
    assert [t["data"]["turnId"] for t in of_type(turns, "assistant.turn_start")] == ["0", "1"]
    assert all(t["data"]["parentToolCallId"] == task_id for t in turns)
    (tool,) = of_type(child, "tool.execution_complete")
    assert tool["data"]["toolCallId"] == tool_call_id("subagent-child", 1, 0, 0)
    assert CHILD_ECHO in result_text(tool)
    (child_start,) = of_type(child, "tool.execution_start")
    assert child_start["data"]["parentToolCallId"] == task_id
    # the parent's task tool completes successfully with the sub-agent's answer
    task_done = completions_by_call(main_agent(events))[task_id]
    assert task_done["data"]["success"] is True
    assert [e["data"]["turnId"] for e in of_type(main_agent(events), "assistant.turn_start")] == ["0", "1"]


def test_subagent_failed(cli_corpus):
    """subagent_failed: the sub-agent's HTTP 400 gives a session.error and subagent.failed
    under its agentId, a failed task call, and the main agent still answers."""
    run = cli_corpus["subagent_failed"]
    events = run.events()
    task_id = tool_call_id("subagent_failed", 1, 0, 0)
    (failed,) = of_type(events, "subagent.failed")
    (error,) = of_type(events, "session.error")
    assert failed["data"]["toolCallId"] == task_id and failed["data"]["error"]
    assert error["agentId"] == failed["agentId"] and error["data"]["statusCode"] == 400
    assert not of_type(events, "subagent.completed")
    assert completions_by_call(events)[task_id]["data"]["success"] is False
    assert run.returncode == 0


def test_autopilot(cli_corpus):
    """autopilot: exactly the scripted number of nudges (empty, source autopilot), each a new
    interaction, then task_complete ends the session with session.task_complete."""
    events = cli_corpus["autopilot"].events()
    (mode,) = of_type(events, "session.mode_changed")
    assert mode["data"]["newMode"] == "autopilot"
    messages = of_type(events, "user.message")
    nudges = [m for m in messages if m["data"].get("isAutopilotContinuation")]
    assert len(nudges) == AUTOPILOT_NUDGES == len(messages) - 1
    assert all(n["data"]["source"] == "autopilot" and n["data"]["content"] == "" for n in nudges)
    assert len({m["data"]["interactionId"] for m in messages}) == AUTOPILOT_NUDGES + 1
    (done,) = of_type(events, "session.task_complete")
    assert done["data"] == {"summary": TASK_COMPLETE_SUMMARY, "success": True}
    (tool,) = of_type(events, "tool.execution_complete")
    assert tool["data"]["toolCallId"] == tool_call_id("autopilot", 1, AUTOPILOT_NUDGES, 0)
    assert tool["data"]["interactionId"] == nudges[-1]["data"]["interactionId"]


def test_provider_error(cli_corpus):
    """provider_error: HTTP 500 is retried 5 times (6 failed calls on the live stream), then
    session.error; no LLM call reaches the file."""
    run = cli_corpus["provider_error"]
    events = run.events()
    (error,) = of_type(events, "session.error")
    assert error["data"]["statusCode"] == 500 and error["data"]["errorType"] == "query"
    assert not of_type(events, "session.usage_record", "assistant.message")
    failures = of_type(run.stdout_events(), "model.call_failure")
    assert [f["data"]["statusCode"] for f in failures] == [500] * 6


def test_provider_bad_request(cli_corpus):
    """provider_bad_request: HTTP 400 is not retried: one failed call, then session.error."""
    run = cli_corpus["provider_bad_request"]
    (error,) = of_type(run.events(), "session.error")
    assert error["data"]["statusCode"] == 400
    assert len(of_type(run.stdout_events(), "model.call_failure")) == 1


def test_tool_then_error(cli_corpus):
    """tool_then_error: turn 0 runs bash, turn 1's LLM call fails, session.error ends it."""
    events = cli_corpus["tool_then_error"].events()
    (tool,) = of_type(events, "tool.execution_complete")
    assert tool["data"]["success"] is True
    assert [e["data"]["turnId"] for e in of_type(events, "assistant.turn_start")] == ["0", "1"]
    (error,) = of_type(events, "session.error")
    assert error["data"]["statusCode"] == 400
    assert [e["type"] for e in events][-3:] == ["assistant.turn_end", "session.error", "session.shutdown"]


def _ts(e) -> float:
    from datetime import datetime

    return datetime.fromisoformat(e["timestamp"].replace("Z", "+00:00")).timestamp()


def test_sleep_tool(cli_corpus):
    """sleep_tool: the bash tool lasts at least the scripted number of seconds."""
    events = cli_corpus["sleep_tool"].events()
    (start,) = of_type(events, "tool.execution_start")
    (done,) = of_type(events, "tool.execution_complete")
    assert f"sleep {SLEEP_TOOL_SECONDS}" in start["data"]["arguments"]["command"]
    assert _ts(done) - _ts(start) >= SLEEP_TOOL_SECONDS
    assert done["data"]["success"] is True


def test_resume(cli_corpus):
    """resume: one events.jsonl with two interactions, a session.resume between them, one
    session.shutdown per CLI process, and turn ids restarting at 0."""
    events = cli_corpus["resume"].events()
    types = [e["type"] for e in events]
    assert types.count("session.start") == 1 and types.count("session.resume") == 1
    assert types.count("session.shutdown") == 2
    assert types.index("session.shutdown") < types.index("session.resume")
    messages = of_type(events, "user.message")
    assert [marker("plain") in m["data"]["content"] for m in messages] == [True, False]
    assert marker("resume") in messages[1]["data"]["content"]
    first, second = (m["data"]["interactionId"] for m in messages)
    assert first != second
    turns = [(e["data"]["interactionId"], e["data"]["turnId"]) for e in of_type(events, "assistant.turn_start")]
    assert turns == [(first, "0"), (first, "1"), (second, "0"), (second, "1")]
    tools = of_type(events, "tool.execution_complete")
    assert PLAIN_ECHO in result_text(tools[0]) and RESUME_ECHO in result_text(tools[1])


# ---------------------------------------------------------------------------------------
# Live runs: the Popen form and a crash


def test_kill_mid_tool_leaves_stale_lock(cli, provider, tmp_path):
    """A CLI killed with SIGKILL while a tool runs leaves events.jsonl mid-turn and its
    inuse.<pid>.lock behind; its orphaned tool processes are killed too."""
    proc = cli.start(prompt_for("sleep_tool", 30), home=tmp_path / "home", port=provider.port, cwd=tmp_path / "work")
    try:
        def started() -> bool:
            assert proc.popen.poll() is None, "the CLI exited before its tool started"
            return proc.events_path.exists() and "tool.execution_start" in proc.events_path.read_text()

        wait_until(started, timeout=60, what="the tool to start")
        lock = proc.session_dir / f"inuse.{proc.pid}.lock"
        assert lock.read_text().strip() == str(proc.pid)
        wait_until(lambda: descendants(proc.pid), timeout=30, what="the bash tool process")
        children = descendants(proc.pid)
    finally:
        proc.kill()
    assert proc.popen.wait(timeout=10) == -signal.SIGKILL
    assert lock.exists()
    types = [json.loads(line)["type"] for line in proc.events_path.read_text().splitlines()]
    assert types[-1] == "tool.execution_start" and "session.shutdown" not in types
    def alive() -> list[int]:
        return [p for p in children if os.path.exists(f"/proc/{p}") and _state(p) != "Z"]

    wait_until(lambda: not alive(), timeout=10, what="the orphaned tool processes killed", seen=alive)


def _state(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "gone"


def test_missing_binary_message(monkeypatch, tmp_path):
    """A missing CLI binary fails with the command that installs it."""
    monkeypatch.setenv("COPILOT_CLI_BIN", str(tmp_path / "nope"))
    with pytest.raises(CopilotCLIMissing, match="npm install --prefix tests/cli"):
        CopilotCLI()


# ---------------------------------------------------------------------------------------
# The scripted provider itself (no CLI)


def _body(*messages, tools=("bash",)):
    return {
        "model": MODEL,
        "messages": [{"role": "system", "content": "sys"}, *messages],
        "tools": [{"type": "function", "function": {"name": t}} for t in tools],
    }


def test_decide_follows_the_conversation():
    """The reply depends only on the request: the last marker message picks the script and
    the assistant messages after it pick the step."""
    first = _body({"role": "user", "content": f"x {marker('plain')}"})
    ctx, reply = decide(first)
    assert (ctx.scenario, ctx.interaction, ctx.step) == ("plain", 1, 0)
    assert [t.name for t in reply.tool_calls] == ["bash"] and reply.finish_reason == "tool_calls"
    assert reply.tool_calls[0].id == tool_call_id("plain", 1, 0, 0)
    after = _body(
        {"role": "user", "content": marker("plain")},
        {"role": "assistant", "content": None, "tool_calls": []},
        {"role": "tool", "tool_call_id": "c", "content": "ok"},
    )
    ctx, reply = decide(after)
    assert ctx.step == 1 and reply.content == FINAL_ANSWER and reply.usage == usage_for("plain", 1, 1)
    resumed = _body(*after["messages"][1:], {"role": "user", "content": [{"type": "text", "text": marker("resume")}]})
    ctx, _ = decide(resumed)
    assert (ctx.scenario, ctx.interaction, ctx.step) == ("resume", 2, 0)
    nudged = _body({"role": "user", "content": marker("autopilot")}, {"role": "assistant", "content": "a"},
                   {"role": "user", "content": "go on"})
    ctx, reply = decide(nudged)
    assert ctx.nudges == 1 and not reply.tool_calls
    assert parse_completion_id(completion_id("subagent-child", 3, 4)) == ("subagent-child", 3, 4)


def test_usage_differs_per_call():
    """Scripted token counts differ between scenarios, interactions and steps."""
    keys = [(s, i, n) for s in SCRIPTED_CALLS for i in (1, 2) for n in range(3)]
    usages = {(u.prompt_tokens, u.completion_tokens, u.cached_tokens) for u in (usage_for(*k) for k in keys)}
    assert len(usages) == len(keys)


def test_provider_serves_sse_and_shuts_down_cleanly():
    """The server answers /v1/models, streams SSE chunks ending in usage and [DONE], answers
    scripted HTTP errors, and leaves no thread behind after the with block."""
    with ScriptedProvider() as p:
        with urllib.request.urlopen(p.base_url + "/models", timeout=10) as r:
            assert json.load(r)["data"][0]["id"] == MODEL
        req = urllib.request.Request(
            p.base_url + "/chat/completions",
            data=json.dumps(_body({"role": "user", "content": marker("plain")})).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=10) as r:
            assert r.headers["Content-Type"] == "text/event-stream"
            lines = [ln for ln in r.read().decode().split("\n\n") if ln]
        assert lines[-1] == "data: [DONE]"
        chunks = [json.loads(ln.removeprefix("data: ")) for ln in lines[:-1]]
        assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"
        assert chunks[-1]["usage"]["prompt_tokens"] == usage_for("plain", 1, 0).prompt_tokens
        assert chunks[-1]["usage"]["prompt_tokens_details"]["cached_tokens"] == usage_for("plain", 1, 0).cached_tokens
        assert chunks[0]["choices"][0]["delta"]["tool_calls"][0]["function"]["name"] == "bash"
        err = urllib.request.Request(
            p.base_url + "/chat/completions",
            data=json.dumps(_body({"role": "user", "content": marker("provider_error")})).encode(),
        )
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(err, timeout=10)
        assert e.value.code == 500
        assert Counter(s.scenario for s in p.served) == {"plain": 1, "provider_error": 1}
        mine = p.threads()
    assert len(mine) >= 2  # serving, and the request threads not yet finished when it was taken
    # Only this provider's own threads: the session's provider may be serving a CLI meanwhile.
    assert not [t for t in mine if t.is_alive()]
