"""How long does a Prometheus scrape of /metrics take when the daemon knows 10,000 sessions?

Two runs, each with its own daemon on its own home of ``--sessions`` folders:

  all idle   every folder holds a small finished session (bench/corpus.py --idle-folders)
  some live  ``--live`` of the folders hold an unfinished session whose lock file
             (inuse.<pid>.lock) names this benchmark's own pid, so the daemon counts them as
             live; a third are mid-tool (waiting_tool), a third mid-turn (working), a third
             between turns (idle); their last events are 0-20 minutes old, so those
             mid-turn for longer than --stuck-after are `stuck` and get a
             copilot_session_stalled_seconds series each.

Once /metrics says every file is followed and the export queue is empty, ``--scrapes``
GETs of /metrics are timed one after the other (Prometheus text format, then OpenMetrics
as Prometheus itself asks for). Target: < 50 ms.

    python bench/scrape_bench.py
    python bench/scrape_bench.py --sessions 10000 --live 2000 --scrapes 50
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
import tempfile
import time
import urllib.request
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (
    DEFAULT_SOURCE,
    add_daemon_options,
    bench_daemon,
    machine,
    median,
    percentile,
)
from corpus import EVENTS_FILE, SESSION_STATE, Template, make_idle, source_logs

from tests.support.scrape import by_label, value

OPENMETRICS = "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5"


def iso(epoch: float) -> str:
    moment = datetime.fromtimestamp(epoch, UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def live_template(source: Path) -> Template:
    """A real main-agent session that ran a bash tool (no sub-agent), without its system prompt lines."""
    for path in source_logs(source):
        text = path.read_bytes()
        if b'"toolName":"bash"' in text and b'"agentId"' not in text and b'"session.shutdown"' in text:
            return Template.load(path, drop_types=("system.message",))
    raise SystemExit(f"{source}: no session with a bash tool call to build live sessions from")


def cut(events: list[dict], kind: str) -> list[dict]:
    """The events up to where a live session of this kind stands now."""
    types = [e["type"] for e in events]
    if kind == "waiting_tool":
        end = types.index("tool.execution_start") + 1
    elif kind == "working":
        end = types.index("assistant.turn_start") + 1
    else:  # between turns: everything but the shutdown
        end = len(types) - types[::-1].index("session.shutdown") - 1
    return events[:end]


def make_live(home: Path, count: int, *, source: Path, seed: int = 3) -> dict[str, int]:
    """``count`` unfinished sessions held by this process; returns how many of each kind."""
    template = live_template(source)
    state = home / SESSION_STATE
    state.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    now = time.time()
    kinds = {"waiting_tool": 0, "working": 0, "idle": 0}
    pid = os.getpid()
    for i in range(count):
        kind = ("waiting_tool", "working", "idle")[i % 3]
        session_id, data = template.render(rng, f"l{seed}c{i}")
        events = cut([json.loads(line) for line in data.splitlines() if line.strip()], kind)
        # Move the session in time so that its last event happened 0..20 minutes ago.
        last = datetime.fromisoformat(events[-1]["timestamp"].replace("Z", "+00:00")).timestamp()
        shift = now - rng.uniform(0, 1200) - last
        for event in events:
            moment = datetime.fromisoformat(event["timestamp"].replace("Z", "+00:00")).timestamp()
            event["timestamp"] = iso(moment + shift)
        folder = state / session_id
        folder.mkdir(mode=0o700)
        (folder / EVENTS_FILE).write_bytes(b"".join(json.dumps(e, separators=(",", ":")).encode() + b"\n"
                                                    for e in events))
        (folder / f"inuse.{pid}.lock").write_text(str(pid))
        kinds[kind] += 1
    return kinds


def time_scrapes(url: str, count: int, accept: str | None) -> tuple[list[float], int]:
    times, size = [], 0
    for _ in range(count):
        request = urllib.request.Request(url, headers={"Accept": accept} if accept else {})
        started = time.perf_counter()
        with urllib.request.urlopen(request, timeout=30) as response:
            body = response.read()
        times.append((time.perf_counter() - started) * 1000)
        size = len(body)
    return times, size


def run_case(label: str, home: Path, work: Path, args, expected: int) -> None:
    daemon = bench_daemon(home, work, args=["--stuck-after", str(args.stuck_after)] + args.daemon_arg)
    try:
        daemon.start(timeout=60)
        startup = daemon.wait_for_metric("copilot_otel_files_watched", expected, timeout=args.startup_timeout,
                                         interval=0.5)
        while value(daemon.scrape(timeout=30), "copilot_otel_export_queue_spans") > 0:
            time.sleep(0.25)
        time.sleep(args.settle)  # idle confirmation (quiet period) and the first liveness pass
        time_scrapes(daemon.metrics_url, 3, None)  # warm up
        text_ms, text_size = time_scrapes(daemon.metrics_url, args.scrapes, None)
        om_ms, om_size = time_scrapes(daemon.metrics_url, args.scrapes, OPENMETRICS)
        samples = daemon.scrape(timeout=30)
    finally:
        daemon.stop()
    states = {state: int(count) for state, count in by_label(samples, "copilot_sessions", "state").items()}
    stalled = len(by_label(samples, "copilot_session_stalled_seconds", "session_id"))
    print(f"\n{label}: {expected} sessions followed after {startup:.1f} s; copilot_sessions "
          f"{ {k: v for k, v in states.items() if v} or 'none live'}; {stalled} stalled series")
    for name, ms, size in (("text 0.0.4", text_ms, text_size), ("OpenMetrics", om_ms, om_size)):
        p50, p99 = median(ms), percentile(ms, 99)
        print(f"  {name:<12} {args.scrapes} GETs: median {p50:.1f} ms, p99 {p99:.1f} ms, max {max(ms):.1f} ms; "
              f"{size / 1024:.1f} KiB  target < 50 ms: {'met' if p99 < 50 else 'MISSED'}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--source", type=Path, default=DEFAULT_SOURCE, help="real sessions to copy")
    parser.add_argument("--sessions", type=int, default=10_000, help="session folders (default 10000)")
    parser.add_argument("--live", type=int, default=1000, help="of which live in the second run (default 1000)")
    parser.add_argument("--scrapes", type=int, default=50, help="timed GETs per format (default 50)")
    parser.add_argument("--stuck-after", type=float, default=600.0, help="daemon's --stuck-after (default 600)")
    parser.add_argument("--skip-idle", action="store_true", help="only the run with live sessions")
    add_daemon_options(parser, settle=4.0)
    args = parser.parse_args(argv)

    work = Path(tempfile.mkdtemp(prefix="copilot-otel-scrape-bench-"))
    print(f"machine: {machine()}", flush=True)
    try:
        if not args.skip_idle:
            home = work / "idle-home"
            make_idle(home, args.sessions, source=args.source)
            run_case("all idle", home, work / "idle-daemon", args, args.sessions)
            shutil.rmtree(home, ignore_errors=True)
        home = work / "live-home"
        make_idle(home, args.sessions - args.live, source=args.source)
        kinds = make_live(home, args.live, source=args.source)
        run_case(f"{args.live} live ({', '.join(f'{v} {k}' for k, v in kinds.items())})", home,
                 work / "live-daemon", args, args.sessions)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
