"""A replay of thousands of sessions into a backend that throttles: is every span delivered exactly once?

The receiver is Rotel (tests/support/otlp_receiver.py) behind the throttling gate of
tests/support/throttling_receiver.py, which refuses as a backend at capacity does (gRPC
RESOURCE_EXHAUSTED): it takes at most ``--capacity`` spans a second and, every ``--every``
seconds, refuses everything for ``--outage`` seconds. Two runs over the same corpus:

1. one replay, start to end;
2. a replay interrupted with SIGINT after ``--interrupt-after`` seconds, then the same command
   again, as a user would after Ctrl-C.

For each, the figures: time, spans and sessions delivered, refused requests, duplicates.

    .venv/bin/python bench/throttled_replay_bench.py --sessions 2800
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import DEFAULT_SOURCE, REPO
from corpus import synthesize

from tests.support.commands import COMMAND, clean_env
from tests.support.otlp_receiver import OtlpReceiver
from tests.support.throttling_receiver import ThrottlingGate


def outages(gate: ThrottlingGate, every: float, outage: float, stop: threading.Event) -> None:
    """Refuse everything for ``outage`` seconds every ``every`` seconds, from the start, until stopped."""
    while not stop.is_set():
        gate.refuse_for(outage)
        stop.wait(every)


def replay(home: Path, state: Path, env: dict, *, interrupt_after: float | None = None) -> tuple[int, str, float]:
    """One `copilot-otel replay` of ``home``: (exit code, its stderr, seconds)."""
    started = time.monotonic()
    process = subprocess.Popen([*COMMAND, "replay", str(home), "--state-dir", str(state)], env=env,
                               stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=REPO)
    try:
        if interrupt_after is not None:
            try:
                process.wait(timeout=interrupt_after)
            except subprocess.TimeoutExpired:
                os.kill(process.pid, signal.SIGINT)
        _out, err = process.communicate(timeout=3600)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    return process.returncode, err.decode(errors="replace"), time.monotonic() - started


def summary_of(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.startswith("copilot-otel: exported")]
    return lines[-1] if lines else "(no summary line)"


def measure(home: Path, sessions: int, args, *, interrupted: bool) -> dict:
    with OtlpReceiver() as receiver, ThrottlingGate(receiver) as gate, \
            tempfile.TemporaryDirectory(prefix="bench-replay-state-") as state:
        gate.capacity(args.capacity)
        stop = threading.Event()
        ticker = threading.Thread(target=outages, args=(gate, args.every, args.outage, stop), daemon=True)
        ticker.start()
        env = clean_env({"OTEL_EXPORTER_OTLP_ENDPOINT": gate.grpc_endpoint, "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
                         "OTEL_EXPORTER_OTLP_TIMEOUT": "2"})
        runs = []
        try:
            if interrupted:
                runs.append(replay(home, Path(state), env, interrupt_after=args.interrupt_after))
            runs.append(replay(home, Path(state), env))
        finally:
            stop.set()
            ticker.join()
        time.sleep(1.0)  # what Rotel accepted reaches its sink
        spans = Counter((s.trace_id, s.span_id) for s in receiver.spans())
        refused, forwarded = gate.refused, gate.forwarded
    conversations = {trace for trace, _span in spans}
    return {"runs": [(code, round(seconds, 1), summary_of(err)) for code, err, seconds in runs],
            "spans": sum(spans.values()), "distinct": len(spans), "duplicates": sum(n - 1 for n in spans.values()),
            "traces": len(conversations), "refused": refused, "forwarded": forwarded,
            "seconds": round(sum(seconds for _code, _err, seconds in runs), 1)}


def expected_spans(home: Path) -> int:
    """The spans a replay of ``home`` makes, from a replay into a file."""
    from tests.support.otlp_json import read_spans

    with tempfile.TemporaryDirectory(prefix="bench-replay-ref-") as scratch:
        target = Path(scratch) / "spans.jsonl"
        subprocess.run([*COMMAND, "replay", str(home), "--traces-file", str(target), "--state-dir", scratch],
                       env=clean_env(), check=True, capture_output=True, cwd=REPO)
        return len(read_spans(target))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=2800)
    parser.add_argument("--source", type=Path, default=DEFAULT_SOURCE, help="real sessions to copy")
    parser.add_argument("--home", type=Path, default=None, help="reuse a corpus made by corpus.py")
    parser.add_argument("--capacity", type=float, default=1000.0, help="spans/s the backend takes (default 1000)")
    parser.add_argument("--every", type=float, default=15.0, help="seconds between outages (default 15)")
    parser.add_argument("--outage", type=float, default=4.0, help="seconds each outage lasts (default 4)")
    parser.add_argument("--interrupt-after", type=float, default=8.0, help="SIGINT after this many seconds")
    args = parser.parse_args(argv)
    scratch = None
    home = args.home
    if home is None:
        scratch = Path(tempfile.mkdtemp(prefix="bench-throttled-"))
        home = scratch / "home"
        made = synthesize(home, args.sessions, source=args.source)
        print(f"corpus: {made['sessions']} sessions, {made['lines']} lines, {made['bytes'] / 1e6:.0f} MB "
              f"(copies of {made['templates']} real sessions)")
    try:
        sessions = len(os.listdir(home / "session-state"))
        expected = expected_spans(home)
        print(f"expected: {expected} spans from {sessions} sessions")
        print(f"backend: at most {args.capacity:.0f} spans/s, everything refused for {args.outage:.0f} s every "
              f"{args.every:.0f} s (gRPC RESOURCE_EXHAUSTED)")
        for interrupted in (False, True):
            figures = measure(home, sessions, args, interrupted=interrupted)
            label = f"interrupted after {args.interrupt_after:.0f} s, then run again" if interrupted else "one run"
            share = 100.0 * figures["distinct"] / expected if expected else 0.0
            print(f"\n{label}:")
            for code, seconds, line in figures["runs"]:
                print(f"  exit {code} after {seconds} s: {line}")
            print(f"  received {figures['spans']} spans, {figures['distinct']} distinct ({share:.1f} % of expected), "
                  f"{figures['duplicates']} duplicates; {figures['refused']} requests refused, "
                  f"{figures['forwarded']} accepted; {figures['seconds']} s in all")
    finally:
        if scratch is not None:
            shutil.rmtree(scratch)
    return 0


if __name__ == "__main__":
    sys.exit(main())
