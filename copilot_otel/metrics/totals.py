"""The session metrics' totals, kept in the checkpoint so that a restart resumes them instead of starting at 0.

A Prometheus counter that drops to 0 at a restart reads as a reset to ``rate()``, and every label set
it had is gone until new activity makes it again: a restarted machine vanished from most panels. So
the totals of the ``copilot_*`` session counters and histograms (not the daemon's own ``copilot_otel_*``
health, which counts what this process did) are committed with the checkpoint positions they match:
everything read before those positions is in them, nothing after. At the next start a :class:`Resumed`
collector adds them to what the new process counts, so each series comes back at the first scrape at
the value it had, and events after the checkpoint are counted once, as they are read again.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import TypeVar

import msgspec
from prometheus_client.samples import Sample

log = logging.getLogger(__name__)

SKIPPED = ("_created",)  # a sample of when a series began in this process: not a total


class Totals(msgspec.Struct, frozen=True):
    """What the checkpoint keeps: since when (Unix ns) the counters count, and each sample's value."""

    since_ns: int
    samples: list[tuple[str, list[tuple[str, str]], float]]


_ENCODER = msgspec.json.Encoder()
_DECODER = msgspec.json.Decoder(Totals)

Key = tuple[str, tuple[tuple[str, str], ...]]


def snapshot(collectors: Iterable, since_ns: int) -> bytes:
    """The samples ``collectors`` give now (every counter and histogram sample but ``_created``; a histogram's
    empty buckets too, or its series would come back without them), encoded."""
    samples = [(s.name, sorted(s.labels.items()), s.value) for collector in collectors
               for family in collector.collect() for s in family.samples
               if not s.name.endswith(SKIPPED)]
    return _ENCODER.encode(Totals(since_ns, samples))


def decode(data: bytes | None) -> Totals | None:
    """Totals a checkpoint kept, or None (none kept, or unreadable: then said, and counting starts at 0)."""
    if not data:
        return None
    try:
        return _DECODER.decode(data)
    except msgspec.DecodeError as exc:
        log.warning("the metric totals kept in the checkpoint are unreadable (%s); counting starts at 0", exc)
        return None


class Resumed:
    """A metric family whose samples start at the totals a checkpoint kept: ``collect`` adds them to the live
    values, and yields a label set the new process has not counted yet at its kept value."""

    def __init__(self, family, baseline: dict[Key, float]) -> None:
        self.family = family
        self.baseline = baseline
        self.name = next(iter(family.describe())).name

    def collect(self):
        """The family's samples plus the kept totals."""
        for metric in self.family.collect():
            live = {(sample.name, tuple(sorted(sample.labels.items()))): sample for sample in metric.samples}
            # The label sets only kept come first, each whole (OpenMetrics wants a series' samples together).
            samples = [Sample(name, dict(labels), value) for (name, labels), value in self.baseline.items()
                       if (name, labels) not in live]
            for key, sample in live.items():
                kept = self.baseline.get(key)
                samples.append(sample._replace(value=sample.value + kept) if kept else sample)
            metric.samples = samples
            yield metric

    def describe(self):
        """The family's own description (names only)."""
        return self.family.describe()


F = TypeVar("F")  # a metric family


def baselines(totals: Totals, names: Mapping[str, F]) -> dict[F, dict[Key, float]]:
    """The kept samples by the family they belong to (``names``: a family's name -> the family); samples of a
    family that no longer exists are left out."""
    found: dict[F, dict[Key, float]] = {}
    for name, labels, value in totals.samples:
        family = names.get(_family_name(name))
        if family is not None:
            found.setdefault(family, {})[(name, tuple((k, v) for k, v in labels))] = value
    return found


def _family_name(sample: str) -> str:
    for suffix in ("_total", "_bucket", "_count", "_sum"):
        if sample.endswith(suffix):
            return sample[: -len(suffix)]
    return sample
