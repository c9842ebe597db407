"""Numbers and names from a log that would break the metrics: a 400-digit token count, a cost of 1e308,
thousands of invented statuses, error types and providers. Each is clamped or capped, counted and named; no
other session loses its metrics. (JSON nested past what a parser reads: test_attacks_input.py.)"""

from __future__ import annotations

import json

from tests.support.daemon import DaemonProcess
from tests.support.events import SessionLog
from tests.support.files import new_session
from tests.support.net import wait_until
from tests.support.otlp_receiver import OtlpReceiver
from tests.support.scrape import by_label, value

FAST = ("--idle-quiet", "0.3", "--rescan-interval", "1")
HUGE = 10 ** 400


def _session(home, name: str, *, giant: bool = False) -> None:
    log = SessionLog(name)
    log.start()
    log.user()
    if giant:
        log.answer(output_tokens=HUGE, cost=1e308, extra={"duration": HUGE, "timeToFirstTokenMs": HUGE})
        log.user()
        log.answer(cost=1e308)
    else:
        log.answer(cost=1.0)
    log.shutdown()
    new_session(home, name).write_bytes(log.jsonl())


def test_one_huge_number_costs_no_session_its_metrics(tmp_path):
    """Six sessions read in one pass, one with a 400-digit outputTokens, duration and time to first token and
    a cost of 1e308 on two calls: all six are counted, every counter stays finite (clamped to int64, as the
    docs promise), each clamped value is counted in copilot_otel_values_clamped_total and logged with its
    file and line, nothing is an internal error, and the web view still lists all six."""
    home = tmp_path / "home"
    for n in range(6):
        _session(home, f"s{n}", giant=n == 3)
    with DaemonProcess(home, tmp_path / "state", traces_file=tmp_path / "traces.jsonl", args=FAST) as daemon:
        daemon.wait_for_metric("copilot_sessions_started_total", 6, timeout=30)
        wait_until(lambda: value(daemon.scrape(), "copilot_otel_values_clamped_total", reason="out_of_range") >= 6,
                   timeout=20, what="the clamped values counted")
        samples = daemon.scrape()
        listed = json.loads(daemon.api_get("/api/sessions"))
    assert value(samples, "copilot_llm_calls_total", model="test-model", outcome="success") == 7
    premium = value(samples, "copilot_premium_requests_total", model="test-model")
    output = value(samples, "copilot_tokens_total", model="test-model", type="output")
    assert premium == 5 + 2 * float((1 << 63) - 1) and output == 5 * 42 + float((1 << 63) - 1)
    assert value(samples, "copilot_otel_values_clamped_total", reason="out_of_range") == 6
    assert value(samples, "copilot_otel_lines_rejected_total", reason="internal_error") == 0
    assert sorted(s["id"] for s in listed["sessions"]) == [f"s{n}" for n in range(6)]
    log = daemon.log_text()
    where = f"{home / 'session-state' / 's3' / 'events.jsonl'}:"
    assert log.count(where) == 6 and "copilot_premium_requests: 1e+308 is beyond int64" in log
    assert "Traceback" not in log


def test_invented_statuses_error_types_and_providers_mint_no_more_than_the_cap(tmp_path):
    """One session whose calls report 300 distinct 2,000-character aiCreditsStatus values and provider kinds
    and whose tools fail with 300 distinct 2,000-character error codes: /metrics keeps at most
    --max-label-values statuses plus 'other', cut to 128 characters; the OTLP push keeps as many error.type
    and gen_ai.provider.name values, cut the same way; each overflow is counted by its label."""
    home = tmp_path / "home"
    count, cap = 300, 20
    log = SessionLog("names")
    log.start()
    log.user()
    for n in range(count):
        log.turn_start()
        log.usage(finish_reason="tool_calls", credits=f"status-{n:04d}-" + "s" * 2000,
                  extra={"provider": {"kind": f"provider-{n:04d}-" + "p" * 2000}})
        log.message(tools=["bash"])
        log.tool_start("bash", f"call-{n}")
        log.tool_complete(f"call-{n}", success=False, error_code=f"error-{n:04d}-" + "e" * 2000)
        log.turn_end()
    log.answer()
    log.shutdown()
    new_session(home, "names").write_bytes(log.jsonl())
    with OtlpReceiver() as receiver:
        env = {"OTEL_METRICS_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT": receiver.grpc_endpoint,
               "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL": "grpc", "OTEL_METRIC_EXPORT_INTERVAL": "500"}
        with DaemonProcess(home, tmp_path / "state", traces_file=tmp_path / "traces.jsonl", env=env,
                           args=(*FAST, "--max-label-values", str(cap))) as daemon:
            daemon.wait_for_metric("copilot_llm_calls_total", count + 1, timeout=60, model="test-model",
                                   outcome="success")
            samples = daemon.scrape()
            body = daemon.scrape_text()
            receiver.wait_for_metric("gen_ai.execute_tool.duration", timeout=30, predicate=lambda m: sum(
                p.count for p in m.points) >= count)
            pushed = {m.name: m for m in receiver.metrics()}
    statuses = by_label(samples, "copilot_llm_calls_without_credits_total", "status")
    assert len(statuses) == cap + 1 and statuses["other"] == count - cap + 1, sorted(statuses)  # +1: the answer
    assert max(len(status) for status in statuses) == 128 and len(body) < 1 << 20
    for name, key in (("gen_ai.execute_tool.duration", "error.type"),
                      ("gen_ai.client.inference.duration", "gen_ai.provider.name")):
        values = {p.attributes.get(key) for p in pushed[name].points} - {None}
        assert len(values) <= cap + 1 and "other" in values, (name, len(values))
        assert max(len(v) for v in values) <= 128, name
    for label in ("status", "error_type", "provider"):
        assert value(samples, "copilot_otel_label_overflow_total", label=label) >= count - cap, label

