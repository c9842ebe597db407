"""Pure encoding: span records -> OTLP JSON lines (the OpenTelemetry Collector file exporter's format).

No I/O here: sinks.py writes what this encodes. An encoder is plain data, so a replay worker
process can be handed one.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import orjson

from . import __version__
from .limits import clean
from .records import SpanRecord

SCOPE_NAME = "copilot-otel"
SCOPE_VERSION = __version__


def _any_value(value: Any) -> dict[str, Any]:
    kind = type(value)  # exact types first: nearly every attribute is a plain str or int
    if kind is str:
        return {"stringValue": value}
    if kind is int:
        return {"intValue": str(value)}
    if isinstance(value, bool):
        return {"boolValue": value}
    if isinstance(value, int):
        return {"intValue": str(value)}
    if isinstance(value, float):
        return {"doubleValue": value}
    if isinstance(value, (list, tuple)):
        return {"arrayValue": {"values": [_any_value(v) for v in value]}}
    return {"stringValue": str(value)}


def _key_values(attributes: Any, shared: dict[tuple[str, str], dict[str, Any]]) -> list[dict[str, Any]]:
    """OTLP key/value pairs; a (key, string) pair seen before in ``shared`` reuses its encoded object."""
    out = []
    for key, value in attributes.items():
        if type(value) is str:  # only strings: True == 1 would otherwise share with an int
            pair = shared.get((key, value))
            if pair is None:
                pair = shared[(key, value)] = {"key": key, "value": {"stringValue": value}}
        else:
            pair = {"key": key, "value": _any_value(value)}
        out.append(pair)
    return out


def _span_json(record: SpanRecord, shared: dict[tuple[str, str], dict[str, Any]]) -> dict[str, Any]:
    span: dict[str, Any] = {
        "traceId": f"{record.trace_id:032x}",
        "spanId": f"{record.span_id:016x}",
        "name": record.name,
        "kind": record.kind,
        "startTimeUnixNano": str(record.start_ns),
        "endTimeUnixNano": str(record.end_ns),
        "attributes": _key_values(record.attributes, shared),
        "status": {"code": record.status, "message": record.status_message} if record.status_message
        else {"code": record.status},
    }
    if record.parent_span_id is not None:
        span["parentSpanId"] = f"{record.parent_span_id:016x}"
    if record.links:
        span["links"] = [{"traceId": f"{trace_id:032x}", "spanId": f"{span_id:016x}"} for trace_id, span_id in record.links]
    if record.events:
        span["events"] = [
            {"timeUnixNano": str(e.time_ns), "name": e.name, "attributes": _key_values(e.attributes, shared)}
            for e in record.events
        ]
    return span


class OtlpJsonEncoder:
    """Span records -> ExportTraceServiceRequest JSON lines for one resource (plain data: it pickles)."""

    def __init__(self, resource_attributes: Mapping[str, Any]) -> None:
        self.resource_attributes = dict(resource_attributes)
        self._resource = _key_values(self.resource_attributes, {})

    def encode(self, records: Sequence[SpanRecord]) -> bytes:
        """One request holding ``records``, as a JSON line (the Collector file exporter's format)."""
        shared: dict[tuple[str, str], dict[str, Any]] = {}  # per request: a decoder sees each object once
        request = {
            "resourceSpans": [
                {
                    "resource": {"attributes": self._resource},
                    "scopeSpans": [
                        {
                            "scope": {"name": SCOPE_NAME, "version": SCOPE_VERSION},
                            "spans": [_span_json(clean(r), shared) for r in records],
                        }
                    ],
                }
            ]
        }
        return orjson.dumps(request) + b"\n"

    def encode_within(self, records: Sequence[SpanRecord], max_bytes: int) -> list[bytes]:
        """``records`` as one or more request lines of at most ``max_bytes`` each (a lone span may exceed it)."""
        line = self.encode(records)
        if len(line) <= max_bytes or len(records) <= 1:
            return [line]
        half = len(records) // 2
        return self.encode_within(records[:half], max_bytes) + self.encode_within(records[half:], max_bytes)
