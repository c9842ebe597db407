"""The series computed when scraped: live sessions by state, stalled sessions, and target_info."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from msgspec import Struct
from prometheus_client.core import GaugeMetricFamily, InfoMetricFamily

from ..otlp.limits import cut_name
from ..vocab import STALLED_STATES, STATES

STALLED_LABELS = ["session_id", "state", "tool", "repository", "trace_id"]


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


def _label_name(key: str) -> str:
    """An attribute key as a Prometheus label name: dots and other characters become underscores."""
    name = re.sub(r"[^a-zA-Z0-9_]", "_", key)
    return f"_{name}" if name[:1].isdigit() else name
