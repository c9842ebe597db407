"""`copilot-otel replay`: real CLI event logs become spans shaped as docs/spans.md says.

Every expectation here is derived from the event log itself (or from the CLI's own OTel
output), never copied from what copilot-otel printed.
"""

from __future__ import annotations

import json
import logging
import multiprocessing
import os
import re
import shutil
import signal
import threading
from collections import Counter
from pathlib import Path

import pytest

from copilot_otel.base.workers import WorkerError
from copilot_otel.delivery.sinks import MemorySink
from copilot_otel.model import attrs as A
from copilot_otel.replay.runner import find_event_files, replay_files, resolve
from tests.support.commands import run_inspect, run_replay
from tests.support.copilot_cli import CORPUS_SCENARIOS, prompt_for
from tests.support.events import cli_shows_failed
from tests.support.model import label
from tests.support.net import wait_until
from tests.support.otlp_json import iso_ns, read_spans


@pytest.fixture(scope="module")
def exported(cli_corpus, tmp_path_factory):
    """Each scenario replayed once to its own OTLP JSON file: scenario -> (run, spans)."""
    out = {}
    root = tmp_path_factory.mktemp("replay")
    for name, run in cli_corpus.items():
        target = root / f"{name}.jsonl"
        result = run_replay(str(run.session_dir), "--traces-file", str(target))
        assert result.returncode == 0, result.stderr.decode()
        out[name] = (run, read_spans(target))
    return out


def by_op(spans, op):
    return [s for s in spans if s.attributes.get("gen_ai.operation.name") == op]


def turn_spans(spans):
    return [s for s in spans if s.name == "turn"]


@pytest.mark.parametrize("scenario", CORPUS_SCENARIOS)
def test_one_span_per_turn_llm_call_and_tool(exported, scenario):
    """Turn, chat and tool spans match the log one for one, with the events' own timestamps."""
    run, spans = exported[scenario]
    events = run.events()
    starts = [e for e in events if e["type"] == "assistant.turn_start"]
    usages = [e for e in events if e["type"] == "session.usage_record"]
    tools = [e for e in events if e["type"] == "tool.execution_start"]
    turns = turn_spans(spans)
    assert sorted(s.start_time_unix_nano for s in turns) == sorted(iso_ns(e["timestamp"]) for e in starts)
    chats = by_op(spans, "chat")
    assert sorted(s.end_time_unix_nano for s in chats) == sorted(iso_ns(e["timestamp"]) for e in usages)
    # A chat lasts usage.duration, clamped so it never starts before its turn.
    turn_start = {(e.get("agentId"), e["data"]["interactionId"], e["data"]["turnId"]): iso_ns(e["timestamp"])
                  for e in starts}
    expected = []
    for usage in usages:
        agent = usage.get("agentId")
        opened = [t for (a, _i, _t), t in turn_start.items() if a == agent and t <= iso_ns(usage["timestamp"])]
        end = iso_ns(usage["timestamp"])
        expected.append(end - max(end - usage["data"]["usage"]["duration"] * 1_000_000, max(opened)))
    assert sorted(s.duration_ns for s in chats) == sorted(expected)
    tool_spans = by_op(spans, "execute_tool")
    assert sorted(s.attributes["gen_ai.tool.call.id"] for s in tool_spans) == sorted(e["data"]["toolCallId"]
                                                                                     for e in tools)
    completes = {e["data"]["toolCallId"]: e for e in events if e["type"] == "tool.execution_complete"}
    # A task call holds its sub-agent: it ends at its completion, or at the sub-agent's if that comes later.
    subagents = {e["data"]["toolCallId"]: iso_ns(e["timestamp"]) for e in events if e["type"] == "subagent.completed"}
    for span in tool_spans:
        call_id = span.attributes["gen_ai.tool.call.id"]
        done = completes[call_id]
        assert span.end_time_unix_nano == max(iso_ns(done["timestamp"]), subagents.get(call_id, 0))
        assert (span.status_code == "ERROR") == cli_shows_failed(done["data"])
        if done["data"]["success"] is False:
            assert span.attributes["error.type"] == done["data"]["error"]["code"]
        elif cli_shows_failed(done["data"]):  # a command that exited non-zero: the CLI's own flag stays on the span
            assert span.attributes["error.type"] in ("command_nonzero_exit", "command_timeout")
            assert span.attributes["github.copilot.tool.success"] is True


@pytest.mark.parametrize("scenario", CORPUS_SCENARIOS)
def test_turns_end_at_their_turn_end(exported, scenario):
    """Each turn span lasts from its assistant.turn_start to the next turn_end of the same agent
    and turn id (a turn_end carries no interaction id)."""
    run, spans = exported[scenario]
    opened, expected = {}, []
    for e in run.events():
        if e["type"] in ("assistant.turn_start", "assistant.turn_end"):
            key = (e.get("agentId"), e["data"]["turnId"])
            if e["type"] == "assistant.turn_start":
                opened[key] = iso_ns(e["timestamp"])
            else:
                expected.append((opened.pop(key), iso_ns(e["timestamp"])))
    assert not opened, "every turn of the corpus ends"
    assert sorted((s.start_time_unix_nano, s.end_time_unix_nano) for s in turn_spans(spans)) == sorted(expected)


@pytest.mark.parametrize("scenario", CORPUS_SCENARIOS)
def test_tree_shape(exported, scenario):
    """One trace per interaction under an invoke_agent root; chats and tools under their turn."""
    run, spans = exported[scenario]
    events = run.events()
    by_id = {s.span_id: s for s in spans}
    roots = [s for s in spans if s.parent_span_id is None]
    main_messages = [e for e in events if e["type"] == "user.message" and not e.get("agentId")]
    assert len(roots) == len(main_messages)
    assert {r.trace_id for r in roots} == {s.trace_id for s in spans}
    assert len({r.trace_id for r in roots}) == len(roots)
    # The corpus runs BYOK against an OpenAI-compatible server: its usage records say providerType "openai";
    # a session whose every call failed has none, and its log names no provider (the Copilot API is assumed).
    provider = "openai" if any(e["type"] == "session.usage_record" for e in events) else "github"
    for root in roots:
        assert root.name == "invoke_agent copilot"
        assert root.attributes["gen_ai.operation.name"] == "invoke_agent"
        assert root.attributes["gen_ai.provider.name"] == provider
        assert root.attributes["gen_ai.conversation.id"] == run.session_id
    for span in spans:
        if span.parent_span_id is not None:
            parent = by_id[span.parent_span_id]  # every parent was exported
            assert parent.trace_id == span.trace_id
            assert parent.start_time_unix_nano <= span.start_time_unix_nano
            # The CLI may write subagent.completed a moment after its task call completed.
            if not (span.name.startswith("invoke_agent ") and parent.name == "execute_tool task"):
                assert parent.end_time_unix_nano >= span.end_time_unix_nano, (parent.name, span.name)
    for turn in turn_spans(spans):
        assert by_id[turn.parent_span_id].attributes["gen_ai.operation.name"] == "invoke_agent"
    # A chat's parent is the turn of the same agent and turn id.
    for chat in by_op(spans, "chat"):
        parent = by_id[chat.parent_span_id]
        assert label(parent) == f"turn {chat.attributes[A.COPILOT_TURN_ID]}"
    # Tools hang under the turn they were called in.
    starts = {e["data"]["toolCallId"]: e for e in events if e["type"] == "tool.execution_start"}
    for tool in by_op(spans, "execute_tool"):
        parent = by_id[tool.parent_span_id]
        assert label(parent) == f"turn {starts[tool.attributes['gen_ai.tool.call.id']]['data']['turnId']}"


@pytest.mark.parametrize("scenario", ["subagent", "subagent_failed"])
def test_subagent_nested_under_its_task_call(exported, scenario):
    """A sub-agent's invoke_agent span sits under the task tool span, its turns under it."""
    run, spans = exported[scenario]
    events = run.events()
    by_id = {s.span_id: s for s in spans}
    started = [e for e in events if e["type"] == "subagent.started"]
    assert started, "the scenario spawns a sub-agent"
    for event in started:
        sub = [s for s in spans if s.name == f"invoke_agent {event['data']['agentName']}"]
        assert len(sub) == 1
        parent = by_id[sub[0].parent_span_id]
        assert parent.attributes["gen_ai.tool.name"] == "task"
        assert parent.attributes["gen_ai.tool.call.id"] == event["data"]["toolCallId"]
        agent_turns = [e for e in events if e["type"] == "assistant.turn_start"
                       and e.get("agentId") == event["agentId"]]
        children = [s for s in turn_spans(spans) if s.parent_span_id == sub[0].span_id]
        assert len(children) == len(agent_turns)
        failed = any(e["type"] == "subagent.failed" for e in events)
        assert (sub[0].status_code == "ERROR") == failed


def test_autopilot_nudges_marked(exported):
    """Each autopilot nudge starts a trace marked as a continuation; task_complete ends the last."""
    run, spans = exported["autopilot"]
    nudges = [e for e in run.events() if e["type"] == "user.message" and e["data"].get("isAutopilotContinuation")]
    roots = sorted((s for s in spans if s.parent_span_id is None), key=lambda s: s.start_time_unix_nano)
    marked = [r for r in roots if r.attributes.get("github.copilot.autopilot.continuation") is True]
    assert len(marked) == len(nudges) == 2
    assert {r.attributes[A.COPILOT_INTERACTION_ID] for r in marked} == {e["data"]["interactionId"] for e in nudges}
    assert roots[-1].attributes["github.copilot.interaction.end"] == "task_complete"


def test_provider_error_is_an_error(exported):
    """A session.error ends the interaction with status ERROR and its error type."""
    run, spans = exported["provider_error"]
    error = next(e for e in run.events() if e["type"] == "session.error")
    root = next(s for s in spans if s.parent_span_id is None)
    assert root.status_code == "ERROR"
    assert root.attributes["error.type"] == error["data"]["errorType"]
    assert root.attributes["http.response.status_code"] == error["data"]["statusCode"]


@pytest.mark.parametrize("scenario", ["provider_error", "subagent_failed", "tool_then_error"])
def test_a_failed_llm_call_fails_its_turn(exported, scenario):
    """The CLI writes a turn's turn_end before the session.error that ended it: the turn (of the
    same agent) is exported as an error all the same, with the error's type and HTTP status."""
    run, spans = exported[scenario]
    events = run.events()
    errors = [(i, e) for i, e in enumerate(events) if e["type"] == "session.error"]
    assert errors, "the scenario hits a provider error"
    for index, error in errors:
        agent = error.get("agentId")
        ended = [e for e in events[:index] if e["type"] == "assistant.turn_end" and e.get("agentId") == agent][-1]
        turn = [s for s in turn_spans(spans) if s.end_time_unix_nano == iso_ns(ended["timestamp"])
                and s.attributes[A.COPILOT_TURN_ID] == ended["data"]["turnId"]]
        assert len(turn) == 1
        assert turn[0].status_code == "ERROR"
        assert turn[0].attributes["error.type"] == error["data"]["errorType"]
        if "statusCode" in error["data"]:
            assert turn[0].attributes["http.response.status_code"] == error["data"]["statusCode"]
    failed = {s.span_id for s in turn_spans(spans) if s.status_code == "ERROR"}
    assert len(failed) == len(errors)  # the turns that went well are not errors


def test_a_log_copied_into_itself_exports_nothing_twice(cli_corpus, tmp_path):
    """A log appended to itself after its session.shutdown: every second copy of a line is a
    duplicate event id, counted and skipped; the spans are those of one copy."""
    run = cli_corpus["subagent"]
    data = run.events_path.read_bytes()
    doubled = tmp_path / run.session_id / "events.jsonl"
    doubled.parent.mkdir()
    doubled.write_bytes(data + data)
    once, twice = tmp_path / "once.jsonl", tmp_path / "twice.jsonl"
    assert run_replay(str(run.events_path), "--traces-file", str(once)).returncode == 0
    result = run_replay(str(doubled), "--traces-file", str(twice))
    assert result.returncode == 0

    def key(s):
        return s.trace_id, s.span_id, s.name, s.start_time_unix_nano, s.end_time_unix_nano, s.status_code

    assert sorted(map(key, read_spans(twice))) == sorted(map(key, read_spans(once)))
    assert result.stderr.decode().count("duplicate_id") == len(data.splitlines())


def test_an_aborted_loop(cli, provider, tmp_path):
    """Ctrl-C (SIGINT) while a tool runs: the CLI writes turn_end and abort (then, mostly, shutdown). The tool is cut
    off (ERROR aborted), the interaction ends as aborted, not failed, and it is one end of the
    agent loop, as the assistant.idle of the CLI's live stream says; file and stream agree."""
    import signal
    import time

    proc = cli.start(prompt_for("sleep_tool", 30), home=tmp_path / "home", port=provider.port, cwd=tmp_path / "work",
                     output_json=True)
    try:
        wait_until(lambda: proc.events_path.exists() and b"tool.execution_start" in proc.events_path.read_bytes(),
                   timeout=90, what="the tool to start")
        time.sleep(0.3)  # the scenario: Ctrl-C while the tool runs, not as it starts
        proc.kill(signal.SIGINT, tools=False)
        run = proc.wait(timeout=60)
    finally:
        proc.kill()
    events = run.events()
    # turn_end and abort come in either order, and the process may exit before it writes the
    # shutdown (all seen): the model must take each.
    after_tool = [e["type"] for e in events[[e["type"] for e in events].index("tool.execution_start") + 1:]]
    assert {"abort", "assistant.turn_end"} <= set(after_tool) <= {"abort", "assistant.turn_end", "session.shutdown"}
    stream = [e["type"] for e in run.stdout_events()]
    assert stream.count("assistant.idle") <= 1
    abort = next(e for e in events if e["type"] == "abort")
    from_file, from_stream = tmp_path / "file.jsonl", tmp_path / "stream.jsonl"
    metrics = tmp_path / "metrics.prom"
    assert run_replay(str(run.events_path), "--traces-file", str(from_file)).returncode == 0
    assert run_replay("-", "--traces-file", str(from_stream), "--metrics-file", str(metrics),
                      stdin=run.stdout_path.read_bytes()).returncode == 0
    for spans in (read_spans(from_file), read_spans(from_stream)):
        tool = by_op(spans, "execute_tool")
        assert len(tool) == 1 and tool[0].status_code == "ERROR" and tool[0].attributes["error.type"] == "aborted"
        # Cut off at the abort, but never after its turn (which may have ended just before the abort).
        turn = next(s for s in spans if s.span_id == tool[0].parent_span_id)
        assert tool[0].end_time_unix_nano == min(iso_ns(abort["timestamp"]), turn.end_time_unix_nano)
        root = [s for s in spans if s.parent_span_id is None]
        assert len(root) == 1 and root[0].status_code == "UNSET"
        assert root[0].attributes["github.copilot.interaction.end"] == "aborted"
        assert root[0].attributes[A.COPILOT_ABORT_REASON] == abort["data"]["reason"]
    assert 'copilot_completion_signals_total{signal="idle"} 1.0' in metrics.read_text()
    # The cut-off tool counts, with its outcome.
    assert 'copilot_tool_calls_total{outcome="aborted",tool="bash"} 1.0' in metrics.read_text()


def test_ids_are_stable_across_replays(cli_corpus, tmp_path):
    """Replaying the same logs twice gives identical spans (ids, times, attributes)."""
    first, second = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    for target in (first, second):
        result = run_replay(str(cli_corpus.home_all), "--traces-file", str(target))
        assert result.returncode == 0, result.stderr.decode()
    a, b = read_spans(first), read_spans(second)
    assert len(a) > 50
    assert sorted(map(repr, a)) == sorted(map(repr, b))


@pytest.mark.parametrize("scenario", CORPUS_SCENARIOS)
def test_agrees_with_the_cli_own_otel(exported, scenario):
    """Same LLM calls, tool executions, tool names, outcomes and tokens as the CLI's own OTel (a command
    that exited non-zero fails in ours, where the CLI's OTel says only its exit code)."""
    run, spans = exported[scenario]
    theirs = [s for s in run.otel() if s.get("type") == "span"]
    their_chats = [s for s in theirs if s["attributes"].get("gen_ai.operation.name") == "chat"]
    their_tools = [s for s in theirs if s["attributes"].get("gen_ai.operation.name") == "execute_tool"]
    ours_chats, ours_tools = by_op(spans, "chat"), by_op(spans, "execute_tool")
    # The CLI also records failed attempts as chat spans (status ERROR); the log has only the successes.
    their_ok_chats = [s for s in their_chats if s["status"]["code"] != 2]
    assert len(ours_chats) == len(their_ok_chats)
    for key in ("gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens"):
        assert sum(s.attributes.get(key, 0) for s in ours_chats) == sum(s["attributes"].get(key, 0)
                                                                        for s in their_ok_chats)
    assert Counter(s.attributes["gen_ai.tool.name"] for s in ours_tools) == Counter(
        s["attributes"]["gen_ai.tool.name"] for s in their_tools)
    # A command that exited non-zero is ERROR in ours, as the CLI's screen says; its OTel leaves it unset and
    # tells only by process.exit.code.
    assert Counter((s.attributes["gen_ai.tool.call.id"], s.status_code == "ERROR") for s in ours_tools) == Counter(
        (s["attributes"]["gen_ai.tool.call.id"], s["status"]["code"] == 2
         or bool(s["attributes"].get("process.exit.code"))) for s in their_tools)


def _all_strings(spans) -> str:
    return json.dumps([s.to_dict() for s in spans], default=str)


def test_no_content_unless_opted_in(cli_corpus, tmp_path):
    """Prompts, arguments and results stay out of spans unless content capture is on."""
    run = cli_corpus["plain"]
    prompt = next(e for e in run.events() if e["type"] == "user.message")["data"]["content"]
    command = next(e for e in run.events() if e["type"] == "tool.execution_start")["data"]["arguments"]["command"]
    off, on = tmp_path / "off.jsonl", tmp_path / "on.jsonl"
    assert run_replay(str(run.session_dir), "--traces-file", str(off)).returncode == 0
    assert run_replay(str(run.session_dir), "--traces-file", str(on),
                      env={"OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "true"}).returncode == 0
    text_off, text_on = _all_strings(read_spans(off)), _all_strings(read_spans(on))
    assert prompt not in text_off and command not in text_off
    assert prompt in text_on and command in text_on


def test_malformed_lines_reported_and_skipped(cli_corpus, tmp_path):
    """Bad lines are named by file and line number; the good lines around them still export."""
    run = cli_corpus["plain"]
    lines = run.events_path.read_bytes().splitlines(keepends=True)
    folder = tmp_path / "session-state" / run.session_id
    folder.mkdir(parents=True)
    bad = [b"this is not json\n", b'["an", "array"]\n', b'{"type": "x", "data": {}}\n', b"\xff\xfe\xfa\n"]
    mixed = lines[:2] + bad[:2] + lines[2:4] + bad[2:] + lines[4:]
    (folder / "events.jsonl").write_bytes(b"".join(mixed))
    clean_out, mixed_out = tmp_path / "clean.jsonl", tmp_path / "mixed.jsonl"
    assert run_replay(str(run.session_dir), "--traces-file", str(clean_out)).returncode == 0
    result = run_replay(str(folder), "--traces-file", str(mixed_out))
    assert result.returncode == 0
    stderr = result.stderr.decode()
    for number in (3, 4, 7, 8):  # 1-based line numbers of the planted lines
        assert f"events.jsonl:{number}:" in stderr
    assert "4 malformed line(s) skipped" in stderr
    assert sorted(map(repr, read_spans(clean_out))) == sorted(map(repr, read_spans(mixed_out)))


def test_resolve_names_each_log_once_by_its_real_path(cli_corpus, tmp_path):
    """resolve() gives what Path.resolve() gives for each log found, each file once, in folder
    order: also through a session-state that is a symlink, and for an alias of a session folder (read once); a
    session folder or an events.jsonl that links out of session-state is refused."""
    home, elsewhere = tmp_path / "home", tmp_path / "elsewhere"
    shutil.copytree(cli_corpus.home_all, elsewhere / "real-home")
    (home / "session-state").mkdir(parents=True)
    runs = sorted(cli_corpus.values(), key=lambda run: run.session_id)
    for run in runs[:4]:
        shutil.copytree(run.session_dir, home / "session-state" / run.session_id)
    linked = elsewhere / "real-home" / "session-state" / runs[4].session_id
    (home / "session-state" / "linked-folder").symlink_to(linked)
    (home / "session-state" / "linked-file").mkdir()
    (home / "session-state" / "linked-file" / "events.jsonl").symlink_to(runs[5].events_path)
    (home / "session-state" / "twice").symlink_to(home / "session-state" / runs[0].session_id)
    (home / "session-state" / "no-log").mkdir()
    (tmp_path / "linked-home").mkdir()
    (tmp_path / "linked-home" / "session-state").symlink_to(home / "session-state")
    for argument in (home, tmp_path / "linked-home", home / "session-state" / ".." / "session-state"):
        expected = list(dict.fromkeys(p.resolve() for p in find_event_files(argument)))
        assert expected == [home.resolve() / "session-state" / run.session_id / "events.jsonl" for run in runs[:4]]
        assert resolve([argument]) == expected
    assert resolve([home, tmp_path / "linked-home"]) == expected


def test_missing_path_is_a_clear_error(tmp_path):
    """A path that does not exist: exit 2 and a message naming it."""
    result = run_replay(str(tmp_path / "nope"), "--traces-file", str(tmp_path / "t.jsonl"))
    assert result.returncode == 2
    assert "nope: no such file or directory" in result.stderr.decode()


def test_export_failure_exits_non_zero(cli_corpus, unused_port, tmp_path):
    """When the OTLP backend cannot be reached for longer than --give-up-after, replay says so, names the
    session it could not deliver, and exits 1."""
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{unused_port}",
           "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf", "OTEL_EXPORTER_OTLP_TIMEOUT": "1"}
    run = cli_corpus["plain"]
    result = run_replay(str(run.session_dir), "--give-up-after", "2", "--state-dir", str(tmp_path), env=env)
    assert result.returncode == 1
    stderr = result.stderr.decode()
    assert "export failed, gave up" in stderr and f"1 of 1 session(s) not delivered: {run.session_id}" in stderr


def test_default_destination_is_announced(cli_corpus, tmp_path):
    """With nothing configured, traces go to a file in the state dir and replay says where."""
    result = run_replay(str(cli_corpus["plain"].session_dir), "--state-dir", str(tmp_path / "state"))
    assert result.returncode == 0
    target = tmp_path / "state" / "traces.jsonl"
    assert str(target) in result.stderr.decode()
    assert len(read_spans(target)) == len(read_spans_of(cli_corpus["plain"], tmp_path))


def read_spans_of(run, tmp_path: Path):
    target = tmp_path / "reference.jsonl"
    assert run_replay(str(run.events_path), "--traces-file", str(target)).returncode == 0
    return read_spans(target)


@pytest.mark.parametrize("protocol", ["grpc", "http/protobuf"])
def test_otlp_export_reaches_a_real_receiver(cli_corpus, tmp_path, protocol):
    """Over OTLP/gRPC and OTLP/HTTP, a real receiver (Rotel) gets the same spans as the file."""
    from tests.support.otlp_receiver import OtlpReceiver

    reference = tmp_path / "reference.jsonl"
    assert run_replay(str(cli_corpus.home_all), "--traces-file", str(reference)).returncode == 0
    expected = read_spans(reference)
    with OtlpReceiver() as receiver:
        endpoint = receiver.grpc_endpoint if protocol == "grpc" else receiver.http_base
        result = run_replay(str(cli_corpus.home_all), env={"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint,
                                                           "OTEL_EXPORTER_OTLP_PROTOCOL": protocol,
                                                           "OTEL_SERVICE_NAME": "agents-under-test"})
        assert result.returncode == 0, result.stderr.decode()
        received = receiver.wait_for_spans(len(expected), timeout=20)
    assert len(received) == len(expected)

    def key(span):
        return (span.trace_id, span.span_id, span.parent_span_id, span.name, span.kind, span.start_time_unix_nano,
                span.end_time_unix_nano, span.status_code, json.dumps(span.attributes, sort_keys=True, default=str))

    assert sorted(map(key, received)) == sorted(map(key, expected))
    assert {s.resource["service.name"] for s in received} == {"agents-under-test"}


def many_sessions(cli_corpus, home: Path, copies: int) -> Path:
    """A COPILOT_HOME holding ``copies`` copies of every real session, each in a folder of its own
    (the folder's name is the session id, so each copy has trace and span ids of its own)."""
    for n in range(copies):
        for run in cli_corpus.values():
            shutil.copytree(run.session_dir, home / "session-state" / f"{run.session_id}-{n:02d}")
    return home


def test_worker_processes_write_exactly_what_one_process_writes(cli_corpus, tmp_path):
    """A replay of many sessions shared by worker processes writes the same requests, byte for byte,
    as one process; a bad line in one of the files is still named with its file and line."""
    home = many_sessions(cli_corpus, tmp_path / "home", copies=11)  # 132 sessions: enough for workers
    bad = sorted((home / "session-state").glob("*/events.jsonl"))[70].resolve()
    lines = bad.read_bytes().splitlines(keepends=True)
    bad.write_bytes(b"".join(lines[:2] + [b"this is not json\n"] + lines[2:]))
    out = {}
    for workers in ("1", "2"):
        target = tmp_path / f"workers-{workers}.jsonl"
        result = run_replay(str(home), "--traces-file", str(target), "--workers", workers, "--log-level", "debug")
        assert result.returncode == 0, result.stderr.decode()
        out[workers] = (target, result.stderr.decode())
    (single, single_log), (multi, multi_log) = out["1"], out["2"]
    assert "in 2 worker processes (fork)" in multi_log and "worker processes" not in single_log
    assert multi.read_bytes() == single.read_bytes()
    reference = tmp_path / "reference.jsonl"
    assert run_replay(str(cli_corpus.home_all), "--traces-file", str(reference)).returncode == 0
    assert len(read_spans(multi)) == 11 * len(read_spans(reference))
    for log in (single_log, multi_log):
        assert f"{bad}:3: skipped line (not_json)" in log
        assert "1 malformed line(s) skipped" in log


@pytest.mark.parametrize("protocol", ["grpc", "http/protobuf"])
def test_worker_processes_export_over_otlp(cli_corpus, tmp_path, protocol):
    """Over OTLP/gRPC and OTLP/HTTP, a replay shared by worker processes delivers to a real receiver
    (Rotel) the same spans as the file replay of the same sessions."""
    from tests.support.otlp_receiver import OtlpReceiver

    home = many_sessions(cli_corpus, tmp_path / "home", copies=11)
    reference = tmp_path / "reference.jsonl"
    assert run_replay(str(home), "--traces-file", str(reference), "--workers", "1").returncode == 0
    expected = read_spans(reference)
    with OtlpReceiver() as receiver:
        endpoint = receiver.grpc_endpoint if protocol == "grpc" else receiver.http_base
        result = run_replay(str(home), "--workers", "2", "--log-level", "debug",
                            env={"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, "OTEL_EXPORTER_OTLP_PROTOCOL": protocol})
        assert result.returncode == 0, result.stderr.decode()
        received = receiver.wait_for_spans(len(expected), timeout=20)
    assert "in 2 worker processes" in result.stderr.decode()

    def key(span):
        return (span.trace_id, span.span_id, span.parent_span_id, span.name, span.kind, span.start_time_unix_nano,
                span.end_time_unix_nano, span.status_code, json.dumps(span.attributes, sort_keys=True, default=str))

    assert sorted(map(key, received)) == sorted(map(key, expected))


def test_worker_processes_export_failure_exits_non_zero(cli_corpus, tmp_path, unused_port):
    """A replay shared by worker processes whose OTLP backend cannot be reached exits 1 and says so."""
    home = many_sessions(cli_corpus, tmp_path / "home", copies=11)
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{unused_port}",
           "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf", "OTEL_EXPORTER_OTLP_TIMEOUT": "2"}
    result = run_replay(str(home), "--workers", "2", "--log-level", "debug", "--give-up-after", "2",
                        "--state-dir", str(tmp_path / "state"), env=env)
    assert result.returncode == 1
    assert "in 2 worker processes" in result.stderr.decode()
    assert "export failed" in result.stderr.decode()


def test_worker_processes_hand_back_the_same_span_records(cli_corpus, caplog):
    """For a sink that encodes spans itself (OTLP), workers hand back span records: the same, in the
    same order, as one process makes. With another thread running, the workers are spawned, not forked."""
    caplog.set_level(logging.DEBUG, logger="copilot_otel")
    files = resolve([cli_corpus.home_all])
    expected, shared = MemorySink(), MemorySink()
    replay_files(files, expected, workers=1, shard_files=2)
    stop = threading.Event()
    other = threading.Thread(target=stop.wait)
    other.start()
    try:
        replay_files(files, shared, workers=2, shard_files=2)
    finally:
        stop.set()
        other.join()
    assert len(expected.records) > 50
    assert shared.records == expected.records
    assert [r.getMessage() for r in caplog.records if "worker processes" in r.getMessage()] == [
        f"replaying {len(files)} files in 2 worker processes (spawn)"]


def test_workers_that_die_fail_the_replay(cli_corpus):
    """Worker processes killed in the middle of a replay, with shares still to do, make it raise WorkerError (the
    CLI then exits 1), and the pool is stopped. (Killing one of two is no sure test: when it dies between shares
    and the other does the rest before the pool looks, the replay is whole, and rightly not failed: seen once in
    CI, with four test processes on two cores.)"""
    killed = []

    def kill_the_workers(_path):
        if not killed:  # at the first log handed out: 11 of the 12 one-log shares are still to come
            killed.extend(multiprocessing.active_children())
            for victim in killed:
                os.kill(victim.pid, signal.SIGKILL)

    with pytest.raises(WorkerError, match="died"):
        replay_files(resolve([cli_corpus.home_all]), MemorySink(), workers=2, shard_files=1, on_file=kill_the_workers)
    assert len(killed) == 2 and not multiprocessing.active_children()


@pytest.mark.parametrize("scenario", ["subagent", "autopilot", "provider_error", "failing_tool", "resume"])
def test_inspect_prints_the_session_tree(cli_corpus, scenario):
    """`inspect` shows interactions, turns, LLM calls with tokens, tools with outcomes, sub-agents
    under their task call, nudges and how each interaction ended, as the log says."""
    run = cli_corpus[scenario]
    result = run_inspect(run.session_id, "--copilot-home", str(run.home))
    assert result.returncode == 0, result.stderr.decode()
    out = result.stdout.decode()
    events = run.events()
    lines = out.splitlines()
    interactions = [e for e in events if e["type"] == "user.message" and not e.get("agentId")]
    assert sum(1 for line in lines if "── interaction " in line) == len(interactions)
    for usage in (e["data"]["usage"] for e in events if e["type"] == "session.usage_record"):
        assert re.search(rf"chat {re.escape(usage['model'])}  \S+ m?s  in={usage['inputTokens']} "
                         rf"out={usage['outputTokens']}", out), out
    names = {e["data"]["toolCallId"]: e["data"]["toolName"] for e in events if e["type"] == "tool.execution_start"}
    for done in (e for e in events if e["type"] == "tool.execution_complete"):
        exit_code = done["data"].get("shellExecution", {}).get("exitCode")
        outcome = ("ok" if done["data"]["success"] and not exit_code
                   else f"failed (command_nonzero_exit, exit code {exit_code})" if done["data"]["success"]
                   else f"failed ({done['data']['error']['code']})")
        assert f"tool {names[done['data']['toolCallId']]} {outcome}" in out
    for started in (e for e in events if e["type"] == "subagent.started"):
        task_line = next(i for i, line in enumerate(lines) if "tool task" in line)
        assert f"sub-agent {started['data']['agentName']}" in lines[task_line + 1]
    nudges = sum(1 for e in interactions if e["data"].get("isAutopilotContinuation"))
    assert out.count("(autopilot nudge)") == nudges
    for done in (e for e in events if e["type"] == "session.task_complete"):
        assert f"task_complete: {done['data']['summary']}" in out
        assert "ended: task_complete" in out
    for error in (e for e in events if e["type"] == "session.error" and not e.get("agentId")):
        assert f"ended: error ({error['data']['errorType']})" in out
    if any(e["type"] == "session.shutdown" for e in events):
        assert "ended (shutdown)" in out


def test_inspect_names_each_malformed_line(cli_corpus, tmp_path):
    """`inspect` of a log with bad lines: each is named on stderr by file and line, the tree of
    the good lines is printed, and the count is shown."""
    run = cli_corpus["plain"]
    lines = run.events_path.read_bytes().splitlines(keepends=True)
    log = tmp_path / run.session_id / "events.jsonl"
    log.parent.mkdir()
    log.write_bytes(b"".join(lines[:3] + [b"not json\n", b"\xff\xfe\n"] + lines[3:]))
    result = run_inspect(str(log))
    assert result.returncode == 0, result.stderr.decode()
    stderr = result.stderr.decode()
    assert f"{log}:4:" in stderr and f"{log}:5:" in stderr
    assert "2 malformed line(s) skipped" in result.stdout.decode()
    assert result.stdout.decode().count("── interaction ") == sum(1 for e in run.events()
                                                                  if e["type"] == "user.message")


def test_inspect_unknown_session_is_a_clear_error(tmp_path):
    """An id that is not a session: exit 2, saying where it looked."""
    result = run_inspect("no-such-session", "--copilot-home", str(tmp_path))
    assert result.returncode == 2
    assert "no-such-session: not a session id under" in result.stderr.decode()


def test_inspect_a_session_still_running(cli, provider, tmp_path):
    """While the CLI sleeps in a tool, `inspect` says the session is still running, waiting on it."""
    home, cwd = tmp_path / "home", tmp_path / "work"
    cwd.mkdir()
    from tests.support.copilot_cli import prompt_for
    from tests.support.net import wait_until

    process = cli.start(prompt_for("sleep_tool", 4), home=home, port=provider.port, cwd=cwd)
    try:
        wait_until(lambda: process.events_path.exists()
                   and b'"tool.execution_start"' in process.events_path.read_bytes(),
                   timeout=90, what="the tool to start")
        result = run_inspect(str(process.session_dir))
        assert result.returncode == 0, result.stderr.decode()
        out = result.stdout.decode()
        assert "waiting_tool: waiting on tool bash" in out
        assert "ended: not yet, running" in out
        assert any("tool bash" in line and "running" in line for line in out.splitlines())
    finally:
        process.wait()
