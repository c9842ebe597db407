"""Daily use, second pass (issue 23): sessions told apart by the name the CLI gives them, selected by folder
or as "no repository", and one truth in every view. Logs the real CLI 1.0.102 wrote (tests/fixtures), the
real daemon as a subprocess, Chromium for the page."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from urllib.parse import quote

import pytest
import yaml

from tests.support import viewclient as view_api
from tests.support.commands import run_copilot_otel
from tests.support.daemon import DaemonProcess
from tests.support.net import wait_until

FIXTURES = Path(__file__).resolve().parent / "fixtures"
CLI = FIXTURES / "cli" / "1.0.102"
FAST = ("--idle-quiet", "0.3", "--rescan-interval", "0.5")


def copy_session(scenario_dir: Path, home: Path) -> Path:
    """Every session of a stored real-CLI folder copied into ``home``; the first one's folder."""
    copied = []
    for log in sorted(scenario_dir.rglob("events.jsonl")):
        target = home / "session-state" / log.parent.name
        shutil.copytree(log.parent, target)
        copied.append(target)
    return copied[0]


def workspace(folder: Path) -> dict:
    return yaml.safe_load((folder / "workspace.yaml").read_text())


def sessions_json(home: Path, state: Path, *args: str) -> dict[str, dict]:
    result = run_copilot_otel("sessions", "--copilot-home", str(home), "--state-dir", str(state), "--json", *args)
    assert result.returncode == 0, result.stderr.decode()
    return {row["id"]: row for row in json.loads(result.stdout)}


@pytest.fixture
def two_places(tmp_path):
    """A COPILOT_HOME with one real session outside git (plain) and one in a repository (git_repo)."""
    home = tmp_path / "home"
    plain = copy_session(CLI / "plain", home)
    in_git = copy_session(CLI / "git_repo", home)
    return home, plain, in_git


def test_a_session_shows_its_name_and_is_selected_by_folder_or_as_in_no_repository(two_places, browser, tmp_path):
    """The name the CLI wrote in workspace.yaml shows in `sessions`, `inspect`, /api/sessions and on the page;
    the page's repository column shows the folder of a session outside git, as `sessions` does; `--repository`
    with the folder's path, its last part or `none` selects it and not the session in a repository, and so
    does the page's filter, whose group counts then count that selection only."""
    home, plain, in_git = two_places
    name, cwd = workspace(plain)["name"], workspace(plain)["cwd"]
    assert name and "repository" not in workspace(plain) and workspace(in_git)["repository"] == "octo-org/octo-repo"
    state = tmp_path / "state"
    with DaemonProcess(home, state, args=FAST) as daemon:
        rows = wait_until(lambda: (lambda r: r if len(r) == 2 else None)(
            {row["id"]: row for row in view_api.get_json(daemon.port, "/api/sessions")["sessions"]}),
            what="both sessions")
        assert rows[plain.name]["name"] == name and rows[in_git.name]["name"] == workspace(in_git)["name"]
        listed = run_copilot_otel("sessions", "--copilot-home", str(home), "--state-dir", str(state),
                                  env={"COLUMNS": "220"})
        assert name in listed.stdout.decode() and cwd in listed.stdout.decode()
        for pattern in (cwd, "work", "none", "/tmp/copilot-record"):
            assert set(sessions_json(home, state, "--repository", pattern)) == {plain.name}, pattern
        assert set(sessions_json(home, state, "--repository", "octo-repo")) == {in_git.name}
        assert set(sessions_json(home, tmp_path / "other", "--from-files", "--repository", "none")) == {plain.name}
        for place in ("none", cwd):
            shown = view_api.get_json(daemon.port, f"/api/sessions?repository={quote(place, safe='')}")
            assert [row["id"] for row in shown["sessions"]] == [plain.name]
            assert shown["states"]["ended"] == 1

        page = browser.page()
        page.goto(daemon.page_url())
        row = page.locator(f'tr.session[data-id="{plain.name}"]')
        row.wait_for()
        assert row.locator(".name").text_content().strip() == name
        assert row.locator(".place").text_content() == cwd
        for place in ("none", cwd):
            page.select_option("#repository", place)
            wait_until(lambda: page.locator("tr.session").count() == 1, what=f"the page filtered by {place}")
            assert page.locator("tr.session").get_attribute("data-id") == plain.name
            assert page.locator('tr.group[data-group="ended"] th').text_content().strip().endswith(" 1")
        page.goto(daemon.page_url(f"/session/{plain.name}"))
        wait_until(lambda: name in (page.locator("#facts").text_content() or ""), what="the name on its page")
        assert page.errors == []
    inspected = run_copilot_otel("inspect", plain.name, "--copilot-home", str(home), env={"COLUMNS": "200"})
    assert name in inspected.stdout.decode()
    assert json.loads(run_copilot_otel("inspect", plain.name, "--copilot-home", str(home),
                                       "--json").stdout)["session"]["name"] == name
