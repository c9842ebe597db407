"""The daemon under load: append-to-export latency, and the cost of watching idle sessions.

(a) latency: `copilot-otel run` follows one live session (its lock file names this
    benchmark's pid). A few hundred times, a complete tool.execution_start +
    tool.execution_complete pair (real event shapes from the corpus, fresh ids,
    timestamps = now) is appended in one write, and the time until that tool's span is
    in the traces file is measured (inotify on the traces file). Target: p99 < 100 ms.
(b) idle: the daemon starts on a home with 10,000 folders each holding a small finished
    session; once /metrics says it follows them all (copilot_otel_files_watched), its CPU
    time over 60 s (utime+stime from /proc/<pid>/stat) and its RSS (VmRSS) are read.
    Targets: < 1 % of one core, < 100 MB. The start-up time to read them all is printed too, and
    the time until a session created just after the daemon answered (while it reads the others)
    is in the traces file. --inotify-watches N runs the daemon in a user namespace of its own with
    that inotify watch limit: folders beyond it are not watched, as on a machine whose limit is spent.

    python bench/daemon_bench.py                     # both, defaults
    python bench/daemon_bench.py --skip-idle --appends 1000
    python bench/daemon_bench.py --skip-latency --idle-folders 10000 --duration 60
    python bench/daemon_bench.py --skip-latency --idle-folders 100000 --duration 30 --inotify-watches 1000
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
import uuid
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (
    DEFAULT_SOURCE,
    FileGrowth,
    add_daemon_options,
    bench_daemon,
    cpu_seconds,
    machine,
    median,
    percentile,
    rss_mb,
)
from corpus import _write, idle_template, make_idle, source_logs

from tests.support.scrape import value


def now_iso() -> str:
    """The CLI's own timestamp form: 2026-12-02T18:15:16.733Z."""
    now = datetime.now(UTC)
    return now.strftime("%Y-%m-%dT%H:%M:%S.") + f"{now.microsecond // 1000:03d}Z"


def real_shapes(source: Path) -> dict[str, dict]:
    """One real event of each type we append, from a session that ran a bash tool."""
    wanted = ("session.start", "user.message", "assistant.turn_start", "tool.execution_start",
              "tool.execution_complete")
    for path in source_logs(source):
        events = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        shapes: dict[str, dict] = {}
        for event in events:
            if event["type"] in wanted and event["type"] not in shapes and event.get("agentId") is None:
                if event["type"].startswith("tool.") and event["data"].get("toolName", "bash") != "bash":
                    continue
                shapes[event["type"]] = event
        if len(shapes) == len(wanted):
            return shapes
    raise SystemExit(f"{source}: no session with a bash tool call to copy event shapes from")


class LiveSession:
    """A session log this benchmark writes as if it were the CLI (its lock names our pid)."""

    def __init__(self, state: Path, shapes: dict[str, dict]) -> None:
        self.shapes = shapes
        self.session_id = str(uuid.uuid4())
        self.interaction_id = str(uuid.uuid4())
        self.folder = state / self.session_id
        self.folder.mkdir(parents=True, mode=0o700)
        (self.folder / f"inuse.{os.getpid()}.lock").write_text(str(os.getpid()))
        self.path = self.folder / "events.jsonl"
        self.last_id: str | None = None
        self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)

    def event(self, kind: str, **data) -> dict:
        shape = self.shapes[kind]
        event_id = str(uuid.uuid4())
        out = {"type": kind, "data": {**shape["data"], **data}, "id": event_id, "timestamp": now_iso(),
               "parentId": self.last_id}
        self.last_id = event_id
        return out

    def append(self, events: list[dict]) -> None:
        """All the events in one write, as the CLI appends them."""
        os.write(self._fd, b"".join(json.dumps(e, separators=(",", ":")).encode() + b"\n" for e in events))

    def begin(self) -> None:
        """session.start, a user message and an open turn: the tools that follow hang under it."""
        self.append([
            self.event("session.start", sessionId=self.session_id, startTime=now_iso()),
            self.event("user.message", interactionId=self.interaction_id),
            self.event("assistant.turn_start", turnId="0", interactionId=self.interaction_id),
        ])

    def tool_pair(self, call_id: str) -> list[dict]:
        start = self.event("tool.execution_start", toolCallId=call_id, turnId="0")
        complete = self.event("tool.execution_complete", toolCallId=call_id, turnId="0",
                              interactionId=self.interaction_id)
        return [start, complete]

    def close(self) -> None:
        os.close(self._fd)


def bench_latency(args, work: Path) -> dict:
    home = work / "latency-home"
    state = home / "session-state"
    state.mkdir(parents=True)
    session = LiveSession(state, real_shapes(args.source))
    session.begin()
    traces = work / "latency-traces.jsonl"
    daemon = bench_daemon(home, work / "latency-daemon", traces_file=traces, args=args.daemon_arg)
    latencies: list[float] = []
    timeouts = 0
    try:
        daemon.start(timeout=30)
        daemon.wait_for_metric("copilot_otel_files_watched", 1, timeout=30)
        while not traces.exists():
            time.sleep(0.01)
        growth = FileGrowth(traces, use_inotify=not args.poll_traces)
        reader = open(traces, "rb")  # noqa: SIM115 - read as the daemon writes, closed after the run
        reader.seek(0, os.SEEK_END)
        seen = b""
        for i in range(args.warmup + args.appends):
            call_id = f"call_bench_{i}_{uuid.uuid4().hex[:8]}"
            needle = call_id.encode()
            pair = session.tool_pair(call_id)
            started = time.perf_counter()
            session.append(pair)
            deadline = started + args.timeout
            found = False
            while True:
                chunk = reader.read()
                if chunk:
                    seen = seen[-4096:] + chunk
                    if needle in seen:
                        found = True
                        break
                remaining = deadline - time.perf_counter()
                if remaining <= 0:
                    break
                growth.wait(remaining)
            elapsed = time.perf_counter() - started
            if i >= args.warmup:
                if found:
                    latencies.append(elapsed)
                else:
                    timeouts += 1
            time.sleep(args.interval)
        growth.close()
        reader.close()
    finally:
        session.close()
        daemon.stop()
    result = {"appends": args.appends, "timeouts": timeouts, "mechanism": growth.mechanism}
    if latencies:
        ms = [x * 1000 for x in latencies]
        result.update(p50=median(ms), p90=percentile(ms, 90), p99=percentile(ms, 99), max=max(ms), min=min(ms))
    return result


def bench_idle(args, work: Path) -> dict:
    home = work / "idle-home"
    started = time.perf_counter()
    made = make_idle(home, args.idle_folders, source=args.source)
    print(f"  created {made['sessions']} idle folders ({made['bytes'] / 1e6:.1f} MB) in "
          f"{time.perf_counter() - started:.1f} s", flush=True)
    prefix = ()
    if args.inotify_watches:
        prefix = ("unshare", "--user", "--map-root-user", "sh", "-c",
                  f'echo {args.inotify_watches} > /proc/sys/user/max_inotify_watches && exec "$@"', "sh")
    daemon = bench_daemon(home, work / "idle-daemon", args=args.daemon_arg, prefix=prefix, checkout=args.checkout)
    try:
        daemon.start(timeout=max(60.0, args.idle_folders / 1000))
        # Once the reading of the history has begun (the first scan of the folder is over): a new session.
        daemon.wait_for_metric("copilot_otel_files_watched", 1, timeout=args.startup_timeout, interval=0.25)
        late_id, late_data = idle_template(args.source).render(random.Random(7), "late")
        _write(home / "session-state", late_id, late_data)
        made_at = time.monotonic()
        new_session = _wait_for_text(daemon.traces_file, late_id.encode(), timeout=args.startup_timeout)
        new_session = new_session - made_at if new_session is not None else float("inf")
        print(f"  a session made after start: in the traces file after {new_session:.1f} s", flush=True)
        startup = daemon.wait_for_metric("copilot_otel_files_watched", args.idle_folders + 1,
                                         timeout=args.startup_timeout, interval=0.25)
        # Then until every span of that history is exported.
        while value(daemon.scrape(timeout=30), "copilot_otel_export_queue_spans") > 0:
            time.sleep(0.25)
        drained = time.monotonic() - daemon.started_at
        rss_after_start = rss_mb(daemon.pid)
        time.sleep(args.settle)
        windows = []
        cpu0, t0 = cpu_seconds(daemon.pid), time.monotonic()
        window_cpu, window_t = cpu0, t0
        while time.monotonic() - t0 < args.duration:
            time.sleep(min(10.0, args.duration - (time.monotonic() - t0)))
            c, t = cpu_seconds(daemon.pid), time.monotonic()
            windows.append(100.0 * (c - window_cpu) / (t - window_t))
            window_cpu, window_t = c, t
        cpu1, t1 = cpu_seconds(daemon.pid), time.monotonic()
        rss = rss_mb(daemon.pid)
        with open(f"/proc/{daemon.pid}/status") as handle:
            hwm = next((int(line.split()[1]) / 1024 for line in handle if line.startswith("VmHWM:")), float("nan"))
        watched = value(daemon.scrape(timeout=30), "copilot_otel_files_watched")
    finally:
        daemon.stop()
    return {"folders": args.idle_folders, "startup": startup, "drained": drained, "watched": watched,
            "new_session": new_session,
            "cpu_pct": 100.0 * (cpu1 - cpu0) / (t1 - t0), "windows": windows, "seconds": t1 - t0,
            "rss": rss, "rss_after_start": rss_after_start, "hwm": hwm}


def _wait_for_text(path: Path, text: bytes, timeout: float) -> float | None:
    """The time.monotonic() at which ``text`` was first seen in the growing file ``path``, or None."""
    deadline, offset, tail = time.monotonic() + timeout, 0, b""
    while time.monotonic() < deadline:
        try:
            with open(path, "rb") as handle:
                handle.seek(offset)
                data = handle.read()
        except FileNotFoundError:
            data = b""
        offset += len(data)
        if text in tail + data:
            return time.monotonic()
        tail = (tail + data)[-len(text):]
        time.sleep(0.05)
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--source", type=Path, default=DEFAULT_SOURCE, help="real sessions to copy shapes from")
    parser.add_argument("--skip-latency", action="store_true")
    parser.add_argument("--skip-idle", action="store_true")
    parser.add_argument("--appends", type=int, default=300, help="timed tool pairs (default 300)")
    parser.add_argument("--warmup", type=int, default=10, help="untimed tool pairs first (default 10)")
    parser.add_argument("--interval", type=float, default=0.02, help="pause between appends, s (default 0.02)")
    parser.add_argument("--timeout", type=float, default=15.0, help="give up on one span after this, s")
    parser.add_argument("--poll-traces", action="store_true",
                        help="watch the traces file with a tight stat loop instead of inotify")
    parser.add_argument("--idle-folders", type=int, default=10_000, help="idle sessions (default 10000)")
    parser.add_argument("--inotify-watches", type=int, default=0,
                        help="run the daemon with this inotify watch limit (a user namespace of its own)")
    parser.add_argument("--duration", type=float, default=60.0, help="CPU measurement window, s (default 60)")
    parser.add_argument("--checkout", type=Path, default=None,
                        help="run the copilot_otel of another source tree (e.g. a worktree of main) for (b)")
    add_daemon_options(parser, settle=5.0, daemon_arg_help=", e.g. --daemon-arg=--poll")
    args = parser.parse_args(argv)

    work = Path(tempfile.mkdtemp(prefix="copilot-otel-daemon-bench-"))
    print(f"machine: {machine()}", flush=True)
    try:
        if not args.skip_latency:
            print(f"\n(a) append -> exported span, {args.appends} tool pairs", flush=True)
            r = bench_latency(args, work)
            if "p99" in r:
                verdict = "met" if r["p99"] < 100 and not r["timeouts"] else "MISSED"
                print(f"  latency ms: p50 {r['p50']:.1f}  p90 {r['p90']:.1f}  p99 {r['p99']:.1f}  "
                      f"min {r['min']:.1f}  max {r['max']:.1f}  (timeouts: {r['timeouts']}; traces file watched "
                      f"with {r['mechanism']})")
                print(f"  target p99 < 100 ms: {verdict}")
            else:
                print(f"  no span arrived within {args.timeout} s (timeouts: {r['timeouts']})")
        if not args.skip_idle:
            print(f"\n(b) watching {args.idle_folders} idle session folders", flush=True)
            r = bench_idle(args, work)
            print(f"  start-up: all {r['folders']} files followed after {r['startup']:.1f} s, "
                  f"their spans exported after {r['drained']:.1f} s")
            print(f"  CPU over {r['seconds']:.0f} s: {r['cpu_pct']:.2f} % of one core "
                  f"(per 10 s: {', '.join(f'{w:.2f}' for w in r['windows'])})  "
                  f"target < 1 %: {'met' if r['cpu_pct'] < 1 else 'MISSED'}")
            print(f"  RSS: {r['rss']:.1f} MB (after start-up {r['rss_after_start']:.1f} MB, peak {r['hwm']:.1f} MB)  "
                  f"target < 100 MB: {'met' if r['rss'] < 100 else 'MISSED'}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
