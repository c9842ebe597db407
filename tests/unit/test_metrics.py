"""metrics/registry.py: metric updates and pipeline outputs applied to a private registry, read back with
registry.get_sample_value; bounded event-type labels; the live sessions collector."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest
from msgspec.structs import replace
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.openmetrics.exposition import generate_latest as openmetrics_latest

from copilot_otel import __version__
from copilot_otel.decode.lines import NOT_JSON, REASONS
from copilot_otel.metrics.collectors import LiveSession
from copilot_otel.metrics.families import MAX_EVENT_TYPES
from copilot_otel.metrics.genai import GenAi
from copilot_otel.metrics.registry import Metrics
from copilot_otel.model.pipeline import Outputs, drive, finish
from copilot_otel.model.records import MetricUpdate
from copilot_otel.model.sessions import SessionModel
from copilot_otel.source.tail import read_all
from copilot_otel.vocab import ABANDONED, IDLE, SIGNALS, STATES, STUCK, WAITING_TOOL, WORKING, Metric
from tests.support.events import MODEL, SessionLog


def fresh() -> Metrics:
    return Metrics(process=False)


# Each session metric key: the labels an update carries, the sample it moves, and that sample's labels.
COUNTERS = [
    (Metric.SESSIONS_STARTED, ("o/r",), "copilot_sessions_started_total", {"repository": "o/r"}),
    (Metric.TURNS, ("main",), "copilot_turns_total", {"agent": "main"}),
    (Metric.LLM_CALLS, (MODEL, "error", ""), "copilot_llm_calls_total",
     {"model": MODEL, "outcome": "error", "repository": ""}),
    (Metric.TOOL_CALLS, ("bash", "failure"), "copilot_tool_calls_total", {"tool": "bash", "outcome": "failure"}),
    (Metric.MCP_TOOL_CALLS, ("probe", "failure"), "copilot_mcp_tool_calls_total",
     {"server": "probe", "outcome": "failure"}),
    (Metric.AUTOPILOT_NUDGES, (), "copilot_autopilot_nudges_total", {}),
    (Metric.COMPLETION_SIGNALS, ("task_complete",), "copilot_completion_signals_total", {"signal": "task_complete"}),
    (Metric.TOKENS, (MODEL, "cache_read", "o/r"), "copilot_tokens_total",
     {"model": MODEL, "type": "cache_read", "repository": "o/r"}),
    (Metric.INTERACTIONS, ("aborted",), "copilot_interactions_total", {"end": "aborted"}),
    (Metric.PREMIUM_REQUESTS, (MODEL, "o/r"), "copilot_premium_requests_total", {"model": MODEL, "repository": "o/r"}),
    (Metric.AUTOPILOT_PREMIUM_REQUESTS, (MODEL, "o/r"), "copilot_autopilot_premium_requests_total",
     {"model": MODEL, "repository": "o/r"}),
    (Metric.AI_CREDITS, (MODEL, "o/r"), "copilot_ai_credits_total", {"model": MODEL, "repository": "o/r"}),
    (Metric.AUTOPILOT_AI_CREDITS, (MODEL, "o/r"), "copilot_autopilot_ai_credits_total",
     {"model": MODEL, "repository": "o/r"}),
    (Metric.LLM_CALLS_WITHOUT_CREDITS, (MODEL, "unavailable", "o/r"), "copilot_llm_calls_without_credits_total",
     {"model": MODEL, "status": "unavailable", "repository": "o/r"}),
    (Metric.CODE_LINES, ("removed", "o/r"), "copilot_code_lines_total", {"change": "removed", "repository": "o/r"}),
    (Metric.FILES_MODIFIED, ("o/r",), "copilot_files_modified_total", {"repository": "o/r"}),
]
HISTOGRAMS = [
    (Metric.TURN_DURATION, ("helper",), "copilot_turn_duration_seconds", {"agent": "helper"}),
    (Metric.TOOL_DURATION, ("bash",), "copilot_tool_duration_seconds", {"tool": "bash"}),
    (Metric.LLM_CALL_DURATION, (MODEL,), "copilot_llm_call_duration_seconds", {"model": MODEL}),
    (Metric.LLM_TIME_TO_FIRST_TOKEN, (MODEL,), "copilot_llm_time_to_first_token_seconds", {"model": MODEL}),
]


def test_every_metric_key_has_a_case_here():
    """The cases below cover every key the session model may update."""
    assert {case[0] for case in COUNTERS + HISTOGRAMS} == set(Metric)


@pytest.mark.parametrize("metric,labels,sample,sample_labels", COUNTERS, ids=[c[2] for c in COUNTERS])
def test_a_counter_update_adds_its_value(metric, labels, sample, sample_labels):
    """A counter key adds the update's value to the series of its label values."""
    metrics = fresh()
    metrics.apply(MetricUpdate(metric, labels))
    metrics.apply(MetricUpdate(metric, labels, 41.0))
    assert metrics.registry.get_sample_value(sample, sample_labels) == 42.0


@pytest.mark.parametrize("metric,labels,sample,sample_labels", HISTOGRAMS, ids=[h[2] for h in HISTOGRAMS])
def test_a_histogram_update_observes_its_value(metric, labels, sample, sample_labels):
    """A histogram key observes the update's value: one more in _count, the value in _sum, in its bucket."""
    metrics = fresh()
    metrics.apply(MetricUpdate(metric, labels, 0.3))
    metrics.apply(MetricUpdate(metric, labels, 7.0))
    get = metrics.registry.get_sample_value
    assert get(f"{sample}_count", sample_labels) == 2
    assert get(f"{sample}_sum", sample_labels) == pytest.approx(7.3)
    assert get(f"{sample}_bucket", {**sample_labels, "le": "+Inf"}) == 2


def test_a_driven_session_counts_what_its_updates_say():
    """apply_outputs of a real drive moves each series by the sum of the model's updates for it."""
    log = SessionLog("s-1")
    log.start()
    log.user()
    log.tool_turn(("bash", "c-1"), ("view", "c-2"))
    log.answer(input_tokens=10, output_tokens=3)
    log.shutdown()
    model = SessionModel("s-1")
    out = finish(model, drive(model, log.decoded(), Outputs(), source="x"))
    metrics = fresh()
    metrics.apply_outputs(out)
    get = metrics.registry.get_sample_value
    turns = sum(u.value for u in out.metrics if u.metric is Metric.TURNS)
    assert get("copilot_turns_total", {"agent": "main"}) == turns == 2
    inputs = sum(u.value for u in out.metrics if u.metric is Metric.TOKENS and u.labels[1] == "input")
    assert get("copilot_tokens_total", {"model": MODEL, "type": "input", "repository": ""}) == inputs
    assert get("copilot_tool_calls_total", {"tool": "view", "outcome": "success"}) == 1
    assert get("copilot_completion_signals_total", {"signal": "shutdown"}) == 1


def _without_created(text: bytes) -> bytes:
    return b"".join(line for line in text.splitlines(keepends=True) if b"_created" not in line)


def test_exemplars_name_the_measured_spans_and_leave_the_text_format_alone():
    """The LLM call, tool, turn and token series get the (trace id, span id) of the span each update measured,
    in the OpenMetrics exposition only: the Prometheus text format is byte for byte what the same updates
    without exemplars give (less what reads the clock: *_created stamps, the lag)."""
    log = SessionLog("s-1")
    log.start()
    log.user()
    log.tool_turn(("bash", "c-1"))
    log.answer(input_tokens=10, output_tokens=3)
    log.shutdown()
    model = SessionModel("s-1")
    out = finish(model, drive(model, log.decoded(), Outputs(), source="x"))
    linked = {u.metric for u in out.metrics if u.exemplar is not None}
    assert linked & set(Metric) == {Metric.TURNS, Metric.TURN_DURATION, Metric.LLM_CALLS, Metric.LLM_CALL_DURATION,
                                    Metric.TOKENS, Metric.TOOL_CALLS, Metric.TOOL_DURATION,
                                    Metric.LLM_TIME_TO_FIRST_TOKEN, Metric.LLM_CALLS_WITHOUT_CREDITS}  # a BYOK call
    assert linked - set(Metric) == set(GenAi)  # the GenAI instruments of the OTLP push, every one
    spans = {(s.trace_id, s.span_id): s.name for s in out.spans}
    for update in out.metrics:
        if update.exemplar is not None:
            assert spans[update.exemplar].split(" ")[0] == {
                Metric.TURNS: "turn", Metric.TURN_DURATION: "turn", Metric.TOOL_CALLS: "execute_tool",
                Metric.TOOL_DURATION: "execute_tool", GenAi.EXECUTE_TOOL_DURATION: "execute_tool",
                GenAi.INVOKE_AGENT_DURATION: "invoke_agent"}.get(update.metric, "chat")
    with_exemplars, without = fresh(), fresh()
    for metrics in (with_exemplars, without):
        metrics.measure_lag_while(lambda: False)  # the lag gauge reads the clock
    with_exemplars.apply_outputs(out)
    stripped = replace(out, metrics=[replace(u, exemplar=None) for u in out.metrics])
    without.apply_outputs(stripped)
    assert _without_created(generate_latest(with_exemplars.registry)) == _without_created(
        generate_latest(without.registry))
    assert b" # {" not in generate_latest(with_exemplars.registry)
    openmetrics = openmetrics_latest(with_exemplars.registry).decode()
    tool = next(line for line in openmetrics.splitlines() if line.startswith("copilot_tool_calls_total{"))
    trace_id, span_id = next(u.exemplar for u in out.metrics if u.metric is Metric.TOOL_CALLS)
    assert f'span_id="{span_id:016x}",trace_id="{trace_id:032x}"' in tool
    assert " # {" not in openmetrics_latest(without.registry).decode()


def test_apply_outputs_counts_events_rejections_and_out_of_order_ends():
    """Events read by type, lines rejected by reason and out-of-order ends by type, as the drive found them."""
    log = SessionLog("s-1")
    log.start()
    log.line(b"not json")
    log.tool_complete("never-started")
    model = SessionModel("s-1")
    out = drive(model, log.decoded(), Outputs(), source="x", warn=lambda *a: None)
    metrics = fresh()
    metrics.apply_outputs(out)
    get = metrics.registry.get_sample_value
    assert get("copilot_otel_events_read_total", {"type": "session.start"}) == 1
    assert get("copilot_otel_events_read_total", {"type": "tool.execution_complete"}) == 1
    assert get("copilot_otel_lines_rejected_total", {"reason": NOT_JSON}) == 1
    assert get("copilot_otel_events_out_of_order_total", {"type": "tool.execution_complete"}) == 1


def _exposition(metrics: Metrics) -> str:
    """The OpenMetrics exposition without what reads the clock: *_created stamps, exemplars' timestamps."""
    text = openmetrics_latest(metrics.registry).decode()
    return re.sub(r"(# \{[^}]*\} \S+) \S+$", r"\1", "\n".join(
        line for line in text.splitlines() if "_created" not in line), flags=re.M)


def test_apply_all_leaves_every_series_as_applying_each_drive_in_turn():
    """The daemon counts the logs one pass read at once (apply_all): every series, of the real CLI logs of every
    fixture and an odd one, ends with the value and the exemplar (on each histogram bucket) that apply_outputs
    of each drive in turn gives."""
    fixtures = Path(__file__).resolve().parent.parent / "fixtures"
    outs = []
    for path in sorted(fixtures.rglob("events.jsonl")):
        model = SessionModel(path.parent.name)
        outs.append(finish(model, drive(model, read_all(path), Outputs(), source=str(path), warn=lambda *a: None)))
    assert len(outs) > 100 and sum(len(out.metrics) for out in outs) > 5000
    odd = SessionLog("s-odd")  # and a log with a line that is no JSON and an end of a tool never started
    odd.start()
    odd.line(b"not json")
    odd.tool_complete("never-started")
    model = SessionModel("s-odd")
    outs.insert(len(outs) // 2, drive(model, odd.decoded(), Outputs(), source="x", warn=lambda *a: None))
    in_turn, at_once = fresh(), fresh()
    for metrics in (in_turn, at_once):
        metrics.measure_lag_while(lambda: False)  # the lag gauge reads the clock
    for out in outs:
        in_turn.apply_outputs(out)
    at_once.apply_all(outs)
    assert _exposition(at_once) == _exposition(in_turn)
    assert _exposition(at_once).count(" # {") > 50  # exemplars were compared


def test_lag_is_measured_from_the_newest_event():
    """copilot_otel_lag_seconds is how far the newest event read lies behind now (0 before any)."""
    metrics = fresh()
    assert metrics.registry.get_sample_value("copilot_otel_lag_seconds") == 0
    out = Outputs()
    out.newest_ns = int((time.time() - 30) * 1e9)
    metrics.apply_outputs(out)
    assert 29 < metrics.registry.get_sample_value("copilot_otel_lag_seconds") < 60
    older = Outputs()
    older.newest_ns = out.newest_ns - 10**12
    metrics.apply_outputs(older)  # an older backlog does not move the newest event back
    assert metrics.registry.get_sample_value("copilot_otel_lag_seconds") < 60


def test_event_type_labels_are_bounded():
    """Past MAX_EVENT_TYPES distinct types, new types are counted as 'other'; known ones keep their series."""
    metrics = fresh()
    for n in range(MAX_EVENT_TYPES):
        metrics.count_event(f"x.made_up.t{n}")
    metrics.count_event("x.made_up.one_too_many", 5)
    metrics.count_event("x.made_up.t0")
    get = metrics.registry.get_sample_value
    assert get("copilot_otel_events_read_total", {"type": "other"}) == 5
    assert get("copilot_otel_events_read_total", {"type": "x.made_up.one_too_many"}) is None
    assert get("copilot_otel_events_read_total", {"type": "x.made_up.t0"}) == 2


@pytest.mark.parametrize("odd", ["Not.An.Event", "nodots", "a.b.c.d.e", "session.start\n", "x." + "é"])
def test_names_that_do_not_look_like_event_types_are_other(odd):
    """A type that is not dotted lower-case words (2 to 4 of them) mints no series of its own."""
    metrics = fresh()
    metrics.count_event(odd)
    assert metrics.registry.get_sample_value("copilot_otel_events_read_total", {"type": "other"}) == 1


def test_closed_label_sets_exist_from_the_start():
    """Every rejection reason and completion signal has its series at 0 before anything happened,
    and build_info names this version."""
    get = fresh().registry.get_sample_value
    assert [get("copilot_otel_lines_rejected_total", {"reason": r}) for r in REASONS] == [0.0] * len(REASONS)
    assert [get("copilot_completion_signals_total", {"signal": s}) for s in SIGNALS] == [0.0] * len(SIGNALS)
    assert get("copilot_otel_build_info", {"version": __version__}) == 1


def test_live_sessions_are_computed_when_scraped():
    """copilot_sessions has every state (0 when none), copilot_session_stalled_seconds a series only per
    stuck or abandoned session; both come from a fresh snapshot at each scrape."""
    metrics = fresh()
    snapshot = [LiveSession("s-1", WORKING), LiveSession("s-2", STUCK, 720.0, "bash", "acme/api", "ab" * 16),
                LiveSession("s-3", ABANDONED, 90.0), LiveSession("s-4", WORKING)]
    metrics.add_live_sessions(lambda: list(snapshot))
    get = metrics.registry.get_sample_value
    assert {state: get("copilot_sessions", {"state": state}) for state in STATES} == {
        WORKING: 2, WAITING_TOOL: 0, "waiting_user": 0, IDLE: 0, STUCK: 1, ABANDONED: 1}
    assert get("copilot_session_stalled_seconds",
               {"session_id": "s-2", "state": STUCK, "tool": "bash", "repository": "acme/api",
                "trace_id": "ab" * 16}) == 720.0
    assert get("copilot_session_stalled_seconds",
               {"session_id": "s-3", "state": ABANDONED, "tool": "", "repository": "", "trace_id": ""}) == 90.0
    assert not [s for f in metrics.registry.collect() for s in f.samples
                if s.name == "copilot_session_stalled_seconds" and s.labels["session_id"] in ("s-1", "s-4")]
    snapshot[:] = [LiveSession("s-5", IDLE)]
    assert get("copilot_sessions", {"state": STUCK}) == 0 and get("copilot_sessions", {"state": IDLE}) == 1
    assert not [s for f in metrics.registry.collect() for s in f.samples if s.name == "copilot_session_stalled_seconds"]


def test_registering_the_collector_takes_no_snapshot():
    """The collector describes itself by name: registering it does not call the snapshot."""
    calls = []
    fresh().add_live_sessions(lambda: calls.append(1) or [])
    assert calls == []


def test_each_metrics_has_its_own_registry():
    """Two Metrics never share series (no global registry); process metrics only when asked."""
    first, second = Metrics(), Metrics(process=False)
    first.apply(MetricUpdate(Metric.SESSIONS_STARTED, ("",)))
    assert second.registry.get_sample_value("copilot_sessions_started_total", {"repository": ""}) == 0
    assert first.registry.get_sample_value("process_cpu_seconds_total") is not None
    assert second.registry.get_sample_value("process_cpu_seconds_total") is None
    shared = CollectorRegistry()
    assert Metrics(registry=shared, process=False).registry is shared


def test_without_the_repository_label_every_attributed_series_has_it_empty():
    """--no-repository-label: the model's repository goes nowhere; the series it would split stay one."""
    metrics = Metrics(process=False, repository_label=False)
    for repository in ("octo-org/a", "octo-org/b", ""):
        metrics.apply(MetricUpdate(Metric.PREMIUM_REQUESTS, (MODEL, repository), 1.0))
        metrics.apply(MetricUpdate(Metric.TURNS, ("main",)))
    get = metrics.registry.get_sample_value
    assert get("copilot_premium_requests_total", {"model": MODEL, "repository": ""}) == 3
    assert get("copilot_premium_requests_total", {"model": MODEL, "repository": "octo-org/a"}) is None
    assert get("copilot_turns_total", {"agent": "main"}) == 3


def test_target_info_carries_the_resource_as_labels():
    """The instance's resource (OTEL_RESOURCE_ATTRIBUTES) is one target_info series; keys become label names."""
    metrics = Metrics(process=False, resource={"service.name": "copilot-otel", "user.name": "mona",
                                               "team": "octo", "k8s.pod.name": "p-1", "9lives": "x"})
    assert metrics.registry.get_sample_value("target_info", {
        "service_name": "copilot-otel", "user_name": "mona", "team": "octo", "k8s_pod_name": "p-1",
        "_9lives": "x"}) == 1
    assert Metrics(process=False).registry.get_sample_value("target_info") is None


def test_tool_model_agent_and_repository_labels_are_capped():
    """Past max_label_values distinct tools, new tools count as 'other' (in calls and durations alike),
    each counted once in copilot_otel_label_overflow_total{label}; known tools keep their own series."""
    metrics = Metrics(process=False, max_label_values=3)
    for n in range(10):
        metrics.apply(MetricUpdate(Metric.TOOL_CALLS, (f"tool-{n}", "success")))
        metrics.apply(MetricUpdate(Metric.TOOL_DURATION, (f"tool-{n}",), 0.5))
    metrics.apply(MetricUpdate(Metric.TOOL_CALLS, ("tool-1", "success")))
    metrics.apply(MetricUpdate(Metric.LLM_CALLS, ("model-a", "success", "")))
    for n in range(5):
        metrics.apply(MetricUpdate(Metric.FILES_MODIFIED, (f"octo-org/repo-{n}",), 1.0))
    value = metrics.registry.get_sample_value
    assert value("copilot_tool_calls_total", {"tool": "other", "outcome": "success"}) == 7
    assert value("copilot_tool_calls_total", {"tool": "tool-1", "outcome": "success"}) == 2
    assert value("copilot_tool_duration_seconds_count", {"tool": "other"}) == 7
    assert value("copilot_otel_label_overflow_total", {"label": "tool"}) == 14
    assert value("copilot_otel_label_overflow_total", {"label": "model"}) == 0
    assert value("copilot_llm_calls_total", {"model": "model-a", "outcome": "success", "repository": ""}) == 1
    # "" (no repository) is a value too: with it, two repositories fit under the cap of three
    assert value("copilot_files_modified_total", {"repository": "other"}) == 3
    assert value("copilot_otel_label_overflow_total", {"label": "repository"}) == 3


def test_a_label_value_is_cut_to_the_name_limit():
    """A 1 MB tool name (or one holding a secret past its first 128 characters) reaches the label cut."""
    metrics = fresh()
    name = "t" * 128 + "SECRET" + "x" * 1_000_000
    metrics.apply(MetricUpdate(Metric.TOOL_CALLS, (name, "success")))
    labels = {s.labels["tool"] for family in metrics.registry.collect() if family.name == "copilot_tool_calls"
              for s in family.samples}
    assert labels == {"t" * 128}


def test_an_event_type_longer_than_a_name_counts_as_other():
    """A plausible-looking but enormous event type is not a label value."""
    metrics = fresh()
    metrics.count_event("session." + "a" * 10_000)
    assert metrics.registry.get_sample_value("copilot_otel_events_read_total", {"type": "other"}) == 1
