"""The limits that keep absurd or hostile input from breaking an export or a scrape.

Pure: what a span may carry once encoded (times within what OTLP can hold, integers within
int64, names and texts cut to a length), how large one request may be, and how many distinct
values a metric label may take. Everything a log writes passes through here on its way out.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from msgspec.structs import replace

from ..model import attrs as A
from ..model.records import SpanEvent, SpanRecord

DEFAULT_MAX_REQUEST_BYTES = 4 * 1024 * 1024  # the OpenTelemetry Collector's default gRPC message limit
MIN_MAX_REQUEST_BYTES = 64 * 1024
# Distinct values per metric label (tool, model, agent); the rest are "other". Each tool value costs 19
# series (its calls and duration histogram) and ~0.2 ms of every scrape: at 100, /metrics stays under
# 200 KiB and 50 ms however many names a log invents (bench/attack_bench.py).
DEFAULT_MAX_LABEL_VALUES = 100
INT64_MIN = -(1 << 63)
INT64_MAX = (1 << 63) - 1
MAX_TIME_NS = INT64_MAX  # 2262-04-11: OTLP's fixed64 nanoseconds, read back as int64 by most backends

MAX_NAME_CHARS = 128  # span names, name-like attributes (tool, model, agent) and metric label values
MAX_ATTRIBUTE_CHARS = 65_536  # any other text (captured content is cut earlier, to --content-max-chars)
MAX_STATUS_CHARS = 4096
OTHER = "other"  # the label value of every value past DEFAULT_MAX_LABEL_VALUES distinct ones

# Attributes that hold a name chosen by the model or the log: cut like span names.
NAME_ATTRIBUTES = frozenset({A.GEN_AI_TOOL_NAME, A.GEN_AI_REQUEST_MODEL, A.GEN_AI_RESPONSE_MODEL,
                             A.GEN_AI_AGENT_NAME})


def clamp_time(ns: int) -> int:
    """Nanoseconds since the epoch within what OTLP can carry (before 1970 becomes the epoch)."""
    return 0 if ns < 0 else MAX_TIME_NS if ns > MAX_TIME_NS else ns


def cut_name(text: str) -> str:
    """A span name or label value, cut to MAX_NAME_CHARS."""
    return text if len(text) <= MAX_NAME_CHARS else text[:MAX_NAME_CHARS]


def _value_ok(key: str, value: Any) -> bool:
    kind = type(value)
    if kind is str:
        return len(value) <= (MAX_NAME_CHARS if key in NAME_ATTRIBUTES else MAX_ATTRIBUTE_CHARS)
    if kind is int:
        return INT64_MIN <= value <= INT64_MAX
    if kind is float:
        return math.isfinite(value)
    if kind is bool:
        return True
    if kind is tuple or kind is list:
        return all(_value_ok(key, item) for item in value)
    return False  # anything else is made a string


def _clean_value(key: str, value: Any) -> Any:
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return max(INT64_MIN, min(INT64_MAX, value))
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, (tuple, list)):
        return tuple(_clean_value(key, item) for item in value)
    text = value if isinstance(value, str) else str(value)
    return text[: MAX_NAME_CHARS if key in NAME_ATTRIBUTES else MAX_ATTRIBUTE_CHARS]


def _attributes_ok(attributes: Mapping[str, Any]) -> bool:
    for key, value in attributes.items():  # strings and ints inline: nearly every value is one
        kind = type(value)
        if kind is str:
            if len(value) > MAX_NAME_CHARS and (len(value) > MAX_ATTRIBUTE_CHARS or key in NAME_ATTRIBUTES):
                return False
        elif kind is int:
            if not INT64_MIN <= value <= INT64_MAX:
                return False
        elif not _value_ok(key, value):
            return False
    return True


def _clean_attributes(attributes: Mapping[str, Any]) -> Mapping[str, Any]:
    if _attributes_ok(attributes):
        return attributes
    return {key: _clean_value(key, value) for key, value in attributes.items()}


def clean(record: SpanRecord) -> SpanRecord:
    """The record as it may be encoded: the record itself when nothing needs clamping or cutting."""
    if (0 <= record.start_ns <= record.end_ns <= MAX_TIME_NS and len(record.name) <= MAX_NAME_CHARS
            and len(record.status_message) <= MAX_STATUS_CHARS and _attributes_ok(record.attributes)
            and (not record.events or all(0 <= e.time_ns <= MAX_TIME_NS and _attributes_ok(e.attributes)
                                          for e in record.events))):
        return record
    start = clamp_time(record.start_ns)
    return replace(
        record, name=cut_name(record.name), start_ns=start, end_ns=max(start, clamp_time(record.end_ns)),
        status_message=record.status_message[:MAX_STATUS_CHARS], attributes=_clean_attributes(record.attributes),
        events=tuple(SpanEvent(e.name[:MAX_NAME_CHARS], clamp_time(e.time_ns), _clean_attributes(e.attributes))
                     for e in record.events))


def clean_attributes(attributes: Mapping[str, Any]) -> Mapping[str, Any]:
    """Attributes as they may be encoded (a log record's, like a span's): the same mapping when nothing needs it."""
    return _clean_attributes(attributes)
