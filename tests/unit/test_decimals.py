"""Decimal counters (metrics/decimals.py): AI credits and premium requests land on their rounded sums."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, Counter, generate_latest

from copilot_otel.metrics.decimals import DIGITS, DecimalTotals


@settings(max_examples=200)
@given(nanos=st.lists(st.integers(min_value=0, max_value=10**13), min_size=1, max_size=60))
def test_a_counter_of_credits_shows_the_exact_sum_of_its_nano_aiu(nanos):
    """Increments of nano AIU / 1e9, added through a real prometheus_client Counter: the value it holds (and
    prints) is the exact sum of the nano AIU / 1e9, never below an earlier value."""
    registry = CollectorRegistry()
    counter = Counter("credits", "test", registry=registry)
    totals = DecimalTotals()
    seen = []
    for nano in nanos:
        for part in totals.increments("credits", nano / 1e9):
            counter.inc(part)
        seen.append(registry.get_sample_value("credits_total"))
        assert seen[-1] == round(sum(nanos[:len(seen)]) / 1e9, DIGITS)
    assert seen == sorted(seen)
    line = next(x for x in generate_latest(registry).decode().splitlines() if x.startswith("credits_total "))
    assert float(line.split()[1]) == sum(nanos) / 1e9


def test_the_float_noise_the_issue_saw_is_gone():
    """7.40740734 credits in three calls: a plain float sum prints 7.407407339999999, the counter 7.40740734."""
    amounts = [2.46913578, 2.46913578, 2.46913578]
    assert repr(sum(amounts)) != "7.40740734"
    totals = DecimalTotals()
    shown = 0.0
    for amount in amounts:
        for part in totals.increments("k", amount):
            shown += part
    assert repr(shown) == "7.40740734"
