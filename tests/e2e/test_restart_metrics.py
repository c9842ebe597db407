"""A restart hides nothing: a real Prometheus scraping a daemon that is killed and started again sees every
copilot_* counter series at its first scrape after the restart, at the value it had, with no reset; the
increase over the restart is exactly what the new sessions did, as `replay` of them alone counts it."""

from __future__ import annotations

import signal
import time
from pathlib import Path

from tests.support.commands import run_replay
from tests.support.daemon import DaemonProcess
from tests.support.files import new_session
from tests.support.net import wait_until, wait_until_steady
from tests.support.prometheus_harness import Prometheus
from tests.support.scrape import parse

FAST = ("--idle-quiet", "0.3", "--rescan-interval", "1")
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "cli" / "1.0.102"
# The session counters (the daemon's own copilot_otel_* counters count what each process did: they do reset).
COUNTERS = '{__name__=~"copilot_.+_total",__name__!~"copilot_otel_.+"}'
# Seconds of 1 s scrapes before the kill and after the new session: increase() extrapolates half a scrape interval
# beyond the samples at each end, so with ~20 samples it is within 10 % of the true increase.
SCRAPES = 8


def log_of(scenario: str) -> bytes:
    return next((FIXTURES / scenario / "session-state").glob("*/events.jsonl")).read_bytes()


def series(prometheus: Prometheus, expr: str) -> dict[tuple, float]:
    """{(name, sorted labels without job and instance): value} of an instant query."""
    return {(r["metric"]["__name__"], tuple(sorted((k, v) for k, v in r["metric"].items()
                                                   if k not in ("__name__", "job", "instance")))): float(r["value"][1])
            for r in prometheus.query(expr)}


def counters(samples: dict) -> dict:
    """A scrape's samples of COUNTERS' series (the session counters): what settles once the daemon confirmed
    what it read."""
    return {key: number for key, number in samples.items()
            if key[0].startswith("copilot_") and key[0].endswith("_total") and not key[0].startswith("copilot_otel_")}


def counted_by_replay(tmp_path: Path, folder: Path) -> dict[tuple, float]:
    """What `replay --metrics-file` counts for one session folder alone: its counter samples."""
    metrics = tmp_path / "alone.prom"
    result = run_replay(str(folder), "--traces-file", str(tmp_path / "alone.jsonl"), "--metrics-file", str(metrics),
                        "--state-dir", str(tmp_path / "replay-state"))
    assert result.returncode == 0, result.stderr.decode()
    return {(name, labels): number for (name, labels), number in parse(metrics.read_text()).items()
            if name.endswith("_total") and name.startswith("copilot_") and not name.startswith("copilot_otel_")
            and number}


def scraped_since(prometheus: Prometheus, moment: float) -> bool:
    """Prometheus has scraped the daemon successfully after ``moment`` (Unix time)."""
    return bool(prometheus.query(f'up{{job="copilot-otel"}} == 1 and timestamp(up{{job="copilot-otel"}}) > {moment}'))


def test_after_a_kill_every_series_is_back_at_its_value_and_increase_is_the_new_activity(tmp_path):
    """Sessions counted, the daemon killed (SIGKILL) and started again: at Prometheus' first scrape after the
    restart every counter series it had is there with the same value; a new session then adds exactly what a
    replay of that session alone counts, resets() sees none, and increase() over the restart is that activity."""
    home, state = tmp_path / "home", tmp_path / "state"
    (home / "session-state").mkdir(parents=True)
    daemon = DaemonProcess(home, state, args=FAST)
    with daemon, Prometheus(tmp_path / "prometheus", [f"127.0.0.1:{daemon.port}"]) as prometheus:
        began = time.time()
        for scenario in ("subagent", "failing_tool"):
            new_session(home, scenario).write_bytes(log_of(scenario))
        daemon.wait_for_metric("copilot_sessions_started_total", 2, timeout=30)
        daemon.wait_for_metric("copilot_otel_checkpoint_commits_total", 1, timeout=30)
        wait_until_steady(lambda: counters(daemon.scrape()), polls=4, interval=0.3,
                          what="the idle confirmations and their commit")
        settled, moment = daemon.scrape(), time.time() + SCRAPES
        wait_until(lambda: scraped_since(prometheus, moment), timeout=30, what="scrapes of the settled daemon")
        before = series(prometheus, COUNTERS)
        assert before == {key: number for key, number in settled.items() if key in before}
        assert any(name == "copilot_tool_calls_total" for name, _labels in before)
        daemon.stop(signal.SIGKILL)
        wait_until(lambda: prometheus.query('up{job="copilot-otel"} == 0'), timeout=30, what="the target seen down")
        restarted = time.time()
        daemon.start()
        wait_until(lambda: scraped_since(prometheus, restarted), timeout=30, what="the first scrape after the restart")
        first = series(prometheus, COUNTERS)
        assert first == before  # every series is back, at its value, before any new activity

        new = home / "session-state" / "new-after-restart"
        new_session(home, "new-after-restart").write_bytes(log_of("multi_turn"))
        daemon.wait_for_metric("copilot_sessions_started_total", 3, timeout=30)
        wait_until_steady(lambda: counters(daemon.scrape()), polls=4, interval=0.3, what="the new session's counts")
        moment = time.time() + SCRAPES
        wait_until(lambda: scraped_since(prometheus, moment), timeout=30, what="scrapes of the new session")
        after = series(prometheus, COUNTERS)
        # Longer than the series have lived: increase() extrapolates only by half a scrape interval at each end.
        window = f"{int(time.time() - began) + 60}s"
        resets, increases = {}, {}
        for name in sorted({name for name, _labels in after}):  # one name at a time: a function drops the name
            resets.update(((name, labels), number) for (_n, labels), number in
                          series(prometheus, f"label_replace(resets({name}[{window}]), '__name__', '{name}', '', '')")
                          .items())
            increases.update(((name, labels), number) for (_n, labels), number in
                             series(prometheus,
                                    f"label_replace(increase({name}[{window}]), '__name__', '{name}', '', '')").items())
    added = counted_by_replay(tmp_path, new)
    assert added, "the new session counts something"
    assert set(before) <= set(after)
    assert {key: after[key] - before.get(key, 0.0) for key in after if after[key] != before.get(key, 0.0)} == added
    assert set(resets.values()) == {0.0}
    for key, number in added.items():
        if key in before:  # a series that existed at both ends: increase() is the new activity (SCRAPES)
            assert abs(increases[key] - number) <= 0.1 * number, (key, increases[key], number)
