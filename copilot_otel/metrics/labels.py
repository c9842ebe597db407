"""The labels whose values a log chooses, each capped (LabelCap), and the exemplar a series keeps.

A log cannot mint unbounded series: each capped label takes at most ``limit`` distinct values, each cut to
MAX_NAME_CHARS, and counts the values past the cap as ``other``.
"""

from __future__ import annotations

from collections.abc import Callable

from ..otlp.limits import OTHER, cut_name
from ..vocab import REPOSITORY_LABEL, Metric

# The exemplar label names Grafana's exemplarTraceIdDestinations and OTLP exemplars read.
TRACE_ID, SPAN_ID = "trace_id", "span_id"
# Labels whose values the model or the log chooses: each is capped (LabelCap). error_type and provider are
# attributes of the GenAI instruments of the OTLP push alone (genai.CAPPED); the others are Prometheus labels.
AGENT, MODEL, TOOL, REPOSITORY, STATUS = "agent", "model", "tool", REPOSITORY_LABEL, "status"
ERROR_TYPE, PROVIDER, SERVER = "error_type", "provider", "server"
CAPPED_LABELS = (AGENT, MODEL, TOOL, REPOSITORY, STATUS, ERROR_TYPE, PROVIDER, SERVER)
PUSH_ONLY = frozenset((ERROR_TYPE, PROVIDER))  # no Prometheus twin counts their overflow: the push does
# For each session metric, the capped label at each position of its label values (None: a closed set).
CAPPED_POSITIONS: dict[Metric, tuple[str | None, ...]] = {
    Metric.SESSIONS_STARTED: (REPOSITORY,),
    Metric.TURNS: (AGENT,),
    Metric.LLM_CALLS: (MODEL, None, REPOSITORY),
    Metric.TOOL_CALLS: (TOOL, None),
    Metric.MCP_TOOL_CALLS: (SERVER, None),
    Metric.TOKENS: (MODEL, None, REPOSITORY),
    Metric.TURN_DURATION: (AGENT,),
    Metric.TOOL_DURATION: (TOOL,),
    Metric.LLM_CALL_DURATION: (MODEL,),
    Metric.LLM_TIME_TO_FIRST_TOKEN: (MODEL,),
    Metric.PREMIUM_REQUESTS: (MODEL, REPOSITORY),
    Metric.AUTOPILOT_PREMIUM_REQUESTS: (MODEL, REPOSITORY),
    Metric.AI_CREDITS: (MODEL, REPOSITORY),
    Metric.AUTOPILOT_AI_CREDITS: (MODEL, REPOSITORY),
    Metric.LLM_CALLS_WITHOUT_CREDITS: (MODEL, STATUS, REPOSITORY),
    Metric.CODE_LINES: (None, REPOSITORY),
    Metric.FILES_MODIFIED: (REPOSITORY,),
}


class LabelCap:
    """At most ``limit`` distinct values per capped label, each cut to MAX_NAME_CHARS; the values that
    come later count as ``other`` (and as one overflow each), so a log cannot mint unbounded series."""

    def __init__(self, limit: int, on_overflow: Callable[[str], None]) -> None:
        self.limit = limit
        self._seen: dict[str, set[str]] = {label: set() for label in CAPPED_LABELS}
        self._on_overflow = on_overflow

    def value(self, label: str, value: str, *, count: bool = True) -> str:
        """The label value to use for ``value`` (``count=False``: an overflow is not counted again, for the
        GenAI twin of an update that counts it)."""
        seen = self._seen[label]
        if value in seen:
            return value
        value = cut_name(value)
        if value in seen:
            return value
        if len(seen) >= self.limit:
            if count:
                self._on_overflow(label)
            return OTHER
        seen.add(value)
        return value

    def admit(self, label: str, value: str) -> None:
        """Count ``value`` among ``label``'s values without a new update (a series resumed from the checkpoint)."""
        if value and value != OTHER and len(self._seen[label]) < self.limit:
            self._seen[label].add(value)


def exemplar_labels(span: tuple[int, int] | None) -> dict[str, str] | None:
    """The exemplar of an update measured on ``span`` (trace id, span id), in the hex the traces use."""
    if span is None:
        return None
    return {TRACE_ID: f"{span[0]:032x}", SPAN_ID: f"{span[1]:016x}"}
