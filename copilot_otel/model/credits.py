"""AI credits (Copilot's billing unit since 2026-06-01): per call as the CLI reports them, then checked
against the totals it writes (``session.usage_checkpoint``, ``session.shutdown``).

Amounts are kept in nano AIU, as integers (1 credit = 1e9 nano AIU), so that sums equal the CLI's own
totals exactly. A call that reported no amount is counted apart, by status, never as zero cost.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..decode.payloads import Usage, as_str
from ..vocab import COMPLETE, PARTIAL, UNAVAILABLE, UNREPORTED, Metric
from .open_spans import OpenSpan, Outbox, Totals
from .summary import Tally
from .usage import NANO_AIU

NANO_AIU_PER_CREDIT = 1_000_000_000


def nano(value: Any) -> int | None:
    """A total as the CLI writes it (an int, or a float such as 8674110000.0), in nano AIU; None if none."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value < 1e18:
        return round(value)
    return None


class CreditBook:
    """Counts one session's AI credits once: each call's amount, then what the CLI's totals hold beyond."""

    def __init__(self, out: Outbox, tally: Tally) -> None:
        self.out = out
        self.tally = tally
        self.counted: dict[str, int] = {}  # model -> nano AIU counted so far
        self.process_counted: dict[str, int] = {}  # the same, since the session's last start or resume

    def call(self, usage: Usage, model: str, totals: Totals, *, nudge: bool, span: OpenSpan | None = None) -> None:
        """One successful LLM call: its amount (on its agent's totals too), or a call without one; ``span``, its
        chat span, is the counters' exemplar."""
        amount = usage.nano_aiu
        if amount is None:
            if usage.credits_status is not None:  # the CLI said so (no status: a CLI before credits, the stream)
                totals.unpriced_calls += 1
                self.tally.unpriced_calls += 1
            self.out.count(Metric.LLM_CALLS_WITHOUT_CREDITS, model, usage.credits_status or UNREPORTED, span=span)
            return
        totals.nano_aiu = (totals.nano_aiu or 0) + amount
        self.tally.priced_calls += 1
        if nudge:
            self.tally.nudge_nano_aiu += amount
            self.out.count(Metric.AUTOPILOT_AI_CREDITS, model, value=amount / NANO_AIU_PER_CREDIT, span=span)
        self._count(model, amount, span)

    def _count(self, model: str, amount: int, span: OpenSpan | None = None) -> None:
        if amount <= 0:
            return
        self.tally.add(model, NANO_AIU, amount)
        self.counted[model] = self.counted.get(model, 0) + amount
        self.process_counted[model] = self.process_counted.get(model, 0) + amount
        self.out.count(Metric.AI_CREDITS, model, value=amount / NANO_AIU_PER_CREDIT, span=span)

    def _settle(self, model: Any, metrics: Any, counted: dict[str, int]) -> None:
        """Count what one model's total holds beyond what was counted; take the CLI's status."""
        if not isinstance(model, str) or not isinstance(metrics, dict):
            return
        total = nano(metrics.get("totalNanoAiu"))
        if total is not None:
            self._count(model, total - counted.get(model, 0))
        status = as_str(metrics.get("aiCreditsStatus"))
        if status in (COMPLETE, PARTIAL, UNAVAILABLE):
            self.tally.credits_status = status

    def shutdown(self, model_metrics: Any, *, cumulative: bool) -> None:
        """session.shutdown ``modelMetrics``: the totals of the whole session (``cumulative``) or of its process."""
        if isinstance(model_metrics, dict):
            counted = self.counted if cumulative else self.process_counted
            for model, metrics in model_metrics.items():
                self._settle(model, metrics, counted)

    def checkpoint(self, data: Mapping[str, Any]) -> None:
        """session.usage_checkpoint: the whole session's totals so far, per model (``providerModelMetrics``).
        The headless stream reports no amount per call: its credits arrive here."""
        entries = data.get("providerModelMetrics")
        for entry in entries if isinstance(entries, list) else ():
            if isinstance(entry, dict):
                self._settle(entry.get("modelId"), entry.get("metrics"), self.counted)

    def new_process(self) -> None:
        """A session.start or resume: per-process totals count from here."""
        self.process_counted.clear()
