"""The Copilot CLI's own schema of its session events (`schemas/session-events.schema.json`, kept per version in
tests/fixtures/schemas/), read: every event type with its schema, and Hypothesis strategies that make events of
each type as the schema allows.

The strategies are built here rather than with hypothesis-jsonschema: on this schema (1 MB, about 160 event
types in 1.0.102) it took 1 to 80 s per event type for ten events (its object strategy resolves each property's
schema again at every draw), where a run needs thousands of events in seconds.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

SCHEMAS = Path(__file__).resolve().parents[1] / "fixtures" / "schemas"
MAX_ITEMS = 2  # arrays and open maps stay small: the events are for the model, not for a size test
TEXT = st.text(max_size=12)
STAMPS = st.datetimes().map(lambda d: d.isoformat(timespec="milliseconds") + "Z")


def versions() -> list[str]:
    """The versions whose schema is kept, oldest first."""
    return sorted((p.stem for p in SCHEMAS.glob("*.json")), key=lambda v: tuple(map(int, v.split("."))))


def load(version: str) -> dict:
    return json.loads((SCHEMAS / f"{version}.json").read_text())


class Schema:
    """One version's schema: its event types, each with the schema of its event, and strategies for them."""

    def __init__(self, document: dict) -> None:
        self.definitions: dict[str, Any] = document.get("definitions", {})
        self.root = self.resolve(document)
        self._deferred: dict[str, st.SearchStrategy] = {}

    def resolve(self, node: dict) -> dict:
        while isinstance(node, dict) and "$ref" in node:
            node = self.definitions[node["$ref"].rsplit("/", 1)[-1]]
        return node

    @property
    def events(self) -> dict[str, dict]:
        """Event type -> the schema of its event (the root's anyOf, each entry resolved)."""
        out = {}
        for entry in self.root.get("anyOf", ()):
            event = self.resolve(entry)
            kind = event.get("properties", {}).get("type", {})
            kind = self.resolve(kind).get("const") if isinstance(kind, dict) else None
            if isinstance(kind, str):
                out[kind] = event
        return out

    def strategy(self, node: Any) -> st.SearchStrategy:
        """Values that ``node`` (a schema) allows; formats uuid and date-time as the CLI writes them."""
        if not isinstance(node, dict):
            return st.none()
        if "$ref" in node:
            name = node["$ref"].rsplit("/", 1)[-1]
            if name not in self._deferred:  # recursive definitions are drawn lazily
                self._deferred[name] = st.deferred(lambda: self.strategy(self.definitions[name]))
            return self._deferred[name]
        if "const" in node:
            return st.just(node["const"])
        if "enum" in node:
            return st.sampled_from(node["enum"])
        for key in ("anyOf", "oneOf"):
            if key in node:
                return st.one_of([self.strategy(option) for option in node[key]])
        if "allOf" in node:
            merged: dict = {}
            for part in node["allOf"]:
                part = self.resolve(part)
                merged.setdefault("properties", {}).update(part.get("properties", {}))
                merged.setdefault("required", []).extend(part.get("required", ()))
            return self._object(merged)
        kind = node.get("type")
        if isinstance(kind, list):
            return st.one_of([self.strategy({**node, "type": k}) for k in kind])
        if kind == "object" or "properties" in node:
            return self._object(node)
        if kind == "array":
            items = self.strategy(node.get("items", {"type": "string"}))
            low = node.get("minItems", 0)
            return st.lists(items, min_size=low, max_size=max(low, MAX_ITEMS))
        if kind == "string":
            fmt = node.get("format")
            return st.uuids().map(str) if fmt == "uuid" else STAMPS if fmt == "date-time" else TEXT
        if kind == "integer":
            return st.integers(node.get("minimum", -(2**53)), node.get("maximum", 2**53))
        if kind == "number":
            return st.floats(node.get("minimum"), node.get("maximum"), allow_nan=False, allow_infinity=False)
        if kind == "boolean":
            return st.booleans()
        if kind == "null":
            return st.none()
        return st.one_of(st.none(), st.booleans(), st.integers(-(2**63), 2**63 - 1), TEXT)  # {}: any value

    def _object(self, node: dict) -> st.SearchStrategy:
        properties = node.get("properties", {})
        required = set(node.get("required", ())) & set(properties)
        fixed = st.fixed_dictionaries({k: self.strategy(properties[k]) for k in sorted(required)},
                                      optional={k: self.strategy(v) for k, v in sorted(properties.items())
                                                if k not in required})
        extra = node.get("additionalProperties")
        if isinstance(extra, dict) and not properties:  # a map (modelMetrics, agentMetrics ...)
            return st.dictionaries(TEXT, self.strategy(extra), max_size=MAX_ITEMS)
        return fixed
