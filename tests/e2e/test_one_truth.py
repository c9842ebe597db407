"""One truth on every CLI version: what each session used (tokens of each kind, LLM calls, premium requests, AI
credits) is the same in `sessions --json`, `inspect --json`, the daemon's /api/sessions, replay's --metrics-file,
the OTLP metrics push and the session's own totals (its session.shutdown), for every log the real CLI wrote
(tests/fixtures/cli, eight versions). Real processes: the daemon, replay, a real OTLP receiver (Rotel)."""

from __future__ import annotations

import json
import shutil
from collections import Counter, defaultdict
from pathlib import Path

from tests.e2e.test_daily_views import FAST, inspect_json, sessions_json
from tests.support import viewclient as view_api
from tests.support.commands import run_replay
from tests.support.daemon import DaemonProcess
from tests.support.net import wait_until, wait_until_steady
from tests.support.otlp_receiver import OtlpReceiver
from tests.support.scrape import parse

CLI = Path(__file__).resolve().parents[1] / "fixtures" / "cli"
VERSIONS = sorted(p.name for p in CLI.iterdir() if p.is_dir())
TOKENS = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens")
FIELDS = (*TOKENS, "llm_calls", "premium_requests", "nano_aiu")
# copilot_tokens_total{type}: the field each type adds to
TOKEN_TYPES = {"input": "input_tokens", "output": "output_tokens", "cache_read": "cache_read_tokens",
               "cache_write": "cache_write_tokens"}
USAGE_KEYS = {"inputTokens": "input_tokens", "outputTokens": "output_tokens", "cacheReadTokens": "cache_read_tokens",
              "cacheWriteTokens": "cache_write_tokens"}
CUMULATIVE_SINCE = (1, 0, 70)  # shutdown totals cover the whole session from this version on, the process before


def version_tuple(text: str) -> tuple[int, ...]:
    return tuple(map(int, text.split(".")))


def own_totals(log: Path, version: str) -> dict | None:
    """What the session's session.shutdown events total (the last one's from 1.0.70, the sum of all before), or
    None when the CLI wrote none. LLM calls are modelMetrics' requests.count."""
    events = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    shutdowns = [e["data"] for e in events if e["type"] == "session.shutdown"]
    if not shutdowns:
        return None
    if version_tuple(version) >= CUMULATIVE_SINCE:
        shutdowns = shutdowns[-1:]
    totals = dict.fromkeys(FIELDS, 0)
    for data in shutdowns:
        totals["premium_requests"] += data.get("totalPremiumRequests", 0)
        snapshot = data.get("accountingSnapshot") or {}
        totals["nano_aiu"] += round(snapshot.get("totalNanoAiu", data.get("totalNanoAiu", 0)))
        for metrics in data["modelMetrics"].values():
            totals["llm_calls"] += metrics["requests"]["count"]
            for key, field in USAGE_KEYS.items():
                totals[field] += metrics["usage"].get(key, 0)
    return totals


def row_fields(row: dict) -> dict:
    return {field: round(row[field], 6) if field == "premium_requests" else row[field] for field in FIELDS}


def prometheus_totals(text: str) -> dict:
    """The FIELDS summed over every series of replay's --metrics-file."""
    totals = dict.fromkeys(FIELDS, 0.0)
    for (name, labels), value in parse(text).items():
        labels = dict(labels)
        if name == "copilot_tokens_total":
            totals[TOKEN_TYPES[labels["type"]]] += value
        elif name == "copilot_llm_calls_total" and labels["outcome"] == "success":
            totals["llm_calls"] += value
        elif name == "copilot_premium_requests_total":
            totals["premium_requests"] += value
        elif name == "copilot_ai_credits_total":
            totals["nano_aiu"] += value * 1e9
    return totals


def pushed_totals(metrics: list, version: str) -> dict:
    """The FIELDS summed over the last push of the replay of ``version`` (told apart by its resource)."""
    latest: dict[str, object] = {}
    for metric in metrics:
        if metric.resource.get("fixture.version") == version:
            latest[metric.name] = metric
    totals = dict.fromkeys(FIELDS, 0.0)
    for name, metric in latest.items():
        for point in metric.points:
            if name == "copilot_tokens":
                totals[TOKEN_TYPES[point.attributes["type"]]] += point.value
            elif name == "copilot_llm_calls" and point.attributes["outcome"] == "success":
                totals["llm_calls"] += point.value
            elif name == "copilot_premium_requests":
                totals["premium_requests"] += point.value
            elif name == "copilot_ai_credits":
                totals["nano_aiu"] += point.value * 1e9
    return totals


def test_every_view_counts_what_each_session_used_alike_on_every_cli_version(tmp_path):
    """For each session of every stored CLI version, `sessions --json`, `inspect --json` and /api/sessions give the
    tokens (input, output, cache read, cache write), LLM calls, premium requests and AI credits its own shutdown
    totals hold; per version, replay's --metrics-file and its OTLP metrics push add up to the same sums. Each
    difference is named by session (or version), view and field."""
    home, state = tmp_path / "home", tmp_path / "state"
    version_of: dict[str, str] = {}
    homes: dict[str, Path] = {}
    for log in sorted(CLI.glob("*/*/session-state/*/events.jsonl")):
        version = log.parents[3].name
        for target in (home, tmp_path / "by-version" / version):
            shutil.copytree(log.parent, target / "session-state" / log.parent.name)
        version_of[log.parent.name] = version
        homes[version] = tmp_path / "by-version" / version
    assert sorted(homes) == VERSIONS and len(VERSIONS) == 8

    with DaemonProcess(home, state, args=FAST) as daemon:
        def answer() -> dict | None:
            rows = {row["id"]: row_fields(row)
                    for row in view_api.get_json(daemon.port, "/api/sessions?limit=500")["sessions"]}
            return rows if len(rows) == len(version_of) else None

        api = wait_until_steady(answer, timeout=90, interval=1.0, what="the daemon's answer to settle")
    listed = {sid: row_fields(row) for sid, row in sessions_json(home, tmp_path / "other", "--from-files").items()}

    pushed: list = []
    replayed: dict[str, dict] = {}
    with OtlpReceiver() as receiver:
        for version, version_home in homes.items():
            metrics_file = tmp_path / f"{version}.prom"
            env = {"OTEL_METRICS_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL": "http/protobuf",
                   "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT": f"{receiver.http_base}/v1/metrics",
                   "OTEL_RESOURCE_ATTRIBUTES": f"fixture.version={version}"}
            result = run_replay(str(version_home), "--traces-file", str(tmp_path / f"{version}.jsonl"),
                                "--metrics-file", str(metrics_file), "--state-dir", str(tmp_path / "replay-state"),
                                env=env)
            assert result.returncode == 0, result.stderr.decode()
            replayed[version] = prometheus_totals(metrics_file.read_text())
        wait_until(lambda: {m.resource.get("fixture.version") for m in receiver.metrics()} >= set(VERSIONS),
                   timeout=30, what="a push from every replay")
        pushed = receiver.metrics()

    differences = []
    sums: dict[str, Counter] = defaultdict(Counter)
    for sid, version in version_of.items():
        views = {"sessions --json": listed[sid], "inspect --json": row_fields(inspect_json(home, sid)["session"]),
                 "/api/sessions": api[sid]}
        totals = own_totals(home / "session-state" / sid / "events.jsonl", version)
        reference = totals if totals is not None else views["sessions --json"]
        for view, said in [*views.items()]:
            for field in FIELDS:
                # An amount no call reported is unknown (null in every view), never a zero: the log's own totals
                # then hold none either.
                unknown = field == "nano_aiu" and said[field] is None and not reference[field]
                if said[field] != reference[field] and not unknown:
                    differences.append(f"{version} {sid[:8]} {view} {field}: {said[field]} (shutdown totals: "
                                       f"{reference[field]})" if totals else
                                       f"{version} {sid[:8]} {view} {field}: {said[field]} (sessions --json: "
                                       f"{reference[field]})")
        sums[version].update({field: amount or 0 for field, amount in reference.items()})
    for version in VERSIONS:
        expected = sums[version]
        for view, said in (("replay --metrics-file", replayed[version]), ("OTLP metrics push",
                                                                          pushed_totals(pushed, version))):
            for field in FIELDS:
                if round(said[field], 3) != round(expected[field], 3):
                    differences.append(f"{version} (all its sessions) {view} {field}: {said[field]} "
                                       f"(the sessions' totals: {expected[field]})")
    assert not differences, "\n".join(differences)
    assert all(sums[v]["input_tokens"] > 0 for v in VERSIONS if v not in ("0.0.400", "1.0.2"))
