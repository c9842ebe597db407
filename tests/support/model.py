"""Feeding a SessionModel in a unit test, and reading what came out."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from copilot_otel.decode.events import Event
from copilot_otel.model import attrs as A
from copilot_otel.model.records import Anomaly, MetricUpdate, SpanRecord, Step
from copilot_otel.model.sessions import SessionModel
from copilot_otel.vocab import Metric


def label(span) -> str:
    """A span's name, with a turn's number ("turn 0"): every turn span is named "turn"."""
    if span.name == A.TURN_SPAN:
        return f"{span.name} {span.attributes.get(A.COPILOT_TURN_ID)}"
    return span.name


@dataclass
class Fed:
    """Everything the model produced, in order."""

    spans: list[SpanRecord] = field(default_factory=list)
    metrics: list[MetricUpdate] = field(default_factory=list)
    anomalies: list[Anomaly] = field(default_factory=list)

    def add(self, step: Step) -> Fed:
        self.spans.extend(step.spans)
        self.metrics.extend(step.metrics)
        self.anomalies.extend(step.anomalies)
        return self

    def named(self, name: str) -> list[SpanRecord]:
        """The spans of this label ("turn 0", "execute_tool bash"...), in the order they closed."""
        return [span for span in self.spans if label(span) == name]

    def one(self, name: str) -> SpanRecord:
        """The one span of this name."""
        found = self.named(name)
        assert len(found) == 1, f"{len(found)} spans named {name!r} among {[label(s) for s in self.spans]}"
        return found[0]

    def total(self, metric: Metric, *labels: str) -> float:
        """The sum of the updates of ``metric`` with these first label values (a counter's increase);
        the labels left out (a metric's trailing repository, say) are summed over."""
        return sum(u.value for u in self.metrics if u.metric is metric and u.labels[:len(labels)] == labels)

    def observed(self, metric: Metric, *labels: str) -> list[float]:
        """The values observed in histogram ``metric`` with these label values."""
        return [u.value for u in self.metrics if u.metric is metric and u.labels == labels]


def feed(model: SessionModel, events: Iterable[Event], into: Fed | None = None) -> Fed:
    """Apply each event, gathering every step."""
    fed = into if into is not None else Fed()
    for event in events:
        fed.add(model.feed(event))
    return fed
