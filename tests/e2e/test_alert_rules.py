"""The alert rules in deploy/prometheus: valid for Prometheus, proven by promtool's
unit tests, written against the metric contract, and documented."""

from __future__ import annotations

import re

import pytest
import yaml

from tests.support.deploy import (
    DEPLOY,
    DOCS,
    JOB,
    METRICS_PORT,
    RULES,
    RULES_TESTS,
    alert_rules,
    promql_metric_names,
    promtool,
    run,
    series_names,
)

ALERTS = [rule for rule in alert_rules() if "alert" in rule]
ALERT_NAMES = [rule["alert"] for rule in ALERTS]

# The issue's list of situations, each covered by one alert at least.
REQUIRED_ALERTS = {
    "CopilotSessionStuck",
    "CopilotSessionAbandoned",
    "CopilotAutopilotNudgeLoop",
    "CopilotSessionErrorSpike",
    "CopilotLLMErrorRateHigh",
    "CopilotOtelDown",
    "CopilotOtelLagging",
    "CopilotOtelRejectingLines",
    "CopilotOtelTraceExportFailing",
    "CopilotPremiumRequestsWithoutCompletion",  # issue 13: the autopilot loop that drains the quota
}


def test_promtool_check_rules_accepts_the_rules():
    """Prometheus's own checker parses every rule and template."""
    result = run([promtool(), "check", "rules", str(RULES)])
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"{len(alert_rules())} rules found" in result.stdout


def test_promtool_unit_tests_pass():
    """Each alert fires on its input series and stays quiet on the near misses."""
    result = run([promtool(), "test", "rules", str(RULES_TESTS)])
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_every_situation_of_the_issue_has_an_alert():
    """Stuck, abandoned, nudge loop, errors, LLM errors and the daemon's health."""
    assert set(ALERT_NAMES) >= REQUIRED_ALERTS
    assert len(ALERT_NAMES) == len(set(ALERT_NAMES)), "duplicate alert names"


@pytest.mark.parametrize("alert", ALERT_NAMES)
def test_unit_tests_show_each_alert_firing_and_quiet(alert):
    """promtool ignores alerts it is not asked about: make sure each one is asked
    about both ways, once expecting it and once expecting silence."""
    doc = yaml.safe_load(RULES_TESTS.read_text())
    cases = [
        case
        for test in doc["tests"]
        for case in test.get("alert_rule_test", [])
        if case["alertname"] == alert
    ]
    assert any(case.get("exp_alerts") for case in cases), f"{alert} never expected to fire"
    assert any(not case.get("exp_alerts") for case in cases), f"{alert} never expected quiet"


@pytest.mark.parametrize("rule", ALERTS, ids=ALERT_NAMES)
def test_alert_carries_severity_and_runbook(rule):
    """Alertmanager routes on severity; a person on call reads summary,
    description and runbook."""
    assert rule["labels"]["severity"] in {"critical", "warning", "info"}
    for key in ("summary", "description", "runbook"):
        assert rule["annotations"].get(key, "").strip(), f"{rule['alert']} lacks {key}"


@pytest.mark.parametrize("rule", ALERTS, ids=ALERT_NAMES)
def test_alert_uses_only_contract_metrics(rule):
    """A typo in a metric name makes an alert that can never fire."""
    names = promql_metric_names(rule["expr"])
    assert names, rule["expr"]
    assert names <= series_names(), names - series_names()


def test_promql_metric_names_reads_our_kind_of_expression():
    """The scanner finds selectors, not functions, labels, keywords or durations."""
    expr = (
        'histogram_quantile(0.95, sum by (le, agent) (rate(copilot_turn_duration_seconds_bucket'
        '{instance=~"$instance",agent!="x(y)"}[$__rate_interval]))) > 1e3 '
        "and on (job) sum without (model) (up offset 5m) or vector(1) unless foo:bar:ratio"
    )
    assert promql_metric_names(expr) == {"copilot_turn_duration_seconds_bucket", "up", "foo:bar:ratio"}


def test_prometheus_config_is_valid_and_scrapes_the_daemon(tmp_path):
    """The compose stack's prometheus.yml passes promtool check config with the
    real rules, and scrapes the daemon's default port under the job name the
    rules expect."""
    config = yaml.safe_load((DEPLOY / "prometheus" / "prometheus.yml").read_text())
    assert config["rule_files"] == ["/etc/prometheus/rules/*.yml"]
    (job,) = [job for job in config["scrape_configs"] if job["job_name"] == JOB]
    assert job["static_configs"][0]["targets"] == [f"copilot-otel:{METRICS_PORT}"]

    config["rule_files"] = [str(RULES.parent / "*.yml")]
    path = tmp_path / "prometheus.yml"
    path.write_text(yaml.safe_dump(config))
    result = run([promtool(), "check", "config", str(path)])
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(alert_rules())} rules found" in result.stdout


def test_prometheusrule_holds_the_same_groups_as_the_rules_file():
    """The Kubernetes PrometheusRule is a copy of the rules file; they must not drift."""
    doc = yaml.safe_load((DEPLOY / "kubernetes" / "monitoring" / "prometheusrule.yaml").read_text())
    assert doc["apiVersion"] == "monitoring.coreos.com/v1"
    assert doc["kind"] == "PrometheusRule"
    assert doc["spec"]["groups"] == yaml.safe_load(RULES.read_text())["groups"]


@pytest.mark.parametrize("alert", ALERT_NAMES)
def test_alert_has_a_section_in_the_docs(alert):
    """docs/deploy.md explains each alert under a heading of its own name."""
    headings = re.findall(r"^#+\s+`?(\w+)`?\s*$", DOCS.read_text(), flags=re.M)
    assert alert in headings
