"""metrics/genai.py: closed spans of a driven session become the GenAI instruments' updates, added up into
OTLP data points with the CLI's bounds, min and max, capped names and an exemplar per bucket."""

from __future__ import annotations

from copilot_otel.metrics.genai import AGENT_BOUNDS, CALL_BOUNDS, GenAi, GenAiMetrics, updates
from copilot_otel.metrics.registry import Metrics
from copilot_otel.model import attrs as A
from copilot_otel.model.pipeline import Outputs, drive, finish
from copilot_otel.model.records import SpanRecord
from copilot_otel.model.sessions import SessionModel
from tests.support.events import MODEL, SessionLog


def driven() -> Outputs:
    log = SessionLog("s-1")
    log.start()
    log.user()
    log.tool_turn(("bash", "c-1"), ("view", "c-2"))
    log.answer(input_tokens=10, output_tokens=3)
    log.shutdown()
    model = SessionModel("s-1")
    return finish(model, drive(model, log.decoded(), Outputs(), source="x"))


def by_name(metrics: list) -> dict:
    return {metric.name: metric for metric in metrics}


def test_a_session_fills_every_instrument_from_its_spans():
    """Two calls, two tools and one interaction: two inference durations whose tokens sum to the calls', one
    duration per tool, one for the interaction (no agent name on it, as the CLI's); each point's exemplar is
    one of the spans it counts."""
    out = driven()
    metrics = Metrics(process=False)
    metrics.apply_outputs(out)
    data = by_name(metrics.genai.data(1, 2))
    assert set(data) == {instrument.value for instrument in GenAi}
    chats = [s for s in out.spans if s.name.startswith("chat ")]
    (inference,) = data[GenAi.INFERENCE_DURATION.value].data.data_points
    assert inference.count == len(chats) == 2 and list(inference.explicit_bounds) == list(CALL_BOUNDS)
    assert inference.attributes == {A.GEN_AI_OPERATION_NAME: "chat", A.GEN_AI_PROVIDER_NAME: "github",
                                    A.GEN_AI_REQUEST_MODEL: MODEL, A.GEN_AI_RESPONSE_MODEL: MODEL}
    assert inference.min <= inference.max and sum(inference.bucket_counts) == 2
    (tokens,) = data[GenAi.INPUT_TOKENS.value].data.data_points
    assert tokens.value == sum(s.attributes[A.GEN_AI_USAGE_INPUT_TOKENS] for s in chats)
    assert tokens.attributes["gen_ai.token.modality"] == "unknown"
    assert data[GenAi.INPUT_TOKENS.value].data.is_monotonic
    tools = {p.attributes[A.GEN_AI_TOOL_NAME]: p for p in data[GenAi.EXECUTE_TOOL_DURATION.value].data.data_points}
    assert {name: p.count for name, p in tools.items()} == {"bash": 1, "view": 1}
    (agent,) = data[GenAi.INVOKE_AGENT_DURATION.value].data.data_points
    assert agent.attributes == {} and list(agent.explicit_bounds) == list(AGENT_BOUNDS)
    ids = {(s.trace_id, s.span_id) for s in out.spans}
    for metric in data.values():
        for point in metric.data.data_points:
            assert point.exemplars and {(e.trace_id, e.span_id) for e in point.exemplars} <= ids


def test_a_value_on_a_bound_falls_in_the_bucket_it_closes():
    """OTLP explicit buckets hold (previous bound, bound]: 0.04 s in the third, 0.041 s in the fourth."""
    genai = GenAiMetrics()
    for seconds in (0.04, 0.041, 100.0):
        span = SpanRecord(1, 2, None, "execute_tool bash", 1, 0, int(seconds * 1e9),
                          {A.GEN_AI_OPERATION_NAME: "execute_tool", A.GEN_AI_TOOL_NAME: "bash"})
        for update in updates(span):
            genai.apply(update)
    (point,) = genai.data(1, 2)[0].data.data_points
    assert point.bucket_counts[2] == point.bucket_counts[3] == point.bucket_counts[-1] == 1
    assert point.min == 0.04 and point.max == 100.0


def test_tool_and_model_names_are_capped_as_the_labels_are():
    """Past --max-label-values distinct tool names, a new one is counted as 'other' here too."""
    metrics = Metrics(process=False, max_label_values=2)
    for n in range(4):
        span = SpanRecord(1, n + 1, None, f"execute_tool t{n}", 1, 0, 1, {
            A.GEN_AI_OPERATION_NAME: "execute_tool", A.GEN_AI_TOOL_NAME: f"t{n}"})
        for update in updates(span):
            metrics.apply(update)
    points = metrics.genai.data(1, 2)[0].data.data_points
    assert sorted(p.attributes[A.GEN_AI_TOOL_NAME] for p in points) == ["other", "t0", "t1"]
    # The overflow is copilot_tool_calls_total's to count (its update comes with the span's), not the twin's.
    assert metrics.registry.get_sample_value("copilot_otel_label_overflow_total", {"label": "tool"}) == 0


def _span(operation: str, parent: int | None = None, **attributes) -> SpanRecord:
    return SpanRecord(1, 2, parent, operation, 1, 0, 2_000_000_000,
                      {A.GEN_AI_OPERATION_NAME: operation, **{k.replace("__", "."): v for k, v in attributes.items()}})


def _labels(span: SpanRecord) -> dict:
    """Each update's labels by instrument, keyed by the instrument's attribute names."""
    from copilot_otel.model.genai import INSTRUMENTS
    return {u.metric: dict(zip(INSTRUMENTS[u.metric].keys, u.labels)) for u in updates(span)}


def test_error_type_as_the_cli_counts_it_on_each_kind_of_span():
    """The abort is `cancelled` on a tool it cut and on its interaction, on neither of a sub-agent's spans (its
    interaction's); another error is counted as it is; a label the span does not hold is empty, and a call
    counts its tokens with modality `unknown` and no error.type."""
    cut_tool = _labels(_span("execute_tool", 9, gen_ai__tool__name="bash", error__type="aborted"))
    assert cut_tool[GenAi.EXECUTE_TOOL_DURATION][A.ERROR_TYPE] == "cancelled"
    assert cut_tool[GenAi.EXECUTE_TOOL_DURATION][A.GEN_AI_AGENT_NAME] == ""
    failed_tool = _labels(_span("execute_tool", 9, gen_ai__tool__name="bash", error__type="tool_error"))
    assert failed_tool[GenAi.EXECUTE_TOOL_DURATION][A.ERROR_TYPE] == "tool_error"
    aborted = _labels(_span("invoke_agent", None, gen_ai__agent__name="copilot",
                            github__copilot__interaction__end="aborted"))
    assert aborted[GenAi.INVOKE_AGENT_DURATION] == {A.GEN_AI_AGENT_NAME: "", A.ERROR_TYPE: "cancelled"}
    cut_subagent = _labels(_span("invoke_agent", 9, gen_ai__agent__name="explore", error__type="cancelled"))
    assert cut_subagent[GenAi.INVOKE_AGENT_DURATION] == {A.GEN_AI_AGENT_NAME: "explore", A.ERROR_TYPE: ""}
    failed_subagent = _labels(_span("invoke_agent", 9, gen_ai__agent__name="explore", error__type="incomplete"))
    assert failed_subagent[GenAi.INVOKE_AGENT_DURATION] == {A.GEN_AI_AGENT_NAME: "explore",
                                                            A.ERROR_TYPE: "incomplete"}
    call = _labels(_span("chat", 9, gen_ai__request__model="m", gen_ai__usage__input_tokens=5, error__type="500"))
    assert call[GenAi.INFERENCE_DURATION][A.ERROR_TYPE] == "500"
    assert call[GenAi.INFERENCE_DURATION][A.GEN_AI_RESPONSE_MODEL] == ""
    token_labels = {tuple(labels.items()) for instrument, labels in call.items()
                    if instrument != GenAi.INFERENCE_DURATION}
    assert token_labels == {((A.GEN_AI_OPERATION_NAME, "chat"), (A.GEN_AI_PROVIDER_NAME, ""),
                             (A.GEN_AI_REQUEST_MODEL, "m"), (A.GEN_AI_RESPONSE_MODEL, ""),
                             ("gen_ai.token.modality", "unknown"))}
    assert _labels(_span("chat", 9, github__copilot__compaction__trigger="auto")) == {}
