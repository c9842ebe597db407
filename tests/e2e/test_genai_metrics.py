"""The names the CLI uses: the OTLP metrics push sends the GenAI semantic-convention instruments with the
names, descriptions, units, kinds, attributes and bucket bounds of the real CLI's own OTel export, and
with the same counts and token sums per series, for the sessions whose native export the fixtures kept.

Each scenario (tests/fixtures/<...>/<scenario>/) holds the session log the real CLI wrote and the OTel
output it exported itself for that session (otel.jsonl); copilot-otel replays the log (or the daemon
reads it) and pushes to a real OTLP receiver (Rotel) on loopback.
"""

from __future__ import annotations

import json
import shutil
from collections import Counter
from pathlib import Path

import pytest

from tests.support.commands import run_replay
from tests.support.daemon import DaemonProcess
from tests.support.net import wait_until
from tests.support.otlp_json import read_spans
from tests.support.otlp_receiver import OtlpReceiver
from tests.support.scrape import value

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
# Scenarios whose otel.jsonl kept the CLI's metrics, one process each: tools that succeed, fail on a denied
# permission, run in the background, and an interaction the user aborted (esc esc).
SCENARIOS = ("cli/1.0.102/plain", "situations/many_tools", "situations/large_output",
             "situations/background_shell", "situations/esc_esc")
# Two sessions, each one CLI process that exported apart: compactions, answers cut at the length limit,
# sub-agents cut by the user's abort, a user steering the agent mid-turn.
TWO_SESSIONS = ("situations/compaction", "situations/finish_length", "situations/abort_subagent",
                "situations/steering")
INSTRUMENTS = ("gen_ai.client.inference.usage.input_tokens", "gen_ai.client.inference.usage.output_tokens",
               "gen_ai.client.inference.usage.cache_read.input_tokens",
               "gen_ai.client.inference.usage.cache_write.input_tokens",
               "gen_ai.client.inference.usage.reasoning.output_tokens", "gen_ai.client.inference.duration",
               "gen_ai.invoke_agent.duration", "gen_ai.execute_tool.duration")
# Where the CLI sent its calls: the logs do not say, so copilot-otel does not either.
UNKNOWABLE = {"server.address", "server.port"}


def cli_export(scenario: str) -> dict[str, dict]:
    """What the CLI exported of each instrument: description, unit, kind, bounds, and per series (its
    attributes less UNKNOWABLE) the count of a histogram or the value of a sum. Each of the scenario's
    sessions ran in a CLI process of its own, which exported its totals once: they add up."""
    found: dict[str, dict] = {}
    sessions = len(list((FIXTURES / scenario / "session-state").iterdir()))
    exports: Counter = Counter()
    for line in (FIXTURES / scenario / "otel.jsonl").read_text().splitlines():
        record = json.loads(line)
        if record.get("type") != "metric" or record["name"] not in INSTRUMENTS:
            continue
        exports[record["name"]] += 1
        entry = found.setdefault(record["name"], {"description": record["description"], "unit": record["unit"],
                                                  "kind": set(), "bounds": set(), "series": Counter()})
        for point in record["dataPoints"]:
            key = frozenset((k, v) for k, v in point["attributes"].items() if k not in UNKNOWABLE)
            data = point["value"]
            if isinstance(data, dict):
                entry["kind"].add("histogram")
                entry["bounds"].add(tuple(data["buckets"]["boundaries"]))
                entry["series"][key] += data["count"]
            else:
                entry["kind"].add("sum")
                entry["series"][key] += data
    assert max(exports.values()) <= sessions, exports
    for entry in found.values():
        (entry["kind"],) = entry["kind"]
        entry["series"] = dict(entry["series"])
    return found


def pushed(metrics) -> dict[str, dict]:
    """The same view of what the receiver got: the last push of each instrument."""
    found = {}
    for metric in metrics:
        if metric.name in INSTRUMENTS:
            found[metric.name] = {
                "description": metric.description, "unit": metric.unit, "kind": metric.kind,
                "bounds": {p.bounds for p in metric.points} if metric.kind == "histogram" else set(),
                "series": {frozenset(p.attributes.items()): p.count if metric.kind == "histogram" else p.value
                           for p in metric.points},
                "monotonic": metric.monotonic, "cumulative": metric.cumulative,
                "exemplars": [e for p in metric.points for e in p.exemplars]}
    return found


@pytest.fixture
def receiver():
    with OtlpReceiver() as rx:
        yield rx


def as_the_cli_names_the_provider(series: dict, provider: str) -> dict:
    """Our series with the provider named as the CLI 1.0.102 names it: ``github`` for every call. copilot-otel
    names the provider that served the call (its chat spans' gen_ai.provider.name: a BYOK provider by its
    kind, as here where the tests' provider is an OpenAI-compatible one)."""
    out = {}
    for key, count in series.items():
        attributes = dict(key)
        if "gen_ai.provider.name" in attributes:
            assert attributes["gen_ai.provider.name"] == provider
            attributes["gen_ai.provider.name"] = "github"
        out[frozenset(attributes.items())] = count
    return out


@pytest.mark.parametrize("scenario", SCENARIOS + TWO_SESSIONS)
def test_a_replay_pushes_the_instruments_the_cli_exports(receiver, tmp_path, scenario):
    """A replay of the session pushes every GenAI instrument the CLI exported for it, with the CLI's
    description, unit, kind and bounds, the same series (attributes) and the same counts and token sums;
    counters are cumulative and monotonic, and each data point's exemplar is a span of the replay's traces."""
    expected = cli_export(scenario)
    assert {"gen_ai.client.inference.duration", "gen_ai.invoke_agent.duration"} <= set(expected)
    receiver.clear()
    traces = tmp_path / "traces.jsonl"
    env = {"OTEL_METRICS_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT": f"{receiver.http_base}/v1/metrics",
           "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL": "http/protobuf"}
    result = run_replay(str(FIXTURES / scenario), "--traces-file", str(traces), env=env)
    assert result.returncode == 0, result.stderr.decode()
    receiver.wait_for_metric("gen_ai.client.inference.duration", timeout=20)
    got = pushed(receiver.metrics())
    spans = read_spans(traces)
    ids = {(s.trace_id, s.span_id) for s in spans}
    (provider,) = {s.attributes["gen_ai.provider.name"] for s in spans if s.name.startswith("chat ")}
    for name, want in expected.items():
        assert name in got, (name, sorted(got))
        have = got[name]
        have["series"] = as_the_cli_names_the_provider(have["series"], provider)
        for field in ("description", "unit", "kind", "bounds", "series"):
            assert have[field] == want[field], (name, field, have[field], want[field])
        assert have["cumulative"] and (have["monotonic"] or have["kind"] == "histogram")
        assert have["exemplars"] and {(t, s) for t, s, _v in have["exemplars"]} <= ids, name


def test_the_daemon_pushes_the_instruments_the_cli_exports(tmp_path):
    """The daemon reading the aborted session (esc esc) pushes the same instruments and series as the CLI
    exported, alongside its copilot_* metrics."""
    scenario = "situations/esc_esc"
    expected = cli_export(scenario)
    home = tmp_path / "home"
    shutil.copytree(FIXTURES / scenario / "session-state", home / "session-state")
    shutdowns = sum(p.read_bytes().count(b'"type":"session.shutdown"')
                    for p in (home / "session-state").glob("*/events.jsonl"))
    with OtlpReceiver() as receiver:
        env = {"OTEL_METRICS_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT":
               f"{receiver.grpc_endpoint}", "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL": "grpc",
               "OTEL_METRIC_EXPORT_INTERVAL": "200"}
        with DaemonProcess(home, tmp_path / "state", traces_file=tmp_path / "traces.jsonl", env=env,
                           args=("--idle-quiet", "0.2")) as daemon:
            wait_until(lambda: value(daemon.scrape(), "copilot_completion_signals_total", signal="shutdown")
                       == shutdowns, what="the session read")
            inference = expected["gen_ai.client.inference.duration"]["series"]
            receiver.wait_for_metric("gen_ai.client.inference.duration", timeout=20, predicate=lambda m: sum(
                p.count for p in m.points) == sum(inference.values()))
            receiver.wait_for_metric("copilot_llm_calls", timeout=20)
            text = daemon.scrape_text()
        got = pushed(receiver.metrics())
    assert "gen_ai" not in text  # /metrics keeps the copilot_* contract
    (provider,) = {s.attributes["gen_ai.provider.name"] for s in read_spans(tmp_path / "traces.jsonl")
                   if s.name.startswith("chat ")}
    for name, want in expected.items():
        got[name]["series"] = as_the_cli_names_the_provider(got[name]["series"], provider)
        for field in ("unit", "kind", "bounds", "series"):
            assert got[name][field] == want[field], (name, field, got[name][field], want[field])
