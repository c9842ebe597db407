"""A fleet, as an operator runs one: five machines (two dev boxes, three CI runners), each a real daemon with its
own home, state folder, loopback address and host name (a UTS namespace of its own) and no identity settings,
sessions of the real Copilot CLI on each; traces and pushed metrics through the real OpenTelemetry Collector
running deploy/otelcol/gateway.yaml (its queue on disk) to a counting OTLP receiver; Debian's Prometheus
scraping all five over TLS with basic auth, with deploy/'s rules; Debian's Alertmanager delivering to a
webhook. Every span arrives once on its machine's resource; every dashboard query has a row per host name; a
stuck session pages with its host, repository, session and trace link; a gateway SIGKILL inside its batch window
loses nothing (its file_storage queue carries the daemons' guarantee on: tests/e2e/test_gateway_loss.py has the
other kill points); a daemon restart re-sends nothing and hides no machine.

The rules are deploy/'s with one change: CopilotSessionStuck's `for: 1m` is 2 s, so the page comes in seconds.
"""

from __future__ import annotations

import re
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.commands import run_replay
from tests.support.copilot_cli import prompt_for
from tests.support.deploy import (
    dashboard_queries,
    git_repository,
    promql_metric_names,
    render_grafana_expr,
    stuck_rules_for_the_test,
)
from tests.support.fleet import Alertmanager, Machine, Pki, Webhook, can_name_machines
from tests.support.net import wait_until
from tests.support.otlp_json import read_spans
from tests.support.otlp_receiver import OtlpReceiver
from tests.support.prometheus_harness import Prometheus
from tests.support.scrape import value
from tests.support.stack import Gateway

pytestmark = pytest.mark.skipif(can_name_machines() is not None, reason=str(can_name_machines()))

# name, address, repository its sessions work in
MACHINES = [("dev-box-1", "127.0.0.11", "octo-org/web"), ("dev-box-2", "127.0.0.12", "octo-org/api"),
            ("ci-runner-1", "127.0.0.13", "octo-org/web"), ("ci-runner-2", "127.0.0.14", "octo-org/ci-app"),
            ("ci-runner-3", "127.0.0.15", "octo-org/api")]
NAMES = {name for name, _, _ in MACHINES}
TRACE_URL = "http://jaeger.fleet.test/trace/{trace_id}"  # the operator's URL template (an external label)
FLAGS = ("--idle-quiet", "0.3", "--rescan-interval", "1", "--stuck-after-tool", "3600,bash=4")
# Series every machine serves once it ran a plain session: a dashboard panel on these alone has a row per machine.
ON_EVERY_MACHINE = {
    "copilot_sessions", "copilot_sessions_started_total", "copilot_turns_total", "copilot_llm_calls_total",
    "copilot_tokens_total", "copilot_completion_signals_total", "copilot_interactions_total",
    "copilot_turn_duration_seconds_bucket", "copilot_llm_call_duration_seconds_bucket",
    "copilot_llm_time_to_first_token_seconds_bucket", "up", "target_info", "copilot_otel_events_read_total",
    "copilot_otel_files_watched", "copilot_otel_build_info", "copilot_otel_lag_seconds",
    "copilot_otel_export_queue_spans", "copilot_otel_checkpoint_commits_total", "copilot_otel_spans_exported_total",
    "process_cpu_seconds_total", "process_resident_memory_bytes",
}
RARE = ('outcome="error"',)  # matchers of series a healthy session does not make (failed LLM calls)


def on_every_machine(title: str, expr: str) -> bool:
    """Does this dashboard query read only series that every machine serves (so it has a row for each)?"""
    return title != "Daemons down" and promql_metric_names(expr) <= ON_EVERY_MACHINE \
        and not any(matcher in expr for matcher in RARE)


@dataclass
class Fleet:
    machines: dict[str, Machine]
    work: dict[str, Path]
    receiver: OtlpReceiver
    gateway: Gateway
    prometheus: Prometheus
    webhook: Webhook
    root: Path

    def received(self, name: str) -> list:
        """The spans the receiver got from machine ``name`` (by its resource's host.name)."""
        return [s for s in self.receiver.spans() if s.resource.get("host.name") == name]

    def expected(self, name: str) -> Counter:
        """The final spans of every session in the machine's home, as `copilot-otel replay` makes them."""
        out = self.root / f"{name}-replayed-{time.monotonic_ns()}.jsonl"
        done = run_replay(str(self.machines[name].home), "--traces-file", str(out))
        assert done.returncode == 0, done.stderr.decode()
        return Counter((s.trace_id, s.span_id) for s in read_spans(out))


def final(spans) -> Counter:
    """(trace id, span id) of each span that is no snapshot of open work (github.copilot.running), counted."""
    return Counter((s.trace_id, s.span_id) for s in spans if not s.attributes.get("github.copilot.running"))




def run_session(fleet: Fleet, cli, provider, name: str, scenario: str = "plain", arg=None):
    machine = fleet.machines[name]
    return cli.start(prompt_for(scenario, arg), home=machine.home, port=provider.port, cwd=fleet.work[name])


@pytest.fixture(scope="module")
def fleet(cli, provider, tmp_path_factory):
    """The five machines up, each having run one plain session that every backend has seen."""
    root = tmp_path_factory.mktemp("fleet")
    pki = Pki(root / "pki", [address for _, address, _ in MACHINES])
    with OtlpReceiver() as receiver, Gateway(root / "gateway", traces_to=receiver.grpc_endpoint.removeprefix("http://"),
                                             metrics_to=receiver.http_base) as gateway, Webhook() as webhook, \
            Alertmanager(root / "alertmanager", webhook.url) as alertmanager:
        env = {"OTEL_EXPORTER_OTLP_ENDPOINT": gateway.grpc_endpoint, "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
               "OTEL_METRICS_EXPORTER": "otlp", "OTEL_METRIC_EXPORT_INTERVAL": "1000"}
        machines = {name: Machine(name, root, address, pki, env=env, args=FLAGS) for name, address, _ in MACHINES}
        work = {name: git_repository(root / name / "work", repository) for name, _, repository in MACHINES}
        try:
            for machine in machines.values():
                machine.start()
            with Prometheus(root / "prometheus", [m.target for m in machines.values()],
                            rule_files=[stuck_rules_for_the_test(root)], scrape=pki.scrape_config(),
                            external_labels={"copilot_trace_url": TRACE_URL},
                            alertmanagers=[alertmanager.address]) as prometheus:
                state = Fleet(machines, work, receiver, gateway, prometheus, webhook, root)
                for run in [run_session(state, cli, provider, name) for name in machines]:
                    run.wait()
                for name in machines:
                    expected = state.expected(name)
                    wait_until(lambda name=name, expected=expected: final(state.received(name)) == expected, timeout=60,
                               what=f"{name}'s spans at the receiver")
                yield state
        finally:
            for machine in machines.values():
                machine.stop()


def test_every_span_arrives_once_on_its_machines_resource(fleet):
    """Each machine's spans reach the receiver through the gateway exactly once each, on a resource that names
    that machine (host.name from its own host name: no identity was configured) with an instance id of its own;
    no span arrives without a machine. The OTLP metrics push arrives the same way, per machine."""
    spans = fleet.receiver.spans()
    assert {s.resource.get("host.name") for s in spans} == NAMES
    for name in NAMES:
        assert final(fleet.received(name)) == fleet.expected(name), name
    instance_ids = {s.resource.get("host.name"): s.resource.get("service.instance.id") for s in spans}
    assert len(set(instance_ids.values())) == len(NAMES) and None not in instance_ids.values()
    pushed = {name: fleet.receiver.wait_for_metric(
        "copilot_otel_build_info", timeout=30,
        predicate=lambda m, name=name: m.resource.get("host.name") == name) for name in NAMES}
    assert {m.resource["service.instance.id"] for m in pushed.values()} == set(instance_ids.values())


def test_dashboard_queries_return_a_row_per_host_name(fleet):
    """Every dashboard query, split by machine, runs on the real Prometheus that scrapes the five over TLS with
    basic auth; those on series every machine serves return one row for each of the five host names, the others
    only host names of the fleet; the machine picker lists the five."""
    prometheus = fleet.prometheus
    wait_until(lambda: prometheus.values("count(up == 1)") == {"": 5.0}, timeout=60, what="five scraped")
    every = '{__name__=~"copilot_.+"}'
    wait_until(lambda: prometheus.values(f"count({every}) - count({every} offset 3s)") == {"": 0}, timeout=60,
               what="two scrapes of every series")
    assert set(prometheus.values("target_info", "host_name")) == NAMES
    everywhere = 0
    for title, expr in dashboard_queries():
        if "host_name" not in render_grafana_expr(expr) or title == "Daemons down":
            continue  # the fleet's budgets; the daemons down (none is)
        rows = prometheus.query(render_grafana_expr(expr, split="host_name", __rate_interval="1m", __range="10m"))
        hosts = {row["metric"].get("host_name") for row in rows}
        assert hosts <= NAMES, (title, hosts)
        if on_every_machine(title, expr):
            assert hosts == NAMES, (title, expr, rows)
            everywhere += 1
    assert everywhere >= 25


def test_a_stuck_session_pages_naming_its_host_repository_session_and_trace(fleet, cli, provider):
    """bash sleeps past its 4 s threshold on ci-runner-2: CopilotSessionStuck fires for it, naming that host, and
    Alertmanager delivers it to the webhook with the host, the repository, the session and a link to the
    session's trace, made from the operator's URL template and the trace id of the stuck interaction."""
    sleeper = run_session(fleet, cli, provider, "ci-runner-2", "sleep_tool", 20)
    try:
        def paged():
            # one alert, however many notifications carry it (each change of its group sends the group again)
            return list({a["fingerprint"]: a for a in fleet.webhook.alerts()
                         if a["labels"]["alertname"] == "CopilotSessionStuck"
                         and a["labels"]["session_id"] == sleeper.session_id}.values())

        (alert,) = wait_until(paged, timeout=60, what="the page at the webhook")
    finally:
        sleeper.wait()
    labels, annotations = alert["labels"], alert["annotations"]
    assert (labels["host_name"], labels["repository"], labels["session_id"], labels["tool"]) == (
        "ci-runner-2", "octo-org/ci-app", sleeper.session_id, "bash")
    assert annotations["summary"] == f"Copilot session {sleeper.session_id} on ci-runner-2 is stuck"
    assert "on ci-runner-2 (octo-org/ci-app) is waiting on tool bash" in annotations["description"]
    roots = {s.trace_id for s in fleet.received("ci-runner-2") if s.name == "invoke_agent copilot"
             and s.attributes.get("gen_ai.conversation.id") == sleeper.session_id}
    assert roots == {labels["trace_id"]}
    assert annotations["trace_url"] == TRACE_URL.replace("{trace_id}", labels["trace_id"])


def test_a_gateway_sigkill_inside_its_batch_window_loses_nothing(fleet, cli, provider):
    """The Collector gateway acknowledges a session's spans into its queue on disk and is SIGKILLed inside its
    1 s batch window, before the batch went out. What a machine ran while the gateway was down is kept by its
    daemon (it retries from its checkpoint). Restarted, the gateway sends what its queue held: both machines'
    sessions arrive, each span once."""
    victim, bystander = fleet.machines["dev-box-1"], "dev-box-2"
    exported = value(victim.scrape(), "copilot_otel_spans_exported_total")
    session = run_session(fleet, cli, provider, "dev-box-1")
    wait_until(lambda: value(victim.scrape(), "copilot_otel_spans_exported_total") > exported, timeout=60,
               interval=0.02, what="the gateway to acknowledge the session's spans")
    fleet.gateway.kill()
    session.wait()
    during = run_session(fleet, cli, provider, bystander)  # the gateway is down: its daemon holds the spans
    during.wait()
    fleet.gateway.start()
    for name in ("dev-box-1", bystander):
        expected = fleet.expected(name)
        wait_until(lambda name=name, expected=expected: final(fleet.received(name)) == expected, timeout=90,
                   what=f"{name}'s spans, each once, after the gateway's restart")


def test_a_daemon_restart_resends_nothing_and_hides_no_machine(fleet):
    """ci-runner-1's daemon restarts (SIGTERM, then the same state folder, address and host name): while it is
    down the "Daemons down" panel names it; it sends no span again, keeps its instance id, and from its first
    scrapes every dashboard query on series every machine serves still has a row for each of the five host names,
    over a window (6 s) that holds only samples from after the restart: its counters are back, not merely remembered
    by Prometheus."""
    machine, prometheus = fleet.machines["ci-runner-1"], fleet.prometheus
    sent = final(fleet.received("ci-runner-1"))
    identity = prometheus.values('target_info{host_name="ci-runner-1"}', "service_instance_id")
    machine.stop()
    wait_until(lambda: prometheus.values(f'up{{instance="{machine.target}"}}') == {"": 0.0}, timeout=30,
               what="the restart seen by Prometheus")
    (down,) = [expr for title, expr in dashboard_queries() if title == "Daemons down"]
    # down, it serves no target_info: the panel names it by the last one it served
    assert prometheus.values(render_grafana_expr(down, split="host_name"), "host_name") == {"ci-runner-1": 1.0}
    machine.start()
    wait_until(lambda: prometheus.values(f'up{{instance="{machine.target}"}}') == {"": 1.0}, timeout=30,
               what="the first scrape after the restart")
    time.sleep(8)  # four scrapes since it came back: a 6 s window holds no sample from before the restart
    assert value(machine.scrape(), "copilot_otel_spans_exported_total") == 0
    assert final(fleet.received("ci-runner-1")) == sent
    assert prometheus.values('target_info{host_name="ci-runner-1"}', "service_instance_id") == identity
    hidden = []
    for title, expr in dashboard_queries():
        if "host_name" not in render_grafana_expr(expr) or not on_every_machine(title, expr):
            continue
        rows = prometheus.query(render_grafana_expr(expr, split="host_name", __rate_interval="6s", __range="6s"))
        if {row["metric"].get("host_name") for row in rows} != NAMES:
            hidden.append(title)
    # The daemon's own reading counters (copilot_otel_events_read_total{type}) start again at zero: a restarted
    # daemon has a row there only once it reads new events. The copilot_* session series resume.
    assert hidden == ["Events read per second by type"]
    assert re.fullmatch(r"[0-9a-f-]+", next(iter(identity)))
