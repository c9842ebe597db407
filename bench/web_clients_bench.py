"""What web view clients cost the daemon (issue 21): clients that never read, and many live views.

Both parts run the real daemon on logs made from a stored real CLI log (tests/support/biglog.py:
its interactions repeated with fresh ids), and scrape /metrics on a new connection every
``--scrape-every`` s while the clients are at work.

  non-reading   one session of about ``--spans`` spans (24,000). One full GET of
                /api/session/<id> first (its size and time), then ``--clients`` connections
                (200) that each send a GET of /api/session/<id> (or, one in four, of its
                /stream) and never read. The daemon's VmRSS and VmHWM (/proc) before, every 0.5 s
                while they are held (``--hold`` s, 35: past the write deadline) and after they are
                closed (``--after`` s), and the scrape times meanwhile. Target: RSS < 300 MB.
  live views    ``--sessions`` sessions (4) of about ``--session-spans`` spans (9,000), live, one
                of them appended a real interaction (20 lines, ~10 spans) every ``--append-every``
                s (0.25) round robin, while ``--views`` streams (64) read: three in four follow a
                session (/api/session/<id>/stream), one in four the sessions page
                (/api/sessions/stream). Over ``--duration`` s (40), after every stream's first
                message: /metrics p50/p99, the daemon's CPU (/proc/<pid>/stat) and the bytes the
                streams received. Target: scrape p99 < 50 ms.

    python bench/web_clients_bench.py
    python bench/web_clients_bench.py --skip-live --clients 200 --hold 20
"""

from __future__ import annotations

import argparse
import http.client
import os
import selectors
import shutil
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import add_daemon_options, bench_daemon, cpu_seconds, machine, median, percentile

from tests.support.biglog import another_copy, grow
from tests.support.files import new_session
from tests.support.net import LOOPBACK, wait_until
from tests.support.scrape import value
from tests.support.viewclient import get, get_json, send_get

STORED = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "cli" / "1.0.102"
SPANS_PER_MB = 738  # multi_turn grown: measured with waterfall.SessionTrace


def real_log() -> bytes:
    """The stored multi_turn log without its session.shutdown (the grown session stays live)."""
    data = next((STORED / "multi_turn" / "session-state").glob("*/events.jsonl")).read_bytes()
    return b"".join(line for line in data.splitlines(keepends=True) if b'"type":"session.shutdown"' not in line)


def memory(pid: int) -> tuple[float, float]:
    """(VmRSS, VmHWM) of a process, MiB."""
    found = {}
    with open(f"/proc/{pid}/status") as handle:
        for line in handle:
            if line.startswith(("VmRSS:", "VmHWM:")):
                found[line.split(":")[0]] = int(line.split()[1]) / 1024
    return found.get("VmRSS", float("nan")), found.get("VmHWM", float("nan"))


def scrape_ms(port: int, timeout: float = 60.0) -> float:
    started = time.perf_counter()
    connection = http.client.HTTPConnection(LOOPBACK, port, timeout=timeout)
    try:
        connection.request("GET", "/metrics")
        connection.getresponse().read()
    finally:
        connection.close()
    return (time.perf_counter() - started) * 1000


class Scraper(threading.Thread):
    """Scrapes every ``every`` s until stopped; a scrape that fails is counted, not timed."""

    def __init__(self, port: int, every: float) -> None:
        super().__init__(daemon=True)
        self.port, self.every = port, every
        self.times: list[float] = []
        self.at: list[float] = []  # when each timed scrape began (time.monotonic())
        self.failed = 0
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            started = time.monotonic()
            try:
                self.times.append(scrape_ms(self.port))
                self.at.append(started)
            except OSError:
                self.failed += 1
            self.stop.wait(max(0.0, self.every - (time.monotonic() - started)))

    def slowest(self, since: float, count: int = 4) -> str:
        """The slowest scrapes, each with when it began (s after ``since``)."""
        worst = sorted(zip(self.times, self.at), reverse=True)[:count]
        return ", ".join(f"{ms:.0f} ms at {at - since:.1f} s" for ms, at in worst)

    def report(self) -> str:
        if not self.times:
            return f"no scrape answered ({self.failed} failed)"
        return (f"{len(self.times)} scrapes: p50 {median(self.times):.1f} ms, p99 {percentile(self.times, 99):.1f} ms, "
                f"max {max(self.times):.1f} ms" + (f", {self.failed} failed" if self.failed else ""))


def settled(daemon, timeout: float) -> None:
    """Until the daemon exported everything it read and the count stopped moving."""
    last = [-1.0, 0]

    def still() -> bool:
        samples = daemon.scrape(timeout=60)
        exported = value(samples, "copilot_otel_spans_exported_total")
        queued = value(samples, "copilot_otel_export_queue_spans")
        if exported == last[0] and exported > 0 and queued == 0:
            last[1] += 1
        else:
            last[:] = [exported, 0]
        return last[1] >= 3

    wait_until(still, timeout=timeout, interval=1.0, what="the daemon to read every log")


# ------------------------------------------------------------------------ non-reading clients

def non_reading(work: Path, args) -> None:
    home = work / "home-big"
    path = new_session(home, "big-session")
    path.write_bytes(grow(real_log(), int(args.spans / SPANS_PER_MB * (1 << 20))))
    print(f"\nnon-reading clients: one session of {path.stat().st_size / 1e6:.1f} MB", flush=True)
    daemon = bench_daemon(home, work / "daemon-big", args=args.daemon_arg)
    with daemon:
        settled(daemon, args.startup_timeout)
        rss, hwm = memory(daemon.pid)
        print(f"  the daemon after reading it: RSS {rss:.0f} MiB, peak {hwm:.0f} MiB")
        started = time.perf_counter()
        status, _headers, body = get(daemon.port, "/api/session/big-session", timeout=120)
        took = time.perf_counter() - started
        spans = body.count(b'"trace":"')
        print(f"  one full GET /api/session/<id>: status {status}, {len(body) / 1e6:.1f} MB, {spans} spans "
              f"in that response, {took:.2f} s")
        time.sleep(args.settle)
        rss, hwm = memory(daemon.pid)
        print(f"  before: RSS {rss:.0f} MiB, peak {hwm:.0f} MiB; scrape {scrape_ms(daemon.port):.1f} ms", flush=True)
        scraper = Scraper(daemon.port, args.scrape_every)
        scraper.start()
        clients, refused = [], 0
        opened = time.monotonic()
        for i in range(args.clients):
            route = "/api/session/big-session/stream" if i % 4 == 3 else "/api/session/big-session"
            try:
                clients.append(send_get(daemon.port, route))
            except OSError:
                refused += 1
        print(f"  {len(clients)} clients sent their GET in {time.monotonic() - opened:.1f} s"
              + (f" ({refused} could not connect)" if refused else ""), flush=True)
        peak_rss, samples = 0.0, []
        held = time.monotonic()
        while time.monotonic() - held < args.hold:
            rss, hwm = memory(daemon.pid)
            peak_rss = max(peak_rss, rss)
            samples.append(rss)
            time.sleep(0.5)
        rss, hwm = memory(daemon.pid)
        print(f"  while held {args.hold:.0f} s: RSS max {peak_rss:.0f} MiB (last {rss:.0f}), peak {hwm:.0f} MiB  "
              f"target < 300 MB: {'met' if hwm * 1.048576 < 300 else 'MISSED'}")
        print(f"  scrapes meanwhile: {scraper.report()}; slowest: {scraper.slowest(opened)}", flush=True)
        scraper.times.clear()
        scraper.at.clear()
        for sock in clients:
            sock.close()
        closed = time.monotonic()
        while time.monotonic() - closed < args.after:
            time.sleep(0.5)
        rss, hwm = memory(daemon.pid)
        scraper.stop.set()
        scraper.join()
        print(f"  {args.after:.0f} s after they closed: RSS {rss:.0f} MiB; scrapes: {scraper.report()}")
        errors = {reason: value(daemon.scrape(), "copilot_otel_http_errors_total", reason=reason)
                  for reason in ("write_timeout", "connection_refused", "connection_evicted")}
        print(f"  copilot_otel_http_errors_total: {errors}", flush=True)
    shutil.rmtree(home, ignore_errors=True)


# ------------------------------------------------------------------------ live views

class Readers(threading.Thread):
    """Reads every stream as it comes (one thread, selectors), counting bytes per stream."""

    def __init__(self, socks: dict) -> None:
        super().__init__(daemon=True)
        self.selector = selectors.DefaultSelector()
        self.received = dict.fromkeys(socks, 0)
        self.ended: set = set()
        for name, sock in socks.items():
            sock.setblocking(False)
            self.selector.register(sock, selectors.EVENT_READ, name)
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            for key, _mask in self.selector.select(timeout=0.2):
                try:
                    data = key.fileobj.recv(1 << 18)
                except BlockingIOError:
                    continue
                except OSError:
                    data = b""
                if not data:
                    self.ended.add(key.data)
                    self.selector.unregister(key.fileobj)
                    continue
                self.received[key.data] += len(data)


class Appender(threading.Thread):
    """Appends a real interaction to the sessions, round robin, every ``every`` s."""

    def __init__(self, paths: list[Path], log: bytes, every: float) -> None:
        super().__init__(daemon=True)
        self.paths, self.log, self.every = paths, log, every
        self.count = 0
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.wait(self.every):
            path = self.paths[self.count % len(self.paths)]
            self.count += 1
            with open(path, "ab") as handle:
                handle.write(another_copy(self.log, f"live{self.count}", datetime.now(UTC)))


def live_views(work: Path, args) -> None:
    home = work / "home-live"
    log = real_log()
    paths = []
    for i in range(args.sessions):
        path = new_session(home, f"live-{i}")
        path.write_bytes(grow(log, int(args.session_spans / SPANS_PER_MB * (1 << 20))))
        paths.append(path)
    print(f"\nlive views: {args.sessions} sessions of {paths[0].stat().st_size / 1e6:.1f} MB, "
          f"{args.views} streams", flush=True)
    daemon = bench_daemon(home, work / "daemon-live", args=args.daemon_arg)
    with daemon:
        settled(daemon, args.startup_timeout)
        listed = get_json(daemon.port, "/api/sessions")["sessions"]
        print(f"  {len(listed)} sessions listed; scrape alone {scrape_ms(daemon.port):.1f} ms")
        appender = Appender(paths, log, args.append_every)
        appender.start()
        socks = {}
        for i in range(args.views):
            if i % 4 == 3:
                name, route = f"sessions-{i}", "/api/sessions/stream"
            else:
                session = f"live-{i % args.sessions}"
                name, route = f"session-{i}", f"/api/session/{session}/stream"
            socks[name] = send_get(daemon.port, route)
        readers = Readers(socks)
        readers.start()
        opened = time.monotonic()
        wait_until(lambda: all(n > 2000 or name in readers.ended for name, n in readers.received.items()),
                   timeout=300, interval=0.2, what="every stream's first message")
        print(f"  every stream got its first message after {time.monotonic() - opened:.1f} s", flush=True)
        time.sleep(args.settle)
        first = sum(readers.received.values())
        print(f"  {first / 1e6:.1f} MB received {time.monotonic() - opened:.1f} s after they opened (each session "
              f"stream: its whole session, then what changed); {len(readers.ended)} ended", flush=True)
        scraper = Scraper(daemon.port, args.scrape_every)
        before = dict(readers.received)
        cpu0, t0 = cpu_seconds(daemon.pid), time.monotonic()
        scraper.start()
        time.sleep(args.duration)
        scraper.stop.set()
        scraper.join()
        elapsed = time.monotonic() - t0
        cpu = cpu_seconds(daemon.pid) - cpu0
        sent = {name: readers.received[name] - before[name] for name in before}
        session_bytes = sum(n for name, n in sent.items() if name.startswith("session-"))
        sessions_bytes = sum(n for name, n in sent.items() if name.startswith("sessions-"))
        appender.stop.set()
        readers.stop.set()
        appender.join()
        readers.join()
        p99 = percentile(scraper.times, 99) if scraper.times else float("inf")
        print(f"  over {elapsed:.0f} s ({appender.count} interactions appended):")
        print(f"    /metrics {scraper.report()}  target p99 < 50 ms: {'met' if p99 < 50 else 'MISSED'}")
        print(f"    daemon CPU {100 * cpu / elapsed:.0f} % of a core; RSS {memory(daemon.pid)[0]:.0f} MiB")
        print(f"    received {(session_bytes + sessions_bytes) / 1e6:.1f} MB: session streams "
              f"{session_bytes / 1e6:.1f} MB, sessions streams {sessions_bytes / 1e6:.1f} MB; "
              f"{len(readers.ended)} streams ended", flush=True)
        for sock in socks.values():
            sock.close()
    shutil.rmtree(home, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--spans", type=int, default=24_000, help="spans of the big session (default 24000)")
    parser.add_argument("--clients", type=int, default=200, help="non-reading clients (default 200)")
    parser.add_argument("--hold", type=float, default=35.0,
                        help="s the clients are held (default 35: past the 30 s write deadline)")
    parser.add_argument("--after", type=float, default=15.0, help="s measured after they close (default 15)")
    parser.add_argument("--sessions", type=int, default=4, help="live sessions (default 4)")
    parser.add_argument("--session-spans", type=int, default=9_000, help="spans of each (default 9000)")
    parser.add_argument("--views", type=int, default=64, help="live streams (default 64)")
    parser.add_argument("--append-every", type=float, default=0.25, help="s between appends (default 0.25)")
    parser.add_argument("--duration", type=float, default=40.0, help="s measured with the views open (default 40)")
    parser.add_argument("--scrape-every", type=float, default=0.25, help="s between scrapes (default 0.25)")
    parser.add_argument("--skip-non-reading", action="store_true")
    parser.add_argument("--skip-live", action="store_true")
    add_daemon_options(parser, settle=3.0)
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="copilot-otel-clients-bench-"))
    print(f"machine: {machine()}; load average {os.getloadavg()[0]:.2f}", flush=True)
    try:
        if not args.skip_non_reading:
            non_reading(work, args)
        if not args.skip_live:
            live_views(work, args)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"load average {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
