"""The CLI's schema as the contract: `schemas/session-events.schema.json` of every CLI version the tests install
or store (tests/fixtures/schemas/<version>.json, unpacked by each real CLI on its first run). Every event type in
it is read by the session model or knowingly ignored with a reason, and events made from it (every type, every
field the schema allows) go through the decoder and the model without a crash, each line counted as read or as
rejected with its reason."""

from __future__ import annotations

import math
from collections import Counter

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from copilot_otel.decode.lines import INTERNAL_ERROR, REASONS, decode_line
from copilot_otel.model.ignored import IGNORED
from copilot_otel.model.pipeline import Outputs, drive, finish
from copilot_otel.model.sessions import HANDLED_TYPES, READ_TYPES, SessionModel
from tests.support.schema_events import Schema, load, versions

VERSIONS = versions()
NEWEST = VERSIONS[-1]
STORED = ("0.0.400", "1.0.2", "1.0.24", "1.0.50", "1.0.70", "1.0.85", "1.0.92", "1.0.102")  # tests/fixtures/cli
EVENTS_PER_RUN = {NEWEST: 1000}  # the newest schema gets most; each older one EVENTS_OLDER (2,050 in all)
EVENTS_OLDER = 150
PER_SESSION = 10  # events fed to one model


def test_every_version_the_tests_run_or_store_has_its_schema_kept():
    """A schema for each stored CLI version and for the CLI the tests install (tests/cli/package.json)."""
    import json
    from pathlib import Path

    installed = json.loads((Path(__file__).parents[1] / "cli" / "package.json").read_text())["dependencies"]
    assert set(VERSIONS) >= {*STORED, installed["@github/copilot"]}


@pytest.mark.parametrize("version", VERSIONS)
def test_every_event_type_is_read_or_ignored_with_a_reason(version):
    """Each event type of the version's schema is one the model reads (HANDLED_TYPES) or one model/ignored.py
    lists with why it is not read; never both."""
    types = set(Schema(load(version)).events)
    assert len(types) > 30
    unknown = sorted(types - HANDLED_TYPES - set(IGNORED))
    assert not unknown, f"CLI {version}: event types neither read nor listed in model/ignored.py: {unknown}"
    assert not HANDLED_TYPES & set(IGNORED)
    assert all(isinstance(reason, str) and len(reason) > 20 for reason in IGNORED.values())


class _Lists:
    """Lists of events drawn from one schema: one of a given type, then 4 to 9 of any type it has."""

    def __init__(self, schema: Schema) -> None:
        self.each = {kind: schema.strategy(event) for kind, event in sorted(schema.events.items())}
        self.any = st.lists(st.one_of(list(self.each.values())), min_size=PER_SESSION // 2 - 1,
                            max_size=PER_SESSION - 1)

    def draw(self, data: st.DataObject, first: str) -> list[dict]:
        return [data.draw(self.each[first]), *data.draw(self.any)]


@pytest.mark.parametrize("version", VERSIONS)
def test_events_made_from_the_schema_feed_the_model_without_a_crash(version):
    """Events drawn from the version's schema (a session model per list of 5 to 10, as JSON lines through the
    decoder the daemon uses): the model never fails on one (no line rejected as internal_error), every line is
    counted as read or as rejected with one of the decoder's reasons, and finishing the session closes every span.
    Across the run, most events are read, and every type the model reads is drawn (each list starts with one)."""
    schema = Schema(load(version))
    total, read, rejected, seen = Counter(), Counter(), Counter(), Counter()
    events = EVENTS_PER_RUN.get(version, EVENTS_OLDER)
    handled = sorted(set(schema.events) & HANDLED_TYPES)  # each one starts lists of its own
    lists = _Lists(schema)

    def feed(first: str, data: st.DataObject) -> None:
        drawn = lists.draw(data, first)
        model = SessionModel("schema-session")
        items = [decode_line(orjson.dumps(event), line=n, keep=READ_TYPES) for n, event in enumerate(drawn, 1)]
        out = drive(model, items, Outputs(), source="schema", warn=lambda *args: None)
        assert INTERNAL_ERROR not in out.rejected, drawn
        assert set(out.rejected) <= set(REASONS)
        assert sum(out.events.values()) + sum(out.rejected.values()) == len(drawn)
        finish(model, out)
        assert model.quiescent
        total["lines"] += len(drawn)
        read.update(out.events)
        rejected.update(out.rejected)
        seen.update(event["type"] for event in drawn)

    runs = settings(max_examples=math.ceil(events / len(handled) / (PER_SESSION // 2)), deadline=None, database=None,
                    suppress_health_check=list(HealthCheck))
    def lists_starting_with(first: str):
        @runs
        @given(st.data())
        def run(data: st.DataObject) -> None:
            feed(first, data)
        return run

    for first in handled:
        lists_starting_with(first)()
    assert total["lines"] >= events
    assert sum(read.values()) > total["lines"] / 2, (read, rejected)
    assert set(seen) >= set(handled)


def _schema_diff():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "scripts" / "schema_diff.py"
    spec = importlib.util.spec_from_file_location("schema_diff", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_schema_diff_names_the_types_and_fields_that_changed():
    """scripts/schema_diff.py between two kept versions names each type one has and the other lacks; on a copy of
    the newest schema with one field of session.shutdown's data taken out and one type taken out, it names both."""
    schema_diff = _schema_diff()
    old, new = load("1.0.92"), load(NEWEST)
    lines = schema_diff.diff(old, new)
    added = {line[2:].split(":")[0] for line in lines if line.startswith("+ ")}
    removed = {line[2:] for line in lines if line.startswith("- ")}
    assert added == set(Schema(new).events) - set(Schema(old).events) and "session.usage_record" in added
    assert removed == set(Schema(old).events) - set(Schema(new).events)

    changed = orjson.loads(orjson.dumps(new))
    schema = Schema(changed)
    shutdown = schema.resolve(schema.events["session.shutdown"]["properties"]["data"])
    del shutdown["properties"]["codeChanges"]
    changed["definitions"]["SessionEvent"]["anyOf"] = [
        entry for entry in changed["definitions"]["SessionEvent"]["anyOf"]
        if schema.resolve(entry)["properties"]["type"].get("const") != "abort"]
    lines = schema_diff.diff(new, changed)
    assert "- abort" in lines
    at = lines.index("~ session.shutdown")
    assert "    - data.codeChanges" in lines[at + 1:] and "    - data.codeChanges.linesAdded" in lines[at + 1:]
