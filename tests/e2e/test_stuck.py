"""Stuck sessions people can act on, with the real CLI and the real daemon: the stalled series names the
tool and the repository, the log says when a session becomes stuck and when it recovers, a snapshot of
the open work is exported while it is stuck and superseded by the final spans (same ids), `inspect` and
`sessions` name the state as the daemon does, and a tool cut off by a crash ends where its log ends."""

from __future__ import annotations

import json
import re

from tests.support.browser import screenshot
from tests.support.commands import run_copilot_otel, run_inspect, run_replay
from tests.support.copilot_cli import prompt_for
from tests.support.daemon import DaemonProcess, complete_lines_spans
from tests.support.net import wait_until
from tests.support.otlp_json import iso_ns, read_spans
from tests.support.scrape import stalled, value

FAST = ("--idle-quiet", "0.3", "--rescan-interval", "1")
THRESHOLDS = ("--stuck-after", "600", "--stuck-after-tool", "3600,bash=2")


def tool_started(process) -> bool:
    return process.events_path.exists() and b'"tool.execution_start"' in process.events_path.read_bytes()


def inspect_json(session_id: str, home, *args: str) -> dict:
    result = run_copilot_otel("inspect", session_id, "--copilot-home", str(home), "--json", *args)
    assert result.returncode == 0, result.stderr.decode()
    return json.loads(result.stdout)


def test_a_tool_past_its_own_threshold(cli, provider, tmp_path):
    """bash sleeps 9 s against a bash threshold of 2 s (other tools: an hour): the session becomes stuck;
    the series carries tool=bash; one log line says so and one that it recovered; the open interaction,
    turn and tool are exported marked github.copilot.running, then again, final, with the same span ids; while
    stuck, `inspect` and `sessions` (from the daemon and from the files) say stuck too."""
    home, traces = tmp_path / "home", tmp_path / "traces.jsonl"
    (home / "session-state").mkdir(parents=True)
    with DaemonProcess(home, tmp_path / "state", traces_file=traces, args=FAST + THRESHOLDS,
                       log_level="info") as daemon:
        sleeper = cli.start(prompt_for("sleep_tool", 9), home=home, port=provider.port, cwd=tmp_path / "work")
        wait_until(lambda: stalled(daemon.scrape(), session_id=sleeper.session_id,
                                 state="stuck", tool="bash"), timeout=90, what="stuck on bash")
        assert inspect_json(sleeper.session_id, home, *THRESHOLDS)["session"]["state"] == "stuck"
        listed = run_copilot_otel("sessions", "--copilot-home", str(home), "--state-dir", str(tmp_path / "state"),
                                  "--json")  # the daemon's socket in its state dir
        assert [(s["id"], s["state"], s["waiting_on"]) for s in json.loads(listed.stdout)] == [
            (sleeper.session_id, "stuck", "bash")]
        from_files = run_copilot_otel("sessions", "--copilot-home", str(home), "--from-files", "--json",
                                      "--state-dir", str(tmp_path / "other"), *THRESHOLDS)
        assert [s["state"] for s in json.loads(from_files.stdout)] == ["stuck"]
        snapshot = wait_until(lambda: [s for s in complete_lines_spans(traces)
                                       if s.attributes.get("github.copilot.running")], what="the snapshot spans")
        sleeper.wait()
        wait_until(lambda: "is no longer stuck" in daemon.log_text(), what="the recovery line")
        wait_until(lambda: not [k for k in daemon.scrape() if k[0] == "copilot_session_stalled_seconds"],
                   what="the series to go")
        log = daemon.log_text()
    assert len(re.findall(rf"session {sleeper.session_id} is stuck: waiting on tool bash", log)) == 1
    assert len(re.findall(rf"session {sleeper.session_id} is no longer stuck", log)) == 1
    assert {s.name for s in snapshot} == {"invoke_agent copilot", "turn", "execute_tool bash"}
    final = {s.span_id: s for s in read_spans(traces) if not s.attributes.get("github.copilot.running")}
    for open_span in snapshot:
        done = final[open_span.span_id]  # the final span has the snapshot's id and supersedes it
        assert done.name == open_span.name and done.start_time_unix_nano == open_span.start_time_unix_nano
        assert done.end_time_unix_nano >= open_span.end_time_unix_nano - 10 ** 9
    tool = next(s for s in snapshot if s.name == "execute_tool bash")
    assert tool.duration_ns >= 2 * 10 ** 9  # it ends when it was found stuck, not at its start


def test_a_tool_cut_off_by_a_crash_ends_where_the_log_ends(cli, provider, tmp_path, browser):
    """A CLI killed while bash sleeps leaves no later trace of its death: the daemon and a replay both end
    the tool at the last event written (its own start) as incomplete, and `inspect` and the session's page say
    alike that the session was abandoned, cut off in bash, whose end is unknown."""
    home, traces, replayed = tmp_path / "home", tmp_path / "traces.jsonl", tmp_path / "replayed.jsonl"
    (home / "session-state").mkdir(parents=True)
    with DaemonProcess(home, tmp_path / "state", traces_file=traces, args=FAST) as daemon:
        victim = cli.start(prompt_for("sleep_tool", 60), home=home, port=provider.port, cwd=tmp_path / "work")
        wait_until(lambda: tool_started(victim), timeout=90, what="the tool to start")
        wait_until(lambda: value(daemon.scrape(), "copilot_sessions", state="waiting_tool") == 1, what="waiting")
        victim.kill()
        victim.popen.wait(timeout=10)
        wait_until(lambda: stalled(daemon.scrape(), session_id=victim.session_id,
                                 state="abandoned", tool="bash"), timeout=20, what="abandoned")
        inspected = run_inspect(victim.session_id, "--copilot-home", str(home))
        wait_until(lambda: any(s.name == "execute_tool bash" for s in complete_lines_spans(traces)), what="the tool")
        page = browser.page()
        page.goto(daemon.page_url(f"/session/{victim.session_id}"))
        tool = page.locator('.span.op-execute_tool:has(.name:text-is("execute_tool bash")) .dur')
        wait_until(lambda: "end unknown" in tool.inner_text(), what="the cut-off tool on the page")
        assert re.fullmatch(r" \u2265 \d+ ms, end unknown", tool.inner_text()), tool.inner_text()
        facts = page.locator("#facts").inner_text()
        assert re.search(r"cut off in\s+tool bash since .+, end unknown", facts), facts
        screenshot(page, "session-abandoned")
        assert page.errors == []
    assert run_replay(str(victim.events_path), "--traces-file", str(replayed)).returncode == 0
    events = [json.loads(line) for line in victim.events_path.read_text().splitlines()]
    last_ns = iso_ns(events[-1]["timestamp"])
    live = next(s for s in read_spans(traces) if s.name == "execute_tool bash")
    later = next(s for s in read_spans(replayed) if s.name == "execute_tool bash")
    assert (live.span_id, live.end_time_unix_nano) == (later.span_id, later.end_time_unix_nano) == (
        live.span_id, last_ns)
    assert live.attributes["error.type"] == later.attributes["error.type"] == "incomplete"
    out = inspected.stdout.decode()
    assert re.search(r"abandoned for \S+ \S+: cut off in tool bash since \S+, end unknown", out), out
    assert re.search(r"tool bash failed \(incomplete\)\s+>= \S+ \S+, end unknown", out), out
