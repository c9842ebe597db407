"""Pure encoding: span records -> OTLP JSON lines (the OpenTelemetry Collector file exporter's format).

No I/O here: delivery/sinks.py writes what this encodes. An encoder is plain data, so a replay worker
process can be handed one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from ..model.records import SpanRecord
from ..version import __version__
from .limits import clean

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


_DUMPS = orjson.dumps
_END = b"]}]}]}\n"
CACHE_PAIRS = 50_000  # encoded (key, string value) pairs kept between requests; past this the cache starts over


class OtlpJsonEncoder:
    """Span records -> ExportTraceServiceRequest JSON lines for one resource (plain data: it pickles).

    Each span is assembled from bytes: its fixed fields formatted in place, each attribute pair
    encoded once by orjson and kept (the same few keys and values recur in every span). The result is
    byte for byte what orjson gives for the request as one object.
    """

    def __init__(self, resource_attributes: Mapping[str, Any]) -> None:
        self.resource_attributes = dict(resource_attributes)
        self._pairs: dict[tuple[str, str], bytes] = {}
        self._keys: dict[str, bytes] = {}  # key -> the start of its pair, for values that are no string
        self._head = (b'{"resourceSpans":[{"resource":{"attributes":[' + self._key_values(self.resource_attributes)
                      + b']},"scopeSpans":[{"scope":' + _DUMPS({"name": SCOPE_NAME, "version": SCOPE_VERSION})
                      + b',"spans":[')

    def __getstate__(self) -> dict:
        return {"resource_attributes": self.resource_attributes}  # a worker builds its own cache

    def __setstate__(self, state: dict) -> None:
        OtlpJsonEncoder.__init__(self, state["resource_attributes"])

    def _key_values(self, attributes: Mapping[str, Any]) -> bytes:
        pairs = self._pairs
        out = []
        for key, value in attributes.items():
            kind = type(value)
            if kind is str:  # only strings: True == 1 would otherwise share with an int
                pair = pairs.get((key, value))
                if pair is None:
                    if len(pairs) >= CACHE_PAIRS:
                        pairs.clear()
                    pair = pairs[(key, value)] = (b'{"key":' + _DUMPS(key) + b',"value":{"stringValue":'
                                                  + _DUMPS(value) + b"}}")
            else:  # the key's part is kept, the value written in place: what orjson writes for the pair
                head = self._keys.get(key)
                if head is None:
                    if len(self._keys) >= CACHE_PAIRS:
                        self._keys.clear()
                    head = self._keys[key] = b'{"key":' + _DUMPS(key) + b',"value":'
                if kind is int:
                    pair = head + b'{"intValue":"%d"}}' % value
                elif kind is float:
                    pair = head + b'{"doubleValue":' + _DUMPS(value) + b"}}"
                else:
                    pair = head + _DUMPS(_any_value(value)) + b"}"
            out.append(pair)
        return b",".join(out)

    def _span(self, r: SpanRecord) -> bytes:
        parts = [b'{"traceId":"%032x","spanId":"%016x","name":' % (r.trace_id, r.span_id), _DUMPS(r.name),
                 b',"kind":%d,"startTimeUnixNano":"%d","endTimeUnixNano":"%d","attributes":['
                 % (r.kind, r.start_ns, r.end_ns), self._key_values(r.attributes)]
        if r.status_message:
            parts.append(b'],"status":{"code":%d,"message":' % r.status + _DUMPS(r.status_message) + b"}")
        else:
            parts.append(b'],"status":{"code":%d}' % r.status)
        if r.parent_span_id is not None:
            parts.append(b',"parentSpanId":"%016x"' % r.parent_span_id)
        if r.links:
            parts.append(b',"links":[' + b",".join(b'{"traceId":"%032x","spanId":"%016x"}' % link for link in r.links)
                         + b"]")
        if r.events:
            parts.append(b',"events":[' + b",".join(
                b'{"timeUnixNano":"%d","name":' % e.time_ns + _DUMPS(e.name) + b',"attributes":['
                + self._key_values(e.attributes) + b"]}" for e in r.events) + b"]")
        parts.append(b"}")
        return b"".join(parts)

    def encode(self, records: Sequence[SpanRecord]) -> bytes:
        """One request holding ``records``, as a JSON line (the Collector file exporter's format)."""
        return self._head + b",".join([self._span(clean(r)) for r in records]) + _END

    def encode_within(self, records: Sequence[SpanRecord], max_bytes: int) -> list[bytes]:
        """``records`` as one or more request lines of at most ``max_bytes`` each (a lone span may exceed it),
        filled in order."""
        base = len(self._head) + len(_END)
        lines: list[bytes] = []
        batch: list[bytes] = []
        size = base
        for record in records:
            span = self._span(clean(record))
            if batch and size + len(span) + 1 > max_bytes:
                lines.append(self._head + b",".join(batch) + _END)
                batch, size = [], base
            batch.append(span)
            size += len(span) + 1
        if batch or not lines:
            lines.append(self._head + b",".join(batch) + _END)
        return lines
