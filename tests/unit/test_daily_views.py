"""Issue 23's pure parts, on logs the real CLI 1.0.102 wrote: a session summed up from its files as the daemon
holds it (settled.py), its name (workspace.py), the repository / folder filter, thresholds applied to a daemon's
row, and durations measured as of the request."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest
from msgspec.structs import replace

from copilot_otel.catalog.board import Row, page, row_json
from copilot_otel.catalog.cache import Catalog
from copilot_otel.catalog.history import summarize_log
from copilot_otel.catalog.settled import settled
from copilot_otel.catalog.status import SessionStatus
from copilot_otel.cli.listing import place_matches
from copilot_otel.config import ModelOptions
from copilot_otel.source.liveness import StuckPolicy
from copilot_otel.source.workspace import MAX_BYTES, MAX_NAME_CHARS, read_name
from copilot_otel.vocab import END_INCOMPLETE, ENDED, IDLE, STUCK, WAITING_TOOL
from copilot_otel.web.overview import HistorySessions

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


def fixture_session(tmp_path, scenario: str, session_prefix: str = "") -> Path:
    """A stored real session folder copied into tmp_path (lock files are not stored: its process is gone)."""
    source = next(p.parent for p in sorted(FIXTURES.rglob("events.jsonl"))
                  if scenario in p.parts and p.parent.name.startswith(session_prefix))
    return Path(shutil.copytree(source, tmp_path / source.name))


def test_a_log_cut_off_mid_turn_is_summed_up_ended_as_incomplete_once_its_process_is_gone(tmp_path):
    """parallel_subagents_stream ends with six tools running: read from the files its summary counts them as
    tools, none failed; its process gone, it is settled as the daemon ends it (incomplete); a live holder keeps
    it as it is."""
    folder = fixture_session(tmp_path, "parallel_subagents_stream", "9d84a1e5")
    raw = summarize_log(folder / "events.jsonl", ModelOptions())
    assert raw.state != IDLE and raw.ended is None and raw.tool_calls == 6 and raw.tool_failures == 0
    done = settled(raw, folder)
    assert (done.ended, done.last_end, done.tool_calls) == (END_INCOMPLETE, END_INCOMPLETE, 6)
    (folder / f"inuse.{os.getpid()}.lock").write_text(str(os.getpid()))  # a process that lives holds it
    assert settled(raw, folder) == raw


def test_an_idle_end_is_confirmed_after_the_quiet_period_only(tmp_path):
    """A log that ends on its final answer: its end is confirmed once --idle-quiet has passed since its last
    event, as the daemon confirms it, not before."""
    folder = fixture_session(tmp_path, "0.0.400", "43f82241")  # multi_turn: answered, no shutdown written
    raw = summarize_log(folder / "events.jsonl", ModelOptions())
    assert raw.confirms == "idle" and raw.last_end is None
    last = raw.last_event_ns / 1e9
    assert settled(raw, folder, now=last + 1.0, idle_quiet=2.0) == raw
    assert settled(raw, folder, now=last + 2.5, idle_quiet=2.0).last_end == "idle"


def test_the_name_is_the_one_workspace_yaml_holds(tmp_path):
    """The name the CLI wrote (the prompt's text, user_named false) or one the user gave; none for a CLI that
    writes none, a file too big, or one that is no mapping; a name over several lines shown on one."""
    folder = fixture_session(tmp_path, "1.0.102", "91f318e8")
    assert b"\nuser_named: false\n" in (folder / "workspace.yaml").read_bytes()
    assert read_name(folder) == "[scenario:subagent] Please do the scripted task."
    assert read_name(fixture_session(tmp_path, "1.0.24", "")) is None
    (folder / "workspace.yaml").write_text("name: |\n  first line\n  second line\nuser_named: true\n")
    assert read_name(folder) == "first line second line"
    (folder / "workspace.yaml").write_text("- a list\n")
    assert read_name(folder) is None
    (folder / "workspace.yaml").write_text("name: x\nfiller: " + "y" * MAX_BYTES + "\n")
    assert read_name(folder) is None
    (folder / "workspace.yaml").write_text("name: x\nuser_named: !!bool \n")  # the parser's own KeyError
    assert read_name(folder) is None
    (folder / "workspace.yaml").write_text("name: " + "z" * (MAX_NAME_CHARS + 5) + "\n")
    assert read_name(folder) == "z" * MAX_NAME_CHARS


def test_a_status_without_its_name_for_hide_names():
    """--hide-names: a status's summary and its JSON row carry no name; everything else is as it was."""
    status = daemon_row(STUCK, WAITING_TOOL, 30.0)
    named = SessionStatus(replace(status.summary, name="release checklist"), status.state, status.stalled_seconds,
                          activity=status.activity, silent_seconds=status.silent_seconds)
    hidden = named.nameless()
    assert named.to_json()["name"] == "release checklist" and hidden.to_json()["name"] is None
    assert replace(hidden.summary, name="release checklist") == named.summary
    assert hidden.nameless() is hidden


@pytest.mark.parametrize(("pattern", "in_git", "outside"), [
    ("octo-org/octo-repo", True, False), ("octo-repo", True, False), ("octo-*", True, False),
    ("none", False, True), ("/tmp/copilot-record/<run>/work", False, True), ("work", False, True),
    ("/tmp/copilot-record", False, True), ("/tmp/copilot-record/<run>/wo", False, False), ("*/work", False, True),
])
def test_repository_selects_a_repository_a_folder_or_none(tmp_path, pattern, in_git, outside):
    """--repository: a repository by name or glob; outside git a folder by path, what lies under a path, its
    last part or a glob; `none`: the sessions in no repository."""
    git = summarize_log(next((FIXTURES / "cli" / "1.0.102" / "git_repo").rglob("events.jsonl")), ModelOptions())
    plain = summarize_log(next((FIXTURES / "cli" / "1.0.102" / "plain").rglob("events.jsonl")), ModelOptions())
    assert (git.repository, plain.repository, plain.cwd) == ("octo-org/octo-repo", None,
                                                            "/tmp/copilot-record/<run>/work")
    assert (place_matches(git, pattern), place_matches(plain, pattern)) == (in_git, outside)


def daemon_row(state: str, activity: str, silent: float, tool: str | None = "bash") -> SessionStatus:
    summary = summarize_log(next((FIXTURES / "cli" / "1.0.102" / "plain").rglob("events.jsonl")), ModelOptions())
    return SessionStatus(replace(summary, waiting_on=tool), state, silent if state == STUCK else 0.0,
                         activity=activity, silent_seconds=silent)


def test_thresholds_given_to_sessions_rename_what_the_daemon_answered():
    """A row the daemon named stuck (its 1 s for tools) is waiting_tool under bash=7200, and the reverse; a
    session no threshold names (ended, abandoned) stays as the daemon said."""
    lenient = StuckPolicy(600.0, 1800.0, {"bash": 7200.0})
    strict = StuckPolicy(600.0, 1.0)
    assert daemon_row(STUCK, WAITING_TOOL, 40.0).under(lenient).state == WAITING_TOOL
    assert daemon_row(WAITING_TOOL, WAITING_TOOL, 40.0).under(strict).state == STUCK
    assert daemon_row(WAITING_TOOL, WAITING_TOOL, 40.0).under(strict).stalled_seconds == 40.0
    assert daemon_row(ENDED, "", 0.0).under(strict).state == ENDED


def test_a_rows_durations_are_as_of_the_request():
    """A row measured 5 s ago, stuck for 30 s then, says 35 s now, and the moment its silence began."""
    status = daemon_row(STUCK, WAITING_TOOL, 30.0)
    now = time.monotonic()
    row = Row(0, 0, status.session_id, Path("x"), status.summary, STUCK, 30.0, 30.0, WAITING_TOOL, now - 5.0)
    shown = row_json(row, monotonic=now, now=1_000.0)
    assert (shown["stalled_s"], shown["silent_s"], shown["stalled_since_ms"]) == (35.0, 35.0, 965_000)


def test_a_rename_with_no_new_event_is_read_again_and_hide_names_leaves_names_out(tmp_path):
    """The summary cache never stores a name (the session's text, its first prompt): each scan reads it, so a
    rename (the file replaced, the log untouched) shows on the next. The web view's rows carry the name, and none
    with --hide-names."""
    root = tmp_path / "session-state"
    folder = fixture_session(root, "1.0.102", "91f318e8")
    cache = tmp_path / "summaries.json"
    assert [item.summary.name for item in Catalog(root, cache_file=cache).scan()] == [read_name(folder)]
    (folder / "workspace.new").write_text("name: the otel exporter\nuser_named: true\n")
    (folder / "workspace.new").replace(folder / "workspace.yaml")
    assert [item.summary.name for item in Catalog(root, cache_file=cache).scan()] == ["the otel exporter"]
    assert b"scripted task" not in cache.read_bytes() and b"otel exporter" not in cache.read_bytes()

    def rows(**kwargs) -> list:
        source = HistorySessions(lambda: [folder / "events.jsonl"], ModelOptions(), policy=StuckPolicy(600.0),
                                 **kwargs)
        source.scan()
        return [row["name"] for row in page(source.board())["sessions"]]

    assert rows() == ["the otel exporter"] and rows(hide_names=True) == [None]
