"""What a session's LLM calls told, counted: premium requests and tokens, for the whole session and since its
last start or resume, checked against the totals its shutdown writes."""

from __future__ import annotations

from ..decode.payloads import as_num
from ..vocab import Metric
from . import attrs as A
from .credits import CreditBook
from .open_spans import OpenSpan, Outbox
from .summary import Tally
from .usage import PREMIUM, TOKEN_INDEX


class CallCounts:
    """Premium requests and tokens the calls told, for the whole session and since its last start or resume: what
    a session's totals (session.shutdown) are checked against. The model's CallBook counts through it, and so does
    the summary read without the model (catalog/mirror.py): counted into the tally, and as metrics by ``out``."""

    __slots__ = ("credits", "out", "premium", "process_premium", "process_tokens", "tally", "tokens")

    def __init__(self, out: Outbox, tally: Tally) -> None:
        self.out = out
        self.tally = tally
        self.tokens: dict[tuple[str, str], int] = {}  # (model, type) -> tokens counted so far
        self.process_tokens: dict[tuple[str, str], int] = {}  # the same, since the session's last start or resume
        self.premium: dict[str, float] = {}  # model -> premium requests counted so far
        self.process_premium: dict[str, float] = {}  # the same, since the session's last start or resume
        self.credits = CreditBook(out, tally)

    def count_premium(self, model: str, value: float, span: OpenSpan | None = None) -> None:
        self.tally.add(model, PREMIUM, value)
        self.premium[model] = self.premium.get(model, 0.0) + value
        self.process_premium[model] = self.process_premium.get(model, 0.0) + value
        self.out.count(Metric.PREMIUM_REQUESTS, model, value=value, span=span)

    def count_tokens(self, model: str, label: str, value: int, span: OpenSpan | None = None) -> None:
        """Tokens told by a call or, beyond what the calls told, by the session's totals: into the summary
        and the metrics alike."""
        if label in TOKEN_INDEX:
            self.tally.add(model, TOKEN_INDEX[label], value)
        key = (model, label)
        self.tokens[key] = self.tokens.get(key, 0) + value
        self.process_tokens[key] = self.process_tokens.get(key, 0) + value
        self.out.count(Metric.TOKENS, model, label, value=value, span=span)

    def reconcile(self, model_metrics: object, *, cumulative: bool, tokens: bool) -> None:
        """Count what a session's totals (session.shutdown ``modelMetrics``) hold beyond what the calls
        told: premium requests (``requests.cost``) always, and tokens when ``tokens`` (CLIs that log no
        usage per call). The totals are of the whole session (``cumulative``) or of the ending process."""
        if not isinstance(model_metrics, dict):
            return
        for model, metrics in model_metrics.items():
            if not isinstance(model, str) or not isinstance(metrics, dict):
                continue
            requests = metrics.get("requests")
            cost = as_num(requests.get("cost")) if isinstance(requests, dict) else 0.0
            missing = cost - (self.premium if cumulative else self.process_premium).get(model, 0.0)
            if missing > 1e-9:  # costs are multipliers such as 0.33: sums are not exact
                self.count_premium(model, missing)
            usage = metrics.get("usage")
            if not tokens or not isinstance(usage, dict):
                continue
            counted = self.tokens if cumulative else self.process_tokens
            for key, _attr, label in A.USAGE_TOKENS:
                total = usage.get(key)
                if isinstance(total, int) and not isinstance(total, bool):
                    missing = total - counted.get((model, label), 0)
                    if missing > 0:
                        self.count_tokens(model, label, missing)

    def new_process(self) -> None:
        """A session.start or resume: the totals the next shutdown writes count from here (per-process CLIs)."""
        self.process_tokens.clear()
        self.process_premium.clear()
        self.credits.new_process()
