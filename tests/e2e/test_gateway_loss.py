"""Nothing the gateway acknowledged is lost. The real OpenTelemetry Collector (built from its Go modules) runs
deploy/otelcol/gateway.yaml as shipped, its sending queue in file_storage; a copilot-otel daemon sends it a burst
of sessions (copies of real CLI logs under new ids) and counts a span delivered, moving its checkpoint past it,
once the gateway acknowledged it. The gateway is SIGKILLed at chosen points: inside its batch window, at random
moments of a burst, with Jaeger unreachable so its queue holds everything, while it compacts that queue on
start, with its queue's disk full; Jaeger is unreachable for longer than the exporter's longest backoff. After
each, every span of the burst is in Jaeger, exactly once.

Jaeger keeps its spans in memory here (it stores every copy it is sent, so a duplicate shows); "Jaeger
unreachable" is a relay between the gateway and Jaeger that closes its port and connections (tests/support/
stack.py TcpRelay), as a network or a restarting Jaeger does to its peer."""

from __future__ import annotations

import random
import subprocess
import sys
import time
from collections import Counter
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.commands import run_replay
from tests.support.daemon import DaemonProcess
from tests.support.net import wait_until
from tests.support.otlp_json import read_spans
from tests.support.scrape import value
from tests.support.stack import Gateway, Jaeger, TcpRelay

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))
from corpus import Template  # noqa: E402  (bench/corpus.py: real logs copied under new ids)

SITUATIONS = REPO / "tests" / "fixtures" / "situations"
TEMPLATES = [next((SITUATIONS / name / "session-state").glob("*/events.jsonl"))
             for name in ("many_tools", "background_shell", "crash_resume", "esc_esc")]
# Old logs are history unless backfilled; nothing here is stuck or abandoned (these sessions all ended).
FLAGS = ("--backfill", "--idle-quiet", "0.2", "--rescan-interval", "0.5", "--stuck-after", "100000000")


@dataclass
class Rig:
    root: Path
    home: Path
    jaeger: Jaeger
    relay: TcpRelay
    gateway: Gateway
    daemon: DaemonProcess
    made: int = 0

    def add_sessions(self, count: int) -> None:
        """``count`` more sessions in the home: real logs under new ids, each written whole at once."""
        rng = random.Random(self.made)
        templates = [Template.load(path) for path in TEMPLATES]
        for _ in range(count):
            session_id, data = templates[self.made % len(templates)].render(rng, f"burst{self.made}")
            folder = self.home / "session-state" / session_id
            folder.mkdir(mode=0o700)
            (folder / "events.jsonl").write_bytes(data)
            self.made += 1

    def acknowledged(self) -> float:
        """Spans the daemon counted delivered: the gateway acknowledged them."""
        return value(self.daemon.scrape(), "copilot_otel_spans_exported_total")

    def expected(self) -> Counter:
        """(trace id, span id) of every span `replay` makes of the home, once each."""
        out = self.root / f"replayed-{time.monotonic_ns()}.jsonl"
        done = run_replay(str(self.home), "--traces-file", str(out))
        assert done.returncode == 0, done.stderr.decode()
        return Counter((s.trace_id, s.span_id) for s in read_spans(out))

    def in_jaeger(self, traces: set[str]) -> Counter:
        return Counter((s.trace_id, s.span_id) for t in traces for s in self.jaeger.trace(t))

    def restart_gateway(self) -> None:
        self.gateway.start()

    def all_arrive(self, timeout: float = 120) -> Counter:
        """Waits until the daemon has handed over the whole home and Jaeger holds every span of it; returns what
        Jaeger holds (each span with the number of copies it got)."""
        expected = self.expected()
        traces = {trace for trace, _ in expected}
        wait_until(lambda: self.acknowledged() >= sum(expected.values())
                   and value(self.daemon.scrape(), "copilot_otel_export_queue_spans") == 0, timeout=timeout,
                   interval=0.25, what="the daemon to hand over every span")
        wait_until(lambda: set(self.in_jaeger(traces)) >= set(expected), timeout=timeout, interval=0.5,
                   what="every acknowledged span in Jaeger",
                   seen=lambda: f"{len(set(expected) - set(self.in_jaeger(traces)))} of {len(expected)} missing")
        time.sleep(1.5)  # a second batch window: a duplicate still in the queue would arrive now
        held = self.in_jaeger(traces)
        assert set(held) == set(expected), "Jaeger holds spans the logs do not make"
        return held


@pytest.fixture
def rig(tmp_path):
    home = tmp_path / "home"
    (home / "session-state").mkdir(parents=True)
    with ExitStack() as stack:
        jaeger = stack.enter_context(Jaeger(tmp_path / "jaeger", storage="memory"))
        relay = stack.enter_context(TcpRelay(jaeger.otlp_endpoint))
        gateway = Gateway(tmp_path / "gateway", traces_to=relay.address,
                          metrics_to="http://127.0.0.1:9/api/v1/otlp")  # metrics are not this test's
        stack.enter_context(gateway)
        daemon = DaemonProcess(home, tmp_path / "state", args=FLAGS, log_level="info", env={
            "OTEL_EXPORTER_OTLP_ENDPOINT": gateway.grpc_endpoint, "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"})
        stack.enter_context(daemon)
        yield Rig(tmp_path, home, jaeger, relay, gateway, daemon)


def held_twice(held: Counter) -> list:
    """The spans Jaeger got more than one copy of."""
    return [span for span, copies in held.items() if copies > 1]


def test_a_sigkill_inside_the_batch_window_loses_nothing_acknowledged(rig):
    """The gateway acknowledges a burst and is SIGKILLed inside its 1 s batch window, before the batch went to
    Jaeger: what it acknowledged is in its queue on disk, and the restarted gateway sends it; every span arrives
    once."""
    rig.relay.cut()  # nothing leaves the gateway before the kill: the whole acknowledged burst is at stake
    rig.add_sessions(8)
    wait_until(lambda: rig.acknowledged() > 0, timeout=60, interval=0.02, what="the gateway's first acknowledgement")
    rig.gateway.kill()
    acknowledged = rig.acknowledged()
    assert acknowledged > 0 and not rig.in_jaeger({t for t, _ in rig.expected()})
    rig.relay.mend()
    rig.restart_gateway()
    assert held_twice(rig.all_arrive()) == []


def test_sigkills_at_random_points_of_a_burst_lose_nothing(rig):
    """Sessions keep coming while the gateway is SIGKILLed six times at random moments (during batching, during
    export to Jaeger, between) and restarted at once: every span arrives; a span twice only as the Collector's
    persistent queue documents (a request being exported when the kill came is sent again)."""
    rng = random.Random(41)
    for _ in range(6):
        rig.add_sessions(4)
        time.sleep(rng.uniform(0.05, 1.5))  # the scenario: a kill at a random moment
        rig.gateway.kill()
        rig.restart_gateway()
    held = rig.all_arrive()
    duplicates = held_twice(held)
    # at most the requests in flight at the six kills: one batch (2048 spans at most) each
    assert len(duplicates) <= 6 * 2048, len(duplicates)
    print(f"duplicates after six kills: {len(duplicates)} of {len(held)} spans")


def test_jaeger_unreachable_then_kills_during_start_and_queue_compaction_lose_nothing(rig):
    """Jaeger is unreachable, so the gateway's queue on disk holds the whole burst it acknowledged; it is SIGKILLed
    with the queue full, then SIGKILLed again a moment after it starts (while file_storage compacts the queue on
    start), then started for good. When Jaeger is back, every span arrives once."""
    rig.relay.cut()
    rig.add_sessions(12)
    expected = rig.expected()
    wait_until(lambda: rig.acknowledged() >= sum(expected.values()), timeout=90, interval=0.25,
               what="the gateway to acknowledge the whole burst into its queue")
    queued = sum(number for (name, labels), number in rig.gateway.telemetry().items()
                 if name == "otelcol_exporter_queue_size" and ("exporter", "otlp_grpc/traces") in labels)
    assert queued > 0, rig.gateway.telemetry()
    rig.gateway.kill()
    for delay in (0.0, 0.05, 0.2):
        rig.gateway.start_unready()
        time.sleep(delay)  # the scenario: a kill this long into its start
        rig.gateway.kill()
    rig.restart_gateway()
    rig.relay.mend()
    # The restarted gateway found Jaeger unreachable while it started: its gRPC channel backs off reconnecting
    # (grpc-go: up to 120 s between attempts), on top of the exporter's own 30 s; on a loaded machine the first
    # attempt after the relay mends can come later than all_arrive's default 120 s.
    held = rig.all_arrive(timeout=240)
    assert held_twice(held) == []


def small_disk(rig: Rig, folder: Path, size: str, **variables: str) -> Path:
    """The gateway restarted with its queue on a file system of ``size`` (tmpfs; root only)."""
    folder.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)], check=True)
    rig.gateway.stop()
    rig.gateway.variables.update(GATEWAY_QUEUE_DIR=str(folder), **variables)
    rig.restart_gateway()
    return folder


def test_a_full_queue_refuses_and_the_daemon_keeps_the_rest(rig, tmp_path):
    """The queue is sized below its disk, as the shipped config says it must be (GATEWAY_QUEUE_SPANS 1,000 on a
    4 MiB file system) and Jaeger is unreachable: the queue fills and the gateway refuses the rest; the daemon
    counts the refusals, keeps those spans behind its checkpoint and retries. A SIGKILL with the queue full loses
    nothing: when Jaeger is back every span arrives once."""
    disk = small_disk(rig, tmp_path / "disk", "4m", GATEWAY_QUEUE_SPANS="1000")
    try:
        rig.relay.cut()
        rig.add_sessions(120)
        expected = rig.expected()
        failed = "copilot_otel_spans_failed_total"
        wait_until(lambda: value(rig.daemon.scrape(), failed) > 0, timeout=90, interval=0.25,
                   what="the gateway to refuse once its queue is full")
        assert 0 < rig.acknowledged() < sum(expected.values())
        rig.gateway.kill()
        rig.restart_gateway()
        rig.relay.mend()
        assert held_twice(rig.all_arrive(timeout=240)) == []
    finally:
        rig.gateway.stop()
        subprocess.run(["umount", "-l", str(disk)], check=False)


def test_a_full_queue_disk_refuses_and_the_daemon_still_hands_everything_over(rig, tmp_path):
    """What the queue limit is there to prevent, measured on the real Collector: its queue's disk (1 MiB) fills
    before the queue does. It refuses what it cannot write; the daemon counts the refusals, keeps those spans and
    sends them again until the gateway takes every one. What the gateway had acknowledged may still never reach
    Jaeger after a SIGKILL and a restart on the full disk: its persistent queue does not always survive a full disk
    whole. How much varies from run to run (none, 512 or 1,024 of 4,250 in ours), so it is printed, not asserted;
    docs/reliability.md says so."""
    disk = small_disk(rig, tmp_path / "disk", "1m")
    try:
        rig.relay.cut()
        rig.add_sessions(200)
        expected = rig.expected()
        wait_until(lambda: value(rig.daemon.scrape(), "copilot_otel_spans_failed_total") > 0, timeout=90,
                   interval=0.25, what="the gateway to refuse once its disk is full")
        assert rig.acknowledged() < sum(expected.values())
        rig.gateway.kill()
        rig.restart_gateway()
        rig.relay.mend()
        traces = {trace for trace, _ in expected}
        wait_until(lambda: rig.acknowledged() >= sum(expected.values())
                   and value(rig.daemon.scrape(), "copilot_otel_export_queue_spans") == 0, timeout=180,
                   interval=0.5, what="the daemon to hand over every span")
        time.sleep(5)  # what the restarted gateway's queue still holds goes out
        held = rig.in_jaeger(traces)
        assert set(held) <= set(expected), "Jaeger holds spans the logs do not make"
        lost = set(expected) - set(held)
        print(f"lost with a full queue disk: {len(lost)} of {sum(expected.values())} spans, "
              f"{len(held_twice(held))} arrived twice")
    finally:
        rig.gateway.stop()
        subprocess.run(["umount", "-l", str(disk)], check=False)


def test_a_graceful_gateway_restart_while_jaeger_is_unreachable_loses_nothing(rig):
    """A rolling restart (SIGTERM) of the gateway while Jaeger is unreachable: it gives up the requests it was
    retrying ("interrupted due to shutdown") but they stay in its queue on disk, and the restarted gateway sends
    them: every span arrives once."""
    rig.relay.cut()
    rig.add_sessions(8)
    expected = rig.expected()
    wait_until(lambda: rig.acknowledged() >= sum(expected.values()), timeout=60, interval=0.25,
               what="the gateway to acknowledge the burst")
    time.sleep(2)  # past the batch window: a batch is being retried
    rig.gateway.stop()
    rig.restart_gateway()
    rig.relay.mend()
    assert held_twice(rig.all_arrive()) == []


def test_jaeger_unreachable_longer_than_the_longest_backoff_loses_nothing(rig):
    """Jaeger is unreachable for 35 s, longer than the exporter's longest wait between retries (30 s); the
    traces exporter retries without a deadline (max_elapsed_time: 0), so nothing is dropped: when Jaeger is back
    every span arrives once."""
    rig.relay.cut()
    rig.add_sessions(6)
    expected = rig.expected()
    wait_until(lambda: rig.acknowledged() >= sum(expected.values()), timeout=60, interval=0.25,
               what="the gateway to acknowledge the burst")
    time.sleep(35)  # past the exporter's 30 s: a deadline would drop now
    assert "Exporting failed. Dropping data" not in rig.gateway.log_path.read_text()
    rig.relay.mend()
    held = rig.all_arrive(timeout=90)
    assert held_twice(held) == []
