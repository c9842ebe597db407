"""What one /metrics render costs during the tool flood (issue 25): prometheus_client's encoders against
copilot_otel.web.exposition.CachedExposition, in the Prometheus text format and OpenMetrics.

The registry is the daemon's own (metrics/registry.py) as the flood leaves it: 100 tool names at the label
cap plus `other`, each with a counter and a histogram carrying exemplars; between two renders only the
`other` series change, as they do while the flood is read. Prints the instructions per render (valgrind's
callgrind, the difference between --renders + 1 renders and one, so the start-up and the first render are
not counted), which do not depend on how busy the machine is.

    python bench/render_bench.py
    python bench/render_bench.py --renders 50
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import bytecode_env, machine
from instructions_bench import callgrind

FORMATS = {"text": "", "openmetrics": "application/openmetrics-text;version=1.0.0"}


def render(encoder_kind: str, accept: str, renders: int) -> None:
    """In this process: fill the registry, then render ``renders`` times, the `other` series changed before each."""
    from prometheus_client.exposition import choose_encoder

    from copilot_otel.metrics.registry import Metrics, disable_created_series
    from copilot_otel.web.exposition import CachedExposition

    disable_created_series()
    metrics = Metrics(resource={"service.name": "copilot-otel"})
    metrics.add_live_sessions(list)

    def calls(names: list[str], n: int) -> None:
        exemplar = {"trace_id": f"{n:032x}", "span_id": f"{n:016x}"}
        for name in names:
            tool = metrics.labels.value("tool", name)
            metrics.tool_calls.labels(tool, "success").inc(1, exemplar)
            metrics.tool_duration.labels(tool).observe(0.3 + n, exemplar)

    calls([f"mcp-tool-{n:06d}-{'x' * 16}" for n in range(101)], 0)  # the 101st is past the cap: `other`
    encoder, content_type = choose_encoder(accept)
    if encoder_kind == "cached":
        encoder = CachedExposition(encoder, openmetrics=content_type.startswith("application/openmetrics-text"))
    encoder(metrics.registry)
    for n in range(renders):
        calls(["mcp-tool-flood"], n + 1)
        encoder(metrics.registry)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--renders", type=int, default=20)
    parser.add_argument("--child", nargs=2, metavar=("ENCODER", "FORMAT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        render(args.child[0], FORMATS[args.child[1]], args.renders)
        return 0
    print(f"machine: {machine()}; load average {os.getloadavg()[0]:.2f}")
    with tempfile.TemporaryDirectory(prefix="copilot-otel-render-bench-") as scratch:
        work = Path(scratch)
        env = bytecode_env(work)
        for fmt in FORMATS:
            figures = {}
            for kind in ("library", "cached"):
                def count(renders: int, kind: str = kind, fmt: str = fmt) -> int:
                    return callgrind([sys.executable, __file__, "--renders", str(renders), "--child", kind, fmt],
                                     work / "cg", env)
                figures[kind] = (count(args.renders) - count(0)) / args.renders
            print(f"{fmt}: {figures['library'] / 1e6:.1f} M instructions per render with prometheus_client, "
                  f"{figures['cached'] / 1e6:.1f} M cached ({figures['cached'] / figures['library']:.2f}x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
