"""Spans as comparable keys, and what must be exported: the replay of the final logs."""

from __future__ import annotations

import json
from pathlib import Path

from copilot_otel.delivery.sinks import MemorySink
from copilot_otel.model.records import salted
from copilot_otel.otlp.limits import clean
from copilot_otel.replay.runner import replay_files
from tests.support.daemon import complete_lines_spans
from tests.support.net import wait_until

_STATUS = {0: "UNSET", 1: "OK", 2: "ERROR"}


def key(span) -> tuple:
    """A received span (OTLP receiver or JSON lines file) as a comparable tuple."""
    return (span.trace_id, span.span_id, span.parent_span_id, span.name, span.start_time_unix_nano,
            span.end_time_unix_nano, span.status_code, json.dumps(span.attributes, sort_keys=True, default=str))


def record_key(record) -> tuple:
    """A ``SpanRecord`` as the same tuple as ``key`` makes of its exported form."""
    return (f"{record.trace_id:032x}", f"{record.span_id:016x}",
            None if record.parent_span_id is None else f"{record.parent_span_id:016x}", record.name,
            record.start_ns, record.end_ns, _STATUS[record.status],
            json.dumps(dict(record.attributes), sort_keys=True, default=str))


def expected_keys(paths, *, generation: int = 0) -> list:
    """The keys of every span an in-process replay of these logs exports, sorted, as an encoding sink writes
    them; with ``generation``, as the daemon exports them once the files were truncated or replaced that many
    times."""
    sink = MemorySink()
    replay_files([Path(p) for p in paths], sink)
    # As they leave through a sink that encodes them (limits.clean: times and integers OTLP can carry).
    return sorted(record_key(clean(salted(r, generation))) for r in sink.records)


def spans_now(traces: Path) -> list:
    """The keys of the spans written so far to an OTLP JSON lines file, sorted (duplicates kept); a stuck
    session's snapshot of an open span (github.copilot.running) is left out once its final span has come."""
    spans = complete_lines_spans(traces)
    final = {s.span_id for s in spans if not s.attributes.get("github.copilot.running")}
    return sorted(key(s) for s in spans if not (s.attributes.get("github.copilot.running") and s.span_id in final))


def wait_for_keys(traces: Path, expected: list, timeout: float = 20.0) -> list:
    """Wait until the set of exported spans equals ``expected``; return all exported (duplicates too)."""
    wanted = set(expected)
    wait_until(lambda: set(spans_now(traces)) >= wanted, timeout=timeout,
               what=f"{len(wanted)} spans in {traces}", seen=lambda: sorted(wanted - set(spans_now(traces))))
    got = spans_now(traces)
    assert set(got) == wanted
    return got
