"""The daemon under attack and at scale (issue 17): memory, /metrics and fairness, measured.

Each part runs the real daemon (`copilot-otel run`, warnings only, traces to a file in a scratch
folder) on logs made from a stored real CLI log (tests/support/biglog.grow) and prints figures:

- big-log: peak RSS (VmHWM) of the daemon following one --log-mb log (default 200 MB) until every
  span is exported, and of `copilot-otel replay` on the same log. Target: daemon < 150 MB.
- tools: peak RSS while a session with --tools distinct tool names (default 100,000) arrives, and
  the size and time of /metrics scrapes during and after it. Targets: < 150 MB, < 1 MB, < 50 ms.
- flood: one session floods junk at --flood-mbps (default 10 MB/s) for --seconds; another session
  writes a tool call every half second: how long each takes to reach the trace file (from the
  append to the span on disk). Target: p99 < 1 s. Every 5 s a new session is made too, and the
  time until its tool call is on disk is printed. --flood-line blank floods empty lines instead
  (what it costs: the daemon's CPU per 300 MB of them).

The scrape latency with 1,000 idle connections is bench/http_bench.py's.

    python bench/attack_bench.py
    python bench/attack_bench.py --only flood --flood-mbps 20
    python bench/attack_bench.py --log-mb 50 --tools 20000      # a quicker run
    python bench/attack_bench.py --only flood --flood-line blank --checkout /path/to/a/worktree/of/main
"""

from __future__ import annotations

import argparse
import http.client
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import bench_daemon, cpu_seconds, machine, median, percentile

from tests.support.biglog import grow  # _common put the repository on sys.path
from tests.support.events import SessionLog
from tests.support.files import append, new_session
from tests.support.net import wait_until
from tests.support.scrape import parse, value

STORED = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "cli" / "1.0.102"


def real_log(scenario: str) -> bytes:
    return next((STORED / scenario / "session-state").glob("*/events.jsonl")).read_bytes()


def peak_rss_mb(pid: int) -> float:
    """VmHWM (peak resident set) of a live process, in MiB."""
    with open(f"/proc/{pid}/status") as handle:
        return next(int(line.split()[1]) for line in handle if line.startswith("VmHWM:")) / 1024


def scrape(port: int) -> tuple[float, bytes]:
    """One GET /metrics on a new connection: (seconds, body)."""
    started = time.perf_counter()
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        connection.request("GET", "/metrics")
        body = connection.getresponse().read()
    finally:
        connection.close()
    return time.perf_counter() - started, body


def spans_in(path: Path) -> int:
    return path.read_bytes().count(b'"spanId"') if path.exists() else 0


# ------------------------------------------------------------------------ parts


DAEMON_ARGS: list[str] = []  # --daemon-arg


def big_log(work: Path, megabytes: int) -> None:
    home = work / "home"
    path = new_session(home, "big-log")
    path.write_bytes(grow(real_log("reused_ids"), megabytes << 20))
    size = path.stat().st_size
    traces = work / "replay.jsonl"
    started = time.perf_counter()
    # VmHWM of the replay's own memory (ru_maxrss would carry this big process's peak across the exec).
    result = subprocess.run([sys.executable, "-c",
                             "import runpy, sys\n"
                             "sys.argv = ['copilot-otel', 'replay', sys.argv[1], '--traces-file', sys.argv[2]]\n"
                             "try:\n    runpy.run_module('copilot_otel.cli.main', run_name='__main__')\n"
                             "finally:\n    print('PEAK', next(line.split()[1] for line in open('/proc/self/status') "
                             "if line.startswith('VmHWM:')), file=sys.stderr)\n", str(path), str(traces)],
                            capture_output=True, text=True)
    replay_s = time.perf_counter() - started
    replay_peak = int(result.stderr.rsplit("PEAK", 1)[1].split()[0]) / 1024
    expected = spans_in(traces)
    traces.unlink()
    daemon = bench_daemon(home, work / "daemon", args=DAEMON_ARGS).start(timeout=300)
    try:
        started = time.perf_counter()
        wait_until(lambda: value(daemon.scrape(timeout=60), "copilot_otel_spans_exported_total") >= expected,
                   timeout=3600, interval=1.0, what=f"{expected} spans exported")
        daemon_s = time.perf_counter() - started
        peak = peak_rss_mb(daemon.pid)
        cpu = cpu_seconds(daemon.pid)
    finally:
        daemon.stop()
    print(f"big-log: one log of {size / 1e6:.0f} MB, {expected} spans")
    print(f"  daemon: peak RSS {peak:.0f} MiB (target < 150), all exported in {daemon_s:.1f} s, CPU {cpu:.1f} s")
    print(f"  replay: peak RSS {replay_peak:.0f} MiB, {replay_s:.1f} s")


def tool_flood(work: Path, tools: int, *, checkout: Path | None = None) -> dict[str, float]:
    """Prints the figures and returns them (read_s, p50_ms, p99_ms, after_p99_ms, peak_mib); ``checkout``: run
    the daemon of that source tree."""
    home = work / "home"
    path = new_session(home, "tool-flood")
    log = SessionLog("tool-flood")
    log.start()
    log.user()
    log.turn_start()
    for n in range(tools):  # one turn that calls them all, each once
        log.tool_start(f"mcp-tool-{n:06d}-{'x' * 16}", f"call-{n}")
        log.tool_complete(f"call-{n}")
    log.turn_end()
    data = log.jsonl()
    daemon = bench_daemon(home, work / "daemon", args=DAEMON_ARGS, checkout=checkout).start(timeout=300)
    times, sizes = [], []
    stop = threading.Event()

    def scraper() -> None:
        while not stop.is_set():
            seconds, body = scrape(daemon.port)
            times.append(seconds)
            sizes.append(len(body))
            time.sleep(0.2)

    thread = threading.Thread(target=scraper)
    try:
        thread.start()
        started = time.perf_counter()
        step = 1 << 20
        for offset in range(0, len(data), step):  # the log arrives a megabyte at a time
            append(path, data[offset:offset + step])
        wait_until(lambda: value(daemon.scrape(timeout=60), "copilot_tool_calls_total", tool="other",
                                 outcome="success") >= tools - 200, timeout=3600, interval=1.0, what="every call")
        read_s = time.perf_counter() - started
        stop.set()
        thread.join()
        after = [scrape(daemon.port) for _ in range(50)]
        peak = peak_rss_mb(daemon.pid)
        samples = parse(after[-1][1].decode())
    finally:
        stop.set()
        thread.join()
        daemon.stop()
    after_times = [seconds for seconds, _body in after]
    print(f"tools: {tools} distinct tool names in a {len(data) / 1e6:.0f} MB log, read in {read_s:.1f} s")
    print(f"  daemon: peak RSS {peak:.0f} MiB (target < 150); label overflow "
          f"{value(samples, 'copilot_otel_label_overflow_total', label='tool'):.0f}")
    print(f"  /metrics while it arrives: {len(times)} scrapes, max {max(sizes) / 1024:.0f} KiB, "
          f"p50 {median(times) * 1000:.1f} ms, p99 {percentile(times, 99) * 1000:.1f} ms")
    print(f"  /metrics after: {len(after[-1][1]) / 1024:.0f} KiB (target < 1 MB), "
          f"p50 {median(after_times) * 1000:.1f} ms, p99 {percentile(after_times, 99) * 1000:.1f} ms (target < 50)")
    return {"read_s": read_s, "p50_ms": median(times) * 1000, "p99_ms": percentile(times, 99) * 1000,
            "after_p99_ms": percentile(after_times, 99) * 1000, "peak_mib": peak}


def _new_session_delay(home: Path, traces: Path, name: str) -> float:
    """Make a session with one tool call; seconds until its span is in the trace file."""
    log = SessionLog(name)
    log.start()
    log.user()
    log.turn_start()
    log.tool_start(f"{name}-tool", f"{name}-call")
    log.tool_complete(f"{name}-call")
    needle = f"execute_tool {name}-tool".encode()
    started = time.perf_counter()
    append(new_session(home, name), log.jsonl())
    while needle not in (traces.read_bytes() if traces.exists() else b""):
        if time.perf_counter() - started > 60:
            break
        time.sleep(0.005)
    return time.perf_counter() - started


def junk_flood(work: Path, mbps: float, seconds: float, *, line: str = "junk", checkout: Path | None = None) -> None:
    home = work / "home"
    flood = new_session(home, "a-flood")
    normal = new_session(home, "b-normal")
    log = SessionLog("b-normal")
    log.start()
    log.user()
    log.turn_start()
    append(normal, log.jsonl())
    traces = work / "daemon" / "traces.jsonl"
    daemon = bench_daemon(home, work / "daemon", traces_file=traces, args=DAEMON_ARGS,
                          checkout=checkout).start(timeout=300)
    junk = (b"x" * 1000 + b"\n") * 1024 if line == "junk" else b"\n" * (1 << 20)  # ~1 MB of junk or empty lines
    stop = threading.Event()
    written = [0]

    def flooder() -> None:
        started = time.perf_counter()
        while not stop.is_set():
            append(flood, junk)
            written[0] += len(junk)
            ahead = written[0] / (mbps * 1e6) - (time.perf_counter() - started)
            if ahead > 0:
                time.sleep(ahead)

    thread = threading.Thread(target=flooder)
    delays, new_delays = [], []
    try:
        thread.start()
        begun = time.perf_counter()
        deadline = begun + seconds
        probe = 0
        while time.perf_counter() < deadline:
            if time.perf_counter() - begun >= 5 * (len(new_delays) + 1):
                new_delays.append(_new_session_delay(home, traces, f"new-{len(new_delays):03d}"))
            probe += 1
            shown = len(log.entries)
            log.tool_start(f"probe-{probe:04d}", f"probe-{probe}")
            log.tool_complete(f"probe-{probe}")
            needle = f"execute_tool probe-{probe:04d}".encode()
            started = time.perf_counter()
            append(normal, log.jsonl(shown))
            while needle not in (traces.read_bytes() if traces.exists() else b""):
                if time.perf_counter() - started > 60:
                    break
                time.sleep(0.005)
            delays.append(time.perf_counter() - started)
            time.sleep(max(0.0, 0.5 - delays[-1]))
        stop.set()
        thread.join()
        cpu = cpu_seconds(daemon.pid)
        peak = peak_rss_mb(daemon.pid)
        samples = daemon.scrape(timeout=60)
    finally:
        stop.set()
        thread.join()
        stop_began = time.perf_counter()
        daemon.stop(timeout=120)  # a daemon deep in a flood may take a while to stop: how long is printed
        stopped = time.perf_counter() - stop_began
    rejected = value(samples, "copilot_otel_lines_rejected_total", reason="not_json")
    print(f"flood: {line} lines at {mbps:.0f} MB/s for {seconds:.0f} s ({written[0] / 1e6:.0f} MB) beside a normal "
          f"session")
    print(f"  normal session, append to span on disk: {len(delays)} probes, p50 {median(delays) * 1000:.0f} ms, "
          f"p99 {percentile(delays, 99) * 1000:.0f} ms, max {max(delays) * 1000:.0f} ms (target p99 < 1 s)")
    if new_delays:
        print(f"  new sessions, made to span on disk: {len(new_delays)}, "
              f"{', '.join(f'{d * 1000:.0f}' for d in new_delays)} ms")
    read = f"{rejected * 1001 / 1e6:.0f} MB of the junk read meanwhile" if line == "junk" else "blank lines"
    print(f"  daemon: {read}, CPU {cpu:.1f} s ({cpu * 300e6 / max(written[0], 1):.1f} s per 300 MB written), "
          f"peak RSS {peak:.0f} MiB; stopped {stopped:.1f} s after SIGTERM")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", choices=["big-log", "tools", "flood"], action="append")
    parser.add_argument("--log-mb", type=int, default=200)
    parser.add_argument("--tools", type=int, default=100_000)
    parser.add_argument("--flood-mbps", type=float, default=10.0)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--flood-line", choices=["junk", "blank"], default="junk")
    parser.add_argument("--checkout", type=Path, default=None,
                        help="flood: run the copilot_otel of another source tree (e.g. a worktree of main)")
    parser.add_argument("--daemon-arg", action="append", default=[],
                        help="extra argument for `copilot-otel run` (repeatable), "
                             "e.g. --daemon-arg=--max-label-values=100")
    args = parser.parse_args()
    DAEMON_ARGS.extend(args.daemon_arg)
    parts = args.only or ["big-log", "tools", "flood"]
    print(f"machine: {machine()}")
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    load = " ".join(Path("/proc/loadavg").read_text().split()[:3])
    print(f"open-files limit: {soft}; load average {load}; "
          f"daemon flags: {' '.join(DAEMON_ARGS) or '(defaults)'}")
    for part in parts:
        work = Path(tempfile.mkdtemp(prefix=f"attack-bench-{part}-"))
        try:
            if part == "big-log":
                big_log(work, args.log_mb)
            elif part == "tools":
                tool_flood(work, args.tools)
            else:
                junk_flood(work, args.flood_mbps, args.seconds, line=args.flood_line, checkout=args.checkout)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        sys.stdout.flush()


if __name__ == "__main__":
    main()
