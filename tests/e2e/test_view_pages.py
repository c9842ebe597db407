"""The web view's pages in Chromium against the real daemon (issue 23 items 8 and 10): a session id's start in the
URL, an unknown session with a way back, a missing COPILOT_HOME said as /healthz says it, "just now", and a
session waiting on a permission saying for which tool."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from tests.support.browser import screenshot
from tests.support.daemon import DaemonProcess
from tests.support.files import new_session
from tests.support.net import wait_until
from tests.support.scrape import fetch

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "cli" / "1.0.102"


def copy_session(scenario: str, home: Path) -> str:
    source = next((FIXTURES / scenario / "session-state").iterdir())
    shutil.copytree(source, home / "session-state" / source.name)
    return source.name


def test_an_id_start_opens_its_session_and_an_unknown_id_leads_back(browser, tmp_path):
    home = tmp_path / "home"
    session_id = copy_session("subagent", home)
    with DaemonProcess(home, tmp_path / "state") as daemon:
        page = browser.page()
        page.goto(daemon.page_url(f"/session/{session_id[:8]}"))
        page.wait_for_url(f"**/session/{session_id}")
        page.wait_for_selector(".span")
        page.goto(daemon.page_url("/session/ffffffff"))  # the same shell for any id: the API says there is none
        wait_until(lambda: "no session ffffffff" in page.locator("h1").inner_text(), timeout=15,
                   what="the page to say there is no such session")
        page.locator("a#back").click()
        page.wait_for_selector(f'tr.session[data-id="{session_id}"]')
        assert page.errors == []


def test_a_missing_copilot_home_is_said_on_the_page_as_on_healthz(browser, tmp_path):
    """A machine where the Copilot CLI never ran: /healthz is 200 and says it waits for the home; the page says the
    same instead of a green "live" dot and "No session matches"."""
    home = tmp_path / "no-such-home"
    with DaemonProcess(home, tmp_path / "state") as daemon:
        said = wait_until(lambda: "waiting for" in (body := fetch(daemon.health_url, timeout=5)) and body,
                          timeout=60, what="/healthz to say it waits for the home")
        assert str(home) in said
        page = browser.page()
        page.goto(daemon.page_url())
        status = page.locator("#status")
        wait_until(lambda: "waiting for" in status.inner_text(), timeout=30, what="the page to say why")
        assert "live" not in (status.get_attribute("class") or "").split()
        empty = page.locator("#empty")
        assert "No sessions can be seen" in empty.inner_text() and str(home) in empty.inner_text()
        assert page.errors == []


def test_a_permission_wait_shows_for_which_tool_and_just_now(browser, tmp_path):
    """The real CLI's permission prompt (failing_tool), its CLI alive: the row says "asks permission for view"; a
    session whose last event is under a second old says "just now", not "0 ms ago"."""
    source = next((FIXTURES / "failing_tool" / "session-state").iterdir())
    events = [json.loads(line) for line in (source / "events.jsonl").read_text().splitlines()]
    cut = next(n for n, e in enumerate(events) if e["type"] == "permission.requested") + 1
    tool = next(e["data"]["toolName"] for e in events if e["type"] == "tool.execution_start"
                and e["data"]["toolCallId"] == events[cut - 1]["data"]["permissionRequest"]["toolCallId"])
    home = tmp_path / "home"
    path = new_session(home, source.name)
    path.write_text("".join(json.dumps(e) + "\n" for e in events[:cut]))
    with DaemonProcess(home, tmp_path / "state") as daemon:
        page = browser.page()
        page.goto(daemon.page_url())
        row = page.locator(f'tr.session[data-id="{source.name}"]')
        row.wait_for()
        wait_until(lambda: row.get_attribute("data-state") == "waiting_user", timeout=30, what="waiting_user")
        wait_until(lambda: f"asks permission for {tool}" in row.inner_text(), timeout=30, what="what it asks")
        just_now = page.evaluate("fmtAgo(serverNow() - 200)")
        assert just_now == "just now"
        assert page.errors == []


def test_the_sessions_table_fits_a_1024_pixel_window(browser, tmp_path):
    """Every 1.0.102 fixture session (long folders outside git, repositories, branches): no sideways scroll."""
    home = tmp_path / "home"
    for scenario in sorted(p.name for p in FIXTURES.iterdir() if (p / "session-state").is_dir()):
        copy_session(scenario, home)
    with DaemonProcess(home, tmp_path / "state") as daemon:
        page = browser.page()
        page.set_viewport_size({"width": 1024, "height": 700})
        page.goto(daemon.page_url())
        page.wait_for_selector("tr.session")
        wait_until(lambda: page.locator("tr.session").count() >= 10, timeout=30, what="the sessions")
        widths = page.evaluate("[document.documentElement.scrollWidth, document.documentElement.clientWidth]")
        screenshot(page, "sessions-1024")
        assert widths[0] <= widths[1], widths
        assert page.errors == []


def test_the_details_panel_covers_no_part_of_the_state_badge(browser, tmp_path):
    """A live session waiting on a permission, a span's details open: the header's badge stays whole, beside the
    panel, and a running span's status reads "running"."""
    source = next((FIXTURES / "failing_tool" / "session-state").iterdir())
    events = [json.loads(line) for line in (source / "events.jsonl").read_text().splitlines()]
    cut = next(n for n, e in enumerate(events) if e["type"] == "permission.requested") + 1
    home = tmp_path / "home"
    new_session(home, source.name).write_text("".join(json.dumps(e) + "\n" for e in events[:cut]))
    with DaemonProcess(home, tmp_path / "state") as daemon:
        page = browser.page()
        page.set_viewport_size({"width": 1024, "height": 700})
        page.goto(daemon.page_url(f"/session/{source.name}"))
        page.wait_for_selector(".span")
        wait_until(lambda: "waiting" in page.locator("#state").inner_text(), timeout=30, what="the state badge")
        page.locator(".span", has_text="execute_tool view").first.click()
        page.wait_for_selector("#details:not([hidden])")
        badge = page.locator("#state").bounding_box()
        panel = page.locator("#details").bounding_box()
        assert badge["x"] + badge["width"] <= panel["x"], (badge, panel)
        assert page.evaluate("(e => e.scrollWidth <= e.clientWidth)(document.getElementById('state'))")
        status = page.locator("#details-table tr", has_text="status").first.inner_text()
        assert "running" in status and "unset" not in status, status
        assert page.errors == []
