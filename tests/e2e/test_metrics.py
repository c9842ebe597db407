"""Prometheus metrics: counters agree with the event logs, with the CLI's own OTel and with
its live `assistant.idle`; a real Prometheus scrapes them; stuck and abandoned sessions show.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import time
from collections import Counter

import pytest

from tests.support import aio
from tests.support.copilot_cli import prompt_for
from tests.support.daemon import DaemonProcess
from tests.support.deploy import RULES, dashboard_queries, promtool, render_grafana_expr
from tests.support.events import cli_shows_failed
from tests.support.model import label
from tests.support.net import wait_until, wait_until_steady
from tests.support.prometheus_harness import Prometheus
from tests.support.scrape import by_label, stalled, value

FAST = ("--idle-quiet", "0.3", "--rescan-interval", "1")
# Counted only with a Copilot subscription (premium requests, AI credits), when an agent changes code, or
# with --budgets-file (the budgets and their month-to-date rule).
COST_METRICS = ("copilot_premium_requests_total", "copilot_autopilot_premium_requests_total",
                "copilot_code_lines_total", "copilot_files_modified_total", "copilot_ai_credits_total",
                "copilot_autopilot_ai_credits_total", "copilot_llm_calls_without_credits_total",
                "copilot:ai_credits:month_to_date", "copilot_budget_", "copilot:budget_ai_credits",
                "copilot:ai_credits:day_to_date", "copilot:ai_credits_by_team:day_to_date")


def derived_counts(runs) -> dict[str, Counter]:
    """Every contract counter, counted straight from the event logs (and, for idle, from the
    CLI's live stream, which carries the real assistant.idle)."""
    c = {name: Counter() for name in ("sessions", "turns", "llm", "tools", "nudges", "signals", "tokens")}
    for run in runs:
        events = run.events()
        agent_names = {e["agentId"]: e["data"]["agentName"] for e in events if e["type"] == "subagent.started"}
        tool_names = {e["data"]["toolCallId"]: e["data"]["toolName"] for e in events
                      if e["type"] == "tool.execution_start"}
        model = next(e["data"]["selectedModel"] for e in events if e["type"] == "session.start")
        for e in events:
            t, d = e["type"], e["data"]
            if t == "session.start":
                c["sessions"][""] += 1
            elif t == "assistant.turn_start":
                c["turns"][agent_names.get(e.get("agentId"), "main")] += 1
            elif t == "session.usage_record":
                c["llm"][(d["usage"]["model"], "success")] += 1
                for key, kind in (("inputTokens", "input"), ("outputTokens", "output"),
                                  ("cacheReadTokens", "cache_read"), ("cacheWriteTokens", "cache_write")):
                    if d["usage"].get(key):
                        c["tokens"][(d["usage"]["model"], kind)] += d["usage"][key]
            elif t == "session.error":
                c["llm"][(model, "error")] += 1
                if not e.get("agentId"):
                    c["signals"]["error"] += 1
            elif t == "tool.execution_complete":
                c["tools"][(tool_names[d["toolCallId"]], "failure" if cli_shows_failed(d) else "success")] += 1
            elif t == "user.message" and d.get("isAutopilotContinuation"):
                c["nudges"][""] += 1
            elif t == "session.task_complete":
                c["signals"]["task_complete"] += 1
            elif t == "session.shutdown":
                c["signals"]["shutdown"] += 1
        streams = [run.stdout_path] + ([run.stdout_path.with_name("first.stdout.jsonl")]
                                      if run.stdout_path.with_name("first.stdout.jsonl").exists() else [])
        for stream in streams:
            for line in stream.read_text().splitlines():
                event = json.loads(line)
                if event.get("type") == "assistant.idle" and not event.get("agentId"):
                    c["signals"]["idle"] += 1
    return c


def scraped_counts(samples) -> dict[str, Counter]:
    c = {name: Counter() for name in ("sessions", "turns", "llm", "tools", "nudges", "signals", "tokens")}
    for (name, labels), v in samples.items():
        labels = dict(labels)
        if not v:
            continue
        if name == "copilot_sessions_started_total":
            c["sessions"][""] += v
        elif name == "copilot_turns_total":
            c["turns"][labels["agent"]] += v
        elif name == "copilot_llm_calls_total":
            c["llm"][(labels["model"], labels["outcome"])] += v
        elif name == "copilot_tool_calls_total":
            c["tools"][(labels["tool"], labels["outcome"])] += v
        elif name == "copilot_autopilot_nudges_total":
            c["nudges"][""] += v
        elif name == "copilot_completion_signals_total":
            c["signals"][labels["signal"]] += v
        elif name == "copilot_tokens_total":
            c["tokens"][(labels["model"], labels["type"])] += v
    return c


@pytest.fixture(scope="module")
def corpus_daemon(cli_corpus, tmp_path_factory):
    """A daemon that has read a copy of the whole corpus, with a real Prometheus scraping it.

    The sessions arrive after Prometheus has scraped the empty daemon, so counters grow while it
    watches and rates and quantiles have something to show."""
    root = tmp_path_factory.mktemp("metrics")
    home = root / "home"
    (home / "session-state").mkdir(parents=True)
    daemon = DaemonProcess(home, root / "state", traces_file=root / "traces.jsonl", args=FAST).start()
    prometheus = Prometheus(root / "prometheus", [f"127.0.0.1:{daemon.port}"], rule_files=[RULES]).start()
    try:
        wait_until(lambda: prometheus.query("copilot_otel_files_watched == 0"), timeout=30, what="a first scrape")
        # First the first half of every log, scraped; then the rest appended.
        rests = {}
        for folder in sorted(cli_corpus.home_all.glob("session-state/*")):
            shutil.copytree(folder, home / "session-state" / folder.name,
                            ignore=shutil.ignore_patterns("events.jsonl"))
            log = home / "session-state" / folder.name / "events.jsonl"
            # Held by a live process (this test) while it is written, as the CLI holds it.
            (log.parent / f"inuse.{os.getpid()}.lock").write_text(str(os.getpid()))
            lines = (folder / "events.jsonl").read_bytes().splitlines(keepends=True)
            log.write_bytes(b"".join(lines[:len(lines) // 2]))
            rests[log] = b"".join(lines[len(lines) // 2:])
        wait_until(lambda: prometheus.query(f"copilot_otel_files_watched == {len(rests)}"), timeout=30,
                   what="the first halves scraped")
        time.sleep(1.5)  # more 1 s scrapes of the first halves before the rest
        for log, rest in rests.items():
            with open(log, "ab") as handle:
                handle.write(rest)
        files = list(rests)
        wait_until(lambda: value(daemon.scrape(), "copilot_completion_signals_total", signal="shutdown")
                   == sum(f.read_bytes().count(b'"type":"session.shutdown"') for f in files), what="all files read")
        yield daemon, prometheus
    finally:
        prometheus.stop()
        daemon.stop()


def test_counters_equal_the_event_logs(cli_corpus, corpus_daemon):
    """Each contract counter equals what the logs say; idle equals the CLI's real assistant.idle."""
    daemon, _ = corpus_daemon
    assert scraped_counts(daemon.scrape()) == derived_counts(cli_corpus.values())


def test_counters_equal_the_cli_own_otel(cli_corpus, corpus_daemon):
    """LLM calls, tool calls and tokens agree with the CLI's own OpenTelemetry output."""
    daemon, _ = corpus_daemon
    ours = scraped_counts(daemon.scrape())
    llm_ok, tools, tokens = Counter(), Counter(), Counter()
    for run in cli_corpus.values():
        for span in run.otel():
            if span.get("type") != "span":
                continue
            a = span["attributes"]
            if a.get("gen_ai.operation.name") == "chat" and span["status"]["code"] != 2:
                llm_ok[a["gen_ai.request.model"]] += 1
                tokens[(a["gen_ai.request.model"], "input")] += a.get("gen_ai.usage.input_tokens", 0)
                tokens[(a["gen_ai.request.model"], "output")] += a.get("gen_ai.usage.output_tokens", 0)
            elif a.get("gen_ai.operation.name") == "execute_tool":
                # the CLI leaves a command that exited non-zero unset, with its process.exit.code: a failure here
                failed = span["status"]["code"] == 2 or a.get("process.exit.code") not in (None, 0)
                tools[(a["gen_ai.tool.name"], "failure" if failed else "success")] += 1
    assert Counter({m: v for (m, o), v in ours["llm"].items() if o == "success"}) == llm_ok
    assert ours["tools"] == tools
    assert Counter({k: v for k, v in ours["tokens"].items() if k[1] in ("input", "output")}) == tokens


def test_prometheus_scrapes_the_same_values(cli_corpus, corpus_daemon):
    """A real Prometheus scraping /metrics every second holds the same counts (query API)."""
    _daemon, prometheus = corpus_daemon
    expected = derived_counts(cli_corpus.values())
    wait_until(lambda: prometheus.query('up{job="copilot-otel"} == 1'), what="a first scrape")
    wait_until(lambda: prometheus.values("sum(copilot_completion_signals_total{signal='shutdown'})")
               == {"": expected["signals"]["shutdown"]}, what="prometheus to see the final counts")
    assert prometheus.values("sum by (tool, outcome) (copilot_tool_calls_total) > 0", "tool") is not None
    tools = {(r["metric"]["tool"], r["metric"]["outcome"]): float(r["value"][1])
             for r in prometheus.query("copilot_tool_calls_total > 0")}
    assert tools == expected["tools"]
    signals = prometheus.values("copilot_completion_signals_total > 0", "signal")
    assert signals == expected["signals"]
    turns = prometheus.values("copilot_turns_total", "agent")
    assert turns == expected["turns"]
    assert prometheus.values("copilot_autopilot_nudges_total") == {"": expected["nudges"][""]}
    # Histograms count every turn, tool and LLM call.
    assert prometheus.values("sum(copilot_turn_duration_seconds_count)") == {"": sum(expected["turns"].values())}
    assert prometheus.values("sum(copilot_tool_duration_seconds_count)") == {"": sum(expected["tools"].values())}


def test_every_dashboard_query_runs_against_real_data(corpus_daemon):
    """Each PromQL expression of every dashboard panel parses in Prometheus and returns data, and a
    number where it is no ratio (not only NaN: quantiles and rates see the corpus arrive)."""
    _, prometheus = corpus_daemon
    every = '{__name__=~"copilot_.+"}'
    wait_until(lambda: prometheus.query("rate(copilot_turns_total[1m]) > 0") and prometheus.values(
               f"count({every}) - count({every} offset 3s)") == {"": 0},
               what="two scrapes of every series")
    empty = []
    for title, expr in dashboard_queries():
        # A window that reaches back to when the corpus arrived (a dashboard over the last hours).
        result = prometheus.query(render_grafana_expr(expr, __rate_interval="10m"))
        # A ratio is NaN where its denominator saw no increase (a series born in the window has no
        # rate yet, as in any Prometheus): it must return series; every other panel a number.
        ratio = ") / " in expr
        if not result or not (ratio or any(sample["value"][1] != "NaN" for sample in result)):
            empty.append((title, expr))
    # Stuck/abandoned sessions do not exist in a finished corpus: those panels may be empty here;
    # test_stuck_and_abandoned_sessions runs them on live sessions. The corpus runs BYOK and changes
    # no code: tests/e2e/test_cost.py runs the cost panels on sessions with a Copilot subscription that do.
    live_only = [t for t, e in empty if "copilot_session_stalled_seconds" in e]
    cost_only = [t for t, e in empty if any(m in e for m in COST_METRICS)]
    # This daemon does not push its metrics over OTLP: tests/e2e/test_fleet.py runs daemons that do.
    push_only = [t for t, e in empty if "copilot_otel_metrics_push_" in e]
    # The corpus calls no MCP server's tool: the mcp_tools situation's calls are counted in
    # tests/component/test_today.py.
    mcp_only = [t for t, e in empty if "copilot_mcp_tool_calls_total" in e]
    assert [t for t, _ in empty if t not in live_only + cost_only + push_only + mcp_only] == []


def test_alert_rules_load_and_stay_quiet(corpus_daemon):
    """The shipped rules load into the real Prometheus and none fires on a healthy corpus (the credits group
    runs once a minute: its first evaluation is waited for)."""
    _, prometheus = corpus_daemon

    def rules_now():
        return json.load(__import__("urllib.request").request.urlopen(f"{prometheus.url}/api/v1/rules"))

    wait_until(lambda: all(r["health"] != "unknown" for g in rules_now()["data"]["groups"] for r in g["rules"]),
               timeout=120, what="every rule group evaluated once")
    rules = rules_now()
    names = {r["name"] for g in rules["data"]["groups"] for r in g["rules"]}
    assert {"CopilotSessionStuck", "CopilotSessionAbandoned", "CopilotOtelDown"} <= names
    assert all(r["health"] == "ok" for g in rules["data"]["groups"] for r in g["rules"])
    firing = list(prometheus.query("ALERTS{alertstate='firing'}"))
    assert firing == []


def test_exposition_passes_promtool(corpus_daemon):
    """`promtool check metrics` accepts our /metrics."""
    daemon, _ = corpus_daemon
    import urllib.request

    body = urllib.request.urlopen(daemon.metrics_url, timeout=5).read()
    result = subprocess.run([promtool(), "check", "metrics"], input=body, capture_output=True, timeout=30)
    assert result.returncode == 0, result.stdout.decode() + result.stderr.decode()


def test_restart_counts_history_once(cli_corpus, tmp_path):
    """After a restart, counters resume at the totals the checkpoint kept and count only events after it: history
    counts once, and no series drops to 0."""
    home = tmp_path / "home"
    shutil.copytree(cli_corpus.home_all, home)
    state = tmp_path / "state"
    args = FAST
    with DaemonProcess(home, state, traces_file=tmp_path / "t.jsonl", args=args) as daemon:
        wait_until(lambda: value(daemon.scrape(), "copilot_otel_files_watched") == len(cli_corpus), what="files")
        wait_until(lambda: value(daemon.scrape(), "copilot_otel_checkpoint_commits_total"), what="a commit")
        first = wait_until_steady(lambda: scraped_counts(daemon.scrape()), polls=4, interval=0.3,
                                  what="the counts to settle")
    assert first == derived_counts(cli_corpus.values())
    with DaemonProcess(home, state, traces_file=tmp_path / "t.jsonl", args=args) as daemon:
        wait_until(lambda: value(daemon.scrape(), "copilot_otel_files_watched") == len(cli_corpus), what="files")
        again = wait_until_steady(lambda: scraped_counts(daemon.scrape()), polls=4, interval=0.3,
                                  what="the counts after the restart to settle")
    assert again == first


def test_stuck_and_abandoned_sessions(cli, provider, tmp_path):
    """A tool sleeping past --stuck-after-tool makes its session stuck until it completes; a CLI
    killed with SIGKILL mid-turn leaves its session abandoned, its open spans ended as incomplete.
    Meanwhile a real Prometheus runs the dashboard's stalled-session panels: they list each one."""
    home = tmp_path / "home"
    (home / "session-state").mkdir(parents=True)
    cwd = tmp_path / "work"
    cwd.mkdir()
    traces = tmp_path / "traces.jsonl"
    stalled_panels = [(t, e) for t, e in dashboard_queries() if "copilot_session_stalled_seconds" in e]
    assert stalled_panels

    def panels_list(prometheus, session_id: str) -> None:
        for title, expr in stalled_panels:
            wait_until(lambda expr=expr: any(r["metric"].get("session_id") == session_id
                                             for r in prometheus.query(render_grafana_expr(expr))),
                       timeout=20, what=f"panel {title!r} to show {session_id}")

    with DaemonProcess(home, tmp_path / "state", traces_file=traces,
                       args=FAST + ("--stuck-after", "1", "--stuck-after-tool", "1")) as daemon, \
            Prometheus(tmp_path / "prometheus", [f"127.0.0.1:{daemon.port}"], rule_files=[RULES]) as prometheus:
        sleeper = cli.start(prompt_for("sleep_tool", 8), home=home, port=provider.port, cwd=cwd)
        wait_until(lambda: value(daemon.scrape(), "copilot_sessions", state="stuck") == 1, timeout=90,
                   what="the sleeping session to be stuck")
        samples = daemon.scrape()
        assert stalled(samples, session_id=sleeper.session_id, state="stuck",
                     tool="bash") >= 1
        panels_list(prometheus, sleeper.session_id)
        sleeper.wait()
        wait_until(lambda: value(daemon.scrape(), "copilot_sessions", state="stuck") == 0, what="stuck to clear")
        assert not [k for k in daemon.scrape() if k[0] == "copilot_session_stalled_seconds"]

        victim = cli.start(prompt_for("sleep_tool", 60), home=home, port=provider.port, cwd=cwd)
        wait_until(lambda: victim.events_path.exists() and b'"tool.execution_start"' in victim.events_path.read_bytes(),
                   timeout=90, what="the victim's tool to start")
        wait_until(lambda: value(daemon.scrape(), "copilot_sessions", state="waiting_tool") == 1
                   or value(daemon.scrape(), "copilot_sessions", state="stuck") == 1, what="the victim mid-tool")
        victim.kill()
        victim.popen.wait(timeout=10)
        wait_until(lambda: value(daemon.scrape(), "copilot_sessions", state="abandoned") == 1, timeout=20,
                   what="the killed session to be abandoned")
        samples = daemon.scrape()
        assert stalled(samples, session_id=victim.session_id, state="abandoned",
                     tool="bash") > 0
        panels_list(prometheus, victim.session_id)
    from tests.support.otlp_json import read_spans

    incomplete = [s for s in read_spans(traces) if s.attributes.get("gen_ai.conversation.id") == victim.session_id
                  and s.attributes.get("error.type") == "incomplete"]
    assert {label(s) for s in incomplete} >= {"execute_tool bash", "turn 0", "invoke_agent copilot"}


def test_live_states_of_an_sdk_session(cli, provider, tmp_path):
    """A session held open by the real SDK: waiting_user while its permission prompt waits for
    an answer (never stuck, however long), stuck while a tool sleeps past --stuck-after-tool, and
    idle again once the loop ends, while its CLI process still lives."""
    pytest.importorskip("copilot", reason="github-copilot-sdk is installed by the test command")
    from copilot import CopilotClient
    from copilot.generated.rpc import PermissionDecisionApproveOnce

    from tests.support.copilot_cli import MODEL

    home, cwd = tmp_path / "home", tmp_path / "work"
    (home / "session-state").mkdir(parents=True)
    cwd.mkdir()
    with DaemonProcess(home, tmp_path / "state", traces_file=tmp_path / "traces.jsonl",
                       args=FAST + ("--stuck-after", "1", "--stuck-after-tool", "1")) as daemon:

        def states() -> dict[str, float]:
            return by_label(daemon.scrape(), "copilot_sessions", "state")

        async def scenario() -> None:
            asked, answer = asyncio.Event(), asyncio.Event()

            async def ask_the_person(request, invocation):
                asked.set()
                await answer.wait()
                return PermissionDecisionApproveOnce()

            async with CopilotClient(env=cli.sdk_env(home=home, port=provider.port),
                                     working_directory=str(cwd)) as client:
                session = await client.create_session(
                    on_permission_request=ask_the_person, model=MODEL, streaming=True,
                    provider={"type": "openai", "base_url": f"http://127.0.0.1:{provider.port}/v1",
                              "api_key": "unused"})
                idle = asyncio.Event()
                session.on(lambda e: idle.set() if e.to_dict().get("type") == "session.idle" and not e.agent_id
                           else None)

                await session.send(prompt_for("failing_tool", str(cwd)))
                await asyncio.wait_for(asked.wait(), 90)
                await asyncio.to_thread(wait_until, lambda: states().get("waiting_user") == 1, 30, 0.1,
                                        "waiting_user while the permission prompt is open")
                await asyncio.sleep(2)  # past --stuck-after: a person being asked is not a stuck agent
                assert states()["waiting_user"] == 1 and states()["stuck"] == 0
                answer.set()
                await asyncio.wait_for(idle.wait(), 90)
                await asyncio.to_thread(wait_until, lambda: states().get("idle") == 1, 30, 0.1, "idle after the loop")
                assert states()["waiting_user"] == 0

                idle.clear()
                await session.send(prompt_for("sleep_tool", 4))
                await asyncio.to_thread(wait_until, lambda: states().get("stuck") == 1, 60, 0.1,
                                        "stuck while the tool sleeps")
                await asyncio.wait_for(idle.wait(), 90)
                # The CLI still runs (the SDK holds the session): stuck cleared because the tool ended.
                await asyncio.to_thread(wait_until, lambda: states().get("idle") == 1 and states()["stuck"] == 0,
                                        30, 0.1, "stuck to clear once the tool completed")
                assert not [k for k in daemon.scrape() if k[0] == "copilot_session_stalled_seconds"]
                await session.disconnect()

        aio.run(scenario())
