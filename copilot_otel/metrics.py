"""Every Prometheus metric in one place: one prefix, one private registry.

Names, types and labels of the ``copilot_*`` metrics are a contract (design.md §2):
dashboards and alert rules depend on them. Live session states are computed at
scrape time by :class:`LiveSessionsCollector`.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from typing import Callable, Iterable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, disable_created_metrics
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.platform_collector import PlatformCollector

from . import __version__
from .decode import REASONS
from .records import MetricUpdate

STATES = ("working", "waiting_tool", "waiting_user", "idle", "stuck", "abandoned")
SIGNALS = ("idle", "task_complete", "error", "shutdown")
TURN_BUCKETS = (0.5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300, 600, 1200, 1800, 3600)
TOOL_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800)
LLM_BUCKETS = (0.25, 0.5, 1, 2, 4, 8, 15, 30, 60, 120, 300)
# The CLI has about 150 event types; a file full of invented ones must not mint series.
MAX_EVENT_TYPES = 250
_EVENT_TYPE = re.compile(r"[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*){1,3}")

# *_created series double the series count and no dashboard here uses them.
disable_created_metrics()


@dataclass(frozen=True, slots=True)
class LiveSession:
    """One session's state as the collector sees it at scrape time."""

    session_id: str
    state: str  # one of STATES
    stalled_seconds: float = 0.0


class LiveSessionsCollector:
    """copilot_sessions{state} and copilot_session_stalled_seconds, computed when scraped."""

    def __init__(self, snapshot: Callable[[], Iterable[LiveSession]]) -> None:
        self._snapshot = snapshot

    def collect(self):
        """Yield the live gauges from a fresh snapshot."""
        counts = dict.fromkeys(STATES, 0)
        stalled = GaugeMetricFamily("copilot_session_stalled_seconds",
                                    "Seconds since the last event of each session that is stuck or abandoned now.",
                                    labels=["session_id", "state"])
        for session in self._snapshot():
            counts[session.state] = counts.get(session.state, 0) + 1
            if session.state in ("stuck", "abandoned"):
                stalled.add_metric([session.session_id, session.state], session.stalled_seconds)
        sessions = GaugeMetricFamily("copilot_sessions", "Live Copilot sessions by state.", labels=["state"])
        for state, count in counts.items():
            sessions.add_metric([state], count)
        yield sessions
        yield stalled

    def describe(self):
        """Names only, so registering does not take a snapshot."""
        yield GaugeMetricFamily("copilot_sessions", "", labels=["state"])
        yield GaugeMetricFamily("copilot_session_stalled_seconds", "", labels=["session_id", "state"])


class Metrics:
    """The copilot_* and copilot_otel_* metrics on a private registry."""

    def __init__(self, *, registry: CollectorRegistry | None = None, process: bool = True) -> None:
        self.registry = registry if registry is not None else CollectorRegistry(auto_describe=True)
        r = self.registry
        self.sessions_started = Counter("copilot_sessions_started", "Sessions started (session.start).", registry=r)
        self.turns = Counter("copilot_turns", "Agent turns started.", ["agent"], registry=r)
        self.llm_calls = Counter("copilot_llm_calls", "LLM calls by model and outcome.", ["model", "outcome"],
                                 registry=r)
        self.tool_calls = Counter("copilot_tool_calls", "Tool executions by tool and outcome.", ["tool", "outcome"],
                                  registry=r)
        self.autopilot_nudges = Counter("copilot_autopilot_nudges", "Autopilot continuation messages.", registry=r)
        self.completion_signals = Counter("copilot_completion_signals",
                                          "Ends of the agent loop and of sessions, by signal.", ["signal"], registry=r)
        self.tokens = Counter("copilot_tokens", "Tokens by model and type.", ["model", "type"], registry=r)
        self.turn_duration = Histogram("copilot_turn_duration_seconds", "Duration of agent turns.", ["agent"],
                                       buckets=TURN_BUCKETS, registry=r)
        self.tool_duration = Histogram("copilot_tool_duration_seconds", "Duration of tool executions.", ["tool"],
                                       buckets=TOOL_BUCKETS, registry=r)
        self.llm_call_duration = Histogram("copilot_llm_call_duration_seconds", "Duration of LLM calls.", ["model"],
                                           buckets=LLM_BUCKETS, registry=r)
        # The daemon's own health.
        self.events_read = Counter("copilot_otel_events_read", "Events read, by type.", ["type"], registry=r)
        self.lines_rejected = Counter("copilot_otel_lines_rejected", "Lines skipped, by reason.", ["reason"],
                                      registry=r)
        self.events_out_of_order = Counter("copilot_otel_events_out_of_order",
                                           "Events that end something never started, by type.", ["type"], registry=r)
        self.spans_exported = Counter("copilot_otel_spans_exported", "Spans delivered to the trace backend.",
                                      registry=r)
        self.spans_failed = Counter("copilot_otel_spans_failed", "Span export attempts that failed (spans).",
                                    registry=r)
        self.export_queue = Gauge("copilot_otel_export_queue_spans", "Spans waiting to be exported.", registry=r)
        self.files_watched = Gauge("copilot_otel_files_watched", "Session event files being followed.", registry=r)
        self.lag = Gauge("copilot_otel_lag_seconds", "Seconds between now and the newest event seen.", registry=r)
        self.checkpoint_commits = Counter("copilot_otel_checkpoint_commits", "Checkpoint transactions committed.",
                                          registry=r)
        self.build_info = Gauge("copilot_otel_build_info", "copilot-otel build.", ["version"], registry=r)
        self.build_info.labels(__version__).set(1)
        for signal in SIGNALS:
            self.completion_signals.labels(signal)
        for reason in REASONS:
            self.lines_rejected.labels(reason)
        self.newest_event_ns = 0
        self._event_types: set[str] = set()
        self.lag.set_function(self._lag)
        if process:
            ProcessCollector(registry=r)
            PlatformCollector(registry=r)
        self._counters = {
            "sessions_started": self.sessions_started,
            "turns": self.turns,
            "llm_calls": self.llm_calls,
            "tool_calls": self.tool_calls,
            "autopilot_nudges": self.autopilot_nudges,
            "completion_signals": self.completion_signals,
            "tokens": self.tokens,
            "out_of_order": self.events_out_of_order,
            "rejected": self.lines_rejected,
        }
        self._histograms = {
            "turn_duration": self.turn_duration,
            "tool_duration": self.tool_duration,
            "llm_call_duration": self.llm_call_duration,
        }

    def _lag(self) -> float:
        if not self.newest_event_ns:
            return 0.0
        return max(0.0, time.time() - self.newest_event_ns / 1e9)

    def count_event(self, event_type: str) -> None:
        """Count an event read, by type; past MAX_EVENT_TYPES distinct names (or an odd one) as 'other'."""
        label = event_type
        if event_type not in self._event_types:
            if len(self._event_types) >= MAX_EVENT_TYPES or not _EVENT_TYPE.fullmatch(event_type):
                label = "other"
            else:
                self._event_types.add(event_type)
        self.events_read.labels(label).inc()

    def apply(self, update: MetricUpdate) -> None:
        """Apply one update from the session model."""
        labels = dict(update.labels)
        if update.observe:
            metric = self._histograms[update.name]
            (metric.labels(**labels) if labels else metric).observe(update.value)
        else:
            metric = self._counters[update.name]
            (metric.labels(**labels) if labels else metric).inc(update.value)

    def add_live_sessions(self, snapshot: Callable[[], Iterable[LiveSession]]) -> None:
        """Register the scrape-time collector of live session states."""
        self.registry.register(LiveSessionsCollector(snapshot))
