"""What do exemplars cost: on a scrape of /metrics, and when the metric updates are applied?

The logs the real CLI wrote (tests/fixtures/cli/*/*) are driven through the session model ``--copies``
times, each copy under a session id of its own (so with trace ids of its own), and applied to two
registries: one with the updates as the model makes them (each LLM call, tool, turn and token update
carries its span as the exemplar), one with the same updates stripped of their exemplars, and (for the
cost of applying them) one without the GenAI instruments' updates either, as before issue 22. Then each
registry is rendered ``--renders`` times in the Prometheus text format and in OpenMetrics (the format a
scraper that asks for exemplars gets), as the daemon's /metrics renders it (without gzip).

    python bench/exemplar_bench.py
    python bench/exemplar_bench.py --copies 200 --renders 200
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import machine, median, percentile  # noqa: E402
from prometheus_client import generate_latest  # noqa: E402
from prometheus_client.openmetrics.exposition import generate_latest as openmetrics  # noqa: E402

from copilot_otel.decode.lines import decode_line  # noqa: E402
from copilot_otel.metrics.genai import GenAi  # noqa: E402
from copilot_otel.metrics.registry import Metrics, disable_created_series  # noqa: E402
from copilot_otel.model.pipeline import Outputs, drive, finish  # noqa: E402
from copilot_otel.model.sessions import SessionModel  # noqa: E402

FIXTURES = REPO / "tests" / "fixtures" / "cli"


def outputs(copies: int) -> tuple[Outputs, int]:
    """Every fixture session driven ``copies`` times, as one Outputs; and how many sessions that was."""
    logs = sorted(FIXTURES.glob("*/*/session-state/*/events.jsonl"))
    out, sessions = Outputs(), 0
    for n in range(copies):
        for path in logs:
            model = SessionModel(f"{path.parent.name}-{n}")
            items = [decode_line(line) for line in path.read_bytes().splitlines() if line.strip()]
            finish(model, drive(model, items, out, source=str(path), warn=lambda *a: None))
            sessions += 1
    return out, sessions


def timed(function, count: int) -> tuple[list[float], int]:
    """Milliseconds of ``count`` calls, and the size of what the last one returned."""
    times, size = [], 0
    for _ in range(count):
        started = time.perf_counter()
        body = function()
        times.append((time.perf_counter() - started) * 1000)
        size = len(body)
    return times, size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--copies", type=int, default=100, help="times each fixture session is driven")
    parser.add_argument("--renders", type=int, default=100, help="renders timed per registry and format")
    args = parser.parse_args()
    disable_created_series()  # as the daemon serves /metrics
    out, sessions = outputs(args.copies)
    stripped = replace(out, metrics=[replace(u, exemplar=None) for u in out.metrics])
    before = replace(stripped, metrics=[u for u in stripped.metrics if not isinstance(u.metric, GenAi)])
    linked = sum(u.exemplar is not None for u in out.metrics)
    genai = len(out.metrics) - len(before.metrics)
    print(f"machine: {machine()}")
    print(f"{sessions} sessions, {len(out.metrics)} metric updates ({genai} of the GenAI instruments), "
          f"{linked} with an exemplar")
    registries = {}
    for label, outs in (("with exemplars", out), ("without", stripped), ("neither", before)):
        elapsed = []
        for _ in range(3):  # the best of three, each on a fresh registry
            metrics = Metrics(process=False)
            metrics.measure_lag_while(lambda: False)
            started = time.perf_counter()
            metrics.apply_outputs(outs)
            elapsed.append((time.perf_counter() - started) * 1e6)
        print(f"apply_outputs {label:15s} {min(elapsed) / sessions:7.1f} us per session")
        if label != "neither":  # the GenAI instruments are not on /metrics: the same renders
            registries[label] = metrics.registry
    print(f"{'format':12s} {'registry':15s} {'median ms':>10s} {'p95 ms':>8s} {'bytes':>8s} {'exemplars':>9s}")
    for name, render in (("text 0.0.4", generate_latest), ("openmetrics", openmetrics)):
        for label, registry in registries.items():
            times, size = timed(lambda render=render, registry=registry: render(registry), args.renders)
            count = render(registry).count(b" # {")
            print(f"{name:12s} {label:15s} {median(times):10.2f} {percentile(times, 95):8.2f} {size:8d} {count:9d}")


if __name__ == "__main__":
    main()
