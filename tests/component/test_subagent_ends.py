"""A sub-agent's span ends at its own subagent.completed (issue 23 item 11), on the real CLI's logs: in
parallel_subagents_stream the task call of p0 completes 3 ms before its sub-agent does; the span was cut to it.
`replay` runs in this process over the stored logs."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import pytest

from tests.support.inprocess import run_command
from tests.support.otlp_json import read_spans

FIXTURES = Path(__file__).parent.parent / "fixtures"
LOGS = sorted([*FIXTURES.glob("situations/*/session-state/*/events.jsonl"),
               *FIXTURES.glob("cli/1.0.102/*/session-state/*/events.jsonl")])
WITH_SUBAGENTS = [p for p in LOGS if b'"subagent.completed"' in p.read_bytes()]


def ns(timestamp: str) -> int:
    return round(datetime.fromisoformat(timestamp.replace("Z", "+00:00")).timestamp() * 1000) * 1_000_000


@pytest.mark.parametrize("log", WITH_SUBAGENTS, ids=lambda p: f"{p.parts[-4]}-{p.parts[-2][:8]}")
def test_each_subagent_span_ends_at_its_completion_inside_its_task_call(log, tmp_path):
    events = [json.loads(line) for line in log.read_text().splitlines()]
    completed = {e["data"]["toolCallId"]: ns(e["timestamp"]) for e in events if e["type"] == "subagent.completed"
                 and not e["data"].get("cancelled")}
    traces = tmp_path / "t.jsonl"
    result = run_command("replay", str(log), "--state-dir", str(tmp_path / "s"), "--traces-file", str(traces))
    assert result.exit_code == 0, result.output
    spans = read_spans(traces)
    by_id = {s.span_id: s for s in spans}
    checked = 0
    for span in spans:
        call_id = span.attributes.get("gen_ai.tool.call.id")
        if span.name.startswith("invoke_agent") and span.parent_span_id and call_id in completed:
            assert span.end_time_unix_nano == completed[call_id], (span.name, call_id)
            parent = by_id[span.parent_span_id]
            assert parent.end_time_unix_nano >= span.end_time_unix_nano  # the task call holds its sub-agent
            checked += 1
    assert checked == len(completed)


def test_the_stream_case_is_among_them():
    assert any("parallel_subagents_stream" in str(p) for p in WITH_SUBAGENTS)
