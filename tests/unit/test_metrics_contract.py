"""docs/metrics.md and the code cannot drift: the daemon's registry holds exactly the metrics the
document lists, with their types and label names, and the closed label sets it names are the code's."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from copilot_otel import vocab
from copilot_otel.decode import lines as decode
from copilot_otel.metrics.budgets import Budget
from copilot_otel.metrics.collectors import LiveSession
from copilot_otel.metrics.registry import Metrics
from copilot_otel.model.pipeline import Outputs, drive, finish
from copilot_otel.model.sessions import SessionModel
from copilot_otel.otlp.resource import resource_attributes
from tests.support.contract import DocumentedMetric, documented_metrics
from tests.support.events import SessionLog

DOCUMENTED = documented_metrics()


def daemon_registry():
    """Metrics() with the live-sessions collector and target_info, as the daemon builds it (with no
    OTEL_RESOURCE_ATTRIBUTES), with a series in every labelled metric: a session in a repository that
    touches each of them, a bad line, an out-of-order end, a stuck session."""
    with tempfile.TemporaryDirectory() as state:  # where the daemon keeps its service.instance.id
        metrics = Metrics(resource=resource_attributes({}, state_dir=Path(state)))
    metrics.metrics_pushed("unimplemented")  # a gateway without a metrics pipeline
    metrics.add_live_sessions(lambda: [LiveSession("s-stuck", vocab.STUCK, 900.0)])
    metrics.add_budgets((Budget("octo", 100.0, repository="octo-org/*"),), {})
    log = SessionLog("s-1")
    log.start(repository="octo-org/octo-repo")
    log.line(b"not json")
    log.user()
    log.tool_turn(("bash", "c-1"))
    log.tool_complete("never-started")
    log.turn_start()
    log.usage(finish_reason="tool_calls")
    log.tool_start("probe-echo", "c-mcp", mcp_server="probe")
    log.tool_complete("c-mcp")
    log.turn_end()
    log.answer(cost=1.0, nano_aiu=2_000_000_000)
    log.answer(credits="unavailable")
    log.user(nudge=True)
    log.answer(cost=1.0, nano_aiu=1_000_000_000)
    log.shutdown(lines=(3, 1), files=("a.py",))
    model = SessionModel("s-1")
    metrics.apply_outputs(finish(model, drive(model, log.decoded(), Outputs(), source="x", warn=lambda *a: None)))
    return metrics.registry


def registered() -> dict[str, tuple[str, tuple[str, ...]]]:
    """{name as exposed: (type, label names)} of every family the daemon's registry serves."""
    found = {}
    for family in daemon_registry().collect():
        # As /metrics exposes them: a counter with _total, an info metric as a gauge named <name>_info.
        kind, name = family.type, family.name + {"counter": "_total", "info": "_info"}.get(family.type, "")
        labels = {key for sample in family.samples for key in sample.labels if key != "le"}
        assert family.samples, f"{name} has no sample to read its labels from"
        found[name] = ("gauge" if kind == "info" else kind, tuple(sorted(labels)))
    return found


def test_the_registry_serves_exactly_the_documented_metrics():
    """Every metric the code registers is in docs/metrics.md, and every one documented is registered."""
    code = set(registered())
    assert sorted(code - set(DOCUMENTED)) == [], "registered, but not in docs/metrics.md"
    assert sorted(set(DOCUMENTED) - code) == [], "in docs/metrics.md, but not registered"


@pytest.mark.parametrize("name", sorted(DOCUMENTED))
def test_type_and_label_names_are_as_documented(name):
    """Each metric has the documented type and exactly the documented label names."""
    documented: DocumentedMetric = DOCUMENTED[name]
    code = registered()
    assert name in code, f"{name} is documented but not registered"
    assert code[name] == (documented.type, tuple(sorted(documented.labels)))


@pytest.mark.parametrize("name,label,values", [
    ("copilot_sessions", "state", vocab.STATES),
    ("copilot_session_stalled_seconds", "state", vocab.STALLED_STATES),
    ("copilot_completion_signals_total", "signal", vocab.SIGNALS),
    ("copilot_interactions_total", "end", vocab.INTERACTION_ENDS),
    ("copilot_code_lines_total", "change", vocab.LINE_CHANGES),
    ("copilot_tokens_total", "type", vocab.TOKEN_TYPES),
    ("copilot_llm_calls_total", "outcome", (vocab.SUCCESS, vocab.ERROR)),
    ("copilot_tool_calls_total", "outcome", (vocab.SUCCESS, vocab.FAILURE, vocab.END_ABORTED, vocab.INCOMPLETE)),
    ("copilot_otel_lines_rejected_total", "reason", decode.REASONS),
    ("copilot_otel_logs_refused_total", "reason", vocab.LOG_REFUSALS),
])
def test_closed_label_sets_are_the_code_s(name, label, values):
    """Where a label takes a fixed set of values, the document names each of the code's values."""
    documented = DOCUMENTED[name]
    assert label in documented.labels
    named = {value for value in values if f"`{value}`" in documented.values}
    assert named == set(values), f"{name}{{{label}}}: docs/metrics.md does not name {set(values) - named}"
