"""Sizing a fleet: what one machine sends, and how many machines one gateway takes.

1. One daemon following 20 busy sessions (copies of real Copilot CLI logs, each appended one event every
   ``--gap`` seconds with the timestamp of the moment it is written, a new copy as one ends): the OTLP bytes
   per second it sends (traces and the metrics push, counted on the wire by a TCP relay in front of the
   receiver), the events and spans per second, and the series on its /metrics.
2. One rotel gateway (deploy/rotel/gateway.env) in front of a counting receiver, fed by ``--daemons``
   `copilot-otel replay --rate R` processes at once: the spans per second it delivers, its CPU and memory.

    .venv/bin/python bench/fleet_bench.py                     # both parts
    .venv/bin/python bench/fleet_bench.py --only gateway --daemons 50 --rate 20 --seconds 45
"""

from __future__ import annotations

import argparse
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import DEFAULT_SOURCE, REPO, cpu_seconds, machine, rss_mb
from corpus import Template, source_logs, synthesize

from tests.support.commands import COMMAND, clean_env
from tests.support.daemon import DaemonProcess
from tests.support.fleet import RotelGateway
from tests.support.otlp_receiver import OtlpReceiver
from tests.support.scrape import value

TIMESTAMP = re.compile(rb'"timestamp":"[^"]*"')


class CountingRelay:
    """A TCP relay on loopback to ``target_port`` that counts the bytes clients send through it."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.sent = 0
        self._lock = threading.Lock()
        self._server = socket.create_server(("127.0.0.1", 0))
        self.port = self._server.getsockname()[1]
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._accept, daemon=True)]
        self._threads[0].start()

    def _accept(self) -> None:
        self._server.settimeout(0.2)
        while not self._stop.is_set():
            try:
                client, _ = self._server.accept()
            except TimeoutError:
                continue
            except OSError:  # closed
                return
            upstream = socket.create_connection(("127.0.0.1", self.target_port))
            for source, dest, counted in ((client, upstream, True), (upstream, client, False)):
                thread = threading.Thread(target=self._pump, args=(source, dest, counted), daemon=True)
                thread.start()
                self._threads.append(thread)

    def _pump(self, source: socket.socket, dest: socket.socket, counted: bool) -> None:
        try:
            while data := source.recv(65536):
                if counted:
                    with self._lock:
                        self.sent += len(data)
                dest.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (source, dest):
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self) -> None:
        self._stop.set()
        self._threads[0].join(timeout=5)
        self._server.close()


def busy_sessions(home: Path, templates: list[Template], sessions: int, gap: float, seconds: float) -> int:
    """Append ``sessions`` session logs in ``home`` at once, one event each every ``gap`` s, stamped now; a copy
    that ends is followed by a new one. Returns the events written."""
    import random
    rng = random.Random(7)
    state = home / "session-state"
    written = 0
    copies = 0

    def fresh():
        nonlocal copies
        copies += 1
        template = templates[copies % len(templates)]
        session_id, data = template.render(rng, f"busy{copies}")
        folder = state / session_id
        folder.mkdir(mode=0o700)
        return [open(folder / "events.jsonl", "ab"), iter(data.splitlines(keepends=True))]

    live = [fresh() for _ in range(sessions)]
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        tick = time.monotonic()
        stamp = datetime.now(UTC).strftime('"timestamp":"%Y-%m-%dT%H:%M:%S.%f')[:-3].encode() + b'Z"'
        for index, (handle, lines) in enumerate(live):
            line = next(lines, None)
            if line is None:
                handle.close()
                live[index] = fresh()
                handle, lines = live[index]
                line = next(lines)
            handle.write(TIMESTAMP.sub(stamp, line, count=1))
            handle.flush()
            written += 1
        time.sleep(max(0.0, gap - (time.monotonic() - tick)))
    for handle, _ in live:
        handle.close()
    return written


def one_machine(work: Path, sessions: int, gap: float, seconds: float, push_interval: float) -> None:
    templates = [Template.load(p) for p in source_logs(DEFAULT_SOURCE)]
    home = work / "home"
    (home / "session-state").mkdir(parents=True)
    with OtlpReceiver() as receiver:
        traces, metrics = CountingRelay(receiver.grpc_port), CountingRelay(receiver.http_port)
        env = {"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{traces.port}", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
               "OTEL_METRICS_EXPORTER": "otlp",
               "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT": f"http://127.0.0.1:{metrics.port}/v1/metrics",
               "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL": "http/protobuf",
               "OTEL_METRIC_EXPORT_INTERVAL": str(int(push_interval * 1000))}
        with DaemonProcess(home, work / "state", env=env, log_level="warning") as daemon:
            cpu0 = cpu_seconds(daemon.pid)
            events = busy_sessions(home, templates, sessions, gap, seconds)
            time.sleep(push_interval + 2)  # the last export and push
            cpu = cpu_seconds(daemon.pid) - cpu0
            text = daemon.scrape_text()
            spans = value(daemon.scrape(), "copilot_otel_spans_exported_total")
            rss = rss_mb(daemon.pid)
        traces.close()
        metrics.close()
    lines = [line for line in text.splitlines() if line and not line.startswith("#")]
    ours = [line for line in lines if line.startswith("copilot_")]
    elapsed = seconds + push_interval + 2
    print(f"one machine, {sessions} busy sessions (one event each every {gap} s) for {seconds:.0f} s:")
    print(f"  events written      {events} ({events / seconds:.0f}/s)")
    print(f"  spans exported      {spans:.0f} ({spans / seconds:.0f}/s)")
    print(f"  OTLP traces         {traces.sent / elapsed / 1024:.1f} KiB/s on the wire (gRPC, uncompressed)")
    print(f"  OTLP metrics push   {metrics.sent / elapsed / 1024:.1f} KiB/s (a push every {push_interval:.0f} s; "
          f"{metrics.sent / max(1, elapsed // push_interval) / 1024:.0f} KiB a push)")
    print(f"  /metrics series     {len(lines)} ({len(ours)} copilot_*), {len(text) / 1024:.0f} KiB a scrape")
    print(f"  daemon CPU          {cpu / elapsed * 100:.1f} % of a core, RSS {rss:.0f} MB")


def one_gateway(work: Path, daemons: int, sessions_each: int, rate: float, seconds: float) -> None:
    homes = []
    for index in range(daemons):
        home = work / f"machine-{index}"
        synthesize(home, sessions_each, seed=100 + index)
        homes.append(home)
    with OtlpReceiver() as receiver, RotelGateway(receiver.grpc_endpoint) as gateway:
        env = clean_env({"OTEL_EXPORTER_OTLP_ENDPOINT": gateway.grpc_endpoint, "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"})
        replays = [subprocess.Popen([*COMMAND, "replay", str(home), "--state-dir", str(work / f"state-{i}"),
                                     "--rate", str(rate)], env=env, cwd=REPO, stdin=subprocess.DEVNULL,
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                   for i, home in enumerate(homes)]
        # Measured once every replay delivers (50 Python processes take a while to start on 2 cores).
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and \
                len({s.resource.get("service.instance.id") for s in receiver.spans()}) < daemons:
            time.sleep(1)
        senders = len({s.resource.get("service.instance.id") for s in receiver.spans()})
        before = receiver.spans()
        cpu0, started = cpu_seconds(gateway.pid), time.monotonic()
        time.sleep(seconds)
        during = receiver.spans()[len(before):]
        elapsed = time.monotonic() - started
        seen = {(s.trace_id, s.span_id) for s in before}
        received = len({(s.trace_id, s.span_id) for s in during} - seen)
        again = len(during) - received  # a span the gateway sent twice (it retried a request that timed out)
        cpu = cpu_seconds(gateway.pid) - cpu0
        rss = rss_mb(gateway.pid)
        for replay in replays:
            if replay.poll() is None:
                replay.terminate()
        for replay in replays:
            replay.wait(timeout=60)
    print(f"one rotel gateway, {daemons} replays at --rate {rate:g} each ({daemons * rate:.0f} spans/s offered), "
          f"{seconds:.0f} s once {senders} of them delivered:")
    print(f"  delivered           {received} spans ({received / elapsed:.0f}/s), and {again} more times again")
    print(f"  gateway CPU         {cpu / elapsed * 100:.1f} % of a core "
          f"({cpu / max(1, received) * 1e6:.0f} µs a span), RSS {rss:.0f} MB")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sessions", type=int, default=20, help="busy sessions on the one machine (20)")
    parser.add_argument("--gap", type=float, default=0.5, help="seconds between a busy session's events (0.5)")
    parser.add_argument("--seconds", type=float, default=60, help="length of each part (60)")
    parser.add_argument("--push-interval", type=float, default=10, help="the metrics push interval (10 s)")
    parser.add_argument("--daemons", type=int, default=50, help="replays feeding the gateway at once (50)")
    parser.add_argument("--sessions-each", type=int, default=60, help="sessions each replay sends (60)")
    parser.add_argument("--rate", type=float, default=20, help="spans a second each replay sends (20)")
    parser.add_argument("--only", choices=("machine", "gateway"), help="run one part")
    args = parser.parse_args(argv)
    print(machine())
    work = Path(tempfile.mkdtemp(prefix="fleet-bench-"))
    try:
        if args.only in (None, "machine"):
            one_machine(work / "machine", args.sessions, args.gap, args.seconds, args.push_interval)
        if args.only in (None, "gateway"):
            one_gateway(work / "gateway", args.daemons, args.sessions_each, args.rate, args.seconds)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
