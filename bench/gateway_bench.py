"""Sizing the real gateway: the OpenTelemetry Collector (built by scripts/backends.sh) running
deploy/otelcol/gateway.yaml as shipped, its queue on disk, fed by ``--daemons`` `copilot-otel replay --rate R`
processes at once and ``--pushers`` daemons pushing their metrics every second.

1. Throughput: the backend (a counting rotel receiver standing in for Jaeger and Prometheus, so that the gateway,
   not the backend, is what is measured) up. Spans and metric points a second through the gateway (its own
   otelcol_exporter_sent_* counters), its CPU per core and RSS.
2. Outage: the backend unreachable (a TCP relay that closes its port). The queue's bytes on disk and the gateway's
   RSS as the queue grows, per hour of outage at that rate (a straight line through the samples).

    .venv/bin/python bench/gateway_bench.py                        # 50 replays at 20 spans/s, 5 pushers, 30 s each
    .venv/bin/python bench/gateway_bench.py --daemons 20 --seconds 20
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import REPO, cpu_seconds, machine, rss_mb
from corpus import synthesize

from tests.support.commands import COMMAND, clean_env
from tests.support.daemon import DaemonProcess
from tests.support.otlp_receiver import OtlpReceiver
from tests.support.stack import Gateway, TcpRelay


def counter(gateway: Gateway, name: str) -> float:
    """A gateway counter summed over its labels (0 before its first sample)."""
    return sum(v for (n, _), v in gateway.telemetry(timeout=60).items() if n == name)


def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_blocks * 512 for p in folder.rglob("*") if p.is_file())


def run(work: Path, daemons: int, sessions_each: int, rate: float, pushers: int, seconds: float) -> None:
    homes = []
    for index in range(daemons):
        home = work / f"machine-{index}"
        synthesize(home, sessions_each, seed=100 + index)
        homes.append(home)
    with OtlpReceiver() as receiver, TcpRelay(receiver.grpc_endpoint.removeprefix("http://")) as relay:
        gateway = Gateway(work / "gateway", traces_to=relay.address, metrics_to=receiver.http_base)
        with gateway:
            env = clean_env({"OTEL_EXPORTER_OTLP_ENDPOINT": gateway.grpc_endpoint,
                             "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"})
            push_env = {"OTEL_EXPORTER_OTLP_ENDPOINT": gateway.grpc_endpoint, "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
                        "OTEL_METRICS_EXPORTER": "otlp", "OTEL_METRIC_EXPORT_INTERVAL": "1000"}
            pushing = [DaemonProcess(homes[i % len(homes)], work / f"pusher-{i}", traces_file=work / f"p{i}.jsonl",
                                     env=push_env, log_level="warning").start(timeout=120) for i in range(pushers)]
            replays = [subprocess.Popen([*COMMAND, "replay", str(home), "--state-dir", str(work / f"state-{i}"),
                                         "--rate", str(rate)], env=env, cwd=REPO, stdin=subprocess.DEVNULL,
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                       for i, home in enumerate(homes)]
            try:
                time.sleep(min(60.0, 10 + daemons * 0.5))  # the replays start (Python processes, 2 cores)
                spans0, points0 = (counter(gateway, f"otelcol_exporter_sent_{kind}_total")
                                   for kind in ("spans", "metric_points"))
                cpu0, started = cpu_seconds(gateway.proc.pid), time.monotonic()
                time.sleep(seconds)
                elapsed = time.monotonic() - started
                spans = counter(gateway, "otelcol_exporter_sent_spans_total") - spans0
                points = counter(gateway, "otelcol_exporter_sent_metric_points_total") - points0
                cpu = cpu_seconds(gateway.proc.pid) - cpu0
                rss = rss_mb(gateway.proc.pid)
                print(f"the Collector gateway (deploy/otelcol/gateway.yaml), {daemons} replays at --rate {rate:g} "
                      f"({daemons * rate:.0f} spans/s offered), {pushers} daemons pushing every 1 s, {seconds:.0f} s:")
                print(f"  through             {spans / elapsed:.0f} spans/s, {points / elapsed:.0f} metric points/s")
                print(f"  CPU                 {cpu / elapsed * 100:.1f} % of a core: "
                      f"{spans / max(cpu, 1e-9):.0f} spans/s per core (points alongside)")
                print(f"  RSS                 {rss:.0f} MB")

                relay.cut()  # the backend is unreachable: everything the gateway takes waits in its queue
                queue = gateway.queue_dir
                samples = []
                started = time.monotonic()
                while time.monotonic() - started < seconds:
                    time.sleep(seconds / 6)
                    samples.append((time.monotonic() - started, folder_bytes(queue), rss_mb(gateway.proc.pid),
                                    counter(gateway, "otelcol_receiver_accepted_spans_total")))
                (t0, b0, _, s0), (t1, b1, r1, s1) = samples[0], samples[-1]
                per_hour = (b1 - b0) / (t1 - t0) * 3600
                taken = (s1 - s0) / (t1 - t0)
                print(f"backend unreachable for {seconds:.0f} s, taking {taken:.0f} spans/s:")
                print(f"  queue on disk       {b1 / 2**20:.1f} MiB after {t1:.0f} s: "
                      f"{per_hour / 2**30:.2f} GiB per hour ({(b1 - b0) / max(1.0, (s1 - s0)):.0f} bytes a span)")
                print(f"  RSS                 {r1:.0f} MB while the queue grows on disk")
            finally:
                for daemon in pushing:
                    daemon.stop()
                for replay in replays:
                    if replay.poll() is None:
                        replay.terminate()
                for replay in replays:
                    replay.wait(timeout=60)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--daemons", type=int, default=50, help="replays feeding the gateway at once (50)")
    parser.add_argument("--sessions-each", type=int, default=60, help="sessions each replay sends (60)")
    parser.add_argument("--rate", type=float, default=20, help="spans a second each replay sends (20)")
    parser.add_argument("--pushers", type=int, default=5, help="daemons pushing their metrics every second (5)")
    parser.add_argument("--seconds", type=float, default=30, help="length of each part (30)")
    args = parser.parse_args(argv)
    print(machine())
    work = Path(tempfile.mkdtemp(prefix="gateway-bench-"))
    try:
        run(work, args.daemons, args.sessions_each, args.rate, args.pushers, args.seconds)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
