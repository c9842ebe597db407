"""/metrics bodies byte for byte as prometheus_client renders them, each sample's line formatted once (issue 25).

A scrape during a flood renders about 2,000 samples (100 tool names at the label cap, 17 lines for each
one's histogram), and between two scrapes only a few of them change: the `other` series, a few
counters. prometheus_client formats every line again each time: 40 % of a text render, 70 % of an
OpenMetrics one (bench/render_bench.py).
Here the registry is still collected in full, each time (values are read live), but a sample's line
is taken from the last render when the sample is the same: same name, labels, value, timestamp and
exemplar in the same family. Lines for new or changed samples are formatted by prometheus_client
itself, family by family (a copy of the family holding only those samples), so the format stays the
library's: escaping, exemplars, OpenMetrics' ``# EOF``. A family whose lines do not map one to one
onto its samples (the Prometheus text format moves ``_created`` samples into a gauge of their own)
is rendered whole by the library, every time. Only the lines of the last render are kept.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable
from typing import Any, cast

from prometheus_client.registry import Collector

# prometheus_client's encoders (generate_latest), typed for a CollectorRegistry: they call only its collect()
Encoder = Callable[[Any], bytes]
OPENMETRICS_END = b"# EOF\n"


class _Families:
    """A collector of given families: prometheus_client's encoders take a collector."""

    def __init__(self, families: Iterable[Any]) -> None:
        self._families = families

    def collect(self) -> Iterable[Any]:
        return self._families


def _zero_key(value: Any) -> Any:
    # 0.0 == -0.0 == 0 == False, and None: all falsy, each rendered its own way (-0.0 as "-0.0").
    return (type(value), repr(value))


def _sample_key(sample: Any) -> tuple | None:
    """What a sample's line depends on, hashable; None for a sample never kept (a native histogram)."""
    if sample.native_histogram is not None:
        return None
    value = sample.value
    exemplar = sample.exemplar
    if exemplar is not None:
        exemplar = (tuple(exemplar.labels.items()), exemplar.value or _zero_key(exemplar.value),
                    None if exemplar.timestamp is None else repr(exemplar.timestamp))
    timestamp = sample.timestamp
    return (sample.name, tuple(sample.labels.items()), value or _zero_key(value),
            None if timestamp is None else repr(timestamp), exemplar)


class CachedExposition:
    """``encoder(registry)``'s bytes (a prometheus_client encoder of one format: text or OpenMetrics, with its
    escaping and version), keeping each sample's line from one render to the next.

    Renders may run at once (a gzipped and a plain scrape): each builds its own tables and swaps them in whole
    at its end; a line is a function of its key, so whichever tables win hold true lines.
    """

    def __init__(self, encoder: Encoder, *, openmetrics: bool) -> None:
        self._encoder = encoder
        self._end = OPENMETRICS_END if openmetrics else b""
        self._heads: dict[tuple, bytes] = {}  # (name, type, unit, help) -> the family's header lines
        self._lines: dict[tuple, dict[tuple | None, bytes]] = {}  # (name, type) -> sample key -> its line

    def __call__(self, registry: Collector) -> bytes:
        """The body: what ``encoder(registry)`` gives."""
        old_heads, old_lines = self._heads, self._lines
        heads: dict[tuple, bytes] = {}
        lines_of: dict[tuple, dict[tuple | None, bytes]] = {}
        output: list[bytes] = []
        for family in registry.collect():
            head_key = (family.name, family.type, family.unit, family.documentation)
            head = heads.get(head_key) or old_heads.get(head_key)
            if head is None:
                head = self._encode(family, [])
            heads[head_key] = head
            samples = family.samples
            keys = [_sample_key(sample) for sample in samples]
            kept = old_lines.get((family.name, family.type), {})
            lines = [kept.get(key) for key in keys]
            missing = [i for i, line in enumerate(lines) if line is None]
            if missing:
                made = None if None in keys else self._lines_of(family, head, [samples[i] for i in missing])
                if made is None:  # not one line per sample: the library renders it whole, every time
                    output.append(self._encode(family, samples))
                    continue
                for i, line in zip(missing, made):
                    lines[i] = line
            done = cast("list[bytes]", lines)  # each one found or made (made is None only with a None key)
            output.append(head)
            output.extend(done)
            lines_of.setdefault((family.name, family.type), {}).update(zip(keys, done))
        self._heads, self._lines = heads, lines_of
        output.append(self._end)
        return b"".join(output)

    def _encode(self, family: Any, samples: list) -> bytes:
        """What the encoder gives for ``family`` holding only ``samples`` (without OpenMetrics' # EOF)."""
        part = copy.copy(family)
        part.samples = samples
        body = self._encoder(_Families([part]))
        if not body.endswith(self._end):
            raise ValueError("an OpenMetrics body that does not end in # EOF")
        return body[:len(body) - len(self._end)]

    def _lines_of(self, family: Any, head: bytes, samples: list) -> list[bytes] | None:
        """The lines of ``samples``, one each, in order; None if the format does not give one line per sample."""
        body = self._encode(family, samples)
        if not body.startswith(head):
            return None
        lines = body[len(head):].split(b"\n")
        if lines.pop() != b"" or len(lines) != len(samples):
            return None
        return [line + b"\n" for line in lines]
