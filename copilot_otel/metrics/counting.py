"""The session model's outputs applied to the families: label values capped, the counter increments of a pass
added up, histograms observed, and each series given only its last exemplar (each one given costs a validation)."""

from __future__ import annotations

import logging
from bisect import bisect_left
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from ..base.pause import PAUSE
from ..decode.lines import INTERNAL_ERROR
from ..model.records import MetricUpdate
from ..otlp.limits import OTHER
from ..vocab import ATTRIBUTED, Metric
from .decimals import DecimalTotals
from .families import BOUNDS, DECIMAL_METRICS, ReaderHealth
from .genai import GenAi, GenAiMetrics
from .labels import CAPPED_POSITIONS, REPOSITORY, LabelCap, exemplar_labels

if TYPE_CHECKING:
    from ..model.pipeline import Outputs
    from .budgets import BudgetMeter

log = logging.getLogger(__name__)


class _Pass:
    """What one :meth:`Counting.apply_all` gathers from its drives before it touches a series."""

    def __init__(self) -> None:
        self.incs: list = []  # (counter series, what to add, the span of its last update), one per drive and series
        self.genai: list = []  # the GenAI instruments' updates, added in one go
        self.observed: list = []  # (histogram series, value, span, bucket)
        self.events: dict[str, int] = {}
        self.decimal: set = set()  # the series of DECIMAL_METRICS among them
        self.ahead = 0
        self.newest = 0


class Counting:
    """Applies metric updates, events and anomalies to the families of one registry.

    ``series``: the family each session metric key updates; ``reader``: the reader's health families (events,
    rejected lines, anomalies, lag); ``repository_label=False`` leaves the repository label empty.
    """

    def __init__(self, series: Mapping[Metric, Any], reader: ReaderHealth, labels: LabelCap, genai: GenAiMetrics,
                 *, repository_label: bool = True) -> None:
        self._series = series
        self._reader = reader
        self._labels = labels
        self._genai = genai
        self._repository_label = repository_label
        self.budget_meter: BudgetMeter | None = None  # Metrics.add_budgets(): the --budgets-file's metrics
        self._decimals = DecimalTotals()  # the series of DECIMAL_METRICS: each lands on its rounded sum
        self._children: dict = {}  # (metric key, label values) -> its series
        # (metric key, label values as the model gave them) -> its series, for values the cap let through unchanged
        # (bounded by the cap; a value cut or counted as 'other' goes through the cap each time, to be counted).
        self._admitted: dict = {}
        self._failures: set[str] = set()  # metrics whose failed update was logged

    def _capped(self, metric: Metric, labels: tuple[str, ...]) -> tuple[str, ...]:
        """The label values to count an update under: tool, model, agent and repository names capped."""
        capped = CAPPED_POSITIONS.get(metric)
        if not capped or not labels:
            return labels
        return tuple(value if label is None else "" if label == REPOSITORY and not self._repository_label
                     else self._labels.value(label, value) for label, value in zip(capped, labels))

    def _child(self, metric: Metric, labels: tuple[str, ...]):
        """The series of ``metric`` with these label values (looked up once, then kept)."""
        key = (metric, labels)
        child = self._children.get(key)
        if child is None:
            series = self._series[metric]
            if not self._repository_label and metric in ATTRIBUTED:
                labels = (*labels[:-1], "")
            child = self._children[key] = series.labels(*labels) if labels else series
        return child

    def apply_all(self, outs: Iterable[Outputs]) -> None:
        """Count what several drives produced, leaving every series as applying each in turn would: the same
        increments in the same order, and on each series (each bucket of a histogram) the same last exemplar.
        Events are counted once per type (issue 25: thousands of short logs at start-up)."""
        gathered = _Pass()
        for out in outs:
            self._gather(out, gathered)
            self._count_anomalies(out)
            for event_type, count in out.events.items():
                gathered.events[event_type] = gathered.events.get(event_type, 0) + count
            gathered.ahead += out.ahead
            gathered.newest = max(gathered.newest, out.newest_ns)
        try:
            self._genai.apply_all(gathered.genai)
        except Exception:  # noqa: BLE001 - the push's totals, never the Prometheus metrics below
            self._failed(gathered.genai[0] if gathered.genai else None)
        self._add(gathered.incs, gathered.decimal)
        self._observe(gathered.observed)
        reader = self._reader
        for event_type, count in gathered.events.items():
            reader.count_event(event_type, count)
        if gathered.ahead:
            reader.events_ahead.inc(gathered.ahead)
        if gathered.newest > reader.newest_event_ns:
            reader.newest_event_ns = gathered.newest

    def _gather(self, out: Outputs, gathered: _Pass) -> None:
        """Find the series of each update of one drive: counter increments added up per series (with the span
        of its last update), histogram values kept in order with their bucket, GenAI updates set aside."""
        sums: dict = {}  # counter series -> what to add
        spans: dict = {}  # counter series -> the span of its last update
        admitted, bounds, pause, meter = self._admitted, BOUNDS, PAUSE, self.budget_meter
        for update in out.metrics:
            if pause.renders:  # a /metrics render runs: let it run alone (pause.py)
                pause.wait()
            metric = update.metric
            if isinstance(metric, GenAi):
                gathered.genai.append(update)
                continue
            try:  # one update that fails (a bug of ours) costs itself, never the rest of the pass
                if metric is Metric.AI_CREDITS and meter is not None:
                    meter.spend(update.labels[-1], update.value)
                key = (metric, update.labels)
                found = admitted.get(key)  # (series, a histogram's bounds or None)
                if found is None:
                    labels = self._capped(metric, update.labels)
                    found = (self._child(metric, labels), bounds.get(metric))
                    if labels == update.labels and OTHER not in labels:
                        admitted[key] = found
                child, edges = found
                if edges is not None:
                    value = update.value
                    # The bucket prometheus_client counts it in (the first bound >= value; none for NaN).
                    gathered.observed.append((child, value, update.exemplar,
                                              bisect_left(edges, value) if value == value else None))
                else:
                    if metric in DECIMAL_METRICS:
                        gathered.decimal.add(child)
                    sums[child] = sums.get(child, 0.0) + update.value
                    if update.exemplar is not None:
                        spans[child] = update.exemplar
            except Exception:  # noqa: BLE001
                self._failed(update)
        gathered.incs.extend((child, value, spans.get(child)) for child, value in sums.items())

    def _count_anomalies(self, out: Outputs) -> None:
        """Count one drive's rejected lines, out-of-order ends, clamped values and log generations."""
        reader = self._reader
        for reason, count in out.rejected.items():
            reader.lines_rejected.labels(reason).inc(count)
        for event_type, count in out.out_of_order.items():
            reader.events_out_of_order.labels(event_type).inc(count)
        for reason, count in out.clamped.items():
            reader.values_clamped.labels(reason).inc(count)
        for how, count in out.restarts.items():
            reader.log_generations.labels(how).inc(count)

    def _add(self, incs: list, decimal: set) -> None:
        """Add the gathered counter increments, the last one of each series with its exemplar."""
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

    def _observe(self, observed: list) -> None:
        """Observe the gathered histogram values, the last one of each bucket with its exemplar."""
        last = {(child, bucket): i for i, (child, _value, span, bucket) in enumerate(observed) if span is not None}
        for i, (child, value, span, bucket) in enumerate(observed):
            try:
                child.observe(value, exemplar_labels(span) if last.get((child, bucket)) == i else None)
            except Exception:  # noqa: BLE001
                self._failed(None)

    def _failed(self, update: MetricUpdate | None) -> None:
        """An update that could not be applied (a bug of ours): counted as internal_error, its traceback logged
        once per metric."""
        name = getattr(getattr(update, "metric", None), "value", "a series")
        self._reader.lines_rejected.labels(INTERNAL_ERROR).inc()
        if name not in self._failures:
            self._failures.add(name)
            log.exception("could not count an update of %s; counted as %s, the others go on", name, INTERNAL_ERROR)
