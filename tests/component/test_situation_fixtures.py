"""The situation fixtures (tests/fixtures/situations, recorded by tests/fixtures/record_situations.py
from the real CLI) show what they claim. Fast: no CLI runs here."""

import shutil

import pytest

from tests.fixtures.record_situations import SITUATIONS
from tests.fixtures.situations import EXPECTATIONS, FIXTURES, Fixture, problems

MAX_TOTAL_BYTES = 2_000_000


@pytest.mark.parametrize("name", sorted(EXPECTATIONS))
def test_fixture_shows_its_situation(name):
    """Each stored log holds the events its situation is about (tests/fixtures/situations.py says which)."""
    assert (FIXTURES / name / "meta.json").is_file(), \
        f"not recorded: run tests/fixtures/record_situations.py --only {name}"
    assert problems(name, FIXTURES / name) == []


def test_every_recorded_situation_is_checked():
    """The recorder, the expectations and the stored fixtures name the same situations."""
    stored = {p.name for p in FIXTURES.iterdir() if p.is_dir()}
    assert set(SITUATIONS) == set(EXPECTATIONS) == stored


def test_fixtures_stay_small():
    """All fixtures together stay under 2 MB (the system prompts are trimmed)."""
    total = sum(p.stat().st_size for p in FIXTURES.rglob("*") if p.is_file())
    assert total < MAX_TOTAL_BYTES, f"{total} bytes"


def test_crash_resume_completes_the_cut_off_tool_after_the_resume():
    """The crashed tool's only completion is the resume's synthetic, failed one, written after
    session.resume and 15 s or more after the tool started: the downtime sits between them."""
    events = Fixture(FIXTURES / "crash_resume").events("crashed")
    types = [e["type"] for e in events]
    resume = types.index("session.resume")
    assert types[resume + 1 : resume + 3] == ["tool.execution_complete", "session.warning"]
    assert events[resume + 1]["data"]["interactionId"] == "resume"


def test_problems_names_what_a_fixture_lacks(tmp_path):
    """A fixture that does not show its situation is reported, not passed: the recorder relies on it."""
    copy = tmp_path / "crash_resume"
    shutil.copytree(FIXTURES / "crash_resume", copy)
    events = next(copy.glob("session-state/*/events.jsonl"))
    lines = events.read_text().splitlines(keepends=True)
    events.write_text("".join(line for line in lines if '"session.warning"' not in line))
    found = problems("crash_resume", copy)
    assert len(found) == 1 and found[0].startswith("crash_resume: ")
