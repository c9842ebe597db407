"""Every trick of the package sits behind bench/tricks_bench.py, which measures it against the plain way by
taking its lines out of a copy of the package: those lines are where the benchmark says, once each, so a change
to a trick that the benchmark no longer follows fails here, not on the next benchmark run."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
PACKAGE = BENCH.parent / "copilot_otel"


def _tricks():
    sys.path.insert(0, str(BENCH))
    try:
        spec = importlib.util.spec_from_file_location("tricks_bench", BENCH / "tricks_bench.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules["tricks_bench"] = module  # dataclasses look their module up there
        spec.loader.exec_module(module)
    finally:
        sys.modules.pop("tricks_bench", None)
        sys.path.remove(str(BENCH))
    return module.TRICKS


TRICKS = _tricks()


@pytest.mark.parametrize("trick", TRICKS, ids=[t.name for t in TRICKS])
def test_the_benchmark_finds_the_lines_it_takes_out(trick):
    text = (PACKAGE / trick.module).read_text()
    if trick.old:
        assert text.count(trick.old) == 1, f"{trick.name}: {trick.module} no longer holds {trick.old!r} once"
    else:  # appended: the class it replaces or overrides must still be there
        names = set(re.findall(r"\b([A-Z]\w+)\b", trick.new))
        defined = set(re.findall(r"^class (\w+)", text, re.M))
        assert names & defined, f"{trick.name}: {trick.module} defines none of {sorted(names)}"


def test_every_trick_module_is_measured():
    """The modules the issue calls tricks are each measured by the benchmark."""
    measured = {t.module for t in TRICKS}
    assert {"base/hashes.py", "base/workers.py", "base/pause.py", "daemon/collector.py"} <= measured
