"""Live subscription: copilot_otel.attach() on a real github-copilot-sdk session driving the real
CLI, and `copilot -p --output-format json | copilot-otel replay -` piped live.

Both are compared with a replay of the same session's events.jsonl (itself checked against
the events in test_replay.py).
"""

from __future__ import annotations

import asyncio
import logging
import subprocess
import sys
import uuid
from collections import Counter

import pytest
from prometheus_client import CollectorRegistry

from copilot_otel import attach, attach_async
from copilot_otel.delivery.sinks import FileSink, MemorySink
from copilot_otel.metrics.registry import Metrics
from copilot_otel.replay.runner import ReplayStats, replay_session
from copilot_otel.source.tail import read_all
from tests.support import aio
from tests.support.copilot_cli import MODEL, prompt_for
from tests.support.otlp_json import read_spans
from tests.support.scrape import keyed

copilot = pytest.importorskip("copilot", reason="github-copilot-sdk is installed by the test command")
from copilot import CopilotClient  # noqa: E402
from copilot.session import PermissionHandler  # noqa: E402


def file_replay(session_id, events_path):
    """Spans and metric updates of the session's events.jsonl, as `replay` makes them."""
    stats = ReplayStats()
    spans = replay_session(session_id, read_all(events_path), stats, source=str(events_path))
    return spans, stats.metrics


def counters(updates_or_registry) -> Counter:
    """Contract counters as {(name, labels): value}."""
    if isinstance(updates_or_registry, CollectorRegistry):
        registry = updates_or_registry
    else:
        metrics = Metrics(process=False, registry=CollectorRegistry())
        for update in updates_or_registry:
            metrics.apply(update)
        registry = metrics.registry
    out = Counter()
    for family in registry.collect():
        for sample in family.samples:
            if sample.name.startswith("copilot_") and not sample.name.startswith("copilot_otel") \
                    and sample.name.endswith("_total") and sample.value:
                out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def structural(records):
    """Spans other than LLM calls, by their deterministic identity and timing."""
    return sorted((r.trace_id, r.span_id, r.parent_span_id, r.name, r.start_ns, r.end_ns, r.status)
                  for r in records if not r.name.startswith("chat "))


def chats(records):
    return sorted((r.name, r.attributes.get("gen_ai.usage.input_tokens"),
                   r.attributes.get("gen_ai.usage.output_tokens"))
                  for r in records if r.name.startswith("chat "))


async def drive(cli, provider, home, scenarios, *, before_send=None):
    """One SDK session on the real CLI; send each prompt and wait for its session.idle.
    Returns (session id, attachment, idle events seen by the app, sink)."""
    home.mkdir(parents=True, exist_ok=True)
    async with CopilotClient(env=cli.sdk_env(home=home, port=provider.port), working_directory=str(home)) as client:
        session = await client.create_session(
            on_permission_request=PermissionHandler.approve_all, model=MODEL, streaming=True,
            provider={"type": "openai", "base_url": f"http://127.0.0.1:{provider.port}/v1", "api_key": "unused"})
        sink = MemorySink()
        registry = CollectorRegistry()
        handle = await attach_async(session, sink=sink, registry=registry)
        idles = []
        idle = asyncio.Event()

        def app_handler(event):
            if event.to_dict().get("type") == "session.idle" and not event.agent_id:
                # Our handler was subscribed first, so it has seen this event already.
                idles.append(handle.registry.get_sample_value("copilot_completion_signals_total",
                                                              {"signal": "idle"}))
                idle.set()

        session.on(app_handler)
        for scenario in scenarios:
            idle.clear()
            if before_send:
                before_send(handle, scenario)
            await session.send(prompt_for(scenario, str(home) if scenario == "failing_tool" else None))
            await asyncio.wait_for(idle.wait(), 90)
        session_id = session.session_id
        await session.disconnect() if hasattr(session, "disconnect") else None
    assert handle.detach(timeout=10)
    return session_id, handle, idles, sink


@pytest.fixture(scope="module")
def sdk_run(cli, provider, tmp_path_factory):
    home = tmp_path_factory.mktemp("sdk") / "home"
    return home, aio.run(drive(cli, provider, home, ["plain", "subagent", "failing_tool"]))


def test_attach_matches_the_file(sdk_run):
    """Live spans and counters match a replay of the same session's events.jsonl."""
    home, (session_id, handle, _idles, sink) = sdk_run
    spans, updates = file_replay(session_id, home / "session-state" / session_id / "events.jsonl")
    assert structural(sink.records) == structural(spans)
    assert chats(sink.records) == chats(spans)
    assert counters(handle.registry) == counters(updates)
    assert sum(1 for r in spans if r.name.startswith("execute_tool")) >= 5


def test_idle_comes_from_session_idle(sdk_run):
    """Each interaction's idle signal is the real session.idle the app also received: counted the
    moment it arrives (inferring it from the file would count it only at the next message)."""
    _home, (_sid, handle, idles, _sink) = sdk_run
    assert idles == [1.0, 2.0, 3.0]
    assert handle.registry.get_sample_value("copilot_completion_signals_total", {"signal": "idle"}) == 3


def test_unknown_sdk_types_keep_their_raw_type(sdk_run):
    """Events this SDK version calls 'unknown' are counted under the CLI's own type name."""
    _home, (_sid, handle, _idles, _sink) = sdk_run
    seen = {s.labels["type"] for f in handle.registry.collect() if f.name == "copilot_otel_events_read"
            for s in f.samples if s.value}
    assert "unknown" not in seen
    assert any(t.startswith("model.") and t not in ("model.call_start", "model.call_finished",
                                                     "model.call_final_result") for t in seen), seen


def test_handler_exception_is_contained(cli, provider, tmp_path, caplog):
    """A bug in the model costs one event (counted as internal_error), one elsewhere in our handler is
    logged and counted as a handler error; either way the app's session goes on."""

    def sabotage(handle, scenario):
        real_feed, real_apply = handle.model.feed, handle.metrics.apply_outputs

        def feed(event):
            if event.type == "tool.execution_start":
                raise RuntimeError("forced failure inside the model")
            return real_feed(event)

        def apply_outputs(out):
            if "assistant.turn_end" in out.events:
                handle.metrics.apply_outputs = real_apply  # once
                raise RuntimeError("forced failure inside the handler")
            return real_apply(out)

        handle.model.feed = feed
        handle.metrics.apply_outputs = apply_outputs

    with caplog.at_level(logging.ERROR, logger="copilot_otel"):
        _sid, handle, idles, _sink = aio.run(drive(cli, provider, tmp_path / "home", ["plain"],
                                                    before_send=sabotage))
    assert len(idles) == 1  # the session finished normally
    assert handle.registry.get_sample_value("copilot_otel_lines_rejected_total", {"reason": "internal_error"}) == 1
    assert handle.registry.get_sample_value("copilot_otel_handler_errors_total") == 1
    assert "forced failure inside the model" in caplog.text
    assert "forced failure inside the handler" in caplog.text


def test_two_sessions_share_one_registry(cli, provider, tmp_path):
    """Two sessions of one client on one registry and one trace file: counters add up, live
    states list both, and detaching one leaves the shared file open for the other."""

    async def both():
        home = tmp_path / "home"
        home.mkdir()
        registry = CollectorRegistry()
        async with CopilotClient(env=cli.sdk_env(home=home, port=provider.port), working_directory=str(home)) as client:
            config = dict(on_permission_request=PermissionHandler.approve_all, model=MODEL, streaming=True,
                          provider={"type": "openai", "base_url": f"http://127.0.0.1:{provider.port}/v1",
                                    "api_key": "unused"})
            first, second = await client.create_session(**config), await client.create_session(**config)
            handles = [attach(s, sink=shared_file, registry=registry) for s in (first, second)]
            live = registry.get_sample_value("copilot_sessions", {"state": "idle"})
            await asyncio.gather(first.send_and_wait(prompt_for("plain"), timeout=90),
                                 second.send_and_wait(prompt_for("multi_turn"), timeout=90))
            for h in handles:
                assert h.detach(timeout=10)
        return registry, handles, live

    shared_file = FileSink(tmp_path / "both.jsonl")
    registry, handles, live = aio.run(both())
    shared_file.shutdown()
    assert live == 2
    turns = registry.get_sample_value("copilot_turns_total", {"agent": "main"})
    spans = read_spans(tmp_path / "both.jsonl")
    assert turns == sum(1 for s in spans if s.name == "turn") >= 2
    assert {s.attributes["gen_ai.conversation.id"] for s in spans} == {h.session_id for h in handles}
    assert registry.get_sample_value("copilot_otel_spans_failed_total") == 0
    assert registry.get_sample_value("copilot_sessions", {"state": "idle"}) == 0  # detached: gone


def test_headless_json_stream_piped_live(cli, provider, tmp_path):
    """`copilot -p --output-format json | copilot-otel replay -`: the same turns, tools and LLM
    calls as the file, and the loop's end from the stream's assistant.idle."""
    home, cwd = tmp_path / "home", tmp_path / "work"
    cwd.mkdir()
    session_id = str(uuid.uuid4())
    traces, metrics_file = tmp_path / "stream.jsonl", tmp_path / "stream.prom"
    argv = cli.argv(prompt_for("subagent"), session_id=session_id, autopilot=False, resume=None, output_json=True,
                    extra_args=())
    producer = subprocess.Popen(argv, cwd=cwd, env=cli.env(home=home, port=provider.port, otel_file=None,
                                                           extra_env=None),
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
    consumer = subprocess.run([sys.executable, "-m", "copilot_otel.cli.main", "replay", "-", "--traces-file",
                               str(traces),
                               "--metrics-file", str(metrics_file)], stdin=producer.stdout, capture_output=True,
                              timeout=120)
    producer.stdout.close()
    assert producer.wait(timeout=60) == 0
    assert consumer.returncode == 0, consumer.stderr.decode()
    streamed = read_spans(traces)
    spans, updates = file_replay(session_id, home / "session-state" / session_id / "events.jsonl")

    def shape(items):
        return sorted((s[0], s[1], s[2], s[3]) for s in items)

    ours = [(int(s.trace_id, 16), int(s.span_id, 16), s.parent_span_id and int(s.parent_span_id, 16), s.name)
            for s in streamed if not s.name.startswith("chat ")]
    theirs = [(r.trace_id, r.span_id, r.parent_span_id, r.name) for r in spans if not r.name.startswith("chat ")]
    assert shape(ours) == shape(theirs)
    assert sum(s.name.startswith("chat ") for s in streamed) == sum(r.name.startswith("chat ") for r in spans)
    text = metrics_file.read_text()
    assert 'copilot_completion_signals_total{signal="idle"} 1.0' in text
    expected_tools = sum(v for (n, _), v in counters(updates).items() if n == "copilot_tool_calls_total")
    assert sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("copilot_tool_calls_total")) == expected_tools


def test_headless_stream_shows_each_failed_attempt(cli_corpus, tmp_path):
    """The stream of a run whose provider answered HTTP 500: each model.call_failure the CLI
    retried is an ERROR chat span and an llm_calls{outcome="error"}; the turn fails too."""
    run = cli_corpus["provider_error"]
    failures = [e for e in run.stdout_events() if e.get("type") == "model.call_failure"]
    assert len(failures) >= 2, "the CLI retries a failed call"
    traces, metrics_file = tmp_path / "stream.jsonl", tmp_path / "stream.prom"
    result = subprocess.run([sys.executable, "-m", "copilot_otel.cli.main", "replay", "-", "--traces-file", str(traces),
                             "--metrics-file", str(metrics_file)], input=run.stdout_path.read_bytes(),
                            capture_output=True, timeout=120)
    assert result.returncode == 0, result.stderr.decode()
    spans = read_spans(traces)
    failed_chats = [s for s in spans if s.name.startswith("chat ") and s.status_code == "ERROR"]
    assert len(failed_chats) == len(failures)
    assert sorted(s.attributes["error.type"] for s in failed_chats) == sorted(str(f["data"]["statusCode"])
                                                                               for f in failures)
    assert keyed(metrics_file.read_text())[f'copilot_llm_calls_total{{model="{MODEL}",outcome="error"}}'] \
        == len(failures)
    assert [s.status_code for s in spans if s.name == "turn"] == ["ERROR"]


def test_attach_names_the_machine_and_the_install(cli, provider, tmp_path):
    """attach() writing its own trace file: the spans' resource names this host and the instance id kept in the
    state folder of its config, as the daemon's and replay's do."""
    import socket

    from copilot_otel.config import Config

    home, state, traces = tmp_path / "home", tmp_path / "state", tmp_path / "attached.jsonl"
    home.mkdir(parents=True)

    async def one_prompt() -> None:
        async with CopilotClient(env=cli.sdk_env(home=home, port=provider.port), working_directory=str(home)) as client:
            session = await client.create_session(
                on_permission_request=PermissionHandler.approve_all, model=MODEL, streaming=True,
                provider={"type": "openai", "base_url": f"http://127.0.0.1:{provider.port}/v1", "api_key": "unused"})
            handle = attach(session, config=Config(copilot_home=home, state_dir=state), traces_file=traces,
                            registry=CollectorRegistry())
            idle = asyncio.Event()
            session.on(lambda event: idle.set() if event.to_dict().get("type") == "session.idle" else None)
            await session.send(prompt_for("plain"))
            await asyncio.wait_for(idle.wait(), 90)
            await session.disconnect() if hasattr(session, "disconnect") else None
        assert handle.detach(timeout=10)

    aio.run(one_prompt())
    resources = {tuple(sorted(span.resource.items())) for span in read_spans(traces)}
    assert len(resources) == 1
    (resource,) = [dict(r) for r in resources]
    assert resource["host.name"] == socket.gethostname()
    assert resource["service.instance.id"] == (state / "instance-id").read_text().strip()
