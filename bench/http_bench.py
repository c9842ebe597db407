"""Does the daemon's HTTP endpoint stay quick while many connections sit idle, half-sent?

Starts the real daemon (`copilot-otel run`, an empty COPILOT_HOME unless --copilot-home is
given, on a free loopback port), times --scrapes GETs of /metrics and of /healthz with no
other client, then opens --connections connections that each send the start of a request
line ("GET /metr") and stop, and times the same GETs again while they are open, opening a new
one for each the server closes (up to a tenth of them before every tenth GET). Each GET is a new connection, as a
scraper without keep-alive makes. Prints p50/p99/max per path, the
daemon's CPU (utime+stime from /proc/<pid>/stat) while the idle connections are held and
while the scrapes run, its open descriptors and threads, and its
copilot_otel_http_errors_total. The server closes half-sent connections at its header
deadline (10 s); at the end the script stops replacing them and waits until all are closed.
Target: scrape p99 < 100 ms with 1000 idle connections.

    python bench/http_bench.py
    python bench/http_bench.py --connections 2000 --scrapes 500
    python bench/http_bench.py --daemon-nofile 512    # the daemon under a 512-descriptor limit
    PYTHONPATH=<another checkout> python bench/http_bench.py    # the same against other code
"""

from __future__ import annotations

import argparse
import http.client
import os
import resource
import select
import shutil
import signal
import socket
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import add_daemon_options, bench_daemon, cpu_seconds, machine, median, percentile

from tests.support.scrape import by_label  # _common put the repository on sys.path


def raise_own_fd_limit(needed: int) -> int:
    """Raise this process's soft RLIMIT_NOFILE towards its hard limit; the daemon inherits it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else max(soft, needed)
    if soft < target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def timed_gets(port: int, path: str, count: int, timeout: float,
               between: Callable[[], None] = lambda: None) -> tuple[list[float], int]:
    """``count`` GETs of ``path``, each on a new connection: (seconds each, failures).
    ``between`` runs (untimed) before every tenth GET."""
    times, failures = [], 0
    for number in range(count):
        if number % 10 == 0:
            between()
        started = time.perf_counter()
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
        try:
            connection.request("GET", path)
            response = connection.getresponse()
            response.read()
            if response.status != 200:
                failures += 1
        except OSError:
            failures += 1
        finally:
            connection.close()
        times.append(time.perf_counter() - started)
    return times, failures


def report(label: str, times: list[float], failures: int) -> None:
    ms = [t * 1000 for t in times]
    print(f"  {label:<9} p50 {median(ms):7.2f} ms   p99 {percentile(ms, 99):7.2f} ms   max {max(ms):7.2f} ms"
          f"   failed {failures}/{len(ms)}", flush=True)


def open_half_sent(port: int, count: int, prefix: bytes) -> list[socket.socket]:
    sockets = []
    for _ in range(count):
        sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        sock.sendall(prefix)
        sockets.append(sock)
    return sockets


def closed(sockets: list[socket.socket]) -> set[int]:
    """The descriptors of ``sockets`` that the server has closed (EOF or reset waiting)."""
    poller = select.poll()
    for sock in sockets:
        poller.register(sock, select.POLLIN)
    return {fd for fd, _events in poller.poll(0)}


def still_open(sockets: list[socket.socket]) -> int:
    return len(sockets) - len(closed(sockets))


class Attacker:
    """Keeps ``count`` half-sent connections open, opening a new one for each the server closes
    (at most a tenth of ``count`` per top-up: under a connection cap most are refused at once)."""

    def __init__(self, port: int, count: int, prefix: bytes) -> None:
        self.port, self.prefix, self.count = port, prefix, count
        self.sockets = open_half_sent(port, count, prefix)
        self.reopened = 0

    def top_up(self) -> None:
        gone = closed(self.sockets)
        if gone:
            for sock in self.sockets:
                if sock.fileno() in gone:
                    sock.close()
            self.sockets = [sock for sock in self.sockets if sock.fileno() != -1]
            again = min(len(gone), max(1, self.count // 10))
            self.sockets += open_half_sent(self.port, again, self.prefix)
            self.reopened += again

    def close(self) -> None:
        for sock in self.sockets:
            sock.close()


def daemon_figures(pid: int) -> str:
    fds = len(os.listdir(f"/proc/{pid}/fd"))
    threads = len(os.listdir(f"/proc/{pid}/task"))
    return f"{fds} open descriptors, {threads} threads"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--connections", type=int, default=1000, help="idle half-sent connections (default 1000)")
    parser.add_argument("--scrapes", type=int, default=200, help="timed GETs per path and phase (default 200)")
    parser.add_argument("--hold", type=float, default=3.0,
                        help="seconds to hold the idle connections before scraping, CPU measured (default 3)")
    parser.add_argument("--prefix", default="GET /metr", help="what each idle connection sends (default 'GET /metr')")
    parser.add_argument("--timeout", type=float, default=10.0, help="client timeout per GET, s (default 10)")
    parser.add_argument("--copilot-home", type=Path, help="COPILOT_HOME for the daemon (default: an empty one)")
    parser.add_argument("--daemon-nofile", type=int,
                        help="run the daemon under `prlimit --nofile=N:N` (the issue measured 512); "
                             "default: this script's raised limit")
    add_daemon_options(parser, settle=1.0)
    args = parser.parse_args(argv)

    import copilot_otel

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # still stop the daemon in `finally`

    limit = raise_own_fd_limit(2 * args.connections + 256)
    print(f"machine: {machine()}; copilot_otel from {Path(copilot_otel.__file__).parent}; "
          f"open-files limit {limit}", flush=True)
    work = Path(tempfile.mkdtemp(prefix="copilot-otel-http-bench-"))
    home = args.copilot_home or work / "home"
    home.mkdir(parents=True, exist_ok=True)
    daemon = bench_daemon(home, work / "daemon", args=args.daemon_arg)
    if args.daemon_nofile:  # prlimit execs the daemon: the pid stays the daemon's
        daemon.prefix = ("prlimit", f"--nofile={args.daemon_nofile}:{args.daemon_nofile}", "--")
    attacker: Attacker | None = None
    try:
        daemon.start(timeout=args.startup_timeout)
        time.sleep(args.settle)
        print(f"daemon pid {daemon.pid} on 127.0.0.1:{daemon.port}: {daemon_figures(daemon.pid)}", flush=True)

        print("no other client:")
        for path in ("/metrics", "/healthz"):
            report(path, *timed_gets(daemon.port, path, args.scrapes, args.timeout))

        began = time.monotonic()
        attacker = Attacker(daemon.port, args.connections, args.prefix.encode())
        opened = time.monotonic() - began
        cpu = cpu_seconds(daemon.pid)
        time.sleep(args.hold)
        held_cpu = (cpu_seconds(daemon.pid) - cpu) / args.hold
        print(f"{args.connections} half-sent connections opened in {opened:.2f} s; while held {args.hold:.0f} s: "
              f"{held_cpu * 100:.1f} % of a core, {daemon_figures(daemon.pid)}", flush=True)

        print("with them open (each one the server closes is replaced before every tenth GET):")
        cpu, wall = cpu_seconds(daemon.pid), time.monotonic()
        for path in ("/metrics", "/healthz"):
            report(path, *timed_gets(daemon.port, path, args.scrapes, args.timeout, attacker.top_up))
        busy_cpu = (cpu_seconds(daemon.pid) - cpu) / (time.monotonic() - wall)
        print(f"  daemon CPU while scraped: {busy_cpu * 100:.1f} % of a core; {daemon_figures(daemon.pid)}; "
              f"{still_open(attacker.sockets)} of {args.connections} idle connections open at the end, "
              f"{attacker.reopened} reopened during the {time.monotonic() - wall:.1f} s", flush=True)

        deadline = time.monotonic() + 20
        while still_open(attacker.sockets) and time.monotonic() < deadline:
            time.sleep(0.2)
        print(f"without top-ups: {still_open(attacker.sockets)} idle connections still open "
              f"{time.monotonic() - began:.1f} s after the first; daemon: {daemon_figures(daemon.pid)}", flush=True)
        try:
            errors = by_label(daemon.scrape(), "copilot_otel_http_errors_total", "reason")
            print("copilot_otel_http_errors_total: "
                  + (", ".join(f"{k} {v:.0f}" for k, v in errors.items() if v) or "none"), flush=True)
        except OSError as exc:
            print(f"final scrape failed: {exc}")
    finally:
        if daemon.proc is not None:
            lines = [line for line in daemon.log_text().splitlines() if line.strip()]
            print(f"daemon log: {len(lines)} lines" + "".join(f"\n  {line[:300]}" for line in lines[:10]))
        if attacker is not None:
            attacker.close()
        daemon.stop()
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
