"""AI credits, end to end, on logs the real CLI 1.0.102 wrote against the Copilot-API stand-in when it
returned `copilot_usage` for every call (complete), for some (partial) or never (unavailable), with a
sub-agent, with autopilot, and resumed (its second shutdown repeats the first's totals).

The oracle is what the stand-in billed (meta.json `nano_aiu_sent`) and the CLI's own totals
(`session.shutdown` `accountingSnapshot.totalNanoAiu`, `modelMetrics`, `agentMetrics`; the headless
stream's `session.usage_checkpoint`); every sum must equal them to the nano AIU.
"""

from __future__ import annotations

import json
import shutil
from collections import Counter
from pathlib import Path

import pytest

from copilot_otel.delivery.sinks import MemorySink
from copilot_otel.replay.runner import replay_files
from copilot_otel.source.sources import resolve
from copilot_otel.vocab import Metric
from tests.support import aio
from tests.support.commands import run_copilot_otel, run_inspect, run_replay
from tests.support.daemon import DaemonProcess
from tests.support.net import wait_until
from tests.support.otlp_json import read_spans
from tests.support.scrape import keyed, parse, value
from tests.support.viewclient import get_json

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "cli" / "1.0.102"
CREDITS = ("credits_complete", "credits_partial", "credits_subagent", "credits_autopilot", "credits_resumed")
UNAVAILABLE = "copilot_api"  # recorded before the stand-in knew copilot_usage: every call unavailable
NANO = "github.copilot.nano_aiu"
STATUS = "github.copilot.ai_credits.status"
MODEL = "claude-sonnet-4.5"


class Fixture:
    """One recorded session: what the stand-in billed, the log, and the CLI's own totals."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.path = FIXTURES / name
        self.meta = json.loads((self.path / "meta.json").read_text())
        (self.log,) = resolve([self.path])
        self.events = [json.loads(line) for line in self.log.read_text().splitlines() if line.strip()]

    def of_type(self, kind: str) -> list[dict]:
        return [e for e in self.events if e["type"] == kind]

    @property
    def last_shutdown(self) -> dict:
        return self.of_type("session.shutdown")[-1]["data"]

    @property
    def total(self) -> int:
        """The CLI's own total for the whole session, nano AIU."""
        return round(self.last_shutdown["accountingSnapshot"]["totalNanoAiu"])


class Replayed:
    """A log (or a headless stream) replayed in this process: spans and summed metric updates."""

    def __init__(self, path: Path) -> None:
        sink = MemorySink()
        stats = replay_files(resolve([path]), sink, keep_metrics=True)
        self.spans = sink.records
        self.counters: Counter = Counter()
        for update in stats.metrics:
            self.counters[(update.metric, update.labels[:-1])] += update.value

    def nano(self, metric: Metric = Metric.AI_CREDITS) -> int:
        """A credits counter's sum over its series, back in nano AIU."""
        return round(sum(v for (m, _labels), v in self.counters.items() if m is metric) * 1e9)

    def chats(self) -> list:
        return sorted((s for s in self.spans if s.name.startswith("chat ")), key=lambda s: s.end_ns)

    def agents(self) -> list:
        return [s for s in self.spans if s.attributes.get("gen_ai.operation.name") == "invoke_agent"]


@pytest.fixture(scope="module", params=CREDITS)
def credited(request) -> tuple[Fixture, Replayed]:
    fx = Fixture(request.param)
    return fx, Replayed(fx.path)


def test_the_stand_in_made_the_cli_log_each_status():
    """A fair test: the CLI logged each billed amount as the call's copilotUsage (complete), the call the
    stand-in did not bill as unavailable, and its totals say complete, partial and unavailable."""
    for name in CREDITS:
        fx = Fixture(name)
        usages = [e["data"]["usage"] for e in fx.of_type("session.usage_record")]
        billed = [u["copilotUsage"]["totalNanoAiu"] for u in usages if u["aiCreditsStatus"] == "complete"]
        assert billed == fx.meta["nano_aiu_sent"] and billed, name
        assert fx.total == sum(fx.meta["nano_aiu_sent"]) > 0
        expected = "partial" if name == "credits_partial" else "complete"
        assert fx.last_shutdown["accountingSnapshot"]["aiCreditsStatus"] == expected
    assert [u["data"]["usage"]["aiCreditsStatus"] for u in Fixture("credits_partial").of_type(
        "session.usage_record")] == ["complete", "unavailable", "complete"]
    assert Fixture(UNAVAILABLE).last_shutdown["accountingSnapshot"]["aiCreditsStatus"] == "unavailable"
    resumed = Fixture("credits_resumed").of_type("session.shutdown")
    assert len(resumed) == 2 and resumed[1]["data"]["totalNanoAiu"] > resumed[0]["data"]["totalNanoAiu"] > 0


def test_each_chat_span_carries_what_the_call_was_billed(credited):
    """github.copilot.nano_aiu on each chat span is the amount the stand-in billed that call; the call it
    did not bill has none, and says unavailable."""
    fx, replayed = credited
    amounts = [s.attributes.get(NANO) for s in replayed.chats()]
    assert [a for a in amounts if a is not None] == fx.meta["nano_aiu_sent"]
    unbilled = [s for s in replayed.chats() if NANO not in s.attributes]
    assert len(unbilled) == (1 if fx.name == "credits_partial" else 0)
    assert all(s.attributes[STATUS] == "unavailable" for s in unbilled)
    assert not [s for s in replayed.chats() if NANO in s.attributes and STATUS in s.attributes]


def test_the_counter_and_the_agents_sums_equal_the_cli_s_totals(credited):
    """copilot_ai_credits_total equals accountingSnapshot.totalNanoAiu to the nano AIU (per model:
    modelMetrics), once across a resume; each invoke_agent span's sum equals agentMetrics of its agent."""
    fx, replayed = credited
    assert replayed.nano() == fx.total
    per_model = {m: round(v["totalNanoAiu"]) for m, v in fx.last_shutdown["modelMetrics"].items()}
    assert {labels[0]: round(v * 1e9) for (m, labels), v in replayed.counters.items()
            if m is Metric.AI_CREDITS} == per_model
    agents = fx.last_shutdown["agentMetrics"]
    roots = [s for s in replayed.agents() if s.parent_span_id is None]
    assert sum(r.attributes[NANO] for r in roots) == round(agents["main"]["totalNanoAiu"])
    subagents = sorted(s.attributes[NANO] for s in replayed.agents() if s.parent_span_id is not None)
    assert subagents == sorted(round(v["totalNanoAiu"]) for k, v in agents.items() if k != "main")
    if fx.name == "credits_resumed":  # counted once: not the sum of both shutdowns
        first = round(fx.of_type("session.shutdown")[0]["data"]["totalNanoAiu"])
        assert replayed.nano() == fx.total != fx.total + first


def test_calls_without_an_amount_are_counted_apart_never_as_zero_cost():
    """partial: the unbilled call is one copilot_llm_calls_without_credits_total{status="unavailable"} and the
    root says partial; unavailable: no credits at all, every call counted apart, each root unavailable."""
    partial = Replayed(FIXTURES / "credits_partial")
    assert partial.counters[(Metric.LLM_CALLS_WITHOUT_CREDITS, (MODEL, "unavailable"))] == 1
    (root,) = partial.agents()
    assert root.attributes[STATUS] == "partial" and root.attributes[NANO] == Fixture("credits_partial").total
    fx, none = Fixture(UNAVAILABLE), Replayed(FIXTURES / UNAVAILABLE)
    assert none.nano() == 0 and not [k for k in none.counters if k[0] is Metric.AI_CREDITS]
    assert none.counters[(Metric.LLM_CALLS_WITHOUT_CREDITS, (MODEL, "unavailable"))] == len(
        fx.of_type("session.usage_record"))
    assert all(r.attributes[STATUS] == "unavailable" and NANO not in r.attributes for r in none.agents())


def test_the_part_autopilot_spent_is_the_nudged_interactions():
    """copilot_autopilot_ai_credits_total is the amount of the calls in interactions a nudge started."""
    fx, replayed = Fixture("credits_autopilot"), Replayed(FIXTURES / "credits_autopilot")
    nudged, in_nudge = 0, False
    for e in fx.events:
        if e["type"] == "user.message":
            in_nudge = bool(e["data"].get("isAutopilotContinuation"))
        elif e["type"] == "session.usage_record" and in_nudge:
            nudged += e["data"]["usage"]["copilotUsage"]["totalNanoAiu"]
    assert nudged == sum(fx.meta["nano_aiu_sent"][1:]) > 0
    assert replayed.nano(Metric.AUTOPILOT_AI_CREDITS) == nudged


@pytest.mark.parametrize("name", ["credits_partial", "credits_subagent", "credits_autopilot", "credits_resumed"])
def test_the_headless_stream_reaches_the_same_totals(name, tmp_path):
    """`copilot -p --output-format json | copilot-otel replay -`: the stream reports no amount per call, so
    each call counts as unreported, and the credits arrive with session.usage_checkpoint: the metric equals
    the CLI's total (the resumed process's stream: the whole session's, as its checkpoint says)."""
    fx = Fixture(name)
    stream = fx.path / ("stdout.resume.jsonl" if name == "credits_resumed" else "stdout.jsonl")
    metrics = tmp_path / "metrics.prom"
    result = run_replay("-", "--traces-file", str(tmp_path / "t.jsonl"), "--metrics-file", str(metrics),
                        "--state-dir", str(tmp_path / "state"), stdin=stream.read_bytes())
    assert result.returncode == 0, result.stderr.decode()
    samples = parse(metrics.read_text())
    checkpoints = [json.loads(line) for line in stream.read_text().splitlines() if '"session.usage_checkpoint"' in line]
    assert checkpoints[-1]["data"]["totalNanoAiu"] == fx.total
    assert round(value(samples, "copilot_ai_credits_total", model=MODEL) * 1e9) == fx.total
    calls = sum(1 for line in stream.read_text().splitlines() if '"model.call_finished"' in line)
    assert value(samples, "copilot_llm_calls_without_credits_total", model=MODEL, status="unreported") == calls


def _home_of(names: tuple[str, ...], home: Path) -> dict[str, Fixture]:
    """A COPILOT_HOME holding the fixtures' sessions; {session id: fixture}."""
    sessions = {}
    for name in names:
        fx = Fixture(name)
        shutil.copytree(fx.log.parent, home / "session-state" / fx.log.parent.name)
        sessions[fx.log.parent.name] = fx
    return sessions


def test_replay_exports_the_sums_on_its_spans_and_metrics(tmp_path):
    """`copilot-otel replay` of every credited session: the metrics file's credits equal the sum of the CLI's
    totals, and the exported roots and sub-agents carry their sums."""
    home = tmp_path / "home"
    sessions = _home_of(CREDITS, home)
    traces, metrics = tmp_path / "t.jsonl", tmp_path / "m.prom"
    result = run_replay(str(home), "--traces-file", str(traces), "--metrics-file", str(metrics),
                        "--state-dir", str(tmp_path / "state"))
    assert result.returncode == 0, result.stderr.decode()
    expected = sum(fx.total for fx in sessions.values())
    assert round(keyed(metrics.read_text())[f'copilot_ai_credits_total{{model="{MODEL}"}}'] * 1e9) == expected
    agents = [s for s in read_spans(traces) if s.attributes.get("gen_ai.operation.name") == "invoke_agent"]
    assert sum(s.attributes[NANO] for s in agents) == expected


def test_the_daemon_sessions_inspect_and_the_web_view_show_the_cli_s_totals(tmp_path):
    """The daemon tails the logs: /metrics, /api/sessions (what the web pages show), `sessions` (through the
    daemon and from the files) and `inspect` each give every session's credits as the CLI totals them."""
    home = tmp_path / "home"
    sessions = _home_of((*CREDITS, UNAVAILABLE), home)
    shutdowns = sum(len(fx.of_type("session.shutdown")) for fx in sessions.values())
    with DaemonProcess(home, tmp_path / "state", traces_file=tmp_path / "t.jsonl",
                       args=("--idle-quiet", "0.2")) as daemon:
        wait_until(lambda: value(daemon.scrape(), "copilot_completion_signals_total", signal="shutdown") == shutdowns,
                   what="every shutdown read")
        scraped = daemon.scrape()
        rows = {r["id"]: r for r in get_json(daemon.port, "/api/sessions")["sessions"]}
        via_daemon = run_copilot_otel("sessions", "--copilot-home", str(home), "--metrics-address",
                                      f"127.0.0.1:{daemon.port}", "--state-dir", str(daemon.state_dir),
                                      env={"COLUMNS": "200"})
    expected = sum(fx.total for fx in sessions.values() if fx.name != UNAVAILABLE)
    assert round(value(scraped, "copilot_ai_credits_total", model=MODEL) * 1e9) == expected
    assert value(scraped, "copilot_llm_calls_without_credits_total", model=MODEL, status="unavailable") == 1 + len(
        sessions_named(sessions, UNAVAILABLE).of_type("session.usage_record"))
    for sid, fx in sessions.items():
        status = fx.last_shutdown["accountingSnapshot"]["aiCreditsStatus"]
        known = None if fx.name == UNAVAILABLE else fx.total  # no call reported an amount: null, not zero
        assert (rows[sid]["nano_aiu"], rows[sid]["credits_status"]) == (known, status), fx.name
    assert via_daemon.returncode == 0, via_daemon.stderr.decode()
    listed = via_daemon.stdout.decode()
    assert "CREDITS" in listed
    for sid, fx in sessions.items():
        line = next(line for line in listed.splitlines() if line.startswith(sid[:8]))
        shown = f"{fx.total / 1e9:,.2f}" + ("+" if fx.name == "credits_partial" else "")
        assert f" {'unknown' if fx.name == UNAVAILABLE else shown} " in line, (fx.name, line)
    assert listed.splitlines()[-1] == "CREDITS: AI credits; 8.67+: some calls reported no amount, unknown: none did"
    from_files = run_copilot_otel("sessions", "--copilot-home", str(home), "--from-files", "--json",
                                  "--state-dir", str(tmp_path / "files"))
    assert {r["id"]: r["nano_aiu"] for r in json.loads(from_files.stdout)} == {
        sid: None if fx.name == UNAVAILABLE else fx.total for sid, fx in sessions.items()}
    sid = next(s for s, fx in sessions.items() if fx.name == "credits_subagent")
    inspected = run_inspect(sid, "--copilot-home", str(home), "--json")
    assert inspected.returncode == 0, inspected.stderr.decode()
    assert json.loads(inspected.stdout)["session"]["nano_aiu"] == sessions[sid].total
    text = run_inspect(sid, "--copilot-home", str(home)).stdout.decode()
    assert f"{sessions[sid].total / 1e9:,.2f} AI credits" in text
    # A session whose calls reported no amount says so, in words: its total, and each interaction's.
    unknown = run_inspect(next(s for s, fx in sessions.items() if fx.name == UNAVAILABLE), "--copilot-home", str(home))
    assert unknown.stdout.decode().count("AI credits unknown") == 1 + unknown.stdout.decode().count("totals:")
    partial = sessions_named(sessions, "credits_partial")
    session = next(s for s, fx in sessions.items() if fx is partial)
    text = run_inspect(session, "--copilot-home", str(home)).stdout.decode()
    assert f"{partial.total / 1e9:,.2f}+ AI credits" in text and "+: some LLM calls reported no AI credits" in text


def sessions_named(sessions: dict[str, Fixture], name: str) -> Fixture:
    return next(fx for fx in sessions.values() if fx.name == name)


def test_sdk_attach_counts_the_credits_the_stand_in_billed(cli, tmp_path):
    """copilot_otel.attach() on a real github-copilot-sdk session with a Copilot subscription (the stand-in
    billing every call): live, each call is reported twice (session.usage_record and assistant.usage) and
    counted once; the registry's credits equal what the stand-in billed, and the chat spans carry it."""
    pytest.importorskip("copilot", reason="github-copilot-sdk is installed by the test command")
    import asyncio

    from copilot import CopilotClient
    from copilot.session import PermissionHandler
    from prometheus_client import CollectorRegistry

    from copilot_otel import attach_async
    from tests.support.copilot_api import COPILOT_MODEL, CopilotApi
    from tests.support.copilot_cli import prompt_for

    home = tmp_path / "home"
    home.mkdir()

    async def drive(api: CopilotApi):
        env = cli.sdk_env(home=home, port=api.port)
        for key in ("COPILOT_OFFLINE", "COPILOT_PROVIDER_BASE_URL"):  # the Copilot API, not BYOK
            env.pop(key, None)
        env.update(api.env(), COPILOT_MODEL=COPILOT_MODEL, COPILOT_DEBUG_GITHUB_API_URL=api.url)
        async with CopilotClient(env=env, working_directory=str(home)) as client:
            session = await client.create_session(on_permission_request=PermissionHandler.approve_all,
                                                  model=COPILOT_MODEL, streaming=True)
            sink, registry = MemorySink(), CollectorRegistry()
            handle = await attach_async(session, sink=sink, registry=registry)
            idle = asyncio.Event()
            session.on(lambda event: idle.set() if event.to_dict().get("type") == "session.idle"
                       and not event.agent_id else None)
            for scenario in ("subagent", "multi_turn"):
                idle.clear()
                await session.send(prompt_for(scenario))
                await asyncio.wait_for(idle.wait(), 90)
            await session.disconnect() if hasattr(session, "disconnect") else None
        assert handle.detach(timeout=10)
        return handle.registry, sink

    with CopilotApi(credits="complete") as api:
        registry, sink = aio.run(drive(api))
        billed = [b["total_nano_aiu"] for b in api.billed]
    assert len(billed) == 4 + 3  # subagent: 2 main and 2 sub-agent calls; multi_turn: 3
    counted = registry.get_sample_value("copilot_ai_credits_total", {"model": COPILOT_MODEL, "repository": ""})
    assert round(counted * 1e9) == sum(billed)
    chats = [s.attributes.get(NANO) for s in sink.records if s.name.startswith("chat ")]
    assert sorted(chats) == sorted(billed)
