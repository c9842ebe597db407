"""The metric contract, read from docs/metrics.md (the one place it is written)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

METRICS_DOC = Path(__file__).resolve().parent.parent.parent / "docs" / "metrics.md"
TYPES = ("counter", "gauge", "histogram")
HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")
_HEADER = ["metric", "type", "labels", "label values", "what it counts"]
_TICKED = re.compile(r"`([^`]+)`")


@dataclass(frozen=True)
class DocumentedMetric:
    """One row of a table in docs/metrics.md."""

    name: str  # as exposed: a counter's name ends in _total
    type: str  # counter, gauge or histogram
    labels: tuple[str, ...]
    values: str  # the "label values" cell, as written
    counts: str
    section: str  # the heading of its table

    @property
    def series(self) -> set[str]:
        """The sample names a query may select (a histogram's _bucket, _sum and _count)."""
        if self.type == "histogram":
            return {self.name + suffix for suffix in HISTOGRAM_SUFFIXES}
        return {self.name}


def documented_metrics(path: Path = METRICS_DOC) -> dict[str, DocumentedMetric]:
    """Every metric the tables of docs/metrics.md list, by name; a malformed row raises ValueError."""
    metrics: dict[str, DocumentedMetric] = {}
    section = ""
    in_table = False
    for number, line in enumerate(Path(path).read_text().splitlines(), 1):
        if line.startswith("#"):
            section = line.lstrip("#").strip()
            continue
        if not line.startswith("|"):
            in_table = False
            continue
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if cells == _HEADER:
            in_table = True
            continue
        if not in_table or set("".join(cells)) <= set("-: "):
            continue
        if len(cells) != len(_HEADER):
            raise ValueError(f"{path}:{number}: {len(cells)} cells, expected {len(_HEADER)}")
        name_cell, kind, labels, values, counts = cells
        name = name_cell.strip("`")
        if kind not in TYPES:
            raise ValueError(f"{path}:{number}: {name}: type {kind!r} is not one of {', '.join(TYPES)}")
        if kind == "counter" and not name.endswith("_total"):
            raise ValueError(f"{path}:{number}: counter {name} must be written as exposed, with _total")
        if name in metrics:
            raise ValueError(f"{path}:{number}: {name} is listed twice")
        metrics[name] = DocumentedMetric(name, kind, tuple(_TICKED.findall(labels)), values, counts, section)
    if not metrics:
        raise ValueError(f"{path}: no metric tables found")
    return metrics
