"""What operators deploy, checked without running it: the Grafana dashboard and its
provisioning, the compose stack, the container image definition, the systemd
unit, the Kubernetes manifests and the Collector config. Real validators where
they exist offline (promtool, the compose-spec JSON schema, kubernetes-validate,
systemd-analyze); the cross-file facts (ports, mounts, names) by hand."""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path
from urllib.parse import unquote

import kubernetes_validate
import pytest
import yaml

from tests.support.deploy import (
    CONTRACT,
    DASHBOARD,
    DEPLOY,
    DOCS,
    JOB,
    MACHINE_JOIN,
    METRICS_PORT,
    check_promql_parses,
    dashboard_panels,
    dashboard_queries,
    promql_metric_names,
    render_grafana_expr,
    require_tool,
    run,
    series_names,
)

COMPOSE = DEPLOY / "docker-compose.yml"
DOCKERFILE = DEPLOY / "container" / "Dockerfile"
UNIT = DEPLOY / "systemd" / "copilot-otel.service"
K8S = DEPLOY / "kubernetes"
COLLECTOR_CONFIG = K8S / "collector" / "config.yaml"
# Native sidecars (initContainers with restartPolicy: Always) need 1.29.
KUBERNETES_VERSION = "1.29.0"
METRICS_ADDRESS = f"0.0.0.0:{METRICS_PORT}"


def load_yaml(path: Path):
    return yaml.safe_load(path.read_text())


def assert_pinned(image: str) -> None:
    """An image reference names a version: a tag other than latest, or a digest."""
    if "@sha256:" in image:
        return
    name, _, tag = image.rpartition(":")
    assert name and "/" not in tag, f"{image} has no tag"
    assert tag != "latest", f"{image} is not pinned"
    assert re.search(r"\d", tag), f"{image}: tag {tag!r} names no version"


# --- Grafana dashboard ------------------------------------------------------

PANELS = [panel for panel in dashboard_panels() if panel["type"] != "row"]
QUERIES = dashboard_queries()


def test_dashboard_ids_are_unique_and_grid_positions_valid():
    """Grafana lays panels on a 24-column grid; overlapping or out-of-grid
    positions and duplicate ids make it shuffle or drop panels."""
    panels = dashboard_panels()
    ids = [panel["id"] for panel in panels]
    assert len(ids) == len(set(ids))
    cells: dict[tuple[int, int], str] = {}
    for panel in panels:
        pos = panel["gridPos"]
        assert set(pos) == {"x", "y", "w", "h"}, panel["title"]
        assert all(isinstance(value, int) for value in pos.values()), panel["title"]
        assert pos["x"] >= 0 and pos["w"] >= 1 and pos["x"] + pos["w"] <= 24, panel["title"]
        assert pos["y"] >= 0 and pos["h"] >= 1, panel["title"]
        for x in range(pos["x"], pos["x"] + pos["w"]):
            for y in range(pos["y"], pos["y"] + pos["h"]):
                assert (x, y) not in cells, f"{panel['title']} overlaps {cells[(x, y)]}"
                cells[(x, y)] = panel["title"]


@pytest.mark.parametrize("panel", PANELS, ids=[panel["title"] for panel in PANELS])
def test_panel_has_a_datasource_a_title_and_queries(panel):
    """Every panel queries the Prometheus chosen in the datasource variable."""
    assert panel["title"].strip()
    assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
    assert panel["targets"], panel["title"]
    for target in panel["targets"]:
        assert target["datasource"] == panel["datasource"]
        assert target["expr"].strip()
    ref_ids = [target["refId"] for target in panel["targets"]]
    assert len(ref_ids) == len(set(ref_ids))


@pytest.mark.parametrize("title,expr", QUERIES, ids=[f"{t}:{i}" for i, (t, _) in enumerate(QUERIES)])
def test_dashboard_query_uses_only_contract_metrics(title, expr):
    """A query on a metric the daemon does not export shows 'No data' forever."""
    names = promql_metric_names(expr)
    assert names, expr
    assert names <= series_names(), f"{title}: unknown {names - series_names()}"


def test_dashboard_queries_parse_in_prometheus(tmp_path):
    """Prometheus's parser (promtool check rules) accepts every query once the
    Grafana variables are filled in."""
    exprs = {f"{title}:{index}": render_grafana_expr(expr) for index, (title, expr) in enumerate(QUERIES)}
    result = check_promql_parses(exprs, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(exprs)} rules found" in result.stdout


# Contract metrics the dashboard does not show yet, and why that is acceptable for now.
NOT_ON_THE_DASHBOARD = {
    "copilot_otel_events_out_of_order_total": "a debugging aid: each such event is also logged with its file and line",
}


def test_dashboard_shows_every_contract_metric():
    """Every copilot_* and copilot_otel_* metric of docs/metrics.md appears on some panel (the
    fleet view and the daemon's own health), but for the few NOT_ON_THE_DASHBOARD names."""
    used = set()
    for _, expr in QUERIES:
        used |= promql_metric_names(expr)
    ours = {name: metric for name, metric in CONTRACT.items() if name.startswith("copilot_")}
    assert set(NOT_ON_THE_DASHBOARD) <= set(ours), "an exception names a metric the contract does not have"
    missing = sorted(name for name, metric in ours.items() if not metric.series & used)
    assert missing == sorted(NOT_ON_THE_DASHBOARD), f"on no panel: {missing}"


def test_dashboard_variables_are_defined_and_used():
    """Queries only use variables the dashboard defines; the machine picker lists host names and the team
    picker teams, both from target_info (the daemons' resource), and every panel can be split by either."""
    dashboard = json.loads(DASHBOARD.read_text())
    variables = {var["name"]: var for var in dashboard["templating"]["list"]}
    assert {"datasource", "host", "team", "split", "jaeger_url"} <= set(variables)
    assert "instance" not in variables
    assert variables["datasource"]["query"] == "prometheus"
    assert variables["host"]["definition"] == 'label_values(target_info{job="copilot-otel",team=~"$team"}, host_name)'
    assert variables["team"]["definition"] == 'label_values(target_info{job="copilot-otel"}, team)'
    for name in ("host", "team"):
        definition = variables[name]["definition"]
        assert promql_metric_names(re.sub(r"^label_values\((.*),\s*\w+\)$", r"\1", definition)) <= series_names()
        assert (variables[name]["includeAll"], variables[name]["allValue"]) == (True, ".*")  # "" matches too
    assert {o["value"] for o in variables["split"]["options"]} == {"job", "host_name", "team"}
    for _, expr in QUERIES:
        for name in re.findall(r"\$\{?(\w+)", expr):
            assert name.startswith("__") or name in variables, name


def test_stalled_sessions_table_links_to_jaeger_by_conversation_id():
    """From a stuck or abandoned session straight to its traces: the session
    column links to a Jaeger search on tag gen_ai.conversation.id."""
    (table,) = [p for p in PANELS if p["title"] == "Stuck and abandoned sessions"]
    assert table["type"] == "table"
    (expr,) = [t["expr"] for t in table["targets"]]
    assert "copilot_session_stalled_seconds" in expr and "session_id" in expr
    assert table["targets"][0]["instant"] is True
    links = [
        link
        for override in table["fieldConfig"]["overrides"]
        if override["matcher"]["options"] == "Session"
        for prop in override["properties"]
        if prop["id"] == "links"
        for link in prop["value"]
    ]
    (link,) = [link for link in links if "jaeger" in link["url"]]  # and one to Tempo, tested below
    url = link["url"]
    assert url.startswith("${jaeger_url}/search?service=copilot-otel&")
    tags = re.search(r"tags=([^&]+)", url).group(1)
    assert json.loads(unquote(tags).replace("${__value.raw}", "SESSION")) == {"gen_ai.conversation.id": "SESSION"}


def test_dashboard_covers_the_issue():
    """Each view the issue asks for is a panel of its own."""
    titles = {panel["title"] for panel in PANELS}
    for wanted in (
        "Sessions by state",
        "Turns per minute by agent",
        "LLM calls per minute by model",
        "Tool calls per minute by tool",
        "Tool failure rate by tool",
        "Token burn per minute",
        "Autopilot nudges vs finished interactions",
        "Completion signals per minute",
        "Turn duration p50 / p95",
        "Tool duration p50 / p95",
        "Stuck and abandoned sessions",
        "Daemons up",
    ):
        assert wanted in titles


def test_dashboard_shows_what_it_costs_where():
    """Issue 13's views: premium requests by model and repository, the nudges' share, code changes,
    time to first token, the cache-read share and how interactions end, each a panel of its own on the
    metric it needs; repository and model are variables, filtering the panels that carry them."""
    wanted = {
        "Premium requests per hour by model and repository": {"copilot_premium_requests_total",
                                                              "copilot_autopilot_premium_requests_total"},
        "Premium requests spent on nudges": {"copilot_premium_requests_total",
                                             "copilot_autopilot_premium_requests_total"},
        "Code lines changed per hour by repository": {"copilot_code_lines_total"},
        "Files modified": {"copilot_files_modified_total"},
        "Time to first token p50 / p95": {"copilot_llm_time_to_first_token_seconds_bucket"},
        "Cache-read share of input tokens": {"copilot_tokens_total"},
        "Interaction outcomes": {"copilot_interactions_total"},
    }
    for title, metrics in wanted.items():
        (panel,) = [p for p in PANELS if p["title"] == title]
        assert {n for t in panel["targets"] for n in promql_metric_names(t["expr"])} == metrics | {"target_info"}, title
    variables = {var["name"]: var for var in json.loads(DASHBOARD.read_text())["templating"]["list"]}
    for name, metric in (("repository", "copilot_sessions_started_total"), ("model", "copilot_llm_calls_total")):
        assert variables[name]["definition"].startswith(f"label_values({metric}")
        assert (variables[name]["includeAll"], variables[name]["allValue"]) == (True, ".*")  # "" matches too
    for _, expr in QUERIES:
        for metric in ("copilot_premium_requests_total", "copilot_code_lines_total", "copilot_llm_calls_total"):
            if metric + "{" in expr:
                assert 'repository=~"$repository"' in expr and MACHINE_JOIN in expr, expr


# Panels of the fleet's budgets and of its usage by team (copilot:ai_credits_by_team:day_to_date): they span
# machines, so they are neither filtered nor split by machine.
FLEET_WIDE = {"Budgets: share spent this month", "AI credits per UTC day by team",
              "AI credits today (UTC) by team, repository and model"}


@pytest.mark.parametrize("title,expr", QUERIES, ids=[f"{t}:{i}" for i, (t, _) in enumerate(QUERIES)])
def test_every_panel_filters_and_splits_by_machine_and_team(title, expr):
    """Each query joins target_info for the machine's host_name and team, filtered by the pickers, and either
    sums by $split (none, machine, team) or keeps each machine apart; none selects by instance address."""
    if title in FLEET_WIDE:
        return
    assert "$instance" not in expr
    if title == "Daemons down":  # a daemon that cannot be scraped: the host name of its last target_info
        assert 'last_over_time(target_info{job="copilot-otel",host_name=~"$host",team=~"$team"}[1d])' in expr
    else:
        assert MACHINE_JOIN in expr
    aggregations = re.findall(r"\b(?:sum|max|count) by \(([^)]*)\)", expr)
    assert aggregations or expr.startswith(("rate(", "process_")), expr
    for labels in aggregations:
        assert "$split" in labels or "host_name" in labels, (labels, expr)


def test_traces_open_in_tempo_next_to_jaeger():
    """A dashboard link and the stalled-session table open the traces in Tempo (Explore, TraceQL on the
    `tempo` datasource variable) as well as in Jaeger."""
    dashboard = json.loads(DASHBOARD.read_text())
    assert {link["title"] for link in dashboard["links"]} == {"Traces in Jaeger", "Traces in Tempo"}
    variables = {var["name"]: var for var in dashboard["templating"]["list"]}
    assert (variables["tempo"]["type"], variables["tempo"]["query"]) == ("datasource", "tempo")
    (table,) = [p for p in PANELS if p["title"] == "Stuck and abandoned sessions"]
    (session,) = [o for o in table["fieldConfig"]["overrides"] if o["matcher"]["options"] == "Session"]
    urls = [link["url"] for prop in session["properties"] if prop["id"] == "links" for link in prop["value"]]
    (tempo,) = [url for url in urls if url.startswith("/explore?")]
    panes = json.loads(unquote(tempo.split("panes=", 1)[1].split("&", 1)[0]).replace("${__value.raw}", "SESSION"))
    (query,) = panes["traces"]["queries"]
    assert (panes["traces"]["datasource"], query["queryType"]) == ("${tempo}", "traceql")
    assert query["query"] == '{ span.gen_ai.conversation.id = "SESSION" }'


# --- Grafana provisioning ---------------------------------------------------
# --- Grafana provisioning ---------------------------------------------------

def compose_services() -> dict:
    return load_yaml(COMPOSE)["services"]


def bind_mounts(service: dict) -> dict[str, dict]:
    """target -> long-syntax volume entry."""
    return {volume["target"]: volume for volume in service.get("volumes", [])}


def test_grafana_provisioning_matches_the_compose_stack():
    """Datasources point at the compose services; the dashboard provider reads
    the folder the compose file mounts; the home dashboard exists there."""
    datasources = {ds["uid"]: ds
                   for ds in load_yaml(DEPLOY / "grafana/provisioning/datasources/copilot-otel.yml")["datasources"]}
    assert datasources["prometheus"]["type"] == "prometheus"
    assert datasources["prometheus"]["url"] == "http://prometheus:9090"
    assert datasources["prometheus"]["isDefault"] is True
    assert datasources["jaeger"]["type"] == "jaeger"
    assert datasources["jaeger"]["url"] == "http://jaeger:16686"

    (provider,) = load_yaml(DEPLOY / "grafana/provisioning/dashboards/copilot-otel.yml")["providers"]
    grafana = compose_services()["grafana"]
    mounts = bind_mounts(grafana)
    dashboards_mount = mounts[provider["options"]["path"]]
    assert (COMPOSE.parent / dashboards_mount["source"]).resolve() == DASHBOARD.parent
    home = grafana["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
    assert home == f"{provider['options']['path']}/{DASHBOARD.name}"
    for target in ("/etc/grafana/provisioning/datasources", "/etc/grafana/provisioning/dashboards"):
        assert (COMPOSE.parent / mounts[target]["source"]).is_dir()


# --- docker compose ---------------------------------------------------------

def test_compose_file_matches_the_compose_specification():
    """The compose-spec JSON schema (shipped in check-jsonschema) accepts it."""
    result = run([sys.executable, "-m", "check_jsonschema", "--builtin-schema", "vendor.compose-spec", str(COMPOSE)])
    assert result.returncode == 0, result.stdout + result.stderr


def test_compose_images_are_pinned_and_the_daemon_is_built_here():
    """Third-party images name a version; the daemon is built from this repo."""
    services = compose_services()
    assert set(services) == {"copilot-otel", "otel-collector", "jaeger", "prometheus", "grafana"}
    for service in services.values():
        if "build" not in service:
            assert_pinned(service["image"])
    build = services["copilot-otel"]["build"]
    assert services["copilot-otel"]["image"] == "copilot-otel:local", "a local name, never pulled"
    assert (COMPOSE.parent / build["context"]).resolve() == DEPLOY.parent
    assert (DEPLOY.parent / build["dockerfile"]).resolve() == DOCKERFILE


def test_compose_daemon_reads_copilot_home_read_only_and_serves_metrics():
    """~/.copilot is mounted read-only where COPILOT_HOME points; the daemon
    listens on all interfaces at the default port, published on loopback; state
    sits on a volume; it sees host pids, runs as a non-root uid, drops
    capabilities."""
    daemon = compose_services()["copilot-otel"]
    env = daemon["environment"]
    mounts = bind_mounts(daemon)
    home = mounts[env["COPILOT_HOME"]]
    assert home["type"] == "bind" and home["read_only"] is True
    assert home["source"] == "${COPILOT_HOME:-${HOME}/.copilot}"
    assert home["bind"]["create_host_path"] is False
    assert mounts[env["COPILOT_OTEL_STATE_DIR"]]["type"] == "volume"
    assert env["COPILOT_OTEL_METRICS_ADDRESS"] == METRICS_ADDRESS
    assert daemon["ports"] == [f"127.0.0.1:{METRICS_PORT}:{METRICS_PORT}"]
    assert daemon["pid"] == "host"
    assert daemon["read_only"] is True
    assert daemon["cap_drop"] == ["ALL"]
    uid = daemon["user"].split(":")[0]
    assert uid.startswith("${") and not uid.startswith("${COPILOT_UID:-0}"), daemon["user"]
    assert daemon["build"]["args"]["UID"] == "${COPILOT_UID:-1000}"


def test_every_shipped_scraper_and_probe_names_the_daemon_as_it_answers():
    """The daemon refuses a Host that is neither localhost, an IP address nor an --allowed-host name: compose's
    Prometheus scrapes it by its service name, which the compose file allows; the image's health check and the
    Kubernetes probes (no host set: the pod IP) and ServiceMonitors (pod IPs) use addresses."""
    from copilot_otel.config import check_allowed_hosts
    from copilot_otel.web.access import host_allowed

    env = compose_services()["copilot-otel"]["environment"]
    allowed = check_allowed_hosts([env.get("COPILOT_OTEL_ALLOWED_HOST", "")])
    targets = [target for job in load_yaml(DEPLOY / "prometheus" / "prometheus.yml")["scrape_configs"]
               for static in job["static_configs"] for target in static["targets"]]
    assert targets and all(host_allowed(target, allowed) for target in targets), (targets, allowed)
    assert not all(host_allowed(target) for target in targets)  # the allowance is what lets them in
    (check,) = re.findall(r"urlopen\('https?://([^/']+)/healthz'", DOCKERFILE.read_text())
    assert host_allowed(check)
    probes = [container[probe]["httpGet"] for _path, doc in OBJECTS if doc["kind"] in ("DaemonSet", "Deployment")
              for container in containers(doc["spec"]["template"]["spec"]) for probe in ("livenessProbe",
                                                                                         "readinessProbe",
                                                                                         "startupProbe")
              if "httpGet" in container.get(probe, {})]
    assert probes and all("host" not in probe and not any(h["name"].lower() == "host"
                                                          for h in probe.get("httpHeaders", [])) for probe in probes)


def test_compose_traces_go_through_the_gateway_to_jaeger():
    """The daemon exports OTLP gRPC to the gateway, which runs deploy/otelcol/gateway.yaml with its queue on a
    volume and sends traces to Jaeger and pushed metrics to Prometheus's OTLP receiver (turned on); the machine's
    name is the container's host name, set from COPILOT_HOST_NAME."""
    services = compose_services()
    daemon = services["copilot-otel"]
    env = daemon["environment"]
    assert env["OTEL_EXPORTER_OTLP_ENDPOINT"] == "http://otel-collector:4317"
    assert env["OTEL_EXPORTER_OTLP_PROTOCOL"] == "grpc"
    assert env["OTEL_SERVICE_NAME"] == JOB
    assert daemon["hostname"] == "${COPILOT_HOST_NAME:-copilot-otel}"
    assert "otel-collector" in daemon["depends_on"]
    gateway = services["otel-collector"]
    mounts = bind_mounts(gateway)
    (config,) = [m for m in mounts.values() if m["type"] == "bind"]
    assert (COMPOSE.parent / config["source"]).resolve() == GATEWAY_CONFIG and config["read_only"] is True
    assert gateway["command"] == [f"--config={config['target']}"]
    queue = mounts[gateway["environment"]["GATEWAY_QUEUE_DIR"]]
    assert queue["type"] == "volume" and queue["source"] in load_yaml(COMPOSE)["volumes"]
    assert gateway["environment"]["JAEGER_OTLP_ENDPOINT"] == "jaeger:4317"
    assert gateway["environment"]["PROMETHEUS_OTLP_ENDPOINT"] == "http://prometheus:9090/api/v1/otlp"
    assert "--web.enable-otlp-receiver" in services["prometheus"]["command"]
    assert {"127.0.0.1:4317:4317", "127.0.0.1:4318:4318"} <= set(gateway["ports"])
    assert services["jaeger"]["ports"] == ["127.0.0.1:16686:16686"]


def test_compose_prometheus_loads_config_and_rules():
    """Prometheus gets prometheus.yml at its default path and the rules folder
    where rule_files looks; the UI ports are the documented ones."""
    services = compose_services()
    mounts = bind_mounts(services["prometheus"])
    config = mounts["/etc/prometheus/prometheus.yml"]
    assert (COMPOSE.parent / config["source"]).resolve() == DEPLOY / "prometheus" / "prometheus.yml"
    rules = mounts["/etc/prometheus/rules"]
    assert (COMPOSE.parent / rules["source"]).resolve() == DEPLOY / "prometheus" / "rules"
    assert all(mount.get("read_only") for mount in (config, rules))
    assert services["prometheus"]["ports"] == ["127.0.0.1:9090:9090"]
    assert services["grafana"]["ports"] == ["127.0.0.1:3000:3000"]


def test_compose_bind_sources_exist():
    """Every relative bind-mount source is a file or folder of this repo."""
    for name, service in compose_services().items():
        for volume in service.get("volumes", []):
            if volume["type"] == "bind" and volume["source"].startswith("."):
                assert (COMPOSE.parent / volume["source"]).exists(), (name, volume["source"])


# --- container image --------------------------------------------------------

def dockerfile_instructions() -> list[tuple[str, str]]:
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    return [
        (line.split(None, 1)[0].upper(), line.split(None, 1)[1] if " " in line.strip() else "")
        for line in (raw.strip() for raw in text.splitlines())
        if line and not line.startswith("#")
    ]


def test_dockerfile_is_small_pinned_and_non_root():
    """Slim pinned base, multi-stage, numeric non-root USER (so Kubernetes can
    check runAsNonRoot), the daemon's port, `copilot-otel run` by default."""
    instructions = dockerfile_instructions()
    args = dict(
        value.split("=", 1) for kind, value in instructions if kind == "ARG" and "=" in value
    )
    base = args["PYTHON_IMAGE"]
    assert_pinned(base)
    assert "slim" in base
    froms = [value for kind, value in instructions if kind == "FROM"]
    assert len(froms) == 2 and all(value.startswith("${PYTHON_IMAGE}") for value in froms)
    (user,) = [value for kind, value in instructions if kind == "USER"]
    assert user == "${UID}:${GID}"
    assert args["UID"] == "1000" and args["GID"] == "1000"
    assert ("EXPOSE", str(METRICS_PORT)) in instructions
    assert ("ENTRYPOINT", '["copilot-otel"]') in instructions
    assert ("CMD", '["run"]') in instructions
    env = " ".join(value for kind, value in instructions if kind == "ENV")
    assert f"COPILOT_OTEL_METRICS_ADDRESS={METRICS_ADDRESS}" in env
    assert any(kind == "HEALTHCHECK" and "/healthz" in value for kind, value in instructions)


def test_dockerignore_keeps_the_context_small():
    """BuildKit reads Dockerfile.dockerignore beside the Dockerfile: no .git,
    virtualenv or tests in the build context."""
    ignored = (DOCKERFILE.parent / "Dockerfile.dockerignore").read_text().split()
    assert {".git", ".venv", "tests", "node_modules"} <= set(ignored)


# --- systemd ----------------------------------------------------------------

def unit_settings() -> dict[str, list[str]]:
    settings: dict[str, list[str]] = {}
    for line in UNIT.read_text().splitlines():
        if "=" in line and not line.lstrip().startswith(("#", ";", "[")):
            key, value = line.split("=", 1)
            settings.setdefault(key.strip(), []).append(value.strip())
    return settings


@pytest.fixture
def unit_home(tmp_path):
    """A home where the daemon is installed as `pipx install .` puts it, so that
    systemd-analyze can resolve %h/.local/bin/copilot-otel."""
    home = tmp_path / "home"
    executable = home / ".local" / "bin" / "copilot-otel"
    executable.parent.mkdir(parents=True)
    executable.write_text("#!/bin/sh\n")
    executable.chmod(0o755)
    runtime = tmp_path / "run"
    runtime.mkdir(mode=0o700)
    return {**os.environ, "HOME": str(home), "XDG_RUNTIME_DIR": str(runtime)}


def test_systemd_verify_accepts_the_user_unit(unit_home):
    """systemd-analyze verify finds no unknown key, bad value or missing command."""
    tool = require_tool("systemd-analyze", "systemd")
    result = run([tool, "--user", "verify", str(UNIT)], env=unit_home)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout + result.stderr == "", result.stdout + result.stderr


def test_systemd_unit_is_hardened(unit_home):
    """systemd-analyze security rates the unit's exposure well under the 'OK' mark."""
    tool = require_tool("systemd-analyze", "systemd")
    result = run([tool, "--user", "security", "--offline=yes", "--threshold=30", str(UNIT)], env=unit_home)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr


def test_systemd_unit_restarts_and_can_still_read_copilot_home():
    """Restart on failure; the home is read-only, not hidden (ProtectHome=yes or
    tmpfs would hide ~/.copilot); state goes to ~/.local/state/copilot-otel; the
    CLI's pids stay visible."""
    settings = unit_settings()
    assert settings["ExecStart"] == ["%h/.local/bin/copilot-otel run"]
    assert settings["Restart"] == ["on-failure"]
    assert settings["ProtectHome"] == ["read-only"]
    assert settings["StateDirectory"] == ["copilot-otel"]
    assert "COPILOT_OTEL_STATE_DIR=%S/copilot-otel" in settings["Environment"]
    assert f"COPILOT_OTEL_METRICS_ADDRESS=127.0.0.1:{METRICS_PORT}" in settings["Environment"]
    assert "ProtectProc" not in settings and "InaccessiblePaths" not in settings
    assert settings["NoNewPrivileges"] == ["yes"]
    assert settings["WantedBy"] == ["default.target"]


GATEWAY_UNIT = DEPLOY / "systemd" / "otelcol-gateway.service"


@pytest.fixture
def gateway_unit(tmp_path) -> Path:
    """The gateway unit with its ExecStart pointing at an executable that exists here (otelcol-contrib is not
    installed on this machine): systemd-analyze then checks every other line."""
    binary = tmp_path / "otelcol-contrib"
    binary.write_text("#!/bin/sh\n")
    binary.chmod(0o755)
    unit = tmp_path / GATEWAY_UNIT.name
    unit.write_text(GATEWAY_UNIT.read_text().replace("/usr/bin/otelcol-contrib", str(binary)))
    return unit


def test_systemd_verify_and_security_accept_the_gateway_unit(gateway_unit):
    """systemd-analyze verify finds no unknown key or bad value in the gateway's system unit, and its security
    rating is 'OK' or better."""
    tool = require_tool("systemd-analyze", "systemd")
    result = run([tool, "verify", str(gateway_unit)])
    assert result.returncode == 0 and result.stdout + result.stderr == "", result.stdout + result.stderr
    result = run([tool, "security", "--offline=yes", "--threshold=30", str(gateway_unit)])
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr


def test_systemd_gateway_keeps_its_queue_in_its_state_directory():
    """The unit runs the shared gateway config, keeps the sending queue in its StateDirectory (kept across
    restarts), restarts always, and its env example names the backends the config reads."""
    settings = {}
    for line in GATEWAY_UNIT.read_text().splitlines():
        if "=" in line and not line.lstrip().startswith(("#", ";", "[")):
            key, value = line.split("=", 1)
            settings.setdefault(key.strip(), []).append(value.strip())
    assert settings["ExecStart"] == ["/usr/bin/otelcol-contrib --config=/etc/otelcol-contrib/gateway.yaml"]
    assert settings["StateDirectory"] == ["otelcol-gateway"]
    assert "GATEWAY_QUEUE_DIR=%S/otelcol-gateway" in settings["Environment"]
    assert settings["Restart"] == ["always"]
    install = "install -D -m 0644 deploy/otelcol/gateway.yaml /etc/otelcol-contrib/gateway.yaml"
    assert install in GATEWAY_UNIT.read_text()
    example = (DEPLOY / "systemd" / "otelcol-gateway.env.example").read_text()
    config = GATEWAY_CONFIG.read_text()
    for variable in re.findall(r"^#?(\w+)=", example, flags=re.M):
        assert f"${{env:{variable}" in config, variable
    daemon = (DEPLOY / "systemd" / "copilot-otel.env.example").read_text()
    assert "host.name" in daemon and "service.instance.id" in daemon and "OTEL_METRICS_EXPORTER=otlp" in daemon


# --- Kubernetes -------------------------------------------------------------

def k8s_objects() -> list[tuple[Path, dict]]:
    objects = []
    for path in sorted(K8S.rglob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and "kind" in doc and doc["kind"] != "Kustomization":
                objects.append((path, doc))
    return objects


OBJECTS = k8s_objects()
CORE_OBJECTS = [(p, d) for p, d in OBJECTS if "monitoring.coreos.com" not in d["apiVersion"]]


def named(kind: str, name: str) -> dict:
    (doc,) = [d for _, d in OBJECTS if d["kind"] == kind and d["metadata"]["name"] == name]
    return doc


def containers(pod: dict) -> list[dict]:
    return pod.get("initContainers", []) + pod["containers"]


def by_name(items: list[dict], name: str) -> dict:
    (item,) = [item for item in items if item["name"] == name]
    return item


def env_of(container: dict) -> dict[str, str]:
    return {e["name"]: e.get("value") for e in container.get("env", [])}


def pod_labels(workload: dict) -> dict:
    return workload["spec"]["template"]["metadata"]["labels"]


@pytest.mark.parametrize(
    "path,doc", CORE_OBJECTS, ids=[f"{p.relative_to(K8S)}:{d['kind']}" for p, d in CORE_OBJECTS]
)
def test_kubernetes_object_matches_the_api_schema(path, doc):
    """kubernetes-validate (OpenAPI schemas shipped in the package, strict: no
    unknown fields) accepts each built-in object for Kubernetes 1.29."""
    try:
        kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)
    except kubernetes_validate.ValidationError as error:
        pytest.fail(f"{path}: {'.'.join(map(str, error.path))}: {error.message}")


def test_kustomizations_reference_existing_files():
    """Every resource, file and directory a kustomization names is there."""
    for path in K8S.rglob("kustomization.yaml"):
        kustomization = load_yaml(path)
        assert kustomization["kind"] == "Kustomization"
        for resource in kustomization.get("resources", []):
            target = path.parent / resource
            assert target.is_file() or (target / "kustomization.yaml").is_file(), (path, resource)
        for generator in kustomization.get("configMapGenerator", []):
            for file in generator["files"]:
                assert (path.parent / file).is_file(), (path, file)
    root = load_yaml(K8S / "kustomization.yaml")
    assert root["namespace"] == named("Namespace", "copilot-otel")["metadata"]["name"]


def test_kubernetes_images_are_pinned():
    for _path, doc in OBJECTS:
        if doc["kind"] in ("Deployment", "DaemonSet"):
            for container in containers(doc["spec"]["template"]["spec"]):
                assert_pinned(container["image"])
    for path in K8S.rglob("kustomization.yaml"):
        for image in load_yaml(path).get("images", []):
            assert image["newTag"] not in ("", "latest"), path


@pytest.mark.parametrize("kind,name", [("DaemonSet", "copilot-otel"), ("Deployment", "copilot-agent"), ("Deployment",
                                                                                                        "otel-collector")])
def test_pods_run_as_non_root_without_privileges(kind, name):
    """runAsNonRoot on the pod; every container without privilege escalation or
    capabilities; the daemon and the Collector on a read-only root filesystem."""
    pod = named(kind, name)["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] != 0
    assert pod["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
    assert pod["automountServiceAccountToken"] is False
    for container in containers(pod):
        context = container["securityContext"]
        assert context["allowPrivilegeEscalation"] is False
        assert context["capabilities"]["drop"] == ["ALL"]
        assert not context.get("privileged")
        if container["name"] != "agent":
            assert context["readOnlyRootFilesystem"] is True


def assert_daemon_container(container: dict, copilot_home: str) -> None:
    """The daemon's settings: where it reads, where it listens, where it exports."""
    env = env_of(container)
    assert env["COPILOT_HOME"] == copilot_home
    assert env["COPILOT_OTEL_METRICS_ADDRESS"] == METRICS_ADDRESS
    assert env["OTEL_EXPORTER_OTLP_PROTOCOL"] == "grpc"
    assert re.fullmatch(r"http://otel-collector(\.copilot-otel\.svc)?:4317", env["OTEL_EXPORTER_OTLP_ENDPOINT"])
    assert env["OTEL_SERVICE_NAME"] == JOB
    assert container["args"] == ["run"]
    assert container["ports"] == [{"name": "metrics", "containerPort": METRICS_PORT, "protocol": "TCP"}]
    for probe in ("readinessProbe", "livenessProbe"):
        assert container[probe]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    assert mounts[copilot_home]["readOnly"] is True
    assert not mounts[env["COPILOT_OTEL_STATE_DIR"]].get("readOnly")


def test_daemonset_mounts_the_host_copilot_home_read_only():
    """One daemon per agent node, reading the node's COPILOT_HOME through a
    read-only hostPath, in the host pid namespace so lock pids mean something."""
    pod = named("DaemonSet", "copilot-otel")["spec"]["template"]["spec"]
    daemon = by_name(pod["containers"], "copilot-otel")
    assert_daemon_container(daemon, "/var/lib/copilot")
    home = by_name(pod["volumes"], by_name(daemon["volumeMounts"], "copilot-home")["name"])
    assert home["hostPath"] == {"path": "/var/lib/copilot", "type": "Directory"}
    assert pod["hostPID"] is True
    assert "hostNetwork" not in pod


def test_sidecar_shares_the_agents_copilot_home():
    """The agent writes COPILOT_HOME on a shared volume; the sidecar mounts the
    same volume read-only at the same path and shares the pod's pid namespace.
    It is a native sidecar: an init container that keeps running."""
    pod = named("Deployment", "copilot-agent")["spec"]["template"]["spec"]
    sidecar = by_name(pod["initContainers"], "copilot-otel")
    agent = by_name(pod["containers"], "agent")
    assert sidecar["restartPolicy"] == "Always"
    home = env_of(agent)["COPILOT_HOME"]
    assert_daemon_container(sidecar, home)
    agent_mount = by_name(agent["volumeMounts"], "copilot-home")
    sidecar_mount = by_name(sidecar["volumeMounts"], "copilot-home")
    assert agent_mount["mountPath"] == sidecar_mount["mountPath"] == home
    assert not agent_mount.get("readOnly") and sidecar_mount["readOnly"] is True
    assert "emptyDir" in by_name(pod["volumes"], "copilot-home")
    assert pod["shareProcessNamespace"] is True
    assert pod["securityContext"]["fsGroup"] == pod["securityContext"]["runAsGroup"]


@pytest.mark.parametrize(
    "service,monitor,workload",
    [
        ("copilot-otel", "copilot-otel", ("DaemonSet", "copilot-otel")),
        ("copilot-otel-sidecar", "copilot-otel-sidecar", ("Deployment", "copilot-agent")),
    ],
)
def test_service_and_servicemonitor_scrape_the_daemon(service, monitor, workload):
    """Service selects the daemon's pods and targets port 9464; the
    ServiceMonitor selects the Service, scrapes its metrics port on /metrics,
    and names the job copilot-otel as the alert rules expect."""
    svc = named("Service", service)
    mon = named("ServiceMonitor", monitor)
    assert svc["spec"]["selector"].items() <= pod_labels(named(*workload)).items()
    assert svc["spec"]["clusterIP"] == "None"
    (port,) = svc["spec"]["ports"]
    assert port["targetPort"] == METRICS_PORT and port["port"] == METRICS_PORT
    assert mon["apiVersion"] == "monitoring.coreos.com/v1"
    assert mon["spec"]["selector"]["matchLabels"].items() <= svc["metadata"]["labels"].items()
    (endpoint,) = mon["spec"]["endpoints"]
    assert endpoint["port"] == port["name"]
    assert endpoint["path"] == "/metrics"
    assert svc["metadata"]["labels"][mon["spec"]["jobLabel"]] == JOB


# --- OpenTelemetry Collector gateway ----------------------------------------

GATEWAY_CONFIG = DEPLOY / "otelcol" / "gateway.yaml"


def test_every_deploy_runs_the_same_gateway_config():
    """Compose, systemd and Kubernetes run one gateway config: the ConfigMap's file is a copy of
    deploy/otelcol/gateway.yaml."""
    assert COLLECTOR_CONFIG.read_text() == GATEWAY_CONFIG.read_text()


def test_gateway_has_traces_and_metrics_pipelines_with_a_queue_on_disk():
    """OTLP in; memory_limiter first; traces AND metrics pipelines; every component defined; each exporter's
    sending queue in file_storage (so what the gateway acknowledged survives its crash), batching inside that
    queue and no batch processor in front of it (which would hold acknowledged data in memory)."""
    config = load_yaml(GATEWAY_CONFIG)
    service = config["service"]
    for extension in service["extensions"]:
        assert extension in config["extensions"]
    assert set(service["pipelines"]) == {"traces", "metrics"}
    for name, pipeline in service["pipelines"].items():
        for section in ("receivers", "processors", "exporters"):
            for component in pipeline[section]:
                assert component in config[section], (name, section, component)
        assert pipeline["receivers"] == ["otlp"]
        assert pipeline["processors"][0] == "memory_limiter"
        assert not [p for p in pipeline["processors"] if p.split("/")[0] == "batch"], name
        for exporter in pipeline["exporters"]:
            queue = config["exporters"][exporter]["sending_queue"]
            assert queue["enabled"] is True and queue["storage"] in service["extensions"], exporter
            assert queue["storage"].split("/")[0] == "file_storage"
            assert set(queue["batch"]) == {"flush_timeout", "min_size", "max_size"}, exporter
    protocols = config["receivers"]["otlp"]["protocols"]
    # every interface on the usual ports unless told otherwise (the tests bind loopback ports through these)
    assert protocols["grpc"]["endpoint"] == "${env:GATEWAY_OTLP_GRPC_ENDPOINT:-0.0.0.0:4317}"
    assert protocols["http"]["endpoint"] == "${env:GATEWAY_OTLP_HTTP_ENDPOINT:-0.0.0.0:4318}"
    (traces,) = service["pipelines"]["traces"]["exporters"]
    assert traces.split("/")[0] == "otlp_grpc" and "JAEGER_OTLP_ENDPOINT" in config["exporters"][traces]["endpoint"]
    (metrics,) = service["pipelines"]["metrics"]["exporters"]
    assert config["exporters"][metrics]["metrics_endpoint"].endswith("/v1/metrics")
    storage = config["extensions"]["file_storage/queue"]
    assert "GATEWAY_QUEUE_DIR" in storage["directory"] and storage["fsync"] is True
    text = GATEWAY_CONFIG.read_text()
    for reason in ("Why a queue on disk", "no `batch` processor", "Batching after the data is on disk"):
        assert reason in text


def test_collector_deployment_uses_the_config_and_exposes_otlp():
    """The Deployment mounts the generated ConfigMap where --config points, and
    its Service exposes the OTLP ports the daemons export to."""
    deployment = named("Deployment", "otel-collector")
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    generator = load_yaml(K8S / "collector" / "kustomization.yaml")["configMapGenerator"][0]
    volume = by_name(pod["volumes"], "config")
    assert volume["configMap"]["name"] == generator["name"]
    mount = by_name(container["volumeMounts"], "config")
    assert container["args"] == [f"--config={mount['mountPath']}/{COLLECTOR_CONFIG.name}"]
    assert generator["files"] == [COLLECTOR_CONFIG.name]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports["otlp-grpc"] == 4317 and ports["otlp-http"] == 4318
    service = named("Service", "otel-collector")
    assert {(p["port"], p["targetPort"]) for p in service["spec"]["ports"]} == {(4317, "otlp-grpc"), (4318,
                                                                                                      "otlp-http")}
    assert service["spec"]["selector"].items() <= pod_labels(deployment).items()
    assert deployment["spec"]["replicas"] >= 2
    assert "memory" in container["resources"]["limits"]
    env = env_of(container)
    queue = by_name(container["volumeMounts"], "queue")
    assert env["GATEWAY_QUEUE_DIR"] == queue["mountPath"] and "emptyDir" in by_name(pod["volumes"], "queue")
    assert pod["securityContext"]["fsGroup"] == pod["securityContext"]["runAsUser"]  # the queue is writable
    assert re.search(r"(jaeger|tempo)", env["JAEGER_OTLP_ENDPOINT"])
    assert env["PROMETHEUS_OTLP_ENDPOINT"].endswith("/api/v1/otlp")


# --- docs -------------------------------------------------------------------

def test_docs_explain_how_to_run_it():
    """docs/deploy.md gives the one compose command, the URLs, and the systemd,
    Kubernetes and image build steps, and says the image is not built here."""
    text = DOCS.read_text()
    for needle in (
        "docker compose -f deploy/docker-compose.yml up -d",
        "http://localhost:3000",
        "http://localhost:16686",
        "http://localhost:9090",
        "systemctl --user enable --now copilot-otel",
        "loginctl enable-linger",
        "kubectl apply -k deploy/kubernetes",
        "docker build -f deploy/container/Dockerfile",
        "promtool test rules deploy/prometheus/tests/copilot-otel.test.yml",
    ):
        assert needle in text, needle
    readme = (DEPLOY / "README.md").read_text()
    assert "docker compose -f deploy/docker-compose.yml up -d" in readme
    assert "http://localhost:3000" in readme


@pytest.mark.parametrize("panel", PANELS, ids=[panel["title"] for panel in PANELS])
def test_docs_say_what_each_panel_answers(panel):
    """Each panel title appears in docs/deploy.md with what it answers."""
    assert f"**{panel['title']}**" in DOCS.read_text()
