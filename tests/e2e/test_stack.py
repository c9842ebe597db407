"""The stack deploy/ ships, run for real: sessions of the real Copilot CLI -> two copilot-otel daemons -> the
OpenTelemetry Collector gateway running deploy/otelcol/gateway.yaml as shipped -> Jaeger v2 and Prometheus 3's
OTLP receiver; and Prometheus 3 scraping one daemon as deploy/prometheus/prometheus.yml says, with deploy/'s rules.
The Collector, Jaeger and Prometheus are built from their Go modules (scripts/backends.sh).

Both daemons read the same home: ``scraped-box`` sends traces to the gateway and is scraped; ``pushed-box``
pushes its metrics through the gateway (OTEL_METRICS_EXPORTER=otlp) and writes its traces to a file, so that each
span reaches Jaeger once. Same logs, two paths: every dashboard query and alert must say the same on both.

Changed from the shipped files, and only this: ports and addresses (loopback, this test's), Prometheus's intervals
(1 s instead of 15 s) and CopilotSessionStuck's ``for`` (2 s instead of 1 m), so that the test takes seconds."""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.commands import run_copilot_otel, run_replay
from tests.support.copilot_cli import prompt_for
from tests.support.daemon import DaemonProcess
from tests.support.deploy import dashboard_queries, git_repository, render_grafana_expr, stuck_rules_for_the_test
from tests.support.net import wait_until
from tests.support.otlp_json import read_spans
from tests.support.otlp_receiver import ReceivedSpan
from tests.support.prometheus_harness import Prometheus
from tests.support.stack import Gateway, Jaeger, prometheus3

SERVICE = "copilot-otel"
REPOSITORY = "octo-org/stack"
HOSTS = ("scraped-box", "pushed-box")
# scenario, its argument, autopilot: a plain answer, tools, a failing tool, a sub-agent, an autopilot nudge
SCENARIOS = [("plain", None, False), ("multi_tools", None, False), ("failing_tool", None, False),
             ("subagent", None, False), ("autopilot", None, True)]
FLAGS = ("--idle-quiet", "0.3", "--rescan-interval", "1", "--stuck-after-tool", "3600,bash=3")


@dataclass
class Stack:
    jaeger: Jaeger
    gateway: Gateway
    prometheus: Prometheus
    daemons: dict[str, DaemonProcess]
    home: Path
    work: Path
    root: Path
    sessions: list[str]

    def replayed(self) -> list[ReceivedSpan]:
        """The spans `copilot-otel replay` writes for the home's logs (what Jaeger must hold)."""
        out = self.root / "replayed.jsonl"
        out.unlink(missing_ok=True)
        done = run_replay(str(self.home), "--traces-file", str(out))
        assert done.returncode == 0, done.stderr.decode()
        return [s for s in read_spans(out) if not s.attributes.get("github.copilot.running")]




def final(spans) -> list[ReceivedSpan]:
    return [s for s in spans if not s.attributes.get("github.copilot.running")]


def jaeger_value(value):
    """An attribute as Jaeger keeps it: its storage model has no arrays, so an array attribute (e.g.
    gen_ai.response.finish_reasons) is stored, shown and returned as its JSON text."""
    return json.dumps(value, separators=(",", ":")) if isinstance(value, list) else value


def content(span: ReceivedSpan) -> tuple:
    """What a user sees of a span in Jaeger: ids, parent, name, kind, times, attributes, status."""
    attributes = {key: jaeger_value(value) for key, value in span.attributes.items()}
    return (span.trace_id, span.span_id, span.parent_span_id, span.name, span.kind, span.start_time_unix_nano,
            span.end_time_unix_nano, json.dumps(attributes, sort_keys=True), span.status_code,
            span.status_message)


@pytest.fixture(scope="module")
def stack(cli, provider, tmp_path_factory):
    """The stack up, every scenario run once by the real CLI and every span of it in Jaeger."""
    root = tmp_path_factory.mktemp("stack")
    home = root / "home"
    (home / "session-state").mkdir(parents=True)
    work = git_repository(root / "work", REPOSITORY)
    with Jaeger(root / "jaeger") as jaeger:
        scraped = DaemonProcess(home, root / "scraped-state", args=FLAGS, log_level="info", env={
            "OTEL_EXPORTER_OTLP_ENDPOINT": "", "OTEL_RESOURCE_ATTRIBUTES": "host.name=scraped-box"})
        prometheus = prometheus3(root / "prometheus", [f"127.0.0.1:{scraped.port}"],
                                 trace_url=f"{jaeger.url}/trace/{{trace_id}}",
                                 rule_files=[stuck_rules_for_the_test(root / "rules")])
        with prometheus, Gateway(root / "gateway", traces_to=jaeger.otlp_endpoint,
                                 metrics_to=f"{prometheus.url}/api/v1/otlp") as gateway:
            scraped.extra_env.update({"OTEL_EXPORTER_OTLP_ENDPOINT": gateway.grpc_endpoint,
                                      "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"})
            pushed = DaemonProcess(home, root / "pushed-state", traces_file=root / "pushed-traces.jsonl",
                                   args=FLAGS, log_level="info", env={
                                       "OTEL_METRICS_EXPORTER": "otlp", "OTEL_METRIC_EXPORT_INTERVAL": "1000",
                                       "OTEL_EXPORTER_OTLP_ENDPOINT": gateway.grpc_endpoint,
                                       "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
                                       "OTEL_RESOURCE_ATTRIBUTES": "host.name=pushed-box"})
            with scraped, pushed:
                sessions = []
                for scenario, arg, autopilot in SCENARIOS:
                    run = cli.start(prompt_for(scenario, arg), home=home, port=provider.port, cwd=work,
                                    autopilot=autopilot)
                    run.wait()
                    sessions.append(run.session_id)
                state = Stack(jaeger, gateway, prometheus, {"scraped-box": scraped, "pushed-box": pushed}, home, work,
                              root, sessions)
                expected = Counter(content(s) for s in state.replayed())
                traces = {s.trace_id for s in state.replayed()}

                def in_jaeger() -> Counter:
                    return Counter(content(s) for t in traces for s in final(jaeger.trace(t)))

                try:
                    wait_until(lambda: in_jaeger() == expected, timeout=90, interval=0.5,
                               what="every replayed span in Jaeger")
                except AssertionError:
                    held = in_jaeger()
                    raise AssertionError(f"not in Jaeger: {sorted(expected - held)[:3]}\n"
                                         f"only in Jaeger: {sorted(held - expected)[:3]}") from None
                yield state


def test_jaeger_returns_every_trace_replay_writes_span_for_span(stack):
    """Jaeger's query API (v3, OTLP JSON) returns each trace `replay` writes for the same logs, span for span: the
    same ids, parents, names, kinds, start and end times, attributes and status; one root per interaction, under
    the service name the user searches by, with the resource naming the machine."""
    replayed = stack.replayed()
    by_trace = defaultdict(list)
    for span in replayed:
        by_trace[span.trace_id].append(span)
    assert len(by_trace) >= len(SCENARIOS)
    for trace_id, spans in by_trace.items():
        held = final(stack.jaeger.trace(trace_id))
        assert Counter(map(content, held)) == Counter(map(content, spans)), trace_id
        roots = [s for s in held if s.parent_span_id is None]
        assert len(roots) == 1 and roots[0].name == "invoke_agent copilot"
        assert {s.resource["service.name"] for s in held} == {SERVICE}
        assert {s.resource["host.name"] for s in held} == {"scraped-box"}
    names = {s.name for s in replayed}
    assert {"invoke_agent copilot", "chat test-model", "execute_tool bash", "execute_tool task"} <= names
    assert any(s.name.startswith("invoke_agent ") and s.parent_span_id for s in replayed)  # the sub-agent
    assert SERVICE in stack.jaeger.services()
    assert names <= set(stack.jaeger.operations(SERVICE))


def test_jaeger_search_finds_each_session_by_service_operation_and_tags(stack):
    """The search a user makes in Jaeger's UI (service, operation, tags) finds each session's interactions: by its
    session id (gen_ai.conversation.id), by its repository, by a failed tool's error."""
    replayed = stack.replayed()
    for session in stack.sessions:
        roots = {s.trace_id for s in replayed if s.parent_span_id is None
                 and s.attributes["gen_ai.conversation.id"] == session}
        assert roots
        found = stack.jaeger.search(SERVICE, operation="invoke_agent copilot",
                                    tags={"gen_ai.conversation.id": session})
        assert found == roots, session
    everything = {s.trace_id for s in replayed}
    url = f"https://github.com/{REPOSITORY}"
    assert stack.jaeger.search(SERVICE, operation="invoke_agent copilot",
                               tags={"vcs.repository.url.full": url}) == everything
    failed = {s.trace_id for s in replayed if s.name.startswith("execute_tool") and s.status_code == "ERROR"}
    assert failed and stack.jaeger.search(SERVICE, tags={"error": "true"}) >= failed


def test_exemplar_links_open_their_trace_in_jaeger(stack):
    """The dashboard's panels lead from an exemplar to its trace (the Prometheus datasource's
    exemplarTraceIdDestinations: trace_id -> the Jaeger datasource). Every exemplar Prometheus 3 holds, scraped
    or pushed, names a trace Jaeger has and a span of that trace."""
    prometheus, jaeger = stack.prometheus, stack.jaeger

    def exemplars(host: str) -> list[dict]:
        query = ('copilot_llm_call_duration_seconds_bucket * on (job, instance) group_left (host_name) '
                 f'target_info{{host_name="{host}"}}')
        return [e for series in prometheus.exemplars(query) for e in series["exemplars"]]

    for host in HOSTS:
        held = wait_until(lambda host=host: exemplars(host), timeout=60, what=f"exemplars of {host}")
        for exemplar in held:
            trace_id, span_id = exemplar["labels"]["trace_id"], exemplar["labels"]["span_id"]
            spans = final(jaeger.trace(trace_id))
            assert span_id in {s.span_id for s in spans}, (host, exemplar)
            # the same trace through the API Jaeger's UI and Grafana's Jaeger datasource read
            ui = jaeger.ui_trace(trace_id)
            assert ui is not None and {s["spanID"] for s in ui["data"][0]["spans"]} >= {span_id}


def host_rows(prometheus: Prometheus, expr: str, host: str) -> dict[tuple, float]:
    """A dashboard query for one machine: {labels but the machine's own: value}."""
    rendered = render_grafana_expr(expr, host=host, __rate_interval="30s", __range="10m")
    own = {"host_name", "instance", "job", "service_instance_id"}
    return {tuple(sorted((k, v) for k, v in row["metric"].items() if k not in own)): float(row["value"][1])
            for row in prometheus.query(rendered)}


def test_every_dashboard_query_says_the_same_pushed_as_scraped(stack):
    """Every query of the dashboard, for the scraped machine and for the pushed one (the same logs): each returns
    rows on both paths or on neither, with the same labels; the counts and gauges (no rate, no quantile) equal."""
    prometheus = stack.prometheus
    for host in HOSTS:
        wait_until(lambda host=host: prometheus.values(f'target_info{{host_name="{host}"}}'), timeout=60,
                   what=f"target_info of {host}")
    compared = with_rows = 0
    differ = []
    for title, expr in dashboard_queries():
        if "$host" not in expr:
            continue  # the fleet-wide panels (budgets, daemons down) have no machine to pick
        if "copilot_otel_metrics_push_" in expr:
            continue  # the push's own health: a scraped daemon pushes nothing
        own = "process_" in expr  # each daemon's own process (memory, CPU): same rows, its own values

        def same(expr=expr, own=own) -> bool:
            scraped, pushed = (host_rows(prometheus, expr, host) for host in HOSTS)
            if scraped.keys() != pushed.keys():
                return False
            exact = not own and "rate(" not in expr and "quantile" not in expr and "increase(" not in expr
            return not exact or all(abs(scraped[k] - pushed[k]) < 1e-9 for k in scraped)

        try:
            wait_until(same, timeout=20, interval=0.5, what=f"{title}: {expr}")
        except AssertionError:
            differ.append((title, expr, *(host_rows(prometheus, expr, host) for host in HOSTS)))
        compared += 1
        with_rows += bool(host_rows(prometheus, expr, "scraped-box"))
    assert differ == [], "\n".join(f"{t}: {e}\n  scraped {a}\n  pushed {b}" for t, e, a, b in differ)
    assert compared >= 30 and with_rows >= 20, (compared, with_rows)


def test_a_stuck_session_alerts_alike_on_both_paths_with_a_trace_link_jaeger_opens(stack, cli, provider):
    """bash sleeps past its 3 s threshold: CopilotSessionStuck fires for the scraped machine and for the pushed one
    with the same labels (but the machine's), and the trace_url it carries is this Jaeger's /trace/<id> of the
    stuck interaction, whose trace the query API behind that page returns."""
    prometheus, jaeger = stack.prometheus, stack.jaeger
    sleeper = cli.start(prompt_for("sleep_tool", 15), home=stack.home, port=provider.port, cwd=stack.work)
    try:
        def firing() -> dict[str, dict]:
            alerts = json.loads(prometheus_get(prometheus, "/api/v1/alerts"))["data"]["alerts"]
            return {a["labels"]["host_name"]: a for a in alerts if a["labels"]["alertname"] == "CopilotSessionStuck"
                    and a["state"] == "firing" and a["labels"].get("session_id") == sleeper.session_id}

        alerts = wait_until(lambda: firing() if set(firing()) == set(HOSTS) else None, timeout=60,
                            what="CopilotSessionStuck firing for both machines")
        # every rule, not only this one, says the same of both machines (but those about one path's own health)
        wait_until(lambda: len(set(map(frozenset, all_firing(prometheus).values()))) == 1, timeout=20,
                   what=f"the same alerts for both machines: {all_firing(prometheus)}")
    finally:
        sleeper.wait()
    assert labels(alerts["scraped-box"]) == labels(alerts["pushed-box"])
    trace_id = alerts["scraped-box"]["labels"]["trace_id"]
    for alert in alerts.values():
        assert alert["annotations"]["trace_url"] == f"{jaeger.url}/trace/{trace_id}"
    root = wait_until(lambda: [s for s in final(jaeger.trace(trace_id)) if s.parent_span_id is None], timeout=60,
                      what="the stuck interaction's trace in Jaeger")
    assert root[0].attributes["gen_ai.conversation.id"] == sleeper.session_id
    assert jaeger.ui_trace(trace_id)["data"][0]["traceID"] == trace_id


PATH_OWN = {"CopilotOtelDown", "CopilotOtelMetricsPushFailing"}  # a scrape's health; a push's health


def labels(alert: dict) -> dict:
    """An alert's labels but those naming the machine."""
    return {k: v for k, v in alert["labels"].items() if k not in ("host_name", "instance", "service_instance_id")}


def all_firing(prometheus: Prometheus) -> dict[str, set]:
    """host -> the alerts firing for it (name and labels but the machine's), except PATH_OWN."""
    found: dict[str, set] = {host: set() for host in HOSTS}
    for alert in json.loads(prometheus_get(prometheus, "/api/v1/alerts"))["data"]["alerts"]:
        host = alert["labels"].get("host_name")
        if alert["state"] == "firing" and host in found and alert["labels"]["alertname"] not in PATH_OWN:
            found[host].add(json.dumps(labels(alert), sort_keys=True))
    return found


def prometheus_get(prometheus: Prometheus, path: str) -> bytes:
    import urllib.request
    with urllib.request.urlopen(f"{prometheus.url}{path}", timeout=10) as response:
        return response.read()


def test_prometheus_says_what_usage_and_sessions_say(stack):
    """On both paths, Prometheus's totals for the machine equal what `copilot-otel usage --json` and
    `sessions --json` say of the same logs: sessions, LLM calls, and tokens of each kind."""
    done = run_copilot_otel("usage", "--json", "--copilot-home", str(stack.home), "--state-dir",
                            str(stack.root / "usage-state"))
    assert done.returncode == 0, done.stderr.decode()
    usage = json.loads(done.stdout)["total"]
    done = run_copilot_otel("sessions", "--json", "--copilot-home", str(stack.home), "--state-dir",
                            str(stack.root / "usage-state"))
    assert done.returncode == 0, done.stderr.decode()
    listed = json.loads(done.stdout)
    assert {s["id"] for s in listed} >= set(stack.sessions)
    for host in HOSTS:
        def total(expr: str, host=host) -> float:
            joined = f"sum({expr} * on (job, instance) group_left target_info{{host_name=\"{host}\"}})"
            return sum(stack.prometheus.values(joined).values())

        wait_until(lambda: total("copilot_sessions_started_total") == len(listed), timeout=60,
                   what=f"{host}'s sessions")
        assert usage["llm_calls"] == sum(s["llm_calls"] for s in listed)
        # A session is counted at its start, its calls as they are read: Prometheus can hold every session and
        # not yet every call (seen once under load). Wait for the calls too; then every total must agree.
        wait_until(lambda: total("copilot_llm_calls_total") == usage["llm_calls"], timeout=60,
                   what=f"{host}'s LLM calls", seen=lambda: total("copilot_llm_calls_total"))
        for kind, field in (("input", "input_tokens"), ("output", "output_tokens"),
                            ("cache_read", "cache_read_tokens"), ("cache_write", "cache_write_tokens")):
            assert total(f'copilot_tokens_total{{type="{kind}"}}') == usage[field], (host, kind)
        own = stack.daemons[host].scrape()
        assert sum(v for (name, _), v in own.items() if name == "copilot_sessions_started_total") == len(listed)
