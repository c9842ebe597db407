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
from tests.support.browser import VIEWPORT, screenshot
from tests.support.commands import run_copilot_otel
from tests.support.daemon import DaemonProcess
from tests.support.net import wait_until, wait_until_steady

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
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
    """The CLI's own name (workspace.yaml `name`, the first prompt's text, `user_named: false`) shows in
    `sessions`, `inspect`, /api/sessions and on the page, and never in the exported spans; a rename (the file
    rewritten, no new event) reaches the daemon's rows; `--hide-names` leaves every name out. The page's
    repository column shows the folder of a session outside git, as `sessions` does; `--repository` with the
    folder's path, its last part or `none` selects it and not the session in a repository, and so does the
    page's filter, whose group counts then count that selection only."""
    home, plain, in_git = two_places
    prompt_name, cwd = workspace(plain)["name"], workspace(plain)["cwd"]
    git_name = workspace(in_git)["name"]
    assert prompt_name and workspace(plain)["user_named"] is False and "repository" not in workspace(plain)
    assert git_name and workspace(in_git)["repository"] == "octo-org/octo-repo"
    state, traces = tmp_path / "state", tmp_path / "traces.jsonl"
    with DaemonProcess(home, state, traces_file=traces, args=FAST) as daemon:
        def names() -> dict | None:
            rows = {row["id"]: row["name"] for row in view_api.get_json(daemon.port, "/api/sessions")["sessions"]}
            return rows if len(rows) == 2 else None

        assert wait_until(names, what="both sessions") == {plain.name: prompt_name, in_git.name: git_name}
        listed = run_copilot_otel("sessions", "--copilot-home", str(home), "--state-dir", str(state),
                                  env={"COLUMNS": "220"}).stdout.decode()
        assert prompt_name in listed and git_name in listed and cwd in listed
        hidden = run_copilot_otel("sessions", "--copilot-home", str(home), "--state-dir", str(state), "--hide-names",
                                  env={"COLUMNS": "220"}).stdout.decode()
        assert prompt_name not in hidden and git_name not in hidden and plain.name[:8] in hidden
        assert {row["name"] for row in sessions_json(home, state, "--hide-names").values()} == {None}

        # A rename, as the CLI writes one: the file replaced, no event in the log.
        name = "release checklist for the otel exporter"
        renamed = (plain / "workspace.yaml").read_text().replace(f"name: '{prompt_name}'", f"name: {name}")
        (plain / "workspace.new").write_text(renamed.replace("user_named: false", "user_named: true"))
        (plain / "workspace.new").replace(plain / "workspace.yaml")
        assert workspace(plain)["name"] == name and workspace(plain)["user_named"] is True
        wait_until(lambda: names()[plain.name] == name, what="the daemon's row renamed")
        assert sessions_json(home, state)[plain.name]["name"] == name
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
        assert page.locator(f'tr.session[data-id="{in_git.name}"] .name').text_content().strip() == git_name
        assert row.locator(".place").text_content() == cwd
        # On a narrow window the repository and branch wrap after a "/" only, never inside a word.
        page.set_viewport_size({"width": 760, "height": 700})
        parts = page.evaluate("""() => [...document.querySelectorAll('#sessions td.branch, #sessions td.place')]
            .map(td => [...td.querySelectorAll('.part')].map(p => [p.textContent, p.getClientRects().length,
                                                                 Math.round(p.getBoundingClientRect().top)]))""")
        assert all(lines == 1 for cell in parts for _text, lines, _top in cell), parts
        assert any(len({top for _text, _lines, top in cell}) > 1 for cell in parts), parts  # some did wrap
        screenshot(page, "sessions-narrow")
        page.set_viewport_size(VIEWPORT)
        for place in ("none", cwd):
            page.select_option("#repository", place)
            wait_until(lambda: page.locator("tr.session").count() == 1, what=f"the page filtered by {place}")
            assert page.locator("tr.session").get_attribute("data-id") == plain.name
            assert page.locator('tr.group[data-group="ended"] th').text_content().strip().endswith(" 1")
        page.goto(daemon.page_url(f"/session/{plain.name}"))
        wait_until(lambda: name in (page.locator("#facts").text_content() or ""), what="the name on its page")
        assert page.errors == []
    exported = traces.read_text()
    assert plain.name in exported and name not in exported and git_name not in exported  # shown, never exported
    inspected = run_copilot_otel("inspect", plain.name, "--copilot-home", str(home), env={"COLUMNS": "200"})
    assert name in inspected.stdout.decode()
    assert json.loads(run_copilot_otel("inspect", plain.name, "--copilot-home", str(home),
                                       "--json").stdout)["session"]["name"] == name
    hidden = run_copilot_otel("inspect", plain.name, "--copilot-home", str(home), "--hide-names",
                              env={"COLUMNS": "200"})
    assert hidden.returncode == 0 and name not in hidden.stdout.decode()
    assert json.loads(run_copilot_otel("inspect", plain.name, "--copilot-home", str(home), "--json",
                                       env={"COPILOT_OTEL_HIDE_NAMES": "true"}).stdout)["session"]["name"] is None


# What every view says of a session, field by field (durations that move with time left out).
SAME = ("state", "ended", "name", "model", "repository", "branch", "cwd", "cli_version", "started_ms", "last_ms",
        "waiting_on", "interactions", "nudges", "turns", "llm_calls", "tool_calls", "tool_failures",
        "input_tokens", "output_tokens", "tokens", "cache_read_tokens", "premium_requests", "last_end",
        "nano_aiu", "ai_credits", "credits_status")  # an unknown amount null in each
# What inspect's spans add up to, against the same counts in the session's row.
SPAN_TOTALS = ("turns", "llm_calls", "tool_calls", "tool_failures", "input_tokens", "output_tokens", "tokens")
TOKEN_FIELDS = ("input_tokens", "output_tokens", "tokens")


def every_fixture_session(home: Path) -> list[str]:
    """Every session log the real CLI wrote that tests/fixtures stores, copied into one COPILOT_HOME."""
    ids = []
    for log in sorted(FIXTURES.rglob("events.jsonl")):
        shutil.copytree(log.parent, home / "session-state" / log.parent.name)
        ids.append(log.parent.name)
    assert len(ids) == len(set(ids)) > 100
    return ids


def inspect_json(home: Path, session_id: str) -> dict:
    """`copilot-otel inspect --json`, run in this process (115 subprocesses would cost minutes)."""
    from click.testing import CliRunner

    from copilot_otel.cli.main import main

    result = CliRunner().invoke(main, ["inspect", session_id, "--copilot-home", str(home), "--json"],
                                env={"OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": None})
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_every_view_says_the_same_of_every_fixture_session(tmp_path):
    """For each of the 115 sessions the real CLI wrote (tests/fixtures), `inspect --json`, the daemon's
    /api/sessions, `sessions --json` through the daemon and `sessions --from-files --json` agree on every fact
    and count, and what inspect's spans add up to (tools running included, compactions no LLM call) is
    what the session's row says."""
    home, state = tmp_path / "home", tmp_path / "state"
    ids = every_fixture_session(home)
    with DaemonProcess(home, state, args=FAST) as daemon:
        wait_until(lambda: len(view_api.get_json(daemon.port, "/api/sessions?limit=500")["sessions"]) == len(ids),
                   timeout=60, what="every session in /api/sessions")
        # Old logs with no CLI process: the daemon confirms their ends, ends what their death cut off, and then
        # holds none of them live. Then what it says is what it will say: its answer no longer changes over three
        # polls a second apart (longer than the quiet period and a rescan), with no session live.
        def answer() -> dict | None:
            rows = {row["id"]: {field: row[field] for field in SAME}
                    for row in view_api.get_json(daemon.port, "/api/sessions?limit=500")["sessions"]}
            live = any(v for k, v in daemon.scrape().items() if k[0] == "copilot_sessions")
            return None if live else rows

        wait_until_steady(answer, timeout=90, interval=1.0, what="the daemon's answer to settle")
        api = {row["id"]: row for row in view_api.get_json(daemon.port, "/api/sessions?limit=500")["sessions"]}
        through_daemon = sessions_json(home, state)
    from_files = sessions_json(home, tmp_path / "other", "--from-files")
    differences = []
    for sid in ids:
        inspected = inspect_json(home, sid)
        views = {"inspect": inspected["session"], "api": api[sid], "sessions": through_daemon[sid],
                 "sessions --from-files": from_files[sid]}
        for field in SAME:
            said = {view: row[field] for view, row in views.items()}
            if len(set(map(json.dumps, said.values()))) > 1:
                differences.append((sid, field, said))
        spans = {field: sum(i["totals"][field] for i in inspected["interactions"]) for field in SPAN_TOTALS}
        # CLIs before 1.0.93 write (some) tokens only in their shutdown totals, which no span carries: there the
        # spans hold at most the session's tokens (test_one_truth holds the row to those totals).
        totals_only = tuple(map(int, api[sid]["cli_version"].split("."))) < (1, 0, 93)
        for field in SPAN_TOTALS:
            if totals_only and field in TOKEN_FIELDS and spans[field] <= api[sid][field]:
                continue
            if spans[field] != api[sid][field]:
                differences.append((sid, field, {"inspect's spans": spans[field], "row": api[sid][field]}))
    assert not differences, "\n".join(map(str, differences))


def test_a_compaction_is_no_chat_call_in_any_view(tmp_path):
    """Every span replayed from every fixture session whose operation is `chat` is named `chat <model>`, as the
    GenAI conventions name one, and a compaction carries an operation of its own; `inspect` prints each
    compaction as one, with its tokens, and counts only the calls the usage records name as LLM calls."""
    from copilot_otel.config import ModelOptions
    from copilot_otel.delivery.sinks import MemorySink
    from copilot_otel.replay.runner import replay_files

    sink = MemorySink()
    replay_files(sorted(FIXTURES.rglob("events.jsonl")), sink, options=ModelOptions())
    operations = {}
    for span in sink.records:
        operation = span.attributes.get("gen_ai.operation.name")
        operations.setdefault(operation, 0)
        operations[operation] += 1
        if operation == "chat":
            assert span.name == f"chat {span.attributes['gen_ai.request.model']}", span.name
        if span.name == "compaction":
            assert operation == "compaction"
    assert operations["compaction"] > 0 and operations["chat"] > 0

    home = tmp_path / "home"
    session = copy_session(FIXTURES / "situations" / "compaction", home)
    events = [json.loads(line) for line in (session / "events.jsonl").read_text().splitlines()]
    completes = [e["data"] for e in events if e["type"] == "session.compaction_complete"]
    records = sum(e["type"] == "session.usage_record" for e in events)
    text = run_copilot_otel("inspect", session.name, "--copilot-home", str(home), env={"COLUMNS": "200"})
    out = text.stdout.decode()
    shown = [line for line in out.splitlines() if "compaction " in line]
    assert len(shown) == len(completes) > 0
    for line, used in zip(shown, completes):
        assert f"in={used['compactionTokensUsed']['inputTokens']} out={used['compactionTokensUsed']['outputTokens']}" \
            in line, line
    assert "in=0 out=0" not in out
    assert inspect_json(home, session.name)["session"]["llm_calls"] == records
    header = next(line for line in out.splitlines() if "interaction" in line and "LLM call" in line)
    assert f" {records} LLM calls" in header, header
