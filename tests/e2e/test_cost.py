"""What it costs, where, end to end: the real Copilot CLI, offline against the Copilot-API stand-in
(a Copilot subscription: premium-request cost per call, accountingSnapshot at shutdown), works in a
fresh git repository and edits code, then resumes and edits again. copilot-otel's spans say where,
its counters equal the CLI's own totals, and the metrics reach a real OTLP receiver
(OTEL_METRICS_EXPORTER=otlp) with the instance's identity."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.commands import run_replay
from tests.support.copilot_api import COPILOT_MODEL, MULTIPLIERS, CopilotApi
from tests.support.copilot_cli import CliRun, prompt_for
from tests.support.daemon import DaemonProcess
from tests.support.deploy import RULES, dashboard_queries, render_grafana_expr
from tests.support.net import wait_until
from tests.support.otlp_json import read_spans
from tests.support.otlp_receiver import OtlpReceiver
from tests.support.prometheus_harness import Prometheus
from tests.support.provider import EDIT_FILE_NAME, EDIT_FILE_TEXT
from tests.support.scrape import keyed, parse, value

REMOTE = "https://github.com/octo-org/cost-repo.git"
BRANCH = "feature/cost"
REPOSITORY = "octo-org/cost-repo"
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "cli" / "1.0.102"
COST_METRICS = ("copilot_premium_requests_total", "copilot_autopilot_premium_requests_total",
                "copilot_code_lines_total", "copilot_files_modified_total", "copilot_ai_credits_total",
                "copilot_autopilot_ai_credits_total", "copilot_llm_calls_without_credits_total")
# Panels of the month-to-date rules (evaluated once a minute) and of --budgets-file: proven by promtool and
# tests/e2e/test_budgets.py, not waited for here.
MONTHLY = ("month_to_date", "copilot_budget_")


@dataclass
class Edited:
    """The session the CLI ran in the repository: its two runs, and the repository's head at the start."""

    first: CliRun
    resumed: CliRun
    head: str

    @property
    def shutdowns(self) -> list[dict]:
        return [e["data"] for e in self.resumed.events() if e["type"] == "session.shutdown"]


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture(scope="module")
def edited(cli, tmp_path_factory) -> Edited:
    """The real CLI, with a Copilot subscription (the stand-in), edits a file and creates one in a git
    repository with a GitHub remote; then the session is resumed and does it again."""
    root = tmp_path_factory.mktemp("cost")
    work, home = root / "work", root / "home"
    work.mkdir()
    (work / EDIT_FILE_NAME).write_text(EDIT_FILE_TEXT)
    _git(work, "init", "-q", "-b", BRANCH)
    _git(work, "-c", "user.name=Octo", "-c", "user.email=octo@example.com", "commit", "-q", "--allow-empty", "-m", "0")
    _git(work, "remote", "add", "origin", REMOTE)
    _git(work, "add", "-A")
    _git(work, "-c", "user.name=Octo", "-c", "user.email=octo@example.com", "commit", "-q", "-m", "the file to edit")
    head = _git(work, "rev-parse", "HEAD")
    with CopilotApi(credits="complete") as api:  # AI credits on every call
        env = {**api.env(), "COPILOT_MODEL": COPILOT_MODEL, "COPILOT_DEBUG_GITHUB_API_URL": api.url,
               "COPILOT_OFFLINE": None, "COPILOT_PROVIDER_BASE_URL": None}  # the Copilot API, not BYOK
        common = dict(home=home, port=api.port, cwd=work, extra_env=env, timeout=180)
        first = cli.run(prompt_for("edit_file", work), **common)
        resumed = cli.run(prompt_for("edit_file", work, text="Please go on."), resume=first.session_id, **common)
    return Edited(first, resumed, head)


def test_the_session_is_a_fair_test(edited):
    """The CLI ran with a Copilot subscription in the repository and changed code in both runs."""
    events = edited.resumed.events()
    context = events[0]["data"]["context"]
    assert (context["repository"], context["branch"], context["headCommit"]) == (REPOSITORY, BRANCH, edited.head)
    usages = [e["data"]["usage"] for e in events if e["type"] == "session.usage_record"]
    assert usages and all(u["isByok"] is False and u["cost"] == MULTIPLIERS[COPILOT_MODEL] for u in usages)
    first, last = edited.shutdowns
    assert 0 < first["codeChanges"]["linesAdded"] < last["codeChanges"]["linesAdded"]  # cumulative
    assert 0 < first["accountingSnapshot"]["totalPremiumRequestCost"] < last["accountingSnapshot"][
        "totalPremiumRequestCost"]


def test_replay_says_where_and_counts_what_the_session_cost_and_changed(edited, tmp_path):
    """`copilot-otel replay`: every span carries vcs.*; premium requests equal totalPremiumRequestCost, code
    lines and files equal codeChanges of the last shutdown (each counted once across the resume)."""
    traces, metrics = tmp_path / "traces.jsonl", tmp_path / "metrics.prom"
    result = run_replay(str(edited.resumed.session_dir), "--traces-file", str(traces), "--metrics-file", str(metrics),
                        "--state-dir", str(tmp_path / "state"))
    assert result.returncode == 0, result.stderr.decode()
    spans = read_spans(traces)
    assert len(spans) > 10
    for span in spans:
        a = span.attributes
        assert (a["vcs.repository.name"], a["vcs.owner.name"], a["vcs.repository.url.full"]) == (
            "cost-repo", "octo-org", REMOTE.removesuffix(".git")), span.name
        assert (a["vcs.ref.head.name"], a["vcs.ref.head.revision"], a["gen_ai.provider.name"]) == (
            BRANCH, edited.head, "github"), span.name
    last = edited.shutdowns[-1]
    snapshot, changes = last["accountingSnapshot"], last["codeChanges"]
    samples = keyed(metrics.read_text())
    assert samples[f'copilot_premium_requests_total{{model="{COPILOT_MODEL}",repository="{REPOSITORY}"}}'] == \
        snapshot["totalPremiumRequestCost"]
    roots = [s for s in spans if s.parent_span_id is None]
    assert sum(r.attributes["github.copilot.premium_requests"] for r in roots) == snapshot["totalPremiumRequestCost"]
    assert samples[f'copilot_code_lines_total{{change="added",repository="{REPOSITORY}"}}'] == changes["linesAdded"]
    assert samples[f'copilot_code_lines_total{{change="removed",repository="{REPOSITORY}"}}'] == changes["linesRemoved"]
    # codeChanges lists every file of the session; the snapshot's filesModifiedCount (1.0.102) counts
    # only those of the last process, so the list is the session's truth.
    assert samples[f'copilot_files_modified_total{{repository="{REPOSITORY}"}}'] == len(set(changes["filesModified"]))
    assert samples[f'copilot_sessions_started_total{{repository="{REPOSITORY}"}}'] == 1
    credits = samples[f'copilot_ai_credits_total{{model="{COPILOT_MODEL}",repository="{REPOSITORY}"}}']
    assert round(credits * 1e9) == round(snapshot["totalNanoAiu"]) > 0  # to the nano AIU, once across the resume
    assert sum(r.attributes["github.copilot.nano_aiu"] for r in roots) == round(snapshot["totalNanoAiu"])


def test_the_daemon_pushes_the_metrics_to_a_real_otlp_receiver(edited, tmp_path):
    """OTEL_METRICS_EXPORTER=otlp (http/protobuf, the metrics-specific endpoint): the daemon's metrics
    reach the receiver, with the values /metrics serves and the resource of OTEL_RESOURCE_ATTRIBUTES,
    which /metrics shows as target_info."""
    home = edited.resumed.home
    with OtlpReceiver() as receiver:
        env = {"OTEL_METRICS_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL": "http/protobuf",
               "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT": f"{receiver.http_base}/v1/metrics",
               "OTEL_METRIC_EXPORT_INTERVAL": "200", "OTEL_RESOURCE_ATTRIBUTES": "user.name=mona,team=octo-team"}
        with DaemonProcess(home, tmp_path / "state", traces_file=tmp_path / "traces.jsonl", env=env,
                           args=("--idle-quiet", "0.2")) as daemon:
            wait_until(lambda: value(daemon.scrape(), "copilot_completion_signals_total", signal="shutdown") == 2,
                       what="both shutdowns read")
            scraped = daemon.scrape()
            premium = value(scraped, "copilot_premium_requests_total", model=COPILOT_MODEL, repository=REPOSITORY)
            assert premium == edited.shutdowns[-1]["accountingSnapshot"]["totalPremiumRequestCost"]
            info = [labels for (name, labels) in scraped if name == "target_info"]
            assert len(info) == 1 and {("user_name", "mona"), ("team", "octo-team")} <= set(info[0])
            pushed = receiver.wait_for_metric("copilot_premium_requests", timeout=20, predicate=lambda m: any(
                p.value == premium for p in m.points))
            lines = receiver.wait_for_metric("copilot_code_lines", timeout=20)
        assert pushed.kind == "sum" and pushed.monotonic and pushed.cumulative
        assert {(p.attributes["model"], p.attributes["repository"]) for p in pushed.points} == {
            (COPILOT_MODEL, REPOSITORY)}
        assert pushed.resource["user.name"] == "mona" and pushed.resource["team"] == "octo-team"
        assert {p.attributes["change"]: p.value for p in lines.points} == {
            "added": value(scraped, "copilot_code_lines_total", change="added", repository=REPOSITORY),
            "removed": value(scraped, "copilot_code_lines_total", change="removed", repository=REPOSITORY)}
        duration = receiver.wait_for_metric("copilot_llm_call_duration_seconds")
        assert duration.kind == "histogram" and duration.unit == "s"
        assert sum(p.count for p in duration.points) == sum(
            v for (name, _labels), v in scraped.items() if name == "copilot_llm_call_duration_seconds_count")


def test_without_the_repository_label_no_series_names_a_repository(edited, tmp_path):
    """--no-repository-label: /metrics holds the same totals, and the repository's name nowhere."""
    with DaemonProcess(edited.resumed.home, tmp_path / "state", traces_file=tmp_path / "traces.jsonl",
                       args=("--idle-quiet", "0.2", "--no-repository-label")) as daemon:
        wait_until(lambda: value(daemon.scrape(), "copilot_completion_signals_total", signal="shutdown") == 2,
                   what="both shutdowns read")
        text = daemon.scrape_text()
    scraped = parse(text)
    assert REPOSITORY not in text and not [labels for (_name, labels) in scraped if "repository" in dict(labels)]
    assert value(scraped, "copilot_premium_requests_total", model=COPILOT_MODEL) == \
        edited.shutdowns[-1]["accountingSnapshot"]["totalPremiumRequestCost"]


def test_the_cost_panels_and_alert_run_against_a_real_prometheus(edited, tmp_path):
    """A real Prometheus scrapes the daemon while the edited session arrives (its first process, then
    the resumed one) beside a stored autopilot session with a Copilot subscription: every dashboard panel
    on premium requests and code changes returns data, the premium requests stat equals what the
    sessions spent, and the new alert loads and stays quiet (2 nudges are no quota drain)."""
    home = tmp_path / "home"
    (home / "session-state").mkdir(parents=True)
    lines = edited.resumed.events_path.read_bytes().splitlines(keepends=True)
    first_shutdown = next(i for i, line in enumerate(lines) if b'"type":"session.shutdown"' in line)
    with DaemonProcess(home, tmp_path / "state", traces_file=tmp_path / "traces.jsonl",
                       args=("--idle-quiet", "0.2", "--rescan-interval", "0.5")) as daemon, \
            Prometheus(tmp_path / "prometheus", [f"127.0.0.1:{daemon.port}"], rule_files=[RULES]) as prometheus:
        wait_until(lambda: prometheus.query('up{job="copilot-otel"} == 1'), timeout=30, what="a first scrape")
        log = home / "session-state" / edited.resumed.session_id / "events.jsonl"
        log.parent.mkdir()
        log.write_bytes(b"".join(lines[:first_shutdown + 1]))  # the first process, up to its shutdown
        wait_until(lambda: prometheus.query("copilot_code_lines_total > 0"), timeout=30, what="the first half")
        time.sleep(1.5)  # more 1 s scrapes of the first half before the rest
        with open(log, "ab") as handle:  # then the resumed process
            handle.write(b"".join(lines[first_shutdown + 1:]))
        autopilot = next((FIXTURES / "copilot_api_autopilot" / "session-state").iterdir())
        shutil.copytree(autopilot, home / "session-state" / autopilot.name)
        stored = [autopilot]
        for credited in ("credits_autopilot", "credits_partial"):  # autopilot's credits; a call without any
            stored.append(next((FIXTURES / credited / "session-state").iterdir()))
            shutil.copytree(stored[-1], home / "session-state" / stored[-1].name)
        snapshots = [edited.shutdowns[-1]["accountingSnapshot"]] + [
            json.loads(line)["data"]["accountingSnapshot"] for folder in stored
            for line in (folder / "events.jsonl").read_text().splitlines() if '"session.shutdown"' in line]
        spent = sum(s["totalPremiumRequestCost"] for s in snapshots)
        credits = sum(s["totalNanoAiu"] for s in snapshots) / 1e9
        wait_until(lambda: prometheus.values("sum(copilot_premium_requests_total)") == {"": spent}, timeout=30,
                   what="Prometheus to hold every premium request")
        wait_until(lambda: abs(prometheus.values("sum(copilot_ai_credits_total)").get("", 0) - credits) < 1e-6,
                   timeout=30, what="Prometheus to hold every AI credit")
        every = '{__name__=~"copilot_.+"}'
        wait_until(lambda: prometheus.values(f"count({every}) - count({every} offset 3s)") == {"": 0},
                   what="two scrapes of every series")
        cost_panels = [(t, e) for t, e in dashboard_queries() if any(m in e for m in COST_METRICS)
                       and not any(m in e for m in MONTHLY)]
        assert len(cost_panels) >= 11
        for title, expr in cost_panels:
            result = prometheus.query(render_grafana_expr(expr, __rate_interval="5m", __range="10m"))
            assert result, (title, expr)
            assert ") / " in expr or any(sample["value"][1] != "NaN" for sample in result), (title, result)
        (premium,) = [e for t, e in cost_panels if t == "Premium requests"]
        # increase() sees what arrived while Prometheus watched: the resumed process' and the fixture's
        watched = prometheus.values(render_grafana_expr(premium, __range="10m"))[""]
        assert 0 < watched <= spent + 0.5
        rules = json.load(urllib.request.urlopen(f"{prometheus.url}/api/v1/rules", timeout=5))["data"]["groups"]
        (alert,) = [r for g in rules for r in g["rules"] if r["name"] == "CopilotPremiumRequestsWithoutCompletion"]
        assert (alert["health"], alert["state"]) == ("ok", "inactive")
