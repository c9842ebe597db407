"""The records the session model keeps while spans are open, and the outbox closed ones go to."""

from __future__ import annotations

from typing import Any

from msgspec import Struct, field
from msgspec.structs import replace

from ..decode.events import Event
from ..vocab import ATTRIBUTED, CANCELLED, END_ABORTED, INCOMPLETE, OUT_OF_RANGE, Metric
from . import attrs as A
from .genai import updates as genai_updates
from .records import (
    EMPTY_STEP,
    INT64_LIMIT,
    STATUS_ERROR,
    Anomaly,
    MetricUpdate,
    SpanEvent,
    SpanRecord,
    Step,
    clamped_value,
    shown,
)

# The status description of a span that failed without a message of its own, by error.type.
_DESCRIPTIONS = {
    INCOMPLETE: "never ended: the session stopped first (its process died, or it shut down)",
    CANCELLED: "cancelled by the user's abort",
    END_ABORTED: "cut off by the user's abort",
}


class OpenSpan(Struct):
    """A span whose end has not come yet."""

    trace_id: int
    span_id: int
    parent_span_id: int | None
    name: str
    kind: int
    start_ns: int
    attributes: dict[str, Any]
    events: list[SpanEvent] = field(default_factory=list)
    parent: OpenSpan | None = None
    end_ns: int | None = None  # set when closed
    links: tuple[tuple[int, int], ...] = ()

    def close(self, end_ns: int, *, status: int = 0, message: str = "", error_type: str | None = None) -> SpanRecord:
        """The finished span; an ``error_type`` makes it an error. It never ends after its parent."""
        if error_type is not None:
            self.attributes[A.ERROR_TYPE] = error_type
            status = STATUS_ERROR
            message = message or _DESCRIPTIONS.get(error_type, error_type)
        ancestor = self.parent
        while ancestor is not None:  # e.g. a sub-agent's last turn logged a few ms after its task call ended
            if ancestor.end_ns is not None and end_ns > ancestor.end_ns:
                end_ns = ancestor.end_ns
            ancestor = ancestor.parent
        self.end_ns = end_ns = max(end_ns, self.start_ns)
        return SpanRecord(self.trace_id, self.span_id, self.parent_span_id, self.name, self.kind, self.start_ns,
                          end_ns, self.attributes, status, message, tuple(self.events), self.links)

    def child(self, span_id: int, name: str, kind: int, start_ns: int, attributes: dict[str, Any]) -> OpenSpan:
        """A span under this one, in the same trace."""
        return OpenSpan(self.trace_id, span_id, self.span_id, name, kind, start_ns, attributes, parent=self)


class Turn(Struct):
    """An open turn of one agent."""

    span: OpenSpan
    agent: str
    requested_tools: bool = False
    errored: str | None = None
    llm_calls: int = 0
    truncated: bool = False  # its last LLM call stopped at the length limit: the CLI asks it to go on
    end_ns: int = 0  # set when its turn_end came
    error_message: str = ""  # the session.error's, when one failed it

    @property
    def turn_id(self) -> str:
        return self.span.attributes[A.COPILOT_TURN_ID]

    def close(self) -> SpanRecord:
        """The finished span of a turn whose turn_end came."""
        return self.span.close(self.end_ns, error_type=self.errored, message=self.error_message)


class Talk(Struct):
    """One agent's conversation: its system prompt, its prompt, what its next call gets, its last answer."""

    system: str | None = None  # gen_ai.system_instructions, as JSON
    prompt: dict | None = None  # the user message that started its invocation
    pending: list[dict] = field(default_factory=list)  # messages since its last call
    order: dict[str, int] = field(default_factory=dict)  # tool call id -> place in the last answer's requests
    answer: dict | None = None  # its last output message
    held: SpanRecord | None = None  # its last chat span, waiting for the answer


class Totals(Struct):
    """What one invocation of an agent used: the main agent in one interaction, or one sub-agent."""

    turns: int = 0
    llm_calls: int = 0
    tool_calls: int = 0
    tokens: dict[str, int] = field(default_factory=dict)  # by copilot_tokens_total{type}
    cost: float | None = None  # sum of the calls' usage.cost; None while no call reported one
    premium_requests: float = 0.0
    nano_aiu: int | None = None  # AI credits of the calls that reported an amount; None while none did
    unpriced_calls: int = 0  # calls that reported no amount


class Agent(Struct):
    """The main agent or one sub-agent: where its turns hang, its open turn, what it used."""

    name: str  # "main" or the sub-agent's name (a metric label)
    invoke_span: OpenSpan | None  # the span its turns hang under
    turn: Turn | None = None
    totals: Totals = field(default_factory=Totals)
    talk: Talk = field(default_factory=Talk)  # its conversation, kept only with content capture on (messages.py)
    custom: str | None = None  # the main agent: the custom agent the CLI runs as (--agent), named on its spans

    @property
    def shown(self) -> str:
        """The name its spans carry: the custom agent's, else its own (``main`` stays unnamed: copilot)."""
        return self.custom or self.name


class Interaction(Struct):
    """The running interaction: its root span and how it seems to be ending."""

    id: str
    root: OpenSpan
    start_offset: int
    start_line: int
    last_end_ns: int
    autopilot: bool = False  # opened by an autopilot nudge
    # Set when the loop looks finished (final answer, task_complete, error); confirmed later.
    pending_end: str | None = None
    error_type: str | None = None
    error_message: str = ""
    summary: str | None = None


class InteractionSummary(Struct, frozen=True):
    """What `inspect` needs to know about a finished interaction."""

    interaction_id: str
    trace_id: int
    start_ns: int
    end: str | None  # one of the END_* values
    autopilot: bool
    summary: str | None


class Outbox:
    """Where the model puts what an event produced, until the caller takes it as one Step."""

    __slots__ = ("anomalies", "keep_metrics", "metrics", "repository", "shared", "spans")

    def __init__(self, keep_metrics: bool = True) -> None:
        self.spans: list[SpanRecord] = []
        self.metrics: list[MetricUpdate] = []
        self.anomalies: list[Anomaly] = []
        self.keep_metrics = keep_metrics  # False: a replay that keeps no metrics asks the model for none
        self.shared: dict[str, Any] = {A.GEN_AI_PROVIDER_NAME: A.PROVIDER}  # on every span (spanattrs.shared)
        self.repository = ""  # the {repository} label of the ATTRIBUTED metrics ("" outside a repository)

    def span(self, record: SpanRecord) -> None:
        """A span closed: it gets the session's shared attributes it does not set itself (added to the
        closed span's own attribute dict, which nothing else holds, rather than copied), and counts in the
        GenAI instruments."""
        assert isinstance(record.attributes, dict)  # the closed span's own dict (OpenSpan.close)
        setdefault = record.attributes.setdefault
        for key, value in self.shared.items():
            setdefault(key, value)
        self.spans.append(record)
        if self.keep_metrics:
            for update in genai_updates(record):
                if not -INT64_LIMIT <= update.value <= INT64_LIMIT:
                    update = replace(update, value=self._clamped(update.metric, update.value))
                self.metrics.append(update)

    def count(self, metric: Metric, *labels: str, value: float = 1.0, span: OpenSpan | None = None) -> None:
        """Add to a counter, or observe in a histogram (the metric's kind says which), with ``span`` as its
        exemplar. A metric attributed to a repository gets the session's as its last label. A value beyond
        int64 (the log's: a 400-digit token count, a cost of 1e308 that sums to infinity) is clamped, and said."""
        if self.keep_metrics:
            if metric in ATTRIBUTED:
                labels = (*labels, self.repository)
            if not -INT64_LIMIT <= value <= INT64_LIMIT:
                value = self._clamped(metric, value)
            self.metrics.append(MetricUpdate(metric, labels, value,
                                             None if span is None else (span.trace_id, span.span_id)))

    def _clamped(self, metric: Any, value: Any) -> float:
        """``value`` clamped (records.clamped_value), noted as an anomaly for the caller to count and log."""
        self.anomalies.append(Anomaly(OUT_OF_RANGE, metric.value, shown(value)))
        clamped = clamped_value(value)
        assert clamped is not None  # called only for a value out of range
        return clamped

    def anomaly(self, kind: str, event: Event) -> None:
        """The event could not be used; the caller logs it with its file and line."""
        self.anomalies.append(Anomaly(kind, event.type, event.id))

    def take(self) -> Step:
        """Everything gathered since the last take (the model keeps none of it)."""
        if not (self.spans or self.metrics or self.anomalies):
            return EMPTY_STEP
        step = Step(tuple(self.spans), tuple(self.metrics), tuple(self.anomalies))
        self.spans, self.metrics, self.anomalies = [], [], []
        return step
