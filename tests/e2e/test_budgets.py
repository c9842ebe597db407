"""Budgets of AI credits (--budgets-file): checked at start with one line, exposed as metrics that count
each budget's scope (repository pattern, the resource's user.name and team), shown in the web view; and
the month-to-date recording rule across a month's end, run by promtool on the shipped expression.
The per-rule promtool tests (firing and quiet) are in deploy/prometheus/tests, run by test_alert_rules."""

from __future__ import annotations

import json
import shutil
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml

from copilot_otel.metrics.budgets import Budget, month_start_ns, progress
from copilot_otel.model.summary import SessionSummary
from tests.support.browser import screenshot
from tests.support.commands import run_copilot_otel
from tests.support.daemon import DaemonProcess
from tests.support.deploy import RULES, promtool, run
from tests.support.net import wait_until
from tests.support.scrape import value
from tests.support.viewclient import get_json

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "cli" / "1.0.102"
MONTH = 31 * 24 * 60  # minutes of January 1970, where promtool's clock starts


@pytest.mark.parametrize("name, text, message", [
    ("b.yml", "budgets:\n  - name: x\n    ai_credits: -1\n", "budget 1 (x): ai_credits must be a positive number"),
    ("b.yml", "budgets:\n  - name: x\n    ai_credits: 5\n    warn_at: 1.5\n", "budget 1 (x): warn_at must be"),
    ("b.yml", "budgets:\n  - name: x\n    ai_credits: 5\n    repo: a/*\n", "budget 1 (x): unknown key 'repo'"),
    ("b.yml", "budgets:\n  - {name: x, ai_credits: 5}\n  - {name: x, ai_credits: 6}\n", "two budgets are named 'x'"),
    ("b.yml", "budgets:\n  - name: 'a b'\n    ai_credits: 5\n", "budget 1: name must be"),
    ("b.yml", "budgets: [\n", "not valid YAML at line 2"),
    ("b.yml", "- name: x\n", "expected one key, budgets"),
    ("b.toml", "[[budgets]]\nname = 'x'\nai_credits = 'lots'\n", "ai_credits must be a positive number"),
    ("b.toml", "[[budgets]\n", "not valid TOML"),
    ("missing.yml", None, "cannot read it"),
])
def test_a_bad_budgets_file_stops_the_daemon_with_one_line(name, text, message, tmp_path):
    """Exit 2 and one line naming the file, the budget and what to fix; the env variable works the same."""
    path = tmp_path / name
    if text is not None:
        path.write_text(text)
    for args, env in ((("--budgets-file", str(path)), None), ((), {"COPILOT_OTEL_BUDGETS_FILE": str(path)})):
        result = run_copilot_otel("run", "--copilot-home", str(tmp_path / "home"), "--state-dir",
                                  str(tmp_path / "state"), *args, env=env, timeout=60)
        lines = result.stderr.decode().strip().splitlines()
        assert result.returncode == 2, lines
        assert len(lines) == 1 and f"--budgets-file {path}" in lines[0] and message in lines[0], lines


def _copy_now(fixture: str, home: Path) -> tuple[str, int]:
    """A real log, its timestamps moved so that its last event is a minute ago (this month, whatever
    today is); its session id and the CLI's own total of nano AIU."""
    source = next((FIXTURES / fixture).rglob("events.jsonl"))
    events = [json.loads(line) for line in source.read_text().splitlines() if line.strip()]
    stamp = lambda e: datetime.fromisoformat(e["timestamp"].replace("Z", "+00:00"))  # noqa: E731
    shift = datetime.now(UTC).replace(microsecond=0) - stamp(events[-1])
    target = home / "session-state" / source.parent.name
    target.mkdir(parents=True)
    for e in events:
        e["timestamp"] = (stamp(e) + shift).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    (target / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    total = round([e for e in events if e["type"] == "session.shutdown"][-1]["data"]["accountingSnapshot"][
        "totalNanoAiu"])
    return source.parent.name, total


BUDGETS_TOML = """
[[budgets]]
name = "everything"
ai_credits = 20

[[budgets]]
name = "mona"
ai_credits = 10
user = "mona"
warn_at = 0.5

[[budgets]]
name = "someone-else"
ai_credits = 10
user = "lisa"

[[budgets]]
name = "octo-org"
ai_credits = 100
repository = "octo-org/*"
"""


def test_the_daemon_counts_each_budget_s_scope_and_the_view_shows_its_progress(tmp_path, browser):
    """Budgets from a TOML file on a daemon whose resource says user.name=mona: each budget is a gauge with its
    scope; the credits of the sessions (outside any repository) count for the budget of everything and mona's,
    not for lisa's nor octo-org/*'s; /api/sessions and the sessions page show this month's progress."""
    home = tmp_path / "home"
    sessions = [_copy_now(name, home) for name in ("credits_subagent", "credits_partial")]
    spent = sum(total for _sid, total in sessions)
    budgets = tmp_path / "budgets.toml"
    budgets.write_text(BUDGETS_TOML)
    with DaemonProcess(home, tmp_path / "state", traces_file=tmp_path / "t.jsonl", args=(
            "--idle-quiet", "0.2", "--budgets-file", str(budgets)),
            env={"OTEL_RESOURCE_ATTRIBUTES": "user.name=mona,team=platform"}) as daemon:
        wait_until(lambda: value(daemon.scrape(), "copilot_completion_signals_total", signal="shutdown") == 2,
                   what="both shutdowns read")
        scraped = daemon.scrape()
        listed = get_json(daemon.port, "/api/sessions")["budgets"]
        page = browser.page()
        page.goto(daemon.page_url())
        page.wait_for_selector('.budget[data-budget="mona"]')
        shown = {b.get_attribute("data-budget"): b.inner_text() for b in page.locator(".budget").all()}
        credits_cells = page.locator("td.credits").all_inner_texts()
        # The budgets line up with the table; the page says why its figures and the counter (reset by a
        # restart) may differ, and what "+" means.
        assert page.locator("#budgets").bounding_box()["x"] == page.locator("#sessions").bounding_box()["x"]
        note = page.locator(".budget-note").inner_text()
        assert "copilot_budget_ai_credits_spent_total counts from the daemon's start" in note
        assert page.locator("#legend").is_visible() and "8.67+" in page.locator("#legend").inner_text()
        screenshot(page, "sessions-budgets")
        assert page.errors == []
    assert value(scraped, "copilot_budget_ai_credits", budget="mona", user_name="mona") == 10
    assert value(scraped, "copilot_budget_ai_credits", budget="octo-org", repository_pattern="octo-org/*") == 100
    assert value(scraped, "copilot_budget_warn_ratio", budget="mona") == 0.5
    for name in ("everything", "mona"):
        assert round(value(scraped, "copilot_budget_ai_credits_spent_total", budget=name) * 1e9) == spent
    assert value(scraped, "copilot_budget_ai_credits_spent_total", budget="octo-org") == 0
    assert ("copilot_budget_ai_credits_spent_total", (("budget", "someone-else"),)) not in scraped
    progress_of = {b["name"]: b for b in listed}
    assert progress_of["mona"]["nano_aiu"] == progress_of["everything"]["nano_aiu"] == spent
    assert progress_of["someone-else"]["this_machine"] is False and progress_of["octo-org"]["nano_aiu"] == 0
    assert f"{spent / 1e9:.2f} of 10 AI credits ({round(spent / 1e9 / 10 * 100)}%)" in shown["mona"]
    assert "not this machine's" in shown["someone-else"]
    assert sorted(credits_cells) == sorted(
        [f"{total / 1e9:.2f}" for _sid, total in sessions[:1]] + [f"{sessions[1][1] / 1e9:.2f}+"])


def test_progress_counts_only_this_month_and_the_budget_s_repositories():
    """A session whose last event was last month, or in another repository, is not in a budget's month."""
    now = datetime(2026, 7, 3, 12, tzinfo=UTC).timestamp()
    start = month_start_ns(now)
    assert start == int(datetime(2026, 7, 1, tzinfo=UTC).timestamp()) * 1_000_000_000

    def summary(repository: str, last_ns: int, nano: int) -> SessionSummary:
        return SessionSummary("s", "idle", None, None, None, None, repository, None, 0, last_ns, None, 0, *[0] * 9,
                              0.0, 0.0, None, nano, 0, "complete")

    summaries = [summary("octo-org/a", start + 1, 3_000_000_000), summary("octo-org/b", start - 1, 5_000_000_000),
                 summary("other/c", start + 5, 7_000_000_000)]
    (octo, everything) = progress((Budget("octo", 10, repository="octo-org/*"), Budget("all", 20)), {}, summaries, now)
    assert (octo["nano_aiu"], octo["share"]) == (3_000_000_000, 0.3)
    assert everything["nano_aiu"] == 10_000_000_000


def test_month_to_date_starts_again_on_the_first_of_the_month(tmp_path):
    """promtool runs the shipped copilot:ai_credits:month_to_date rule (with the counters it last saw) over January
    1970 into February: a counter growing 1 a minute gives the minutes of January on its last evaluation, then
    starts again. The group runs every 4 minutes here, not every minute (its `offset 1m` made `offset 4m`): a
    month of minutes is 44,640 evaluations, more than a minute of promtool on a busy machine. (Not less often:
    each rule reads its own value of the evaluation before, which must be within Prometheus' 5 minute lookback.)"""
    rules = yaml.safe_load(RULES.read_text())
    (group,) = [g for g in rules["groups"] if g["name"] == "copilot-credits"]
    kept = [dict(r, expr=r["expr"].replace("offset 1m", "offset 4m")) for r in group["rules"]
            if r.get("record") in ("copilot:ai_credits:month_to_date", "copilot:ai_credits_total:seen_by_month_rules")]
    (tmp_path / "rules.yml").write_text(yaml.safe_dump({"groups": [dict(group, interval="4m", rules=kept)]}))
    series = 'copilot:ai_credits:month_to_date{job="copilot-otel",instance="a:9464",model="m"}'
    (tmp_path / "test.yml").write_text(yaml.safe_dump({
        "rule_files": ["rules.yml"], "evaluation_interval": "4m",
        "tests": [{"interval": "4m", "input_series": [
            {"series": 'copilot_ai_credits_total{job="copilot-otel",instance="a:9464",model="m"}',
             "values": f"0+4x{MONTH // 4 + 10}"}],
            "promql_expr_test": [
                {"expr": "copilot:ai_credits:month_to_date", "eval_time": f"{MONTH - 4}m",
                 "exp_samples": [{"labels": series, "value": MONTH - 4}]},
                # February's first evaluation adds the 4 minutes up to it, then 4 a time
                {"expr": "copilot:ai_credits:month_to_date", "eval_time": f"{MONTH + 20}m",
                 "exp_samples": [{"labels": series, "value": 24}]}]}]}))
    result = run([promtool(), "test", "rules", str(tmp_path / "test.yml")])
    assert result.returncode == 0 and "SUCCESS" in result.stdout, result.stdout + result.stderr


def test_a_restarted_daemon_s_resumed_counters_are_counted_once(tmp_path):
    """promtool runs the shipped accumulating rules (the month's credits, a budget's, the day's) over a daemon that
    stops for three scrapes (its series stale) and comes back with its counters resumed where they were (what the
    checkpoint does): they add only what it counted since. A second daemon comes back with its state lost (its
    counters from 0): what it counts since is added to what it had counted."""
    groups = [g for g in yaml.safe_load(RULES.read_text())["groups"] if g["name"] in ("copilot-credits",
                                                                                      "copilot-usage")]
    groups = [dict(g, rules=[r for r in g["rules"] if "record" in r]) for g in groups]
    (tmp_path / "rules.yml").write_text(yaml.safe_dump({"groups": groups}))
    resumed, lost = 'job="copilot-otel",instance="a:9464"', 'job="copilot-otel",instance="b:9464"'
    gap = "stale stale stale"
    inputs = []
    for target, after in ((resumed, "10+1x5"), (lost, "0+1x5")):
        inputs += [{"series": f'copilot_ai_credits_total{{{target},model="m",repository="o/r"}}',
                    "values": f"0+1x10 {gap} {after}"},
                   {"series": f'copilot_budget_ai_credits_spent_total{{{target},budget="all"}}',
                    "values": f"0+1x10 {gap} {after}"}]
    # each counted 10 before it stopped; then 5 more
    expected = {"copilot:ai_credits:month_to_date": [(resumed, 15), (lost, 15)],
                "copilot:ai_credits:day_to_date": [(resumed, 15), (lost, 15)]}
    checks = [{"expr": name, "eval_time": "19m",
               "exp_samples": [{"labels": f'{name}{{{target},model="m",repository="o/r"}}', "value": value}
                               for target, value in samples]} for name, samples in expected.items()]
    checks.append({"expr": "copilot:budget_ai_credits:month_to_date", "eval_time": "19m",
                   "exp_samples": [{"labels": 'copilot:budget_ai_credits:month_to_date{budget="all"}', "value": 30}]})
    (tmp_path / "test.yml").write_text(yaml.safe_dump({
        "rule_files": ["rules.yml"], "evaluation_interval": "1m",
        "tests": [{"interval": "1m", "input_series": inputs, "promql_expr_test": checks}]}))
    result = run([promtool(), "test", "rules", str(tmp_path / "test.yml")])
    assert result.returncode == 0 and "SUCCESS" in result.stdout, result.stdout + result.stderr


def test_a_real_prometheus_records_the_month_and_warns_on_the_budget(tmp_path):
    """The daemon with a budget of 10 credits and the shipped rules in a real Prometheus: the month-to-date rules
    equal the credits of the sessions (the CLI's totals), and the budget's warning fires at 8 (its rules run
    once a minute: this waits for their evaluations)."""
    from tests.support.prometheus_harness import Prometheus

    home = tmp_path / "home"
    totals = []
    for name in ("credits_complete", "credits_subagent"):
        source = next((FIXTURES / name / "session-state").iterdir())
        shutil.copytree(source, home / "session-state" / source.name)
        events = [json.loads(line) for line in (source / "events.jsonl").read_text().splitlines() if line.strip()]
        totals.append(round([e for e in events if e["type"] == "session.shutdown"][-1]["data"]["totalNanoAiu"]))
    expected = sum(totals) / 1e9
    (tmp_path / "budgets.yml").write_text("budgets:\n  - name: all\n    ai_credits: 10\n")
    with DaemonProcess(home, tmp_path / "state", traces_file=tmp_path / "t.jsonl",
                       args=("--budgets-file", str(tmp_path / "budgets.yml"))) as daemon, \
            Prometheus(tmp_path / "prometheus", [f"127.0.0.1:{daemon.port}"], rule_files=[RULES]) as prometheus:
        def recorded(expr: str) -> float:
            return sum(prometheus.values(expr).values())

        wait_until(lambda: abs(recorded("copilot:ai_credits:month_to_date") - expected) < 1e-6
                   and abs(recorded("copilot:budget_ai_credits:month_to_date") - expected) < 1e-6,
                   timeout=200, what="the month-to-date rules to hold the sessions' credits")
        wait_until(lambda: prometheus.query('ALERTS{alertname="CopilotAICreditsBudgetNearlySpent",budget="all",'
                                            'alertstate="firing"}'), timeout=200, what="the budget's warning")
        assert not prometheus.query('ALERTS{alertname="CopilotAICreditsBudgetProjectedOverrun"}')
