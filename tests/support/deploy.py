"""Helpers for the tests of deploy/: the metric contract (read from docs/metrics.md), PromQL
pulled out of the dashboard and the rules, and the external checkers (promtool, systemd-analyze).

A later test that runs the daemon against a real Prometheus can reuse them, e.g.
``for title, expr in dashboard_queries(DASHBOARD): query(render_grafana_expr(expr))``.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest
import yaml

from tests.support.contract import documented_metrics

REPO = Path(__file__).resolve().parent.parent.parent
DEPLOY = REPO / "deploy"
DASHBOARD = DEPLOY / "grafana" / "dashboards" / "copilot-otel.json"
RULES = DEPLOY / "prometheus" / "rules" / "copilot-otel.rules.yml"
RULES_TESTS = DEPLOY / "prometheus" / "tests" / "copilot-otel.test.yml"
DOCS = REPO / "docs" / "deploy.md"

METRICS_PORT = 9464
JOB = "copilot-otel"

# docs/metrics.md: every metric the daemon serves, by name (sessions, health, process).
CONTRACT = documented_metrics()
# The series Prometheus itself adds to every scrape.
PROMETHEUS_SERIES = {"up"}


def series_names() -> set[str]:
    """Every series name a query may select: the contract's (histograms as _bucket/_sum/_count),
    Prometheus's own ``up``, and the recording rules of deploy/prometheus."""
    names = set(PROMETHEUS_SERIES) | {rule["record"] for rule in alert_rules() if "record" in rule}
    for metric in CONTRACT.values():
        names |= metric.series
    return names


# --- PromQL -----------------------------------------------------------------

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_MATCHERS = re.compile(r"\{[^{}]*\}")
_RANGE = re.compile(r"\[[^\[\]]*\]")
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)")
_IDENT = re.compile(r"(?<![\w:.$])([A-Za-z_:][A-Za-z0-9_:]*)(\s*\()?")
_KEYWORDS = {
    "and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring",
    "group_left", "group_right", "inf", "nan", "atan2",
}


def promql_metric_names(expr: str) -> set[str]:
    """Metric names an expression selects (a lexical scan, enough for our queries)."""
    text = _STRING.sub('""', expr)
    text = _MATCHERS.sub(" ", text)
    text = _RANGE.sub(" ", text)
    text = _GROUPING.sub(" ", text)
    names = set()
    for match in _IDENT.finditer(text):
        word, call = match.group(1), match.group(2)
        if call or word.lower() in _KEYWORDS:
            continue
        names.add(word)
    return names


# Grafana's built-in and dashboard variables, with values Prometheus accepts.
_GRAFANA_DEFAULTS = {
    "__rate_interval": "1m",
    "__interval": "30s",
    "__range": "1h",
    "host": ".*",
    "team": ".*",
    "split": "job",
    "repository": ".*",
    "model": ".*",
}
_VARIABLE = re.compile(r"\$\{(\w+)(?::\w+)?\}|\$(\w+)")


def render_grafana_expr(expr: str, **values: str) -> str:
    """The expression with Grafana variables replaced, ready for Prometheus.

    Keyword arguments override the defaults (``host=".*"``, ``split="job"`` (no split),
    ``__rate_interval="1m"``...). An unknown variable raises KeyError.
    """
    table = {**_GRAFANA_DEFAULTS, **values}

    def replace(match: re.Match) -> str:
        return table[match.group(1) or match.group(2)]

    return _VARIABLE.sub(replace, expr)


def _walk_panels(panels: Iterable[dict]) -> Iterator[dict]:
    for panel in panels:
        yield panel
        yield from _walk_panels(panel.get("panels", []))


def dashboard_panels(path: Path = DASHBOARD) -> list[dict]:
    """Every panel of a dashboard, rows and panels inside collapsed rows included."""
    return list(_walk_panels(json.loads(Path(path).read_text())["panels"]))


def dashboard_queries(path: Path = DASHBOARD) -> list[tuple[str, str]]:
    """(panel title, PromQL expression) for every query of every panel."""
    return [
        (panel.get("title", ""), target["expr"])
        for panel in dashboard_panels(path)
        for target in panel.get("targets", [])
        if target.get("expr")
    ]


def alert_rules(path: Path = RULES) -> list[dict]:
    """Every rule (alerting or recording) of a Prometheus rules file."""
    doc = yaml.safe_load(Path(path).read_text())
    return [rule for group in doc["groups"] for rule in group["rules"]]


# The join that names the machine of a series: its daemon's target_info (host_name, team).
MACHINE_JOIN = '* on (job, instance) group_left (host_name, team) target_info{host_name=~"$host",team=~"$team"}'


# --- external tools ---------------------------------------------------------

def require_tool(name: str, package: str) -> str:
    """Path of a command on PATH; fails (never skips) the test when it is missing."""
    path = shutil.which(name)
    if path is None:
        pytest.fail(
            f"{name} is not on PATH. The test command installs it "
            f"(apt-get install -y {package}); run that first."
        )
    return path


def promtool() -> str:
    """Path of promtool (Debian package `prometheus`)."""
    return require_tool("promtool", "prometheus")


def run(cmd: list[str], **kwargs) -> subprocess.CompletedProcess:
    """Run a checker with a time limit, capturing text output."""
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60, **kwargs)


def check_promql_parses(exprs: dict[str, str], tmp_path: Path) -> subprocess.CompletedProcess:
    """promtool check rules on a file with one recording rule per expression:
    that parses every one of them with Prometheus's own parser."""
    rules = [
        {"record": f"check:{re.sub(r'[^A-Za-z0-9_]', '_', name)}:{index}", "expr": expr}
        for index, (name, expr) in enumerate(exprs.items())
    ]
    path = tmp_path / "exprs.rules.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "check", "rules": rules}]}))
    return run([promtool(), "check", "rules", str(path)])


def git_repository(folder: Path, repository: str) -> Path:
    """A git work tree at ``folder`` whose origin is github.com/<repository>, with one commit: where the Copilot CLI
    finds a repository (session.start's context) as it does in a user's clone."""
    folder.mkdir(parents=True, exist_ok=True)
    for args in (("init", "-q", "-b", "main"), ("remote", "add", "origin", f"https://github.com/{repository}.git"),
                 ("-c", "user.name=Octo", "-c", "user.email=octo@example.com", "commit", "-q", "--allow-empty",
                  "-m", "0")):
        subprocess.run(["git", *args], cwd=folder, check=True, capture_output=True)
    return folder


def stuck_rules_for_the_test(folder: Path) -> Path:
    """deploy/'s rules with CopilotSessionStuck's `for` at 2 s instead of 1 m (so a test's page comes in seconds),
    written to ``folder``."""
    doc = yaml.safe_load(RULES.read_text())
    (stuck,) = [r for g in doc["groups"] for r in g["rules"] if r.get("alert") == "CopilotSessionStuck"]
    assert stuck["for"] == "1m"
    stuck["for"] = "2s"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / RULES.name
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path
