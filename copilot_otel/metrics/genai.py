"""The totals of the GenAI instruments (model/genai.py) since this process started, as OTLP data points.

They go out with the OTLP metrics push only; /metrics keeps the ``copilot_*`` contract. Each data point
carries the span of its latest update as its exemplar.
"""

from __future__ import annotations

import math
import threading
from bisect import bisect_left
from collections.abc import Callable, Iterable
from typing import Any

from msgspec import Struct, field

# the instruments, for the push and the tests (their definitions are the model's)
from ..model.genai import AGENT_BOUNDS, CALL_BOUNDS, CAPPED, INSTRUMENTS, MAX_KNOWN, GenAi, Instrument, updates  # noqa: F401
from ..model.records import MetricUpdate


class _Point(Struct):
    """The running total of one instrument's series: a sum, or a histogram's buckets, count, sum, min and max."""

    value: float = 0.0
    count: int = 0
    minimum: float = math.inf
    maximum: float = -math.inf
    buckets: list[int] | None = None
    # bucket -> (value, time, ids)
    exemplars: dict[int, tuple[float, int, tuple[int, int]]] = field(default_factory=dict)


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
        self.apply_all((update,))

    def apply_all(self, batch: Iterable[MetricUpdate]) -> None:
        """Add updates made by ``updates``, in order (observed at one time: the exemplars' time)."""
        now = self._clock()
        known, points, cap = self._known, self._points, self._cap
        with self._lock:
            for update in batch:
                instrument: GenAi = update.metric  # type: ignore[assignment]  # metrics.apply_all hands in only these
                point = known.get((instrument, update.labels))
                if point is None:
                    spec = INSTRUMENTS[instrument]
                    labels = tuple(cap(CAPPED[key], value) if value and key in CAPPED else value
                                   for key, value in zip(spec.keys, update.labels))
                    point = points.get((instrument, labels))
                    if point is None:
                        point = points[(instrument, labels)] = _Point(
                            buckets=None if spec.bounds is None else [0] * (len(spec.bounds) + 1), exemplars={})
                    if len(known) < MAX_KNOWN:
                        known[(instrument, update.labels)] = point
                value = update.value
                point.value += value
                point.count += 1
                index = 0
                if point.buckets is not None:
                    bounds = INSTRUMENTS[instrument].bounds
                    assert bounds is not None  # a point has buckets only when its instrument has bounds
                    index = bisect_left(bounds, value)
                    point.buckets[index] += 1
                    if value < point.minimum:
                        point.minimum = value
                    if value > point.maximum:
                        point.maximum = value
                if update.exemplar is not None:
                    point.exemplars[index] = (value, now, update.exemplar)

    def data(self, start_ns: int, now_ns: int) -> list[Any]:
        """The instruments as OpenTelemetry metrics (cumulative since ``start_ns``), those with data."""
        from opentelemetry.sdk.metrics import Exemplar
        from opentelemetry.sdk.metrics.export import (
            AggregationTemporality,
            Histogram,
            HistogramDataPoint,
            Metric,
            NumberDataPoint,
            Sum,
        )

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
                                                    list(point.buckets), list(spec.bounds or ()), point.minimum,
                                                    point.maximum, exemplars)
                by_instrument.setdefault(instrument, []).append(data_point)
        metrics = []
        for instrument, points in by_instrument.items():
            spec = INSTRUMENTS[instrument]
            data = (Sum(points, cumulative, is_monotonic=True) if spec.bounds is None
                    else Histogram(points, cumulative))
            metrics.append(Metric(instrument.value, spec.description, spec.unit, data))
        return metrics
