"""Every Prometheus metric in one place: one prefix, one private registry.

Names, types and labels of the ``copilot_*`` metrics are a contract (docs/metrics.md):
dashboards and alert rules depend on them. The families are defined by what they measure (families.py),
applied by counting.py; live session states are computed at scrape time (collectors.py).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Gauge, Histogram
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector

from ..model.records import MetricUpdate
from ..otlp.limits import DEFAULT_MAX_LABEL_VALUES
from ..version import __version__
from ..vocab import Metric
from .collectors import LiveSession, LiveSessionsCollector, TargetInfoCollector
from .counting import Counting
from .families import BOUNDS, HISTOGRAMS, DeliveryHealth, ReaderHealth, SessionActivity, SessionCosts
from .genai import GenAiMetrics
from .labels import CAPPED_LABELS, PUSH_ONLY, LabelCap
from .totals import Resumed, baselines, decode, snapshot

if TYPE_CHECKING:
    from ..model.pipeline import Outputs


def disable_created_series() -> None:
    """*_created series double the series count and no dashboard here uses them (a process-wide switch:
    only a command that owns the process calls it, never ``attach()``)."""
    from prometheus_client import disable_created_metrics

    disable_created_metrics()


class Metrics(SessionActivity, SessionCosts, ReaderHealth, DeliveryHealth):
    """The copilot_* and copilot_otel_* metrics on a private registry: each group's families (families.py) as
    attributes, the session metrics' totals kept across restarts, and the counting of updates (counting.py).

    ``repository_label=False`` (--no-repository-label) leaves the repository label of every series empty
    (Prometheus then shows none). ``resource``: the attributes of the target_info series.
    """

    def __init__(self, *, registry: CollectorRegistry | None = None, process: bool = True,
                 repository_label: bool = True, resource: Mapping[str, Any] | None = None,
                 max_label_values: int = DEFAULT_MAX_LABEL_VALUES) -> None:
        self.registry = registry if registry is not None else CollectorRegistry(auto_describe=True)
        self.repository_label = repository_label
        r = self.registry
        SessionActivity.__init__(self, r)
        SessionCosts.__init__(self, r)
        ReaderHealth.__init__(self, r)
        DeliveryHealth.__init__(self, r)
        self.labels = LabelCap(max_label_values, lambda label: self.label_overflow.labels(label).inc())
        # The GenAI instruments the CLI's own OTel exports: for the OTLP push only (not on /metrics).
        self.genai = GenAiMetrics(lambda label, value: self.labels.value(label, value, count=label in PUSH_ONLY))
        self.build_info = Gauge("copilot_otel_build_info", "copilot-otel build.", ["version"], registry=r)
        self.build_info.labels(__version__).set(1)
        if process:
            ProcessCollector(registry=r)
            PlatformCollector(registry=r)
        if resource is not None:
            r.register(TargetInfoCollector(resource))
        # The series each of the session model's metric keys updates, and whether it observes.
        self._series = {**self.activity_series(), **self.cost_series()}
        assert set(self._series) == set(Metric), "every metric key needs its series"
        assert HISTOGRAMS == set(BOUNDS) == {key for key, series in self._series.items()
                                             if isinstance(series, Histogram)}
        self._counting = Counting(self._series, self, self.labels, self.genai, repository_label=repository_label)
        # The session metrics' totals start where the checkpoint left them (resume(); totals.py): since when they
        # count (the OTLP push's start time), and the families given a kept start, each by its Resumed collector.
        self.counting_since_ns = time.time_ns()
        self._resumed: dict = {}

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

        self._counting.budget_meter = BudgetMeter(budgets, resource, self.registry)

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
        apply_outputs of each in turn would (counting.py)."""
        self._counting.apply_all(outs)

    def add_live_sessions(self, snapshot: Callable[[], Iterable[LiveSession]]) -> None:
        """Register the scrape-time collector of live session states."""
        self.registry.register(LiveSessionsCollector(snapshot, repository_label=self.repository_label))
