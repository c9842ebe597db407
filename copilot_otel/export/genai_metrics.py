"""The GenAI semantic-convention instruments the Copilot CLI's own OTel exports, made from the spans.

Same names, units, attributes and bucket bounds as the CLI 1.0.102 writes them (its native export, in
tests/fixtures), so that one dashboard reads machines that run the CLI's export and machines that run
copilot-otel. They go out with the OTLP metrics push only; /metrics keeps the ``copilot_*`` contract.
What the logs cannot say is left out: ``server.address`` and ``server.port`` of the API the CLI called.
The abort of an interaction counts as the CLI counts it: ``error.type=cancelled`` on the interaction's
invoke_agent and on the tools it cut, not on the sub-agents under them; a compaction's call is not an
inference here either.

The session model turns each closed span into updates (``updates``); ``GenAiMetrics`` adds them up and
gives the OTLP data points, each with the span of its latest update as its exemplar.
"""

from __future__ import annotations

import enum
import math
import threading
from bisect import bisect_left
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from ..model import attrs as A
from ..model.records import MetricUpdate, SpanRecord
from ..vocab import CANCELLED, END_ABORTED

TOKEN_MODALITY = "gen_ai.token.modality"
UNKNOWN_MODALITY = "unknown"  # the logs say nothing of modality; the CLI says the same
REASONING_OUTPUT_TOKENS = "gen_ai.usage.reasoning.output_tokens"
# The CLI's bucket bounds: seconds of a call or tool, of an agent's invocation.
CALL_BOUNDS = (0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92)
AGENT_BOUNDS = (0.1, 0.2, 0.4, 0.8, 1.6, 3.2, 6.4, 12.8, 25.6, 51.2, 102.4, 204.8, 409.6)
_TOKEN_KEYS = (A.GEN_AI_OPERATION_NAME, A.GEN_AI_PROVIDER_NAME, A.GEN_AI_REQUEST_MODEL, A.GEN_AI_RESPONSE_MODEL,
               TOKEN_MODALITY)
_CALL_KEYS = (A.GEN_AI_OPERATION_NAME, A.GEN_AI_PROVIDER_NAME, A.GEN_AI_REQUEST_MODEL, A.GEN_AI_RESPONSE_MODEL,
              A.ERROR_TYPE)
_AGENT_KEYS = (A.GEN_AI_AGENT_NAME, A.ERROR_TYPE)
_TOOL_KEYS = (A.GEN_AI_TOOL_NAME, A.GEN_AI_TOOL_TYPE, A.GEN_AI_AGENT_NAME, A.ERROR_TYPE)
MAX_KNOWN = 10_000  # label tuples remembered as they came (past that, each update is capped again)
# Attributes whose values the model or the log chooses: capped as the Prometheus labels are (metrics.LabelCap).
CAPPED = {A.GEN_AI_REQUEST_MODEL: "model", A.GEN_AI_RESPONSE_MODEL: "model", A.GEN_AI_TOOL_NAME: "tool",
          A.GEN_AI_AGENT_NAME: "agent"}


class GenAi(enum.Enum):
    """One instrument, by its name."""

    INPUT_TOKENS = "gen_ai.client.inference.usage.input_tokens"
    OUTPUT_TOKENS = "gen_ai.client.inference.usage.output_tokens"
    CACHE_READ_TOKENS = "gen_ai.client.inference.usage.cache_read.input_tokens"
    CACHE_WRITE_TOKENS = "gen_ai.client.inference.usage.cache_write.input_tokens"
    REASONING_TOKENS = "gen_ai.client.inference.usage.reasoning.output_tokens"
    INFERENCE_DURATION = "gen_ai.client.inference.duration"
    INVOKE_AGENT_DURATION = "gen_ai.invoke_agent.duration"
    EXECUTE_TOOL_DURATION = "gen_ai.execute_tool.duration"


@dataclass(frozen=True, slots=True)
class Instrument:
    """What the CLI declares: description, unit, attribute keys (the order of an update's labels), and the
    bucket bounds of a histogram (None: a monotonic counter)."""

    description: str
    unit: str
    keys: tuple[str, ...]
    bounds: tuple[float, ...] | None = None


INSTRUMENTS: dict[GenAi, Instrument] = {
    GenAi.INPUT_TOKENS: Instrument("The number of input tokens used, including cached tokens.", "{token}",
                                   _TOKEN_KEYS),
    GenAi.OUTPUT_TOKENS: Instrument("The number of output tokens used, including reasoning tokens.", "{token}",
                                    _TOKEN_KEYS),
    GenAi.CACHE_READ_TOKENS: Instrument("The number of input tokens served from a provider-managed cache.",
                                        "{token}", _TOKEN_KEYS),
    GenAi.CACHE_WRITE_TOKENS: Instrument("The number of input tokens written to a provider-managed cache.",
                                         "{token}", _TOKEN_KEYS),
    GenAi.REASONING_TOKENS: Instrument("The number of output tokens used for reasoning.", "{token}", _TOKEN_KEYS),
    GenAi.INFERENCE_DURATION: Instrument("GenAI client inference operation duration.", "s", _CALL_KEYS,
                                         CALL_BOUNDS),
    GenAi.INVOKE_AGENT_DURATION: Instrument("The end-to-end duration of a single agent invocation.", "s",
                                            _AGENT_KEYS, AGENT_BOUNDS),
    GenAi.EXECUTE_TOOL_DURATION: Instrument("The duration of a single tool execution.", "s", _TOOL_KEYS,
                                            CALL_BOUNDS),
}
# Span attribute -> the token instrument it feeds.
_TOKENS = ((A.GEN_AI_USAGE_INPUT_TOKENS, GenAi.INPUT_TOKENS), (A.GEN_AI_USAGE_OUTPUT_TOKENS, GenAi.OUTPUT_TOKENS),
           (A.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS, GenAi.CACHE_READ_TOKENS),
           (A.GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS, GenAi.CACHE_WRITE_TOKENS),
           (REASONING_OUTPUT_TOKENS, GenAi.REASONING_TOKENS))


def updates(span: SpanRecord) -> list[MetricUpdate]:
    """What one closed span adds to the instruments (its own ids as the exemplar)."""
    a = span.attributes
    operation = a.get(A.GEN_AI_OPERATION_NAME)
    ids = (span.trace_id, span.span_id)
    seconds = max(0, span.end_ns - span.start_ns) / 1e9
    error = _error(a.get(A.ERROR_TYPE))
    if operation == A.OP_CHAT and A.COPILOT_COMPACTION_TRIGGER not in a:  # the CLI times no compaction call
        out = [_update(GenAi.INFERENCE_DURATION, {**a, A.ERROR_TYPE: error}, seconds, ids)]
        if any(key in a for key, _instrument in _TOKENS):  # a failed call used none the log knows of
            tokens = {**a, TOKEN_MODALITY: UNKNOWN_MODALITY, A.ERROR_TYPE: None}
            out += [_update(instrument, tokens, _count(a.get(key)), ids) for key, instrument in _TOKENS]
        return out
    if operation == A.OP_EXECUTE_TOOL:
        return [_update(GenAi.EXECUTE_TOOL_DURATION, {**a, A.ERROR_TYPE: error}, seconds, ids)]
    if operation == A.OP_INVOKE_AGENT:
        if span.parent_span_id is None:  # the interaction: the CLI names no agent on it
            aborted = a.get(A.COPILOT_INTERACTION_END) == END_ABORTED
            values = {A.ERROR_TYPE: CANCELLED if aborted else error}
        else:  # a sub-agent: the abort is its interaction's
            values = {A.GEN_AI_AGENT_NAME: a.get(A.GEN_AI_AGENT_NAME), A.ERROR_TYPE: None if error == CANCELLED
                      else error}
        return [_update(GenAi.INVOKE_AGENT_DURATION, values, seconds, ids)]
    return []


def _count(tokens: Any) -> int:
    """A token count a counter may add: a number the log made negative adds nothing."""
    return max(0, int(tokens)) if isinstance(tokens, (int, float)) and not isinstance(tokens, bool) else 0


def _error(error_type: Any) -> str | None:
    """A span's error.type as the CLI's metrics say it (a tool cut by the user's abort is ``cancelled``)."""
    return CANCELLED if error_type == END_ABORTED else error_type


def _update(instrument: GenAi, attributes: Mapping[str, Any], value: float, ids: tuple[int, int]) -> MetricUpdate:
    labels = tuple("" if attributes.get(key) is None else str(attributes[key])
                   for key in INSTRUMENTS[instrument].keys)
    return MetricUpdate(instrument, labels, value, ids)  # type: ignore[arg-type]


@dataclass(slots=True)
class _Point:
    """The running total of one instrument's series: a sum, or a histogram's buckets, count, sum, min and max."""

    value: float = 0.0
    count: int = 0
    minimum: float = math.inf
    maximum: float = -math.inf
    buckets: list[int] | None = None
    exemplars: dict[int, tuple[float, int, tuple[int, int]]] | None = None  # bucket -> (value, time, ids)


class GenAiMetrics:
    """The instruments' totals since this process started. ``cap(kind, value)`` bounds the values of the
    attributes in CAPPED (model, tool, agent names), as the Prometheus labels are bounded."""

    def __init__(self, cap: Callable[[str, str], str] = lambda _kind, value: value, *,
                 clock: Callable[[], int] | None = None) -> None:
        import time

        self._cap = cap
        self._clock = clock or time.time_ns
        self._points: dict[tuple[GenAi, tuple[str, ...]], _Point] = {}
        self._known: dict[tuple[GenAi, tuple[str, ...]], _Point] = {}  # by the labels as updates say them
        self._lock = threading.Lock()

    def apply(self, update: MetricUpdate) -> None:
        """Add one update made by ``updates``."""
        instrument: GenAi = update.metric  # type: ignore[assignment]
        spec = INSTRUMENTS[instrument]
        now = self._clock()
        with self._lock:
            point = self._known.get((instrument, update.labels))
            if point is None:
                labels = tuple(self._cap(CAPPED[key], value) if value and key in CAPPED else value
                               for key, value in zip(spec.keys, update.labels))
                point = self._points.get((instrument, labels))
                if point is None:
                    point = self._points[(instrument, labels)] = _Point(
                        buckets=None if spec.bounds is None else [0] * (len(spec.bounds) + 1), exemplars={})
                if len(self._known) < MAX_KNOWN:
                    self._known[(instrument, update.labels)] = point
            point.value += update.value
            point.count += 1
            index = 0
            if point.buckets is not None:
                index = bisect_left(spec.bounds, update.value)
                point.buckets[index] += 1
                point.minimum = min(point.minimum, update.value)
                point.maximum = max(point.maximum, update.value)
            if update.exemplar is not None:
                point.exemplars[index] = (update.value, now, update.exemplar)

    def data(self, start_ns: int, now_ns: int) -> list[Any]:
        """The instruments as OpenTelemetry metrics (cumulative since ``start_ns``), those with data."""
        from opentelemetry.sdk.metrics import Exemplar
        from opentelemetry.sdk.metrics.export import (AggregationTemporality, Histogram, HistogramDataPoint,
                                                      Metric, NumberDataPoint, Sum)

        cumulative = AggregationTemporality.CUMULATIVE
        by_instrument: dict[GenAi, list[Any]] = {}
        with self._lock:
            for (instrument, labels), point in self._points.items():
                spec = INSTRUMENTS[instrument]
                attributes = {key: value for key, value in zip(spec.keys, labels) if value}
                exemplars = [Exemplar({}, value, at, ids[1], ids[0]) for value, at, ids in point.exemplars.values()]
                if point.buckets is None:
                    data_point: Any = NumberDataPoint(attributes, start_ns, now_ns, int(point.value), exemplars)
                else:
                    data_point = HistogramDataPoint(attributes, start_ns, now_ns, point.count, point.value,
                                                    list(point.buckets), list(spec.bounds), point.minimum,
                                                    point.maximum, exemplars)
                by_instrument.setdefault(instrument, []).append(data_point)
        metrics = []
        for instrument, points in by_instrument.items():
            spec = INSTRUMENTS[instrument]
            data = (Sum(points, cumulative, is_monotonic=True) if spec.bounds is None
                    else Histogram(points, cumulative))
            metrics.append(Metric(instrument.value, spec.description, spec.unit, data))
        return metrics
