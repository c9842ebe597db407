"""Daily use, second pass (issue 23): a state survives a restart of the daemon, `sessions` applies the
thresholds it is given to what the daemon answers, and stuck and abandoned durations keep moving between
polls. The real CLI writes the logs, the real daemon runs as a subprocess."""

from __future__ import annotations

import json

from tests.support import viewclient as view_api
from tests.support.commands import run_copilot_otel
from tests.support.copilot_cli import prompt_for
from tests.support.daemon import DaemonProcess, complete_lines_spans
from tests.support.net import wait_until
from tests.support.scrape import stalled, value

FAST = ("--idle-quiet", "0.3", "--rescan-interval", "0.5")


def tool_started(process) -> bool:
    return process.events_path.exists() and b'"tool.execution_start"' in process.events_path.read_bytes()


def listed(home, state_dir, *args: str) -> dict[str, dict]:
    """`sessions --json` (from the daemon whose socket is in ``state_dir``, if one runs): rows by session id."""
    result = run_copilot_otel("sessions", "--copilot-home", str(home), "--state-dir", str(state_dir), "--json", *args)
    assert result.returncode == 0, result.stderr.decode()
    return {row["id"]: row for row in json.loads(result.stdout)}


def api_rows(daemon) -> dict[str, dict]:
    return {row["id"]: row for row in view_api.get_json(daemon.port, "/api/sessions")["sessions"]}


def test_a_session_abandoned_before_a_restart_is_still_abandoned_after_it(cli, provider, tmp_path):
    """A CLI killed while bash sleeps is abandoned; the daemon stops and starts again on the same state dir: the
    session is still abandoned on /metrics (so an alert on it does not clear), in /api/sessions and in `sessions`,
    as `inspect` and `sessions --from-files` say, still waiting on bash, and not one span is exported again."""
    home, state, traces = tmp_path / "home", tmp_path / "state", tmp_path / "traces.jsonl"
    (home / "session-state").mkdir(parents=True)
    with DaemonProcess(home, state, traces_file=traces, args=FAST) as daemon:
        victim = cli.start(prompt_for("sleep_tool", 60), home=home, port=provider.port, cwd=tmp_path / "work")
        wait_until(lambda: tool_started(victim), timeout=90, what="the tool to start")
        wait_until(lambda: value(daemon.scrape(), "copilot_sessions", state="waiting_tool") == 1, what="waiting")
        victim.kill()
        victim.popen.wait(timeout=10)
        wait_until(lambda: value(daemon.scrape(), "copilot_sessions", state="abandoned") == 1, timeout=20,
                   what="abandoned")
        wait_until(lambda: any(s.name == "execute_tool bash" for s in complete_lines_spans(traces)),
                   what="the incomplete spans exported")
    spans_before = len(complete_lines_spans(traces))
    with DaemonProcess(home, state, traces_file=traces, args=FAST) as daemon:
        wait_until(lambda: value(daemon.scrape(), "copilot_otel_files_watched") == 1, what="the log followed")
        wait_until(lambda: value(daemon.scrape(), "copilot_sessions", state="abandoned") == 1, timeout=20,
                   what="abandoned after the restart")
        samples = daemon.scrape()
        assert value(samples, "copilot_sessions", state="ended") in (None, 0)
        assert stalled(samples, session_id=victim.session_id, state="abandoned",
                     tool="bash") > 0
        row = wait_until(lambda: api_rows(daemon).get(victim.session_id), what="the row")
        assert (row["state"], row["waiting_on"]) == ("abandoned", "bash")
        from_daemon = listed(home, state)[victim.session_id]
        assert (from_daemon["state"], from_daemon["waiting_on"]) == ("abandoned", "bash")
    # Stopped, the daemon flushed what it queued: the spans it would have exported again are in the file by now.
    from_files = listed(home, tmp_path / "other", "--from-files")[victim.session_id]
    inspected = json.loads(run_copilot_otel("inspect", victim.session_id, "--copilot-home", str(home),
                                            "--json").stdout)
    assert from_files["state"] == inspected["session"]["state"] == "abandoned"
    assert len(complete_lines_spans(traces)) == spans_before


def test_sessions_applies_its_thresholds_and_durations_move_between_polls(cli, provider, browser, tmp_path):
    """bash sleeps 40 s; the daemon calls a tool stuck after 1 s. `sessions` asked with
    --stuck-after-tool 1800,bash=7200 applies those to what the daemon answers and says waiting_tool, as
    `sessions --from-files` and `inspect` do with them, while without them it says the daemon's stuck. The
    stuck duration moves: /api/sessions' stalled_s grows between two polls, and the page's ticks on its own."""
    home, state = tmp_path / "home", tmp_path / "state"
    (home / "session-state").mkdir(parents=True)
    lenient = ("--stuck-after-tool", "1800,bash=7200")
    with DaemonProcess(home, state, args=FAST + ("--stuck-after-tool", "1")) as daemon:
        sleeper = cli.start(prompt_for("sleep_tool", 40), home=home, port=provider.port, cwd=tmp_path / "work")
        try:
            wait_until(lambda: value(daemon.scrape(), "copilot_sessions", state="stuck") == 1, timeout=90,
                       what="stuck at the daemon's 1 s")
            sid = sleeper.session_id
            assert listed(home, state)[sid]["state"] == "stuck"
            given = listed(home, state, *lenient)[sid]
            assert (given["state"], given["waiting_on"], given["stalled_s"]) == ("waiting_tool", "bash", 0)
            assert listed(home, tmp_path / "other", "--from-files", *lenient)[sid]["state"] == "waiting_tool"
            inspected = run_copilot_otel("inspect", sid, "--copilot-home", str(home), "--json", *lenient)
            assert json.loads(inspected.stdout)["session"]["state"] == "waiting_tool"
            assert listed(home, state, "--stuck-after-tool", "1")[sid]["state"] == "stuck"

            first = api_rows(daemon)[sid]
            later = wait_until(lambda: (lambda row: row if row["stalled_s"] >= first["stalled_s"] + 2 else None)(
                api_rows(daemon)[sid]), timeout=20, what="stalled_s to grow between polls")
            assert later["state"] == "stuck"
            assert abs(later["stalled_since_ms"] - first["stalled_since_ms"]) < 1500  # the same start, measured again

            page = browser.page()
            page.goto(daemon.page_url())
            shown = page.locator(f'tr.session[data-id="{sid}"] .stalled')
            shown.wait_for()
            before = shown.text_content()
            page.evaluate("window.__sameDocument = true")
            wait_until(lambda: shown.text_content() != before, timeout=10, what="the stuck duration to tick")
            assert page.evaluate("window.__sameDocument") is True  # it ticked on the page, not by a reload
        finally:
            sleeper.kill()
            sleeper.popen.wait(timeout=10)
