"""Read OTLP JSON lines (the Collector file-exporter format) through the official protobuf schema.

Each line is parsed with protobuf's json_format into an ``ExportTraceServiceRequest``; the
OTLP/JSON hex ids are first turned into the base64 that protobuf's JSON mapping expects.
A line that does not fit the schema fails the parse, so this also checks the format.
"""

from __future__ import annotations

import base64
import json
from datetime import datetime
from pathlib import Path

from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

from tests.support.otlp_receiver import ReceivedSpan, spans_from_request


def _hex_to_b64(value: str) -> str:
    return base64.b64encode(bytes.fromhex(value)).decode()


def _fix_ids(request: dict) -> dict:
    for resource_spans in request.get("resourceSpans", []):
        for scope_spans in resource_spans.get("scopeSpans", []):
            for span in scope_spans.get("spans", []):
                for key in ("traceId", "spanId", "parentSpanId"):
                    if span.get(key):
                        span[key] = _hex_to_b64(span[key])
                for link in span.get("links", []):
                    for key in ("traceId", "spanId"):
                        link[key] = _hex_to_b64(link[key])
    return request


def read_spans(path: Path) -> list[ReceivedSpan]:
    """Every span of an OTLP JSON lines file."""
    spans: list[ReceivedSpan] = []
    for line in Path(path).read_text().splitlines():
        if not line.strip():
            continue
        request = json_format.Parse(json.dumps(_fix_ids(json.loads(line))),
                                    trace_service_pb2.ExportTraceServiceRequest())
        spans.extend(spans_from_request(request))
    return spans


def iso_ns(timestamp: str) -> int:
    """An event's ISO timestamp as epoch nanoseconds (independently of copilot_otel.decode.lines)."""
    moment = datetime.fromisoformat(timestamp.replace("Z", "+00:00"))
    return round(moment.timestamp() * 1000) * 1_000_000
