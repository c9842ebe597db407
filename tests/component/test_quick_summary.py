"""The summary read without the model (catalog/quick.py) equals the model's, field by field, or is not given.

Every stored log of every CLI version and situation, and logs generated from them: cut short (a crash), one
session's lines after another's (a resume, sub-agents of both), lines dropped or repeated, hostile lines
(not JSON, invalid UTF-8, NUL bytes, a CR, numbers out of range, unknown types, another shape, over-long), and a
torn last line. Whenever the quick path answers, its summary and its rejected lines are the model's.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from copilot_otel.catalog.history import model_summary, summarize_log
from copilot_otel.catalog.mirror import MIRRORED
from copilot_otel.catalog.quick import KNOWN, SKIPPED, quick_summary
from copilot_otel.model.options import ModelOptions
from copilot_otel.model.sessions import HANDLED_TYPES

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
CLI_LOGS = sorted((FIXTURES / "cli").glob("*/*/session-state/*/events.jsonl"))
SITUATION_LOGS = sorted((FIXTURES / "situations").glob("*/session-state/*/events.jsonl"))
LIMIT = 16 << 20
OPTIONS = ModelOptions()


def both(path: Path, limit: int = LIMIT):
    """(the quick path's summary or None, the model's), each as `sessions` gets it."""
    quick = summarize_log(path, OPTIONS, limit) if quick_summary(path, path.parent.name, limit) else None
    return quick, model_summary(path, OPTIONS, limit)


def _id(path: Path) -> str:
    return "/".join(path.relative_to(FIXTURES).parts[:-3])


@pytest.mark.parametrize("log", CLI_LOGS + SITUATION_LOGS, ids=_id)
def test_every_stored_log_gets_the_models_summary(log: Path) -> None:
    """On every stored log the quick summary, when there is one, is the model's, field by field."""
    quick, model = both(log)
    if quick is not None:
        assert quick == model


def test_the_quick_path_reads_most_stored_logs_of_every_version() -> None:
    """It reads at least four in five of the stored CLI logs whose every type it knows, of each CLI version but
    0.0.400 (whose answers carry no turn id), and the rest go to the model: the shapes it leaves to the model
    are rare."""
    known = [log for log in CLI_LOGS
             if {line[9:line.find(b'"', 9)] for line in log.read_bytes().splitlines()} <= KNOWN]
    read = [log for log in known if quick_summary(log, log.parent.name, LIMIT) is not None]
    assert len(read) >= 0.8 * len(known)
    versions = {log.relative_to(FIXTURES / "cli").parts[0] for log in read}
    assert versions >= {path.name for path in (FIXTURES / "cli").iterdir() if path.is_dir()} - {"0.0.400"}


def test_the_known_types_leave_every_other_type_to_the_model(tmp_path: Path) -> None:
    """The quick path mirrors only types the model handles, skips only types it does not, and sends a log with
    any other type (an abort, one the model learns later) to the model."""
    assert MIRRORED <= HANDLED_TYPES
    assert not SKIPPED & HANDLED_TYPES
    log = next(p for p in CLI_LOGS if "1.0.102/plain/" in str(p))
    lines = log.read_bytes().splitlines(keepends=True)
    for kind in ("abort", "session.compaction_start", "hook.progress", "assistant.usage"):
        assert kind.encode() not in KNOWN
        folder = tmp_path / kind / "s1"
        folder.mkdir(parents=True)
        extra = lines[3].replace(b'"type":"', b'"type":"' + kind.encode() + b'","x":"', 1)
        (folder / "events.jsonl").write_bytes(b"".join(lines[:4]) + extra + b"".join(lines[4:]))
        assert quick_summary(folder / "events.jsonl", "s1", LIMIT) is None


def test_a_loop_that_looks_finished_while_a_sub_agent_runs_goes_to_the_model(tmp_path: Path) -> None:
    """A sub-agent whose end never came, after the main agent's last answer: the model says how that loop ends
    (found by the generated logs below), so the quick path leaves it to the model."""
    log = next(p for p in CLI_LOGS if "1.0.102/subagent/" in str(p))
    folder = tmp_path / "s1"
    folder.mkdir()
    kept = [line for line in log.read_bytes().splitlines(keepends=True)
            if b'"type":"subagent.completed"' not in line[:40] and b'"type":"session.shutdown"' not in line[:40]]
    (folder / "events.jsonl").write_bytes(b"".join(kept))
    quick, model = both(folder / "events.jsonl")
    assert quick is None or quick == model


def test_a_log_too_long_to_hold_whole_goes_to_the_model(monkeypatch: pytest.MonkeyPatch) -> None:
    """A log longer than the quick path holds in memory is read through the model (a chunk at a time)."""
    import copilot_otel.catalog.quick as quick

    log = next(p for p in CLI_LOGS if "1.0.102/plain/" in str(p))
    assert quick_summary(log, "s1", LIMIT) is not None
    monkeypatch.setattr(quick, "MAX_BYTES", log.stat().st_size - 1)
    assert quick_summary(log, "s1", LIMIT) is None


def test_a_skimmed_line_is_checked_for_utf8_as_the_model_checks_it(tmp_path: Path) -> None:
    """The file is checked for UTF-8 once, not each line it only skims: a system prompt with a byte that is no
    UTF-8 is still one rejected line, as the model counts it, and one with characters across the check's blocks
    is read."""
    log = next(p for p in CLI_LOGS if "1.0.102/plain/" in str(p))
    data = log.read_bytes()
    prompt = data.index(b'{"type":"system.message"')
    content = data.index(b'"content":"', prompt) + len(b'"content":"')
    pad = b"x" * (-content % 4096 + 4094)  # the inserted bytes straddle the end of the check's block
    for name, insert, rejected in (("bad", b"\xff\xfe", 1), ("good", "é→😀".encode(), 0)):
        folder = tmp_path / name / "9f0c4a7e-0000-4000-8000-000000000002"
        folder.mkdir(parents=True)
        (folder / "events.jsonl").write_bytes(data[:content] + pad + insert + data[content:])
        quick, model = both(folder / "events.jsonl")
        assert quick is not None and quick == model and quick.rejected == rejected


# ------------------------------------------------------------------ generated logs

SOURCES = [p.read_bytes().splitlines(keepends=True) for p in CLI_LOGS + SITUATION_LOGS]
STAMP = b'"id":"hostile-%d","timestamp":"2026-12-02T18:15:16.733Z","parentId":null}\n'
HOSTILE = [
    b"not json at all\n",
    b'{"type":"tool.execution_complete","data":{"toolCallId":"c1","success":true,"x":1e999},' + STAMP,
    b'{"type":"session.usage_record","data":{"usage":{"model":"m","inputTokens":1e300,"cost":1,'
    b'"initiator":"user"}},' + STAMP,
    b'{"type":"user.message","data":{"content":"\xff\xfe"},' + STAMP,
    b'{"type":"system.message","data":{"content":"\xff\xfe"},' + STAMP,
    b'{"type":"system.message","data":{"content":"' + "é→😀".encode() * 900 + b'"},' + STAMP,
    b'{"type":"user.message","data":{"content":"a\x00b"},' + STAMP,
    b'{"type":"assistant.turn_start","data":{"turnId":"0"},' + STAMP.replace(b"}\n", b"}\r\n"),
    b'{"type":"session.warning","data":{"message":"' + b"x" * 5000 + b'"},' + STAMP,
    b'{"type":"tool.execution_start","data":{"toolCallId":"c2","toolName":"bash"},"extra":1,' + STAMP,
    b'{"type":"assistant.turn_end","data":{"turnId":"0"},"id":"t","timestamp":"yesterday","parentId":null}\n',
    b'{"type":"session.error","data":[],' + STAMP,
    b"\n",
    b'  {"type":"session.info","data":{},' + STAMP,
    b'{"type":"session.usage_record","data":{"usage":{"model":"m","inputTokens":' + b"9" * 400 + b".0}},"
    + STAMP,
    b'{"type":"subagent.started","data":{"toolCallId":' + b"[" * 300 + b"]" * 300 + b"},"
    + STAMP,
]
_NUMBER = re.compile(rb'("(?:inputTokens|outputTokens|cost|totalNanoAiu|linesAdded|duration)":)(-?[0-9.]+)')


@st.composite
def generated_log(draw) -> bytes:
    """Pieces of stored logs one after another, with damage: what crashes, resumes and hostile writers leave."""
    lines: list[bytes] = []
    for _ in range(draw(st.integers(1, 3))):
        source = draw(st.sampled_from(SOURCES))
        start = draw(st.integers(0, len(source) - 1)) if draw(st.booleans()) else 0
        end = draw(st.integers(start + 1, len(source)))
        lines += source[start:end]
    for _ in range(draw(st.integers(0, 3))):
        what = draw(st.sampled_from(["hostile", "repeat", "drop", "number"]))
        at = draw(st.integers(0, len(lines)))
        if what == "hostile":
            line = draw(st.sampled_from(HOSTILE))
            lines.insert(at, line.replace(b"hostile-%d", b"hostile-%d" % at))
        elif what == "repeat" and lines:
            lines.insert(at, lines[draw(st.integers(0, len(lines) - 1))])
        elif what == "drop" and len(lines) > 1:
            del lines[min(at, len(lines) - 1)]
        elif what == "number" and lines:
            index = min(at, len(lines) - 1)
            value = draw(st.sampled_from([b"1e999", b"-5", b"1.5", b"18446744073709551616", b'"7"', b"true"]))
            lines[index] = _NUMBER.sub(rb"\g<1>" + value, lines[index], count=1)
    data = b"".join(lines)
    if draw(st.booleans()) and lines:  # torn: the start of a line whose newline never came
        tail = lines[draw(st.integers(0, len(lines) - 1))].rstrip(b"\n")
        data += tail[:draw(st.integers(1, max(1, len(tail) - 1)))]
    return data


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=generated_log(), small_limit=st.booleans())
def test_generated_logs_get_the_models_summary_or_go_to_it(tmp_path_factory, data: bytes, small_limit: bool) -> None:
    """On logs cut, joined and damaged, the quick summary (rejected lines included) is the model's, or none."""
    folder = tmp_path_factory.mktemp("gen") / "9f0c4a7e-0000-4000-8000-000000000001"
    folder.mkdir()
    log = folder / "events.jsonl"
    log.write_bytes(data)
    limit = 4096 if small_limit else LIMIT
    quick, model = both(log, limit)
    event("read by the quick path" if quick is not None else "left to the model")
    if quick is not None:
        event("with rejected lines" if quick.rejected else "every line read")
        assert quick == model
