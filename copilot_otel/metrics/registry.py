"""Every Prometheus metric in one place: one prefix, one private registry.

Names, types and labels of the ``copilot_*`` metrics are a contract (docs/metrics.md):
dashboards and alert rules depend on them. Live session states are computed at
scrape time by :class:`LiveSessionsCollector`.
"""

from __future__ import annotations

import logging
import re
import time
from bisect import bisect_left
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from msgspec import Struct
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily, InfoMetricFamily
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector

from ..base.pause import PAUSE
from ..version import __version__
from ..otlp.limits import DEFAULT_MAX_LABEL_VALUES
from ..decode.lines import INTERNAL_ERROR, REASONS
from .decimals import DecimalTotals
from .genai import GenAi, GenAiMetrics
from ..otlp.limits import MAX_NAME_CHARS, OTHER, cut_name
from .totals import Resumed, baselines, decode, snapshot
from ..model.records import MetricUpdate
from ..source.identity import EDITED, REPLACED, TRUNCATED
from ..vocab import (ATTRIBUTED, CLAMP_REASONS, INTERACTION_ENDS, LOG_REFUSALS, REPOSITORY_LABEL, SIGNALS,
                     STALLED_STATES, STATES, Metric)

log = logging.getLogger(__name__)
HISTOGRAMS = frozenset((Metric.TURN_DURATION, Metric.TOOL_DURATION, Metric.LLM_CALL_DURATION,
                        Metric.LLM_TIME_TO_FIRST_TOKEN))

if TYPE_CHECKING:
    from .budgets import BudgetMeter
    from ..model.pipeline import Outputs

TURN_BUCKETS = (0.5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300, 600, 1200, 1800, 3600)
TOOL_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800)
LLM_BUCKETS = (0.25, 0.5, 1, 2, 4, 8, 15, 30, 60, 120, 300)
TTFT_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2, 4, 8, 15, 30, 60)
# Each histogram's upper bounds as prometheus_client counts them (then +Inf): which bucket a value lands in.
# Counters whose increments are decimals: they land on their rounded sums (decimals.py), not on float noise.
DECIMAL_METRICS = frozenset({Metric.AI_CREDITS, Metric.AUTOPILOT_AI_CREDITS, Metric.PREMIUM_REQUESTS,
                             Metric.AUTOPILOT_PREMIUM_REQUESTS})
_BOUNDS = {key: [float(bound) for bound in buckets] + [float("inf")] for key, buckets in (
    (Metric.TURN_DURATION, TURN_BUCKETS), (Metric.TOOL_DURATION, TOOL_BUCKETS),
    (Metric.LLM_CALL_DURATION, LLM_BUCKETS), (Metric.LLM_TIME_TO_FIRST_TOKEN, TTFT_BUCKETS))}
# The CLI has about 150 event types; a file full of invented ones must not mint series.
MAX_EVENT_TYPES = 250
STALLED_LABELS = ["session_id", "state", "tool", "repository", "trace_id"]
# The exemplar label names Grafana's exemplarTraceIdDestinations and OTLP exemplars read.
TRACE_ID, SPAN_ID = "trace_id", "span_id"
_EVENT_TYPE = re.compile(r"[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*){1,3}")
# Labels whose values the model or the log chooses: each is capped (LabelCap). error_type and provider are
# attributes of the GenAI instruments of the OTLP push alone (genai.CAPPED); the others are Prometheus labels.
AGENT, MODEL, TOOL, REPOSITORY, STATUS = "agent", "model", "tool", REPOSITORY_LABEL, "status"
ERROR_TYPE, PROVIDER, SERVER = "error_type", "provider", "server"
CAPPED_LABELS = (AGENT, MODEL, TOOL, REPOSITORY, STATUS, ERROR_TYPE, PROVIDER, SERVER)
PUSH_ONLY = frozenset((ERROR_TYPE, PROVIDER))  # no Prometheus twin counts their overflow: the push does
# For each session metric, the capped label at each position of its label values (None: a closed set).
_CAPPED_POSITIONS: dict[Metric, tuple[str | None, ...]] = {
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


def disable_created_series() -> None:
    """*_created series double the series count and no dashboard here uses them (a process-wide switch:
    only a command that owns the process calls it, never ``attach()``)."""
    from prometheus_client import disable_created_metrics

    disable_created_metrics()


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


class LiveSession(Struct, frozen=True):
    """One session's state as the collector sees it at scrape time."""

    session_id: str
    state: str  # one of STATES
    stalled_seconds: float = 0.0
    tool: str = ""  # the tool a stalled session waits on ("" when none)
    repository: str = ""  # owner/name of its git repository ("" outside one)
    trace_id: str = ""  # hex id of the trace of its running (else last) interaction ("" before the first)


class LiveSessionsCollector:
    """copilot_sessions{state} and copilot_session_stalled_seconds, computed when scraped."""

    def __init__(self, snapshot: Callable[[], Iterable[LiveSession]], *, repository_label: bool = True) -> None:
        self._snapshot = snapshot
        self._repository_label = repository_label

    def collect(self):
        """Yield the live gauges from a fresh snapshot."""
        counts = dict.fromkeys(STATES, 0)
        stalled = GaugeMetricFamily("copilot_session_stalled_seconds",
                                    "Seconds since the last event of each session that is stuck or abandoned now.",
                                    labels=STALLED_LABELS)
        for session in self._snapshot():
            counts[session.state] = counts.get(session.state, 0) + 1
            if session.state in STALLED_STATES:
                repository = cut_name(session.repository) if self._repository_label else ""
                stalled.add_metric([session.session_id, session.state, cut_name(session.tool), repository,
                                    session.trace_id],
                                   session.stalled_seconds)
        sessions = GaugeMetricFamily("copilot_sessions", "Live Copilot sessions by state.", labels=["state"])
        for state, count in counts.items():
            sessions.add_metric([state], count)
        yield sessions
        yield stalled

    def describe(self):
        """Names only, so registering does not take a snapshot."""
        yield GaugeMetricFamily("copilot_sessions", "", labels=["state"])
        yield GaugeMetricFamily("copilot_session_stalled_seconds", "", labels=STALLED_LABELS)


class TargetInfoCollector:
    """target_info: the instance's OpenTelemetry resource (OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES:
    user, host, team...) as the labels of one series, as OpenTelemetry's Prometheus exporters expose it."""

    def __init__(self, attributes: Mapping[str, Any]) -> None:
        self._labels = {_label_name(key): str(value) for key, value in attributes.items()}

    def collect(self):
        """The one target_info series."""
        info = InfoMetricFamily("target", "Target metadata: the OpenTelemetry resource of this copilot-otel.")
        info.add_metric([], self._labels)
        yield info


def exemplar_labels(span: tuple[int, int] | None) -> dict[str, str] | None:
    """The exemplar of an update measured on ``span`` (trace id, span id), in the hex the traces use."""
    if span is None:
        return None
    return {TRACE_ID: f"{span[0]:032x}", SPAN_ID: f"{span[1]:016x}"}


def _label_name(key: str) -> str:
    """An attribute key as a Prometheus label name: dots and other characters become underscores."""
    name = re.sub(r"[^a-zA-Z0-9_]", "_", key)
    return f"_{name}" if name[:1].isdigit() else name


class Metrics:
    """The copilot_* and copilot_otel_* metrics on a private registry.

    ``repository_label=False`` (--no-repository-label) leaves the repository label of every series empty
    (Prometheus then shows none). ``resource``: the attributes of the target_info series.
    """

    def __init__(self, *, registry: CollectorRegistry | None = None, process: bool = True,
                 repository_label: bool = True, resource: Mapping[str, Any] | None = None,
                 max_label_values: int = DEFAULT_MAX_LABEL_VALUES) -> None:
        self.registry = registry if registry is not None else CollectorRegistry(auto_describe=True)
        self.repository_label = repository_label
        self.budget_meter: BudgetMeter | None = None  # add_budgets(): the --budgets-file's metrics
        self._decimals = DecimalTotals()  # the series of DECIMAL_METRICS: each lands on its rounded sum
        r = self.registry
        repo = REPOSITORY_LABEL
        self.sessions_started = Counter("copilot_sessions_started", "Sessions started (session.start), by repository.",
                                        [repo], registry=r)
        self.turns = Counter("copilot_turns", "Agent turns started.", [AGENT], registry=r)
        self.llm_calls = Counter("copilot_llm_calls", "LLM calls by model, outcome and repository.",
                                 [MODEL, "outcome", repo], registry=r)
        self.tool_calls = Counter("copilot_tool_calls", "Tool executions by tool and outcome.", [TOOL, "outcome"],
                                  registry=r)
        self.mcp_tool_calls = Counter("copilot_mcp_tool_calls", "MCP server tool executions by server and outcome.",
                                      [SERVER, "outcome"], registry=r)
        self.autopilot_nudges = Counter("copilot_autopilot_nudges", "Autopilot continuation messages.", registry=r)
        self.completion_signals = Counter("copilot_completion_signals",
                                          "Ends of the agent loop and of sessions, by signal.", ["signal"], registry=r)
        self.tokens = Counter("copilot_tokens", "Tokens by model, type and repository.", ["model", "type", repo],
                              registry=r)
        self.turn_duration = Histogram("copilot_turn_duration_seconds", "Duration of agent turns.", ["agent"],
                                       buckets=TURN_BUCKETS, registry=r)
        self.tool_duration = Histogram("copilot_tool_duration_seconds", "Duration of tool executions.", ["tool"],
                                       buckets=TOOL_BUCKETS, registry=r)
        self.llm_call_duration = Histogram("copilot_llm_call_duration_seconds", "Duration of LLM calls.", ["model"],
                                           buckets=LLM_BUCKETS, registry=r)
        # What it costs and changes, and how interactions end.
        self.llm_ttft = Histogram("copilot_llm_time_to_first_token_seconds",
                                  "Time from an LLM request to its first streamed token.", ["model"],
                                  buckets=TTFT_BUCKETS, registry=r)
        self.interactions = Counter("copilot_interactions", "Interactions by how they ended.", ["end"], registry=r)
        self.premium_requests = Counter(
            "copilot_premium_requests",
            "Premium requests (usage.cost of user-initiated calls) by model and repository.", ["model", repo],
            registry=r)
        self.autopilot_premium_requests = Counter(
            "copilot_autopilot_premium_requests", "The premium requests spent on autopilot continuations.",
            ["model", repo], registry=r)
        self.ai_credits = Counter("copilot_ai_credits", "AI credits (1 credit = 1e9 nano AIU) by model and repository.",
                                  ["model", repo], registry=r)
        self.autopilot_ai_credits = Counter("copilot_autopilot_ai_credits",
                                            "The AI credits spent in interactions autopilot started.", ["model", repo],
                                            registry=r)
        self.llm_calls_without_credits = Counter(
            "copilot_llm_calls_without_credits", "LLM calls that reported no AI credits, by the CLI's status.",
            ["model", "status", repo], registry=r)
        self.code_lines = Counter("copilot_code_lines", "Lines of code the agent added or removed.", ["change", repo],
                                  registry=r)
        self.files_modified = Counter("copilot_files_modified", "Files the agent modified.", [repo], registry=r)
        # The daemon's own health.
        self.events_read = Counter("copilot_otel_events_read", "Events read, by type.", ["type"], registry=r)
        self.lines_rejected = Counter("copilot_otel_lines_rejected", "Lines skipped, by reason.", ["reason"],
                                      registry=r)
        self.logs_refused = Counter("copilot_otel_logs_refused",
                                    "Session logs not read as the user's, by reason: owner (its folder or the log is "
                                    "another user's), outside (a link out of session-state), alias (another name of "
                                    "a log already read).", ["reason"], registry=r)
        for reason in LOG_REFUSALS:
            self.logs_refused.labels(reason)
        self.events_out_of_order = Counter("copilot_otel_events_out_of_order",
                                           "Events that end something never started, by type.", ["type"], registry=r)
        self.events_ahead = Counter("copilot_otel_events_ahead_of_clock",
                                    "Events stamped more than an hour ahead of this machine's clock (kept as stamped).",
                                    registry=r)
        self.log_generations = Counter(
            "copilot_otel_log_generations", "Logs read again as a new generation, with span ids of their own, because "
            "bytes already read changed: truncated, replaced by another log, or edited (rewritten).", ["how"],
            registry=r)
        for how in (TRUNCATED, REPLACED, EDITED):
            self.log_generations.labels(how)
        self.spans_exported = Counter("copilot_otel_spans_exported", "Spans delivered to the trace backend.",
                                      registry=r)
        self.spans_failed = Counter("copilot_otel_spans_failed", "Span export attempts that failed (spans).",
                                    registry=r)
        self.export_queue = Gauge("copilot_otel_export_queue_spans", "Spans waiting to be exported.", registry=r)
        self.files_watched = Gauge("copilot_otel_files_watched", "Session event files being followed.", registry=r)
        self.lag = Gauge("copilot_otel_lag_seconds", "Seconds between now and the newest event read, while some "
                         "session is working or waiting on a tool (0 otherwise).", registry=r)
        self.checkpoint_commits = Counter("copilot_otel_checkpoint_commits", "Checkpoint transactions committed.",
                                          registry=r)
        self.spans_dead_lettered = Counter("copilot_otel_spans_dead_lettered",
                                           "Spans the trace backend refused for good, kept in the dead-letter file.",
                                           registry=r)
        self.spans_dropped_by_backend = Counter(
            "copilot_otel_spans_dropped_by_backend",
            "Spans the trace backend accepted and dropped all the same (OTLP partial success).", registry=r)
        self.logs_exported = Counter("copilot_otel_log_records_exported",
                                     "Log records delivered to the logs backend (OTEL_LOGS_EXPORTER=otlp).", registry=r)
        self.logs_failed = Counter("copilot_otel_log_records_failed",
                                   "Log record export attempts that failed (log records).", registry=r)
        self.logs_dropped = Counter("copilot_otel_log_records_dropped",
                                    "Log records refused for good, or accepted and dropped (OTLP partial success), "
                                    "by the logs backend.", registry=r)
        self.values_clamped = Counter("copilot_otel_values_clamped",
                                      "Values from the logs clamped or cut to be usable (each logged with its file "
                                      "and line), by reason.", ["reason"], registry=r)
        for reason in CLAMP_REASONS:
            self.values_clamped.labels(reason)
        self._failures: set[str] = set()  # metrics whose failed update was logged
        self.label_overflow = Counter("copilot_otel_label_overflow",
                                      "Label values counted as 'other': past the cap on distinct values, by label.",
                                      ["label"], registry=r)
        for label in CAPPED_LABELS:
            self.label_overflow.labels(label)
        # The OTLP metrics push (OTEL_METRICS_EXPORTER=otlp): a gateway that refuses it is counted and said.
        self.metrics_push_failures = Counter("copilot_otel_metrics_push_failures",
                                             "OTLP metrics pushes that failed, by reason (a gRPC status, http_<code>, "
                                             "timeout, unreachable, not_otlp, error).", ["reason"], registry=r)
        self.metrics_push_last_success = Gauge(
            "copilot_otel_metrics_push_last_success_timestamp_seconds",
            "When an OTLP metrics push was last accepted (Unix time; 0: none yet, or no push configured).", registry=r)
        self.labels = LabelCap(max_label_values, lambda label: self.label_overflow.labels(label).inc())
        # The GenAI instruments the CLI's own OTel exports: for the OTLP push only (not on /metrics).
        self.genai = GenAiMetrics(lambda label, value: self.labels.value(label, value, count=label in PUSH_ONLY))
        self.build_info = Gauge("copilot_otel_build_info", "copilot-otel build.", ["version"], registry=r)
        self.build_info.labels(__version__).set(1)
        for signal in SIGNALS:
            self.completion_signals.labels(signal)
        for end in INTERACTION_ENDS:
            self.interactions.labels(end)
        self.sessions_started.labels("")
        for reason in REASONS:
            self.lines_rejected.labels(reason)
        self.newest_event_ns = 0
        self._lag_applies: Callable[[], bool] = lambda: True
        self._event_types: dict[str, Counter] = {}  # event type -> its events_read series
        self.lag.set_function(self._lag)
        if process:
            ProcessCollector(registry=r)
            PlatformCollector(registry=r)
        if resource is not None:
            r.register(TargetInfoCollector(resource))
        # The series each of the session model's metric keys updates, and whether it observes.
        self._series = {
            Metric.SESSIONS_STARTED: self.sessions_started,
            Metric.TURNS: self.turns,
            Metric.LLM_CALLS: self.llm_calls,
            Metric.TOOL_CALLS: self.tool_calls,
            Metric.MCP_TOOL_CALLS: self.mcp_tool_calls,
            Metric.AUTOPILOT_NUDGES: self.autopilot_nudges,
            Metric.COMPLETION_SIGNALS: self.completion_signals,
            Metric.TOKENS: self.tokens,
            Metric.TURN_DURATION: self.turn_duration,
            Metric.TOOL_DURATION: self.tool_duration,
            Metric.LLM_CALL_DURATION: self.llm_call_duration,
            Metric.LLM_TIME_TO_FIRST_TOKEN: self.llm_ttft,
            Metric.INTERACTIONS: self.interactions,
            Metric.PREMIUM_REQUESTS: self.premium_requests,
            Metric.AUTOPILOT_PREMIUM_REQUESTS: self.autopilot_premium_requests,
            Metric.AI_CREDITS: self.ai_credits,
            Metric.AUTOPILOT_AI_CREDITS: self.autopilot_ai_credits,
            Metric.LLM_CALLS_WITHOUT_CREDITS: self.llm_calls_without_credits,
            Metric.CODE_LINES: self.code_lines,
            Metric.FILES_MODIFIED: self.files_modified,
        }
        assert set(self._series) == set(Metric), "every metric key needs its series"
        assert HISTOGRAMS == set(_BOUNDS) == {key for key, series in self._series.items()
                                              if isinstance(series, Histogram)}
        # The session metrics' totals start where the checkpoint left them (resume(); totals.py): since when they
        # count (the OTLP push's start time), and the families given a kept start, each by its Resumed collector.
        self.counting_since_ns = time.time_ns()
        self._resumed: dict = {}
        self._children: dict = {}  # (metric key, label values) -> its series
        # (metric key, label values as the model gave them) -> its series, for values the cap let through unchanged
        # (bounded by the cap; a value cut or counted as 'other' goes through the cap each time, to be counted).
        self._admitted: dict = {}

    def _lag(self) -> float:
        if not self.newest_event_ns or not self._lag_applies():
            return 0.0
        return max(0.0, time.time() - self.newest_event_ns / 1e9)

    def measure_lag_while(self, sessions_open: Callable[[], bool]) -> None:
        """Report lag only while ``sessions_open()``: with no session at work, old events are no backlog."""
        self._lag_applies = sessions_open

    def count_event(self, event_type: str, count: int = 1) -> None:
        """Count events read, by type; past MAX_EVENT_TYPES distinct names (or an odd one) as 'other'."""
        child = self._event_types.get(event_type)
        if child is None:
            if (len(self._event_types) >= MAX_EVENT_TYPES or len(event_type) > MAX_NAME_CHARS
                    or not _EVENT_TYPE.fullmatch(event_type)):
                child = self.events_read.labels("other")
            else:
                child = self._event_types[event_type] = self.events_read.labels(event_type)
        child.inc(count)

    def _labels(self, metric: Metric, labels: tuple[str, ...]) -> tuple[str, ...]:
        """The label values to count an update under: tool, model, agent and repository names capped."""
        capped = _CAPPED_POSITIONS.get(metric)
        if not capped or not labels:
            return labels
        return tuple(value if label is None else "" if label == REPOSITORY and not self.repository_label
                     else self.labels.value(label, value) for label, value in zip(capped, labels))

    def _child(self, metric: Metric, labels: tuple[str, ...]):
        """The series of ``metric`` with these label values (looked up once, then kept)."""
        key = (metric, labels)
        child = self._children.get(key)
        if child is None:
            series = self._series[metric]
            if not self.repository_label and metric in ATTRIBUTED:
                labels = (*labels[:-1], "")
            child = self._children[key] = series.labels(*labels) if labels else series
        return child

    def totals(self) -> bytes:
        """The session metrics' totals now (every copilot_* counter and histogram), for the checkpoint."""
        families = dict.fromkeys(self._series.values())
        return snapshot([self._resumed.get(family, family) for family in families], self.counting_since_ns)

    def resume(self, data: bytes | None) -> int:
        """Start the session metrics at the totals the checkpoint kept (``totals()`` of a run before); the number
        of samples resumed. Call it before the first update."""
        kept = decode(data)
        if kept is None:
            return 0
        names = {described.name: family for family in dict.fromkeys(self._series.values())
                 for described in family.describe()}
        resumed = 0
        for family, baseline in baselines(kept, names).items():
            self.registry.unregister(family)
            self._resumed[family] = Resumed(family, baseline)
            self.registry.register(self._resumed[family])
            for _name, labels in baseline:
                for label, value in labels:
                    if label in CAPPED_LABELS:
                        self.labels.admit(label, value)
            resumed += len(baseline)
        self.counting_since_ns = kept.since_ns
        return resumed

    def resumed_starts(self) -> dict[str, int]:
        """The families whose totals a run before began, each with since when they count (Unix ns)."""
        return {resumed.name: self.counting_since_ns for resumed in self._resumed.values()}

    def add_budgets(self, budgets: tuple, resource: Mapping[str, Any]) -> None:
        """Expose ``budgets`` (budgets.py) and count the credits of each one's scope."""
        from .budgets import BudgetMeter

        self.budget_meter = BudgetMeter(budgets, resource, self.registry)

    def apply(self, update: MetricUpdate) -> None:
        """Apply one update from the session model (with its span as the exemplar, when it has one)."""
        from ..model.pipeline import Outputs

        self.apply_all((Outputs(metrics=[update]),))

    def apply_outputs(self, out: Outputs) -> None:
        """Count what one drive of the pipeline produced: metric updates, events, rejected lines.

        Counter increments of the same series are added up first (a backlog holds thousands), with the
        last one's span as the exemplar: a series keeps only its latest exemplar anyway."""
        self.apply_all((out,))

    def apply_all(self, outs: Iterable[Outputs]) -> None:
        """Count what several drives produced (the logs one pass of the daemon read), leaving every series as
        apply_outputs of each in turn would: the same increments in the same order, and on each series (each
        bucket of a histogram) the same last exemplar. Only that last one is given, since each exemplar given
        costs a validation, and events are counted once per type (issue 25: thousands of short logs at start-up)."""
        incs: list = []  # (counter series, what to add, the span of its last update), one per drive and series
        genai: list = []  # the GenAI instruments' updates, added in one go
        observed: list = []  # (histogram series, value, span, bucket)
        events: dict[str, int] = {}
        decimal: set = set()  # the series of DECIMAL_METRICS among them
        admitted = self._admitted
        bounds = _BOUNDS
        pause = PAUSE
        ahead = newest = 0
        for out in outs:
            sums: dict = {}  # counter series -> what to add
            spans: dict = {}  # counter series -> the span of its last update
            for update in out.metrics:
                if pause.renders:  # a /metrics render runs: let it run alone (pause.py)
                    pause.wait()
                metric = update.metric
                if isinstance(metric, GenAi):
                    genai.append(update)
                    continue
                try:  # one update that fails (a bug of ours) costs itself, never the rest of the pass
                    if metric is Metric.AI_CREDITS and self.budget_meter is not None:
                        self.budget_meter.spend(update.labels[-1], update.value)
                    key = (metric, update.labels)
                    found = admitted.get(key)  # (series, a histogram's bounds or None)
                    if found is None:
                        labels = self._labels(metric, update.labels)
                        found = (self._child(metric, labels), bounds.get(metric))
                        if labels == update.labels and OTHER not in labels:
                            admitted[key] = found
                    child, edges = found
                    if edges is not None:
                        value = update.value
                        # The bucket prometheus_client counts it in (the first bound >= value; none for NaN).
                        observed.append((child, value, update.exemplar, bisect_left(edges, value) if value == value
                                         else None))
                    else:
                        if metric in DECIMAL_METRICS:
                            decimal.add(child)
                        sums[child] = sums.get(child, 0.0) + update.value
                        if update.exemplar is not None:
                            spans[child] = update.exemplar
                except Exception:  # noqa: BLE001
                    self._failed(update)
            incs.extend((child, value, spans.get(child)) for child, value in sums.items())
            for event_type, count in out.events.items():
                events[event_type] = events.get(event_type, 0) + count
            for reason, count in out.rejected.items():
                self.lines_rejected.labels(reason).inc(count)
            for event_type, count in out.out_of_order.items():
                self.events_out_of_order.labels(event_type).inc(count)
            for reason, count in out.clamped.items():
                self.values_clamped.labels(reason).inc(count)
            for how, count in out.restarts.items():
                self.log_generations.labels(how).inc(count)
            ahead += out.ahead
            newest = max(newest, out.newest_ns)
        try:
            self.genai.apply_all(genai)
        except Exception:  # noqa: BLE001 - the push's totals, never the Prometheus metrics below
            self._failed(genai[0] if genai else None)
        last = {child: i for i, (child, _value, span) in enumerate(incs) if span is not None}
        for i, (child, value, span) in enumerate(incs):
            try:
                if child in decimal:  # a decimal sum: its increments land on the rounded sum (decimals.py)
                    *first, value = self._decimals.increments(child, value)
                    for part in first:
                        child.inc(part)
                child.inc(value, exemplar_labels(span) if last.get(child) == i else None)
            except Exception:  # noqa: BLE001
                self._failed(None)
        last = {(child, bucket): i for i, (child, _value, span, bucket) in enumerate(observed) if span is not None}
        for i, (child, value, span, bucket) in enumerate(observed):
            try:
                child.observe(value, exemplar_labels(span) if last.get((child, bucket)) == i else None)
            except Exception:  # noqa: BLE001
                self._failed(None)
        for event_type, count in events.items():
            self.count_event(event_type, count)
        if ahead:
            self.events_ahead.inc(ahead)
        if newest > self.newest_event_ns:
            self.newest_event_ns = newest

    def metrics_pushed(self, reason: str | None) -> None:
        """Count one OTLP metrics push: accepted (``reason`` None) or failed for ``reason``."""
        if reason is None:
            self.metrics_push_last_success.set(time.time())
        else:
            self.metrics_push_failures.labels(reason).inc()

    def _failed(self, update: MetricUpdate | None) -> None:
        """An update that could not be applied (a bug of ours): counted as internal_error, its traceback logged
        once per metric."""
        name = getattr(getattr(update, "metric", None), "value", "a series")
        self.lines_rejected.labels(INTERNAL_ERROR).inc()
        if name not in self._failures:
            self._failures.add(name)
            log.exception("could not count an update of %s; counted as %s, the others go on", name, INTERNAL_ERROR)

    def add_live_sessions(self, snapshot: Callable[[], Iterable[LiveSession]]) -> None:
        """Register the scrape-time collector of live session states."""
        self.registry.register(LiveSessionsCollector(snapshot, repository_label=self.repository_label))
