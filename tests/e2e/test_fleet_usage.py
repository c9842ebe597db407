"""The usage report for a fleet: the rules group `copilot-usage` (deploy/prometheus/rules) and the dashboard's
"Usage by day, across the fleet" row give the AI credits of the day by team, repository and model across every
machine, and they add up to what `copilot-otel usage` says on each machine. Real daemons reading logs the real
CLI wrote (tests/fixtures/cli/1.0.102), Debian's Prometheus, promtool."""

from __future__ import annotations

import json
import shutil
import time
from collections import Counter
from contextlib import ExitStack
from pathlib import Path

import yaml

from tests.support.commands import run_copilot_otel
from tests.support.daemon import DaemonProcess
from tests.support.deploy import RULES, dashboard_panels, promtool, render_grafana_expr, run
from tests.support.net import wait_until
from tests.support.prometheus_harness import Prometheus

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "cli" / "1.0.102"
MACHINES = {"payments": ("credits_complete", "credits_subagent", "copilot_api", "git_repo"),
            "search": ("credits_autopilot", "credits_resumed", "credits_partial")}
DAY = 24 * 60  # minutes


def usage_group(*, every: str | None = None) -> dict:
    """The shipped `copilot-usage` group; ``every``: its minute (interval, and the offset its growth is taken
    over) made that long instead, so that a test sees its evaluations in seconds."""
    (group,) = [g for g in yaml.safe_load(RULES.read_text())["groups"] if g["name"] == "copilot-usage"]
    if every is None:
        return group
    rules = [{**rule, "expr": rule["expr"].replace("offset 1m", f"offset {every}")} for rule in group["rules"]]
    return {**group, "interval": every, "rules": rules}


def test_the_day_starts_again_at_midnight_utc(tmp_path):
    """promtool runs the shipped rules over a day into the next: a counter growing 1 a minute gives the minutes
    of the day on its last minute, then starts again; the team rule carries the team of the machine's
    target_info, and a machine with none counts under team ""."""
    (tmp_path / "rules.yml").write_text(yaml.safe_dump({"groups": [usage_group()]}))
    a, b = 'job="copilot-otel",instance="a:9464"', 'job="copilot-otel",instance="b:9464"'
    (tmp_path / "test.yml").write_text(yaml.safe_dump({
        "rule_files": ["rules.yml"], "evaluation_interval": "1m",
        "tests": [{"interval": "1m", "input_series": [
            {"series": f'copilot_ai_credits_total{{{a},model="m",repository="o/r"}}', "values": f"0+1x{DAY + 10}"},
            {"series": f'copilot_ai_credits_total{{{b},model="m",repository="o/r"}}', "values": f"0+2x{DAY + 10}"},
            {"series": f'target_info{{{a},team="payments"}}', "values": f"1x{DAY + 10}"},
            {"series": f'target_info{{{b}}}', "values": f"1x{DAY + 10}"}],
            "promql_expr_test": [
                {"expr": "copilot:ai_credits_by_team:day_to_date", "eval_time": f"{DAY - 1}m",
                 "exp_samples": [{"labels": 'copilot:ai_credits_by_team:day_to_date{model="m",repository="o/r",'
                                            'team="payments"}', "value": DAY - 1},
                                 {"labels": 'copilot:ai_credits_by_team:day_to_date{model="m",repository="o/r"}',
                                  "value": 2 * (DAY - 1)}]},
                {"expr": 'copilot:ai_credits:day_to_date{instance="a:9464"}', "eval_time": f"{DAY + 5}m",
                 "exp_samples": [{"labels": f'copilot:ai_credits:day_to_date{{{a},model="m",repository="o/r"}}',
                                  "value": 6}]}]}]}))
    result = run([promtool(), "test", "rules", str(tmp_path / "test.yml")])
    assert result.returncode == 0 and "SUCCESS" in result.stdout, result.stdout + result.stderr


IN_A_REPOSITORY = "credits_subagent"  # its copy is made to run in a repository (session.start's context edited)
CONTEXT = '"context":{"cwd":"/tmp/copilot-record/<run>/work"}'
REPOSITORY_CONTEXT = ('"context":{"cwd":"/tmp/copilot-record/<run>/work","gitRoot":"/tmp/copilot-record/<run>/work",'
                      '"repository":"octo-org/billing","hostType":"github","branch":"main"}')


def machine_home(home: Path, scenarios: tuple[str, ...]) -> Path:
    """The stored sessions of ``scenarios`` in one COPILOT_HOME; IN_A_REPOSITORY's with the git context the CLI
    writes in a repository (octo-org/billing), so that credits are spent in and out of a repository."""
    for scenario in scenarios:
        for log in (FIXTURES / scenario / "session-state").glob("*/events.jsonl"):
            target = Path(shutil.copytree(log.parent, home / "session-state" / log.parent.name)) / "events.jsonl"
            if scenario == IN_A_REPOSITORY:
                text = target.read_text()
                assert CONTEXT in text
                target.write_text(text.replace(CONTEXT, REPOSITORY_CONTEXT, 1))
    return home


def report(home: Path, state: Path) -> dict:
    result = run_copilot_otel("usage", "--copilot-home", str(home), "--state-dir", str(state), "--json",
                              "--group", "repository,model")
    assert result.returncode == 0, result.stderr.decode()
    return json.loads(result.stdout)


def test_the_fleet_s_day_by_team_repository_and_model_adds_up_the_machines_reports(tmp_path):
    """Two daemons (teams payments and search, named in OTEL_RESOURCE_ATTRIBUTES) read their machines' logs under
    a real Prometheus with the shipped copilot-usage rules (their minute made 2 s): the day's credits by team are
    each machine's `copilot-otel usage` total, and by repository and model the two reports' rows added up; the
    dashboard's table query gives the same, and its bars the same per team."""
    reports, daemons = {}, []
    rules = tmp_path / "usage-rules.yml"
    rules.write_text(yaml.safe_dump({"groups": [usage_group(every="2s")]}))
    for team, scenarios in MACHINES.items():
        home = machine_home(tmp_path / team / "home", scenarios)
        reports[team] = report(home, tmp_path / team / "report-state")
        daemons.append(DaemonProcess(home, tmp_path / team / "state", traces_file=tmp_path / team / "t.jsonl",
                                     env={"OTEL_RESOURCE_ATTRIBUTES": f"team={team}"}, args=("--idle-quiet", "0.2")))
    expected_team = {team: r["total"]["nano_aiu"] / 1e9 for team, r in reports.items()}
    expected_place: Counter = Counter()
    for r in reports.values():
        for row in r["rows"]:
            if row["nano_aiu"]:  # Prometheus has no series for credits never spent
                expected_place[("" if row["repository"] == "-" else row["repository"], row["model"])] += \
                    row["nano_aiu"] / 1e9
    assert all(expected_team.values()) and {repository for repository, _model in expected_place} == {
        "", "octo-org/billing"}
    with ExitStack() as stack:
        for daemon in daemons:
            stack.enter_context(daemon)
        with Prometheus(tmp_path / "prometheus", [f"127.0.0.1:{d.port}" for d in daemons],
                        rule_files=[rules]) as prometheus:
            def by(expr: str, *labels: str) -> dict:
                return {tuple(s["metric"].get(label, "") for label in labels): float(s["value"][1])
                        for s in prometheus.query(expr)}

            def close(said: dict, expected: dict) -> bool:
                return said.keys() == expected.keys() and all(abs(said[k] - v) < 1e-6 for k, v in expected.items())

            teams = {(team,): value for team, value in expected_team.items()}
            wait_until(lambda: close(by("sum by (team) (copilot:ai_credits_by_team:day_to_date)", "team"), teams),
                       timeout=120, what="the day's credits of both teams")
            time.sleep(3)  # more evaluations change nothing: the day holds what was counted, once
            assert close(by("sum by (team) (copilot:ai_credits_by_team:day_to_date)", "team"), teams)
            places = dict(expected_place)
            assert close(by("sum by (repository, model) (copilot:ai_credits_by_team:day_to_date)", "repository",
                            "model"), places)
            (table,) = [p for p in dashboard_panels() if p["title"].startswith("AI credits today (UTC) by team")]
            (bars,) = [p for p in dashboard_panels() if p["title"] == "AI credits per UTC day by team"]
            values = {"team": ".*", "repository": ".*", "model": ".*"}
            shown = by(render_grafana_expr(table["targets"][0]["expr"], **values), "team", "repository", "model")
            assert abs(sum(shown.values()) - sum(expected_team.values())) < 1e-6
            assert {team for team, _repository, _model in shown} == set(MACHINES)
            daily = by(render_grafana_expr(bars["targets"][0]["expr"], **values), "team")
            assert close(daily, teams)
