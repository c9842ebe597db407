"""From a metric to its trace: exemplars on the LLM call, tool, turn and token metrics, read by a real
Prometheus with exemplar storage on and by a real OTLP receiver, lead to spans the daemon exported.

The sessions are logs the real CLI 1.0.102 wrote (tests/fixtures/cli/1.0.102): a plain session, one with
a sub-agent, one whose tool failed.
"""

from __future__ import annotations

import shutil
import urllib.request
from pathlib import Path

import pytest
import yaml

from tests.support.daemon import DaemonProcess
from tests.support.deploy import DEPLOY, dashboard_panels
from tests.support.net import wait_until
from tests.support.otlp_json import read_spans
from tests.support.otlp_receiver import OtlpReceiver
from tests.support.prometheus_harness import Prometheus
from tests.support.scrape import value

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "cli" / "1.0.102"
SCENARIOS = ("plain", "subagent", "failing_tool", "credits_complete")
OPENMETRICS = "application/openmetrics-text; version=1.0.0"
# Each series with exemplars, the span name its exemplars must lead to, and the label that names what the span
# names in its attribute.
LINKED = {
    "copilot_llm_calls_total": ("chat ", "model", "gen_ai.request.model"),
    "copilot_llm_call_duration_seconds_bucket": ("chat ", "model", "gen_ai.request.model"),
    "copilot_tokens_total": ("chat ", "model", "gen_ai.request.model"),
    "copilot_tool_calls_total": ("execute_tool ", "tool", "gen_ai.tool.name"),
    "copilot_tool_duration_seconds_bucket": ("execute_tool ", "tool", "gen_ai.tool.name"),
    "copilot_turns_total": ("turn", None, None),
    "copilot_ai_credits_total": ("chat ", "model", "gen_ai.request.model"),
    "copilot_turn_duration_seconds_bucket": ("turn", None, None),
}


def fixture_home(home: Path) -> tuple[Path, int]:
    """A COPILOT_HOME holding the real CLI's sessions; and how many of them shut down."""
    shutdowns = 0
    for scenario in SCENARIOS:
        for folder in (FIXTURES / scenario / "session-state").iterdir():
            shutil.copytree(folder, home / "session-state" / folder.name)
            shutdowns += (folder / "events.jsonl").read_bytes().count(b'"type":"session.shutdown"')
    return home, shutdowns


def get(url: str, accept: str | None = None) -> tuple[str, str]:
    """The body and content type of one GET."""
    request = urllib.request.Request(url, headers={"Accept": accept} if accept else {})
    with urllib.request.urlopen(request, timeout=10) as response:
        return response.read().decode(), response.headers["Content-Type"]


@pytest.fixture(scope="module")
def scraped(tmp_path_factory):
    """A daemon that has read the sessions, its traces file, and a real Prometheus (exemplar storage on)
    that scraped it in OpenMetrics."""
    root = tmp_path_factory.mktemp("exemplars")
    home, shutdowns = fixture_home(root / "home")
    traces = root / "traces.jsonl"
    with DaemonProcess(home, root / "state", traces_file=traces, args=("--idle-quiet", "0.2")) as daemon:
        wait_until(lambda: value(daemon.scrape(), "copilot_completion_signals_total", signal="shutdown") == shutdowns,
                   what="every session read")
        with Prometheus(root / "prometheus", [f"127.0.0.1:{daemon.port}"],
                        flags=("--enable-feature=exemplar-storage",)) as prometheus:
            wait_until(lambda: all(prometheus.exemplars(name) for name in LINKED), timeout=30,
                       what="the exemplars of every linked series stored")
            stored = {name: prometheus.exemplars(name) for name in LINKED}
            stored["*"] = prometheus.exemplars('{__name__=~"copilot_.+"}')
            plain, plain_type = get(daemon.metrics_url)
            open_metrics, open_type = get(daemon.metrics_url, OPENMETRICS)
        wait_until(lambda: len(read_spans(traces)) > 0, what="the spans written")
    yield stored, read_spans(traces), (plain, plain_type), (open_metrics, open_type)


def test_prometheus_exemplars_lead_to_exported_spans(scraped):
    """Every exemplar Prometheus stored for the LLM call, tool, turn and token series names a trace and a span
    that are in the exported traces: a chat span for the LLM and token series, with the series' model; an
    execute_tool span with the series' tool; a turn span for the turn series."""
    stored, spans, _plain, _open = scraped
    by_ids = {(s.trace_id, s.span_id): s for s in spans}
    for name, (span_name, label, attribute) in LINKED.items():
        found = [(series["seriesLabels"], exemplar) for series in stored[name] for exemplar in series["exemplars"]]
        assert found, name
        for labels, exemplar in found:
            span = by_ids.get((exemplar["labels"]["trace_id"], exemplar["labels"]["span_id"]))
            assert span is not None, (name, exemplar)
            assert span.name.startswith(span_name), (name, span.name)
            if label is not None:
                assert span.attributes[attribute] == labels[label], (name, labels, span.attributes)
    # A series keeps its latest exemplar: the tool series, one per tool, lead to spans of their own.
    tools = {(e["labels"]["span_id"]) for s in stored["copilot_tool_calls_total"] for e in s["exemplars"]}
    assert len(tools) == len(stored["copilot_tool_calls_total"]) > 1


def test_exemplars_only_for_a_scraper_that_asks_for_openmetrics(scraped):
    """The Prometheus text format (no Accept header) carries no exemplar; OpenMetrics carries them, with the
    ids of exported spans."""
    _stored, spans, (plain, plain_type), (open_metrics, open_type) = scraped
    assert plain_type.startswith("text/plain") and " # {" not in plain
    assert open_type.startswith("application/openmetrics-text")
    lines = [line for line in open_metrics.splitlines() if " # {" in line]
    assert any(line.startswith("copilot_llm_calls_total{") for line in lines)
    ids = {(s.trace_id, s.span_id) for s in spans}
    for line in lines:
        exemplar = dict(pair.split("=") for pair in line.split(" # {")[1].split("}")[0].split(","))
        assert (exemplar["trace_id"].strip('"'), exemplar["span_id"].strip('"')) in ids, line


def test_the_otlp_push_carries_exemplars_of_the_exported_spans(tmp_path):
    """OTEL_METRICS_EXPORTER=otlp with the traces to the same real receiver: the pushed LLM call, tool and turn
    data points carry exemplars whose trace and span ids are those of spans the receiver got."""
    home, shutdowns = fixture_home(tmp_path / "home")
    with OtlpReceiver() as receiver:
        env = {"OTEL_METRICS_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.http_base,
               "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf", "OTEL_METRIC_EXPORT_INTERVAL": "200"}
        with DaemonProcess(home, tmp_path / "state", env=env, args=("--idle-quiet", "0.2")) as daemon:
            wait_until(lambda: value(daemon.scrape(), "copilot_completion_signals_total", signal="shutdown")
                       == shutdowns, what="every session read")
            calls = sum(v for (name, _l), v in daemon.scrape().items() if name == "copilot_llm_calls_total")
            pushed = {name: receiver.wait_for_metric(name, timeout=20, predicate=lambda m, total=total: sum(
                      p.value if m.kind == "sum" else p.count for p in m.points) == total)
                      for name, total in (("copilot_llm_calls", calls), ("copilot_llm_call_duration_seconds", calls))}
            for name in ("copilot_tool_duration_seconds", "copilot_turns", "copilot_tokens"):
                pushed[name] = receiver.wait_for_metric(name, timeout=20)
        spans = {(s.trace_id, s.span_id): s for s in receiver.spans()}
    for name, metric in pushed.items():
        exemplars = [e for p in metric.points for e in p.exemplars]
        assert exemplars, name
        for trace_id, span_id, _value in exemplars:
            assert (trace_id, span_id) in spans, (name, trace_id, span_id)
    tool = pushed["copilot_tool_duration_seconds"]
    for point in tool.points:
        for trace_id, span_id, seconds in point.exemplars:
            span = spans[(trace_id, span_id)]
            assert span.attributes["gen_ai.tool.name"] == point.attributes["tool"]
            # a person's wait is no tool time
            waited_ns = span.attributes.get("github.copilot.tool.user_wait.duration", 0) * 1e9
            assert seconds == pytest.approx((span.duration_ns - waited_ns) / 1e9)


def test_the_dashboard_links_every_exemplar_series_to_the_trace_backend(scraped):
    """Every time-series panel whose query reads a series that Prometheus stored exemplars for shows them, the
    Prometheus datasource opens an exemplar's trace_id in the trace backend, and the compose stack's Prometheus
    stores exemplars."""
    stored, _spans, _plain, _open = scraped
    names = {series["seriesLabels"]["__name__"] for series in stored["*"]}
    assert set(LINKED) <= names
    bases = {name.removesuffix("_bucket").removesuffix("_total") for name in names}
    shown = 0
    for panel in dashboard_panels():
        for target in panel.get("targets", []):
            if panel.get("type") == "timeseries" and any(base in target.get("expr", "") for base in bases):
                assert target.get("exemplar") is True, (panel["title"], target["expr"])
                shown += 1
    assert shown >= len(LINKED)
    labels = {key for series in stored["*"] for exemplar in series["exemplars"] for key in exemplar["labels"]}
    datasources = {ds["uid"]: ds for ds in yaml.safe_load(
        (DEPLOY / "grafana/provisioning/datasources/copilot-otel.yml").read_text())["datasources"]}
    (destination,) = datasources["prometheus"]["jsonData"]["exemplarTraceIdDestinations"]
    assert destination["name"] in labels and datasources[destination["datasourceUid"]]["type"] == "jaeger"
    compose = yaml.safe_load((DEPLOY / "docker-compose.yml").read_text())
    assert "--enable-feature=exemplar-storage" in compose["services"]["prometheus"]["command"]
