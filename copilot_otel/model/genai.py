"""The GenAI semantic-convention instruments the Copilot CLI's own OTel exports: what each is, and the
updates one closed span makes to them (pure: the session model makes them; metrics/genai.py adds them
up for the OTLP metrics push).

Same names, units, attributes and bucket bounds as the CLI 1.0.102 writes them (its native export, in
tests/fixtures), so that one dashboard reads machines that run the CLI's export and machines that run
copilot-otel. What the logs cannot say is left out: ``server.address`` and ``server.port`` of the API the CLI
called. The abort of an interaction counts as the CLI counts it: ``error.type=cancelled`` on the interaction's
invoke_agent and on the tools it cut, not on the sub-agents under them; a compaction's call is not an
inference here either.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any

from msgspec import Struct

from ..vocab import CANCELLED, END_ABORTED
from . import attrs as A
from .records import MetricUpdate, SpanRecord

TOKEN_MODALITY = "gen_ai.token.modality"
UNKNOWN_MODALITY = "unknown"  # the logs say nothing of modality; the CLI says the same
REASONING_OUTPUT_TOKENS = A.GEN_AI_USAGE_REASONING_OUTPUT_TOKENS
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
# Attributes whose values the model or the log chooses: capped as the Prometheus labels are (labels.LabelCap).
CAPPED = {A.GEN_AI_REQUEST_MODEL: "model", A.GEN_AI_RESPONSE_MODEL: "model", A.GEN_AI_TOOL_NAME: "tool",
          A.GEN_AI_AGENT_NAME: "agent", A.ERROR_TYPE: "error_type", A.GEN_AI_PROVIDER_NAME: "provider"}


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

    __hash__ = object.__hash__  # as vocab.Metric's: identity, in C (Enum's hash is Python, run at every update)


class Instrument(Struct, frozen=True):
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
    if operation == A.OP_CHAT and A.COPILOT_COMPACTION_TRIGGER not in a:  # the CLI times no compaction call
        out = [MetricUpdate(GenAi.INFERENCE_DURATION, _labels(_CALL_KEYS, a, _error(a.get(A.ERROR_TYPE))), seconds,
                            ids)]
        if any(key in a for key, _instrument in _TOKENS):  # a failed call used none the log knows of
            labels = _labels(_TOKEN_KEYS, a, UNKNOWN_MODALITY)  # the same for each token instrument
            out += [MetricUpdate(instrument, labels, _count(a.get(key)), ids) for key, instrument in _TOKENS]
        return out
    if operation == A.OP_EXECUTE_TOOL:
        return [MetricUpdate(GenAi.EXECUTE_TOOL_DURATION, _labels(_TOOL_KEYS, a, _error(a.get(A.ERROR_TYPE))),
                             seconds, ids)]
    if operation == A.OP_INVOKE_AGENT:
        error = _error(a.get(A.ERROR_TYPE))
        if span.parent_span_id is None:  # the interaction: the CLI names no agent on it
            labels = ("", CANCELLED if a.get(A.COPILOT_INTERACTION_END) == END_ABORTED else _text(error))
        else:  # a sub-agent: the abort is its interaction's
            labels = (_text(a.get(A.GEN_AI_AGENT_NAME)), "" if error == CANCELLED else _text(error))
        return [MetricUpdate(GenAi.INVOKE_AGENT_DURATION, labels, seconds, ids)]
    return []


def _count(tokens: Any) -> int:
    """A token count a counter may add: a number the log made negative adds nothing."""
    return max(0, int(tokens)) if isinstance(tokens, (int, float)) and not isinstance(tokens, bool) else 0


def _error(error_type: Any) -> str | None:
    """A span's error.type as the CLI's metrics say it (a tool cut by the user's abort is ``cancelled``)."""
    return CANCELLED if error_type == END_ABORTED else error_type


def _text(value: Any) -> str:
    """A label value: None is the empty string."""
    return "" if value is None else str(value)


def _labels(keys: tuple[str, ...], attributes: Mapping[str, Any], last: Any) -> tuple[str, ...]:
    """The label values of an instrument whose ``keys`` end with one the span does not hold as such (error.type
    as the CLI's metrics say it, or the token modality): that one is ``last``, the others the span's attributes."""
    get = attributes.get
    labels = ["" if (value := get(key)) is None else str(value) for key in keys[:-1]]
    labels.append(_text(last))
    return tuple(labels)
