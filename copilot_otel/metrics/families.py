"""The metric families, grouped by what they measure: what sessions did and how long it took, what it cost,
and the health of the reader and of delivery.

Names, types, labels and help texts are a contract (docs/metrics.md): dashboards and alert rules depend on them.
Each group defines its families on the registry it is given; :class:`~.registry.Metrics` holds them all.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from ..decode.lines import REASONS
from ..otlp.limits import MAX_NAME_CHARS
from ..source.identity import EDITED, REPLACED, TRUNCATED
from ..vocab import CLAMP_REASONS, INTERACTION_ENDS, LOG_REFUSALS, REPOSITORY_LABEL, SIGNALS, Metric
from .labels import AGENT, CAPPED_LABELS, MODEL, SERVER, TOOL

TURN_BUCKETS = (0.5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300, 600, 1200, 1800, 3600)
TOOL_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800)
LLM_BUCKETS = (0.25, 0.5, 1, 2, 4, 8, 15, 30, 60, 120, 300)
TTFT_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2, 4, 8, 15, 30, 60)
HISTOGRAMS = frozenset((Metric.TURN_DURATION, Metric.TOOL_DURATION, Metric.LLM_CALL_DURATION,
                        Metric.LLM_TIME_TO_FIRST_TOKEN))
# Each histogram's upper bounds as prometheus_client counts them (then +Inf): which bucket a value lands in.
BOUNDS = {key: [float(bound) for bound in buckets] + [float("inf")] for key, buckets in (
    (Metric.TURN_DURATION, TURN_BUCKETS), (Metric.TOOL_DURATION, TOOL_BUCKETS),
    (Metric.LLM_CALL_DURATION, LLM_BUCKETS), (Metric.LLM_TIME_TO_FIRST_TOKEN, TTFT_BUCKETS))}
# Counters whose increments are decimals: they land on their rounded sums (decimals.py), not on float noise.
DECIMAL_METRICS = frozenset({Metric.AI_CREDITS, Metric.AUTOPILOT_AI_CREDITS, Metric.PREMIUM_REQUESTS,
                             Metric.AUTOPILOT_PREMIUM_REQUESTS})
# The CLI has about 150 event types; a file full of invented ones must not mint series.
MAX_EVENT_TYPES = 250
_EVENT_TYPE = re.compile(r"[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*){1,3}")


class SessionActivity:
    """What the sessions did (sessions, turns, calls, tokens, completion signals) and how long it took."""

    def __init__(self, r: CollectorRegistry) -> None:
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
        self.llm_ttft = Histogram("copilot_llm_time_to_first_token_seconds",
                                  "Time from an LLM request to its first streamed token.", ["model"],
                                  buckets=TTFT_BUCKETS, registry=r)
        for signal in SIGNALS:
            self.completion_signals.labels(signal)
        self.sessions_started.labels("")

    def activity_series(self) -> dict[Metric, Counter | Histogram]:
        """The family each of these session metric keys updates."""
        return {
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
        }


class SessionCosts:
    """What the sessions cost (premium requests, AI credits) and changed, and how interactions ended."""

    def __init__(self, r: CollectorRegistry) -> None:
        repo = REPOSITORY_LABEL
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
        for end in INTERACTION_ENDS:
            self.interactions.labels(end)

    def cost_series(self) -> dict[Metric, Counter]:
        """The family each of these session metric keys updates."""
        return {
            Metric.INTERACTIONS: self.interactions,
            Metric.PREMIUM_REQUESTS: self.premium_requests,
            Metric.AUTOPILOT_PREMIUM_REQUESTS: self.autopilot_premium_requests,
            Metric.AI_CREDITS: self.ai_credits,
            Metric.AUTOPILOT_AI_CREDITS: self.autopilot_ai_credits,
            Metric.LLM_CALLS_WITHOUT_CREDITS: self.llm_calls_without_credits,
            Metric.CODE_LINES: self.code_lines,
            Metric.FILES_MODIFIED: self.files_modified,
        }


class ReaderHealth:
    """The reader's own health: events read, lines and logs refused, values clamped, files followed, lag."""

    def __init__(self, r: CollectorRegistry) -> None:
        self.events_read = Counter("copilot_otel_events_read", "Events read, by type.", ["type"], registry=r)
        self.lines_rejected = Counter("copilot_otel_lines_rejected", "Lines skipped, by reason.", ["reason"],
                                      registry=r)
        self.logs_refused = Counter("copilot_otel_logs_refused",
                                    "Session logs not read as the user's, by reason: owner (its folder or the log is "
                                    "another user's), outside (a link out of session-state), alias (another name of "
                                    "a log already read).", ["reason"], registry=r)
        self.events_out_of_order = Counter("copilot_otel_events_out_of_order",
                                           "Events that end something never started, by type.", ["type"], registry=r)
        self.events_ahead = Counter("copilot_otel_events_ahead_of_clock",
                                    "Events stamped more than an hour ahead of this machine's clock (kept as stamped).",
                                    registry=r)
        self.log_generations = Counter(
            "copilot_otel_log_generations", "Logs read again as a new generation, with span ids of their own, because "
            "bytes already read changed: truncated, replaced by another log, or edited (rewritten).", ["how"],
            registry=r)
        self.files_watched = Gauge("copilot_otel_files_watched", "Session event files being followed.", registry=r)
        self.lag = Gauge("copilot_otel_lag_seconds", "Seconds between now and the newest event read, while some "
                         "session is working or waiting on a tool (0 otherwise).", registry=r)
        self.values_clamped = Counter("copilot_otel_values_clamped",
                                      "Values from the logs clamped or cut to be usable (each logged with its file "
                                      "and line), by reason.", ["reason"], registry=r)
        self.label_overflow = Counter("copilot_otel_label_overflow",
                                      "Label values counted as 'other': past the cap on distinct values, by label.",
                                      ["label"], registry=r)
        self._known_labels()
        self.newest_event_ns = 0
        self._lag_applies: Callable[[], bool] = lambda: True
        self._event_types: dict[str, Counter] = {}  # event type -> its events_read series
        self.lag.set_function(self._lag)

    def _known_labels(self) -> None:
        """The series of every known label value, shown at 0 before the first count."""
        for reason in LOG_REFUSALS:
            self.logs_refused.labels(reason)
        for how in (TRUNCATED, REPLACED, EDITED):
            self.log_generations.labels(how)
        for reason in CLAMP_REASONS:
            self.values_clamped.labels(reason)
        for label in CAPPED_LABELS:
            self.label_overflow.labels(label)
        for reason in REASONS:
            self.lines_rejected.labels(reason)

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


class DeliveryHealth:
    """Delivery's own health: spans and log records exported, failed, dead-lettered or dropped, the queue, the
    checkpoint commits and the OTLP metrics push."""

    def __init__(self, r: CollectorRegistry) -> None:
        self.spans_exported = Counter("copilot_otel_spans_exported", "Spans delivered to the trace backend.",
                                      registry=r)
        self.spans_failed = Counter("copilot_otel_spans_failed", "Span export attempts that failed (spans).",
                                    registry=r)
        self.export_queue = Gauge("copilot_otel_export_queue_spans", "Spans waiting to be exported.", registry=r)
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
        # The OTLP metrics push (OTEL_METRICS_EXPORTER=otlp): a gateway that refuses it is counted and said.
        self.metrics_push_failures = Counter("copilot_otel_metrics_push_failures",
                                             "OTLP metrics pushes that failed, by reason (a gRPC status, http_<code>, "
                                             "timeout, unreachable, not_otlp, error).", ["reason"], registry=r)
        self.metrics_push_last_success = Gauge(
            "copilot_otel_metrics_push_last_success_timestamp_seconds",
            "When an OTLP metrics push was last accepted (Unix time; 0: none yet, or no push configured).", registry=r)

    def metrics_pushed(self, reason: str | None) -> None:
        """Count one OTLP metrics push: accepted (``reason`` None) or failed for ``reason``."""
        if reason is None:
            self.metrics_push_last_success.set(time.time())
        else:
            self.metrics_push_failures.labels(reason).inc()
