"""catalog.py's summary cache (summaries.json): whatever a damaged file holds, a scan never raises and
gives the summaries the logs give; the bad entries are left out, said once, and the file rewritten."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from copilot_otel.catalog.cache import Catalog
from copilot_otel.catalog.status import SessionStatus
from tests.support.events import SessionLog

JSON = st.recursive(st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats(allow_nan=False) | st.text(),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
                    max_leaves=6)


def _home(folder: Path) -> Path:
    root = folder / "session-state"
    for n in range(3):
        log = SessionLog(f"s-{n}", model=f"model-{n}")
        log.start(repository=f"o/r{n}")
        log.user()
        log.answer()
        path = root / log.session_id / "events.jsonl"
        path.parent.mkdir(parents=True)
        path.write_bytes(log.jsonl())
    return root


@dataclass(frozen=True)
class Home:
    root: Path  # three sessions' logs
    reference: dict  # log path -> its summary, read with no cache
    good: dict  # the cache file a scan writes for them


@pytest.fixture(scope="module")
def home(tmp_path_factory) -> Home:
    """The sessions every test reads (and never writes), made once for the module in pytest's temp folder."""
    folder = tmp_path_factory.mktemp("catalog-cache")
    root = _home(folder)
    reference = {item.path: item.summary for item in Catalog(root).scan()}
    Catalog(root, cache_file=folder / "good.json").scan()
    return Home(root, reference, json.loads((folder / "good.json").read_bytes()))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(which=st.integers(0, 2), field=st.integers(0, 40), value=JSON, whole=st.booleans())
def test_any_damage_to_one_entry_costs_only_a_re_read(home, tmp_path, caplog, which, field, value, whole):
    """One entry's field (or the whole entry, or its identity key) replaced by any JSON value: the scan never
    fails; the other sessions keep their summaries; a damaged entry is said once and its log read again (one
    still well formed, a count changed by hand say, is trusted as before, and still serves a listing); the
    file is rewritten with well-formed entries only."""
    document = json.loads(json.dumps(home.good))
    name = sorted(document["logs"])[which]
    entry = document["logs"][name]
    fields = sorted(entry[1])
    if whole:
        document["logs"][name] = value
    elif field >= len(fields):
        entry[0] = value
    else:
        entry[1][fields[field]] = value
    cache = tmp_path / "summaries.json"
    cache.write_text(json.dumps(document))
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="copilot_otel.catalog.cache"):
        got = {item.path: item.summary for item in Catalog(home.root, cache_file=cache).scan()}
        again = {item.path: item.summary for item in Catalog(home.root, cache_file=cache).scan()}
    damaged = Path(name)
    assert {p: s for p, s in got.items() if p != damaged} == {p: s for p, s in home.reference.items() if p != damaged}
    assert got == again and len(caplog.records) <= 1  # only the first catalog had something to say
    if caplog.records:
        assert got[damaged] == home.reference[damaged]
    orjson.dumps([SessionStatus(summary, "idle").to_json() for summary in got.values()])
    assert len(json.loads(cache.read_bytes())["logs"]) == len(home.reference)


def test_a_cache_of_another_shape_is_rebuilt(home, tmp_path):
    """A list, a number, no 'logs', logs as a list: rebuilt, the summaries right."""
    version = home.good["version"]
    for document in ([], 3, {"version": version}, {"version": version, "logs": [1, 2]}):
        cache = tmp_path / "summaries.json"
        cache.write_text(json.dumps(document))
        assert {item.path: item.summary for item in Catalog(home.root, cache_file=cache).scan()} == home.reference
        assert json.loads(cache.read_bytes())["version"] == version
