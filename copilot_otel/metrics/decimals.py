"""Float counters whose increments are decimals (AI credits: nano AIU / 1e9; premium multipliers such as 0.33)
land on the rounded sum, so /metrics shows 7.40740734, not the float noise 7.407407339999999 of adding them up.

prometheus_client adds each increment to the counter's float (``value += amount``). :class:`DecimalTotals`
keeps the same float for each series and picks the increment so that this addition gives the sum rounded to
DIGITS decimals: the exposed value is the exact sum to the nano AIU, and a counter still only goes up.
"""

from __future__ import annotations

import math
from collections.abc import Hashable

DIGITS = 9  # 1 nano AIU = 1e-9 credit: the finest amount a log holds


class DecimalTotals:
    """What each series' counter holds, and the increment that lands it on its rounded sum."""

    __slots__ = ("_shown",)

    def __init__(self) -> None:
        self._shown: dict[Hashable, float] = {}

    def increments(self, key: Hashable, amount: float) -> tuple[float, ...]:
        """What to add to ``key``'s counter (instead of ``amount``), in turn, so that it holds its rounded sum: one
        increment, or two when no single float addition lands there (the first stops just below, the second,
        exact, closes the gap)."""
        shown = self._shown.get(key, 0.0)
        target = max(shown, round(shown + amount, DIGITS))  # a counter never goes down
        delta = target - shown
        total = shown + delta
        while total > target and delta > 0.0:
            delta = math.nextafter(delta, 0.0)
            total = shown + delta
        self._shown[key] = target
        return (delta,) if total == target else (delta, target - total)
