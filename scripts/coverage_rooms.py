#!/usr/bin/env python3
"""Prints the line coverage of copilot_otel that a coverage data file holds (scripts/test.sh: unit + component), by
room: each folder of the package, the top-level modules together, then the total.

    scripts/coverage_rooms.py [DATA_FILE]      (default: $COVERAGE_FILE, else .coverage)
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import coverage

PACKAGE = Path(__file__).resolve().parent.parent / "copilot_otel"


def rooms(data_file: str) -> dict[str, tuple[int, int]]:
    """Statements and statements run, by room ("(top level)" for the package's own modules)."""
    cov = coverage.Coverage(data_file=data_file)
    cov.load()
    found: dict[str, tuple[int, int]] = {}
    for measured in cov.get_data().measured_files():
        path = Path(measured).resolve()
        if not path.is_relative_to(PACKAGE):
            continue
        parts = path.relative_to(PACKAGE).parts
        room = parts[0] if len(parts) > 1 else "(top level)"
        _, statements, _, missing, _ = cov.analysis2(measured)
        total, run = found.get(room, (0, 0))
        found[room] = (total + len(statements), run + len(statements) - len(missing))
    return found


def main() -> int:
    data_file = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("COVERAGE_FILE", ".coverage")
    found = rooms(data_file)
    if not found:
        print(f"coverage: no data for copilot_otel in {data_file}", file=sys.stderr)
        return 1
    print(f"{'room':<14} {'lines':>6} {'missed':>7} {'cover':>6}")
    for room, (total, run) in sorted(found.items()):
        print(f"{room:<14} {total:>6} {total - run:>7} {100 * run / total:>5.1f}%")
    total = sum(t for t, _ in found.values())
    run = sum(r for _, r in found.values())
    print(f"{'total':<14} {total:>6} {total - run:>7} {100 * run / total:>5.1f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
