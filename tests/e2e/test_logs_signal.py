"""The session's events as OpenTelemetry log records, read back from the real OpenTelemetry Collector.

The daemon and `replay` export real CLI logs (tests/fixtures) with OTEL_LOGS_EXPORTER=otlp to an
otelcol-copilot whose file exporter writes what it received; traces go to a traces file. Each record must
link to the span its event belongs to, carry the spans' resource, hold no prompt text without capture, and
arrive exactly once across restarts, also when the logs backend was down while the spans went out.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
from collections import Counter
from pathlib import Path

import pytest

from tests.support.collector import Collector, LogLine
from tests.support.commands import run_replay
from tests.support.daemon import DaemonProcess
from tests.support.net import free_port, wait_until
from tests.support.otlp_json import iso_ns, read_spans
from tests.support.scrape import fetch, value

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
# A denied tool, failed tools and permissions; an LLM call that failed for good; two sessions with compactions.
SESSIONS = [FIXTURES / "cli" / "1.0.102" / "failing_tool", FIXTURES / "cli" / "1.0.102" / "provider_error",
            FIXTURES / "situations" / "compaction"]
FAST = ("--idle-quiet", "0.3", "--rescan-interval", "1")
# What makes a record (docs/logs.md), read off the raw events independently of the code under test.
RECORDED = {"permission.requested", "permission.completed", "tool.execution_complete", "session.usage_record",
            "session.error", "session.compaction_complete", "session.shutdown"}


def home_with(tmp_path: Path, fixtures: list[Path], name: str = "home") -> Path:
    """A COPILOT_HOME holding the session folders of ``fixtures``."""
    home = tmp_path / name
    for fixture in fixtures:
        for folder in (fixture / "session-state").iterdir():
            shutil.copytree(folder, home / "session-state" / folder.name)
    return home


def add_sessions(home: Path, fixture: Path) -> None:
    for folder in (fixture / "session-state").iterdir():
        shutil.copytree(folder, home / "session-state" / folder.name)


def events_of(fixtures: list[Path]) -> list[dict]:
    return [json.loads(line) for fixture in fixtures for log in sorted(fixture.glob("session-state/*/events.jsonl"))
            for line in log.read_text().splitlines() if line.strip()]


def expected_events(fixtures: list[Path]) -> dict[str, dict]:
    """Event id -> event, of every event that makes a record: a person's prompt (not a sub-agent's), and RECORDED."""
    wanted = {}
    for event in events_of(fixtures):
        kind = event["type"]
        source = str(event.get("data", {}).get("source") or "")
        if kind in RECORDED or (kind == "user.message" and not event.get("agentId")
                                and not source.startswith("agent-")):
            wanted[event["id"]] = event
    return wanted


def logs_env(endpoint: str, protocol: str = "grpc", **extra: str) -> dict[str, str]:
    return {"OTEL_LOGS_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_LOGS_ENDPOINT": endpoint,
            "OTEL_EXPORTER_OTLP_LOGS_PROTOCOL": protocol, **extra}


def wait_for_records(collector: Collector, event_ids: set[str], timeout: float = 60) -> list[LogLine]:
    def arrived():
        records = collector.log_records()
        return records if event_ids <= {r.event_id for r in records} else None

    return wait_until(arrived, timeout=timeout, what=f"{len(event_ids)} log records in {collector.logs_file}")


def check_records(records: list[LogLine], expected: dict[str, dict], traces: Path) -> None:
    """Each expected event has exactly one record, stamped with the event's time, linked to a span of its own
    session (the right kind of span), under the spans' resource, with no prompt or error text."""
    assert Counter(r.event_id for r in records) == Counter(list(expected)), "each event once, and only those"
    spans = {(s.trace_id, s.span_id): s for s in read_spans(traces)}
    span_resource = next(iter(spans.values())).resource
    for record in records:
        event = expected[record.event_id]
        assert record.time_ns == iso_ns(event["timestamp"]), record.event_name
        assert record.attributes["event.name"] == record.event_name and record.event_name.startswith(
            "github.copilot.")
        assert record.attributes["github.copilot.event.type"] == event["type"]
        span = spans.get((record.trace_id, record.span_id))
        assert span is not None, f"{record.event_name} of {event['type']} links to no exported span"
        assert span.attributes["gen_ai.conversation.id"] == record.attributes["gen_ai.conversation.id"]
        operation = span.attributes.get("gen_ai.operation.name")
        if event["type"] == "user.message":
            assert span.is_root and operation == "invoke_agent"
        elif event["type"] == "tool.execution_complete":
            assert operation == "execute_tool"
            assert span.attributes["gen_ai.tool.call.id"] == event["data"]["toolCallId"]
            assert record.attributes["gen_ai.tool.name"] == span.attributes["gen_ai.tool.name"]
        elif event["type"] == "session.usage_record":
            assert operation == "chat"
        elif event["type"] == "session.compaction_complete":
            assert operation == "compaction"
        if event["type"] == "session.error":
            assert (record.severity, record.severity_text) == (17, "ERROR")
        assert record.resource == span_resource, "the records' resource is the spans'"
        assert record.body is None and "github.copilot.prompt" not in record.attributes
        assert "github.copilot.error.message" not in record.attributes
    for key in ("host.name", "service.instance.id", "service.name"):
        assert span_resource.get(key), key


def prompts_of(fixtures: list[Path]) -> list[str]:
    return [e["data"]["content"] for e in events_of(fixtures)
            if e["type"] == "user.message" and len(e["data"].get("content") or "") > 20]


def test_the_daemon_exports_each_event_once_linked_to_its_span_over_grpc(tmp_path):
    """`copilot-otel run` with OTEL_LOGS_EXPORTER=otlp over gRPC: the Collector gets one record per event worth
    one, each linked to the span of that event in the traces the daemon wrote, under the same resource, with no
    prompt text (capture is off); the records read back are the ones the real receiver accepted."""
    home = home_with(tmp_path, SESSIONS)
    traces = tmp_path / "traces.jsonl"
    expected = expected_events(SESSIONS)
    with Collector(tmp_path / "otelcol") as collector, \
            DaemonProcess(home, tmp_path / "state", traces_file=traces, args=FAST,
                          env=logs_env(collector.grpc_endpoint)) as daemon:
        records = wait_for_records(collector, set(expected))
        daemon.wait_for_metric("copilot_otel_log_records_exported_total", len(expected), timeout=30)
    check_records(collector.log_records(), expected, traces)
    assert {r.event_name for r in records} >= {
        "github.copilot.user_prompt", "github.copilot.permission_request", "github.copilot.tool_decision",
        "github.copilot.tool_result", "github.copilot.api_request", "github.copilot.api_error",
        "github.copilot.compaction", "github.copilot.session_end"}
    denied = [r for r in records if r.attributes.get("github.copilot.tool.denied")]
    assert denied and all(r.severity_text == "WARN" for r in denied)
    text = collector.logs_file.read_text()
    assert not any(prompt in text for prompt in prompts_of(SESSIONS)), "a prompt reached the logs backend"


def test_replay_exports_the_same_records_over_http_and_captures_prompts_when_asked(tmp_path):
    """`copilot-otel replay` over http/protobuf sends the records a daemon sends (the same times, ids, links and
    attributes: a backend merges a replay after a crash); with content capture on, the prompt is the body."""
    home = home_with(tmp_path, SESSIONS)
    expected = expected_events(SESSIONS)
    with Collector(tmp_path / "otelcol") as collector:
        # The generic endpoint, a base URL (/v1/logs is added); --traces-file keeps the traces out of it.
        done = run_replay(str(home), "--traces-file", str(tmp_path / "traces.jsonl"), "--state-dir",
                          str(tmp_path / "state"),
                          env={"OTEL_LOGS_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_ENDPOINT": collector.http_endpoint,
                               "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"})
        assert done.returncode == 0, done.stderr.decode()
        assert f"{len(expected)} log records" in done.stderr.decode()
        records = wait_for_records(collector, set(expected))
        check_records(records, expected, tmp_path / "traces.jsonl")
        with Collector(tmp_path / "otelcol-capture") as capturing:
            done = run_replay(str(home), "--traces-file", str(tmp_path / "traces-capture.jsonl"), "--state-dir",
                              str(tmp_path / "state"),
                              env=logs_env(capturing.grpc_endpoint,
                                           OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT="true"))
            assert done.returncode == 0, done.stderr.decode()
            captured = wait_for_records(capturing, set(expected))
    prompts = {r.event_id: r for r in captured if r.event_name == "github.copilot.user_prompt"}
    assert prompts and all(r.body == expected[i]["data"]["content"] == r.attributes["github.copilot.prompt"]
                           for i, r in prompts.items())
    plain = {r.event_id: (r.time_ns, r.trace_id, r.span_id, r.attributes) for r in records}
    assert {i: (r.time_ns, r.trace_id, r.span_id, {k: v for k, v in r.attributes.items()
                                                      if k not in ("github.copilot.prompt",
                                                                   "github.copilot.error.message")})
            for i, r in ((r.event_id, r) for r in captured)} == plain


def committed_offset(state: Path, log: Path) -> int:
    """How far the daemon's checkpoint says ``log`` was exported (0: no row)."""
    with sqlite3.connect(f"file:{state / 'checkpoint.sqlite'}?mode=ro", uri=True) as db:
        row = db.execute("SELECT offset FROM files WHERE path = ?", (str(log),)).fetchone()
    return row[0] if row else 0


def test_records_arrive_exactly_once_across_restarts_and_an_outage_of_the_logs_backend(tmp_path):
    """With the logs backend down, the daemon still exports spans and serves metrics, counts the failures, says
    so on /healthz, and its checkpoint stays behind the undelivered records; killed (-9) and started again once
    the Collector is up, it delivers them; a later restart sends nothing twice."""
    first, second, third = SESSIONS
    home = home_with(tmp_path, [first])
    traces, state = tmp_path / "traces.jsonl", tmp_path / "state"
    port = free_port()
    env = logs_env(f"http://127.0.0.1:{port}", OTEL_EXPORTER_OTLP_LOGS_TIMEOUT="2")
    daemon = DaemonProcess(home, state, traces_file=traces, args=FAST, env=env).start()
    try:
        daemon.wait_for_metric("copilot_otel_spans_exported_total", 1, timeout=30)
        daemon.wait_for_metric("copilot_otel_log_records_failed_total", 1, timeout=30)
        wait_until(lambda: "log export failing" in fetch(daemon.health_url), timeout=30, what="/healthz says it")
        assert value(daemon.scrape(), "copilot_sessions_started_total") >= 1  # metrics keep flowing
        log = next(home.glob("session-state/*/events.jsonl"))
        assert committed_offset(state, log) == 0, "the checkpoint passed records the logs backend never got"
    finally:
        daemon.kill9()
    with Collector(tmp_path / "otelcol", grpc_port=port) as collector:
        add_sessions(home, second)
        with DaemonProcess(home, state, traces_file=traces, args=FAST, env=env):
            wait_for_records(collector, set(expected_events([first, second])))
        add_sessions(home, third)
        with DaemonProcess(home, state, traces_file=traces, args=FAST, env=env):
            wait_for_records(collector, set(expected_events(SESSIONS)))
    check_records(collector.log_records(), expected_events(SESSIONS), traces)  # all it wrote, once stopped


def test_attach_exports_a_live_sessions_records_linked_to_its_spans(cli, provider, tmp_path):
    """attach() on a real github-copilot-sdk session driving the real CLI, its logs over OTLP to the Collector:
    the prompt, each tool's result and the session's records arrive, each linked to a span attach() wrote, under
    the same resource; detach() delivers them all."""
    import asyncio

    from prometheus_client import CollectorRegistry

    from copilot_otel import attach
    from copilot_otel.config import Config
    from copilot_otel.otlp.settings import OtlpSettings
    from tests.support import aio
    from tests.support.copilot_cli import MODEL, prompt_for

    copilot = pytest.importorskip("copilot", reason="github-copilot-sdk is installed by the test command")
    from copilot.session import PermissionHandler

    home, state, traces = tmp_path / "home", tmp_path / "state", tmp_path / "attached.jsonl"
    home.mkdir(parents=True)

    async def one_prompt(endpoint: str) -> str:
        async with copilot.CopilotClient(env=cli.sdk_env(home=home, port=provider.port),
                                         working_directory=str(home)) as client:
            session = await client.create_session(
                on_permission_request=PermissionHandler.approve_all, model=MODEL, streaming=True,
                provider={"type": "openai", "base_url": f"http://127.0.0.1:{provider.port}/v1", "api_key": "unused"})
            config = Config(copilot_home=home, state_dir=state, logs_otlp=OtlpSettings(endpoint, "grpc"))
            handle = attach(session, config=config, traces_file=traces, registry=CollectorRegistry())
            idle = asyncio.Event()
            session.on(lambda event: idle.set() if event.to_dict().get("type") == "session.idle" else None)
            await session.send(prompt_for("plain"))
            await asyncio.wait_for(idle.wait(), 90)
            session_id = session.session_id
            await session.disconnect() if hasattr(session, "disconnect") else None
        assert handle.detach(timeout=10)
        return session_id

    with Collector(tmp_path / "otelcol") as collector:
        session_id = aio.run(one_prompt(collector.grpc_endpoint))
    records = collector.log_records()
    names = Counter(r.event_name for r in records)
    assert names["github.copilot.user_prompt"] == 1 and names["github.copilot.tool_result"] >= 1, names
    assert names["github.copilot.api_request"] == sum(1 for s in read_spans(traces) if s.name.startswith("chat "))
    spans = {(s.trace_id, s.span_id): s for s in read_spans(traces)}
    for record in records:
        assert record.attributes["gen_ai.conversation.id"] == session_id
        if record.trace_id:
            span = spans[(record.trace_id, record.span_id)]
            assert record.resource == span.resource
            if record.event_name == "github.copilot.tool_result":
                assert span.attributes["gen_ai.tool.call.id"] == record.attributes["gen_ai.tool.call.id"]
            if record.event_name == "github.copilot.api_request":
                assert span.name.startswith("chat ")
    assert all(r.trace_id for r in records if r.event_name != "github.copilot.session_end")
