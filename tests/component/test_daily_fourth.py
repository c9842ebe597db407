"""Daily use, fourth pass (issue 44), in this process over logs the real CLI 1.0.102 wrote (tests/fixtures): a
command that exits non-zero is a failed tool in every view; an unknown amount of AI credits is null (JSON) or
empty (CSV), never zero; `usage` fits the terminal; an unreachable endpoint is said in our words."""

from __future__ import annotations

import csv
import io
import json
import shutil
import socket
from pathlib import Path

import pytest
from click.testing import CliRunner
from rich.console import Console

from copilot_otel.cli.main import main

CLI = Path(__file__).resolve().parent.parent / "fixtures" / "cli" / "1.0.102"
ENV = {"OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": None, "COLUMNS": "200", "TZ": "UTC"}


def home_with(tmp_path: Path, *scenarios: str) -> tuple[Path, dict[str, str]]:
    """A COPILOT_HOME holding the stored sessions of ``scenarios``; each scenario's session id."""
    home = tmp_path / "home"
    ids = {}
    for scenario in scenarios:
        (log,) = (CLI / scenario).glob("session-state/*/events.jsonl")
        shutil.copytree(log.parent, home / "session-state" / log.parent.name)
        ids[scenario] = log.parent.name
    return home, ids


def run(*args: str) -> str:
    result = CliRunner().invoke(main, list(args), env=ENV)
    assert result.exit_code == 0, result.output
    return result.stdout


def test_a_command_that_exits_non_zero_is_failed_in_inspect_and_sessions(tmp_path):
    """failing_tool (view of a missing file, a denied view, `exit 3`, `echo still-fine`): `inspect` says the
    command failed with its exit code and the echo ok; its --json span is an error with process.exit.code 3 and
    the CLI's own success kept; `sessions --json` counts three failed tools of four."""
    home, ids = home_with(tmp_path, "failing_tool")
    sid = ids["failing_tool"]
    text = run("inspect", sid, "--copilot-home", str(home))
    assert "tool bash failed (command_nonzero_exit, exit code 3)" in text
    assert "tool bash ok" in text and "tool view failed (failure)" in text and "tool view failed (denied)" in text
    assert "4 tools (3 failed)" in text
    tree = json.loads(run("inspect", sid, "--copilot-home", str(home), "--json"))

    def tools(node: dict) -> list[dict]:
        own = [node] if node["attributes"].get("gen_ai.operation.name") == "execute_tool" else []
        return own + [t for child in node["children"] for t in tools(child)]

    spans = [t for i in tree["interactions"] for t in tools(i["tree"])]
    (command,) = [t for t in spans if t["attributes"].get("process.exit.code") == 3]
    assert command["status"] == "error" and command["attributes"]["error.type"] == "command_nonzero_exit"
    assert command["attributes"]["github.copilot.tool.success"] is True
    (row,) = json.loads(run("sessions", "--copilot-home", str(home), "--state-dir", str(tmp_path / "s"),
                            "--from-files", "--json"))
    assert (row["tool_calls"], row["tool_failures"]) == (4, 3)


def test_an_unknown_amount_of_credits_is_null_and_a_partial_one_a_floor(tmp_path):
    """copilot_api (the stand-in reported no AI credits: unavailable), credits_partial (two of three calls
    reported theirs) and credits_complete: `sessions --json` and `usage --json` say null for the unknown amount,
    the floor with its status (partial, credits_complete false) for the partial one, the amount for the complete
    one; `usage --csv` leaves the unknown cells empty; `inspect --json` totals say null where no call reported."""
    home, ids = home_with(tmp_path, "copilot_api", "credits_partial", "credits_complete")
    state = str(tmp_path / "state")
    rows = {r["id"]: r for r in json.loads(run("sessions", "--copilot-home", str(home), "--state-dir", state,
                                                "--from-files", "--json"))}
    unknown, partial, complete = (rows[ids[s]] for s in ("copilot_api", "credits_partial", "credits_complete"))
    assert unknown["credits_status"] == "unavailable"
    assert (unknown["nano_aiu"], unknown["ai_credits"], unknown["nudge_nano_aiu"]) == (None, None, None)
    assert partial["credits_status"] == "partial" and partial["nano_aiu"] > 0
    assert partial["ai_credits"] == partial["nano_aiu"] / 1e9
    assert complete["credits_status"] == "complete" and complete["ai_credits"] == complete["nano_aiu"] / 1e9 > 0

    report = json.loads(run("usage", "--copilot-home", str(home), "--state-dir", state, "--group", "session",
                            "--json"))
    by_session = {r["session"]: r for r in report["rows"]}
    assert {k: by_session[ids["copilot_api"]][k] for k in ("nano_aiu", "ai_credits", "usd", "credits_complete")} \
        == {"nano_aiu": None, "ai_credits": None, "usd": None, "credits_complete": False}
    floor = by_session[ids["credits_partial"]]
    assert floor["nano_aiu"] == partial["nano_aiu"] and floor["credits_complete"] is False
    assert floor["usd"] == round(floor["nano_aiu"] / 1e9 * 0.01, 6)  # dollars to the millionth
    assert by_session[ids["credits_complete"]]["credits_complete"] is True
    assert report["total"]["nano_aiu"] == partial["nano_aiu"] + complete["nano_aiu"]  # a floor: some unknown
    assert report["total"]["credits_complete"] is False

    lines = {r["session"]: r for r in csv.DictReader(io.StringIO(run(
        "usage", "--copilot-home", str(home), "--state-dir", state, "--group", "session", "--csv")))}
    assert {k: lines[ids["copilot_api"]][k] for k in ("nano_aiu", "ai_credits", "usd")} == \
        {"nano_aiu": "", "ai_credits": "", "usd": ""}
    assert lines[ids["credits_partial"]]["nano_aiu"] == str(partial["nano_aiu"])

    inspected = json.loads(run("inspect", ids["copilot_api"], "--copilot-home", str(home), "--json"))
    totals = [i["totals"] for i in inspected["interactions"]]
    assert totals and all(t["nano_aiu"] is None and t["unpriced_calls"] > 0 for t in totals)
    assert inspected["session"]["ai_credits"] is None


def test_usage_fits_a_terminal_and_is_whole_when_piped(tmp_path):
    """On an 80-column terminal `usage` leaves out the columns that do not fit and says which, with no header
    cut short and no line longer than the terminal; piped with COLUMNS=80 it prints the whole table, every
    header whole."""
    from copilot_otel.cli.usage import HEADERS, build, render
    from copilot_otel.config import Config

    home, _ids = home_with(tmp_path, "credits_partial", "copilot_api", "multi_turn")
    config = Config(copilot_home=home, state_dir=tmp_path / "state")
    report = build(home / "session-state", by="day", groups=("model",), zone=None, zone_name="UTC", since=None,
                   until=None, cache_file=None, policy=config.stuck_policy)
    terminal = Console(width=80, file=io.StringIO(), force_terminal=True, color_system=None)
    render(report, terminal)
    shown = terminal.file.getvalue().splitlines()
    assert all(len(line) <= 80 for line in shown)
    header = next(line for line in shown if line.startswith("DAY"))
    assert "…" not in header and "CREDITS" in header.split()
    left_out = [h for h in HEADERS if h not in header]
    assert left_out and f"Left out at this width: {', '.join(left_out)}" in " ".join(shown)

    result = CliRunner().invoke(main, ["usage", "--copilot-home", str(home), "--state-dir", str(tmp_path / "s2"),
                                       "--group", "model"], env={**ENV, "COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    piped = result.stdout.splitlines()
    header = next(line for line in piped if line.startswith("DAY"))
    assert header.split() == ["DAY", "MODEL", *" ".join(HEADERS).split()] and len(header) > 80
    assert "…" not in result.stdout and "Left out" not in result.stdout


def test_an_unreachable_http_endpoint_is_said_in_our_words(tmp_path):
    """A plain http:// endpoint where nothing listens (a port just closed on 127.0.0.1) or whose host has no
    address (.invalid never resolves): the export error names the place and what is wrong, no `ssl:default`."""
    from copilot_otel.delivery.otlp_spans import traces_signal
    from copilot_otel.otlp.contract import ExportError
    from copilot_otel.otlp.settings import OtlpSettings
    from copilot_otel.otlp.transport import HttpTransport

    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    for endpoint, said in ((f"http://127.0.0.1:{port}/v1/traces", f"nothing listens on 127.0.0.1:{port} "
                                                                   "(connection refused)"),
                           ("http://no-such-host.invalid:4318/v1/traces",
                            "cannot find the host no-such-host.invalid (its name does not resolve")):
        transport = HttpTransport(OtlpSettings(endpoint=endpoint, protocol="http/protobuf", timeout=5.0), endpoint,
                                  traces_signal())
        try:
            with pytest.raises(ExportError) as failed:
                transport.send(b"")
        finally:
            transport.close()
        message = str(failed.value)
        assert said in message and "ssl" not in message.lower(), message
        assert message.startswith(f"OTLP export to {endpoint} (http/protobuf) failed: ")
