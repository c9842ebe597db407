"""The session metrics' totals travel with the checkpoint: after any number of restarts, and after commits lost
to a crash, the real Daemon's counters and histograms are those of one run over the final logs, never a count
twice or a count lost; the label cap counts the label values it resumed."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from copilot_otel.delivery.sinks import MemorySink
from copilot_otel.metrics.registry import Metrics
from tests.support.files import append, new_session
from tests.support.inprocess import InProcessDaemon
from tests.support.net import wait_until
from tests.support.scrape import value

STORED = Path(__file__).resolve().parents[1] / "fixtures" / "cli" / "1.0.102"


def lines_of(scenario: str) -> list[bytes]:
    return next((STORED / scenario / "session-state").glob("*/events.jsonl")).read_bytes().splitlines(keepends=True)


def session_totals(daemon: InProcessDaemon) -> dict:
    """Every copilot_* counter and histogram sample (not the daemon's own copilot_otel_*), as /metrics shows it."""
    return {key: number for key, number in daemon.scrape().items()
            if key[0].startswith("copilot_") and not key[0].startswith("copilot_otel_")
            and key[0].endswith(("_total", "_bucket", "_count", "_sum"))}


def committed_to_the_end(daemon: InProcessDaemon, paths: list[Path]) -> bool:
    """The checkpoint holds each log up to its last byte (all it read is counted in the committed totals)."""
    positions = daemon.daemon.checkpoint.load()
    return all(str(p) in positions and positions[str(p)].offset == p.stat().st_size for p in paths)


def settled(daemon: InProcessDaemon, paths: list[Path]) -> dict:
    """The totals once every log is read and committed to its end, and a last idle confirmation committed."""
    wait_until(lambda: committed_to_the_end(daemon, paths), what="the logs committed to their end")
    commits = value(daemon.scrape(), "copilot_otel_checkpoint_commits_total")
    wait_until(lambda: value(daemon.scrape(), "copilot_otel_checkpoint_commits_total") > commits
               or not daemon.daemon.queue.depth, what="the queue empty")
    daemon.daemon.queue.flush(10)
    return session_totals(daemon)


def test_totals_over_restarts_and_lost_commits_are_those_of_one_run(tmp_path):
    """A log written in three parts with a restart after each, then the state of the first restart put back (as
    if the commits after it were lost): each time the totals equal a fresh daemon's over the same file."""
    lines = lines_of("subagent")
    other = lines_of("failing_tool")
    home, state, sink = tmp_path / "home", tmp_path / "state", MemorySink()
    path, second = new_session(home, "parts"), new_session(home, "whole")
    thirds = [lines[: len(lines) // 3], lines[len(lines) // 3: 2 * len(lines) // 3], lines[2 * len(lines) // 3:]]
    with InProcessDaemon(home, state, sink=sink) as daemon:
        append(path, b"".join(thirds[0]))
        append(second, b"".join(other))
        settled(daemon, [path, second])
    saved = tmp_path / "state-after-first"
    shutil.copytree(state, saved)
    for part in thirds[1:]:
        append(path, b"".join(part))
        with InProcessDaemon(home, state, sink=sink) as daemon:
            resumed = settled(daemon, [path, second])
    with InProcessDaemon(home, state, sink=sink) as daemon:
        restarted = settled(daemon, [path, second])
    shutil.rmtree(state)
    shutil.copytree(saved, state)  # every commit after the first run's is lost
    with InProcessDaemon(home, state, sink=sink) as daemon:
        after_loss = settled(daemon, [path, second])
    with InProcessDaemon(home, tmp_path / "fresh", sink=MemorySink()) as daemon:
        once = settled(daemon, [path, second])
    assert any(name == "copilot_tool_calls_total" and number for (name, _labels), number in once.items())
    # Sums of durations are added in another order across restarts: equal to the last bits of a float.
    assert resumed and restarted == pytest.approx(once, rel=1e-12) and after_loss == pytest.approx(once, rel=1e-12)
    assert set(restarted) == set(once) == set(after_loss)


def test_resumed_label_values_count_against_the_cap():
    """A daemon that resumes series of tools a, b counts them among --max-label-values: with a cap of 3, one new
    tool name more is counted, the next one is 'other'."""
    from copilot_otel.model.records import MetricUpdate
    from copilot_otel.vocab import Metric

    before = Metrics(process=False, max_label_values=3)
    for tool in ("a", "b"):
        before.apply(MetricUpdate(Metric.TOOL_CALLS, (tool, "success"), 1.0))
    after = Metrics(process=False, max_label_values=3)
    assert after.resume(before.totals()) > 0
    for tool in ("c", "d"):
        after.apply(MetricUpdate(Metric.TOOL_CALLS, (tool, "success"), 1.0))
    tools = {sample.labels["tool"]: sample.value for family in after.tool_calls.collect() for sample in family.samples
             if sample.name.endswith("_total")}
    shown = {sample.labels["tool"] for family in after.registry.collect() if family.name == "copilot_tool_calls"
             for sample in family.samples if sample.name.endswith("_total")}
    assert tools == {"c": 1.0, "other": 1.0} and shown == {"a", "b", "c", "other"}
