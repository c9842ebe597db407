"""safe_text.py, and `inspect`'s tree and `sessions`' lines built on it: whatever a session log holds, no
control, bidi or other invisible format character reaches the terminal raw; printable text is unchanged;
`--json` keeps its values; a log line stays one line."""

from __future__ import annotations

import io
import logging
import re
import tempfile
import unicodedata
from pathlib import Path

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rich.console import Console

from copilot_otel.base.safe_text import SafeFormatter, safe, safe_json, spreadsheet_cell, unsafe
from copilot_otel.catalog.snapshot import SessionReader
from copilot_otel.catalog.status import SessionStatus
from copilot_otel.cli.listing import render
from copilot_otel.cli.tree import build_tree
from copilot_otel.config import ModelOptions
from copilot_otel.model.summary import SessionSummary
from copilot_otel.source.liveness import StuckPolicy
from tests.support.events import SessionLog

UNSAFE_CATEGORIES = {"Cc", "Cf", "Zl", "Zp", "Cs"}
# What a hostile MCP server or repository would write: clipboard (OSC 52), title, clear screen, hidden text,
# a C1 CSI, a bidi override and isolate, zero-width characters, rich markup, a tag character.
ATTACKS = ["\x1b]52;c;cHduZWQ=\x07", "\x1b]0;pwned\x07", "\x1b[2J\x1b[H", "\x1b[8m", "\x9b31m", "\x9d0;x\x9c",
           "\u202e", "\u2066", "\u200b\u200d", "\r\n", "\x08\x7f", "[bold red]x[/]", "[link=http://evil/]y[/link]",
           "\U000e0041", "\u2028"]
HOSTILE = st.lists(st.one_of(st.sampled_from(ATTACKS), st.text(max_size=8)), min_size=1, max_size=6).map("".join)
ONLY_SGR = re.compile(r"\x1b\[[0-9;]*m")


def unsafe_in(output: str, *, allowed: str = "\n") -> set[str]:
    """The characters of ``output`` a terminal would act on or hide (other than ``allowed``)."""
    return {c for c in output if unsafe().match(c) and c not in allowed}


def test_the_table_holds_every_control_and_format_character_of_this_python():
    """The written-out ranges cover every Cc, Cf, Zl, Zp and Cs code point of the running unicodedata, and
    hold nothing printable (only those categories, or code points this Python does not know yet): so text
    that str.isprintable() passes (safe()'s fast path) holds none of them."""
    pattern = unsafe()
    for code in range(0x110000):
        char = chr(code)
        category = unicodedata.category(char)
        if category in UNSAFE_CATEGORIES:
            assert pattern.match(char), f"U+{code:04X} ({category}) is not escaped"
        elif pattern.match(char):
            assert category == "Cn", f"U+{code:04X} ({category}) would be escaped"
        if pattern.match(char):
            assert not char.isprintable(), f"U+{code:04X} is printable to Python"


@given(st.text())
def test_escaped_text_holds_no_unsafe_character_and_printable_text_is_unchanged(text):
    """safe() leaves nothing to act on, is idempotent, and changes only the unsafe characters."""
    out = safe(text)
    assert not unsafe_in(out, allowed="")
    assert safe(out) == out
    if not unsafe().search(text):
        assert out == text
    assert unsafe().sub("", text) == "".join(c for c in text if not unsafe().match(c))


def test_the_escapes_are_visible_and_readable():
    """ESC as \\x1b, a bidi override as \\u202e, a tag as \\U000e0041; text around them kept."""
    assert safe("a\x1b]0;t\x07b\u202ec\U000e0041\x9b") == "a\\x1b]0;t\\x07b\\u202ec\\U000e0041\\x9b"
    assert safe("Grüße, 東京, emoji 🎉, tab-free") == "Grüße, 東京, emoji 🎉, tab-free"


json_values = st.recursive(st.one_of(st.text(), HOSTILE, st.integers(-2**63, 2**63 - 1), st.none(), st.booleans()),
                           lambda inner: st.lists(inner, max_size=4) | st.dictionaries(HOSTILE | st.text(), inner,
                                                                                       max_size=4), max_leaves=12)


@given(json_values)
def test_json_output_is_the_same_json_with_nothing_a_terminal_acts_on(value):
    """--json: orjson writes C1, DEL and bidi characters raw; safe_json writes them as \\uXXXX (surrogate
    pairs beyond the BMP), so the document parses to the same values and prints safely."""
    document = orjson.dumps(value, option=orjson.OPT_INDENT_2)
    out = safe_json(document)
    assert orjson.loads(out) == value
    assert not unsafe_in(out.decode())


def test_a_log_line_quoting_a_hostile_name_stays_one_escaped_line():
    """Whatever a message interpolates (a tool name, a path, an exception's text) is escaped, newlines
    included, so it can neither act on the terminal nor forge a second log line; a traceback keeps its lines."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(SafeFormatter("%(levelname)s %(name)s: %(message)s"))
    logger = logging.getLogger("test_safe_text")
    logger.addHandler(handler)
    logger.propagate = False
    try:
        logger.warning("session %s started (%s)", "s\x1b]0;t\x07", "model\nERROR forged: line\u202e")
        try:
            raise ValueError("bad \x1b[2J name")
        except ValueError:
            logger.exception("failed on %s", "x")
    finally:
        logger.removeHandler(handler)
    lines = stream.getvalue().splitlines()
    assert lines[0] == "WARNING test_safe_text: session s\\x1b]0;t\\x07 started (model\\nERROR forged: line\\u202e)"
    assert lines[1] == "ERROR test_safe_text: failed on x"
    assert lines[2].startswith("Traceback") and lines[-1] == "ValueError: bad \\x1b[2J name"
    assert not unsafe_in(stream.getvalue())


def _tree_output(log: SessionLog, *, color: bool) -> str:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / log.session_id / "events.jsonl"
        path.parent.mkdir()
        path.write_bytes(log.jsonl())
        reader = SessionReader(path, options=ModelOptions(capture_content=True, content_max_chars=200))
        reader.update()
        snapshot = reader.snapshot(policy=StuckPolicy(600, 1800, {}))
    console = Console(file=io.StringIO(), width=400, force_terminal=color, color_system="truecolor" if color else None,
                      legacy_windows=False)
    console.print(build_tree(snapshot))
    return console.file.getvalue()


@settings(max_examples=60, deadline=None)
@given(text=HOSTILE, color=st.booleans())
def test_no_inspect_line_carries_a_control_character_whatever_the_log_holds(text, color):
    """A hostile string in every field `inspect` shows (model, folder, repository, branch, tool name and
    arguments, error, sub-agent, task summary): the tree holds none of its control or format characters;
    on a colour terminal the only escape sequences are rich's own colours (SGR)."""
    log = SessionLog("s-hostile", model="m" + text)
    log.start(cwd="/w" + text, repository="o/r" + text, branch="b" + text)
    log.user()
    log.turn_start()
    log.usage()
    log.message(tools=["t" + text, "task"])
    log.tool_start("t" + text, "c1", arguments={"command": "echo " + text})
    log.tool_complete("c1", success=False, error="e" + text, error_code="x" + text)
    log.tool_start("task", "c2")
    log.subagent_started("c2", "agent-1", name="a" + text)
    log.subagent_completed("c2", "agent-1", name="a" + text)
    log.tool_complete("c2")
    log.turn_end()
    log.task_complete("done" + text)
    output = _tree_output(log, color=color)
    assert not unsafe_in(ONLY_SGR.sub("", output)), output
    assert "[bold red]x[/]" in output or "[bold red]" not in text  # markup shown as text, never applied


def _summary(text: str) -> SessionSummary:
    return SessionSummary("id" + text, "idle", None, "m" + text, "/w" + text, "1" + text, "o/r" + text, "b" + text,
                          1, 2, "t" + text, 1, 1, 0, 2, 1, 1, 0, 10, 20, 0, 1.0, 0.0, "idle" + text)


@settings(max_examples=60, deadline=None)
@given(text=HOSTILE, width=st.sampled_from([80, 200]), terminal=st.booleans())
def test_no_sessions_line_carries_a_control_character_whatever_the_log_holds(text, width, terminal):
    """`sessions`, wide or narrow, on a terminal (through rich) or piped: hostile session ids, models,
    folders, repositories, branches and tool names are escaped."""
    statuses = [SessionStatus(_summary(text), "stuck", 700.0, "/x"), SessionStatus(_summary(""), "idle")]
    console = Console(file=io.StringIO(), width=width, force_terminal=terminal,
                      color_system="truecolor" if terminal else None, legacy_windows=False)
    render(statuses, console, now=3.0)
    output = console.file.getvalue()
    assert not unsafe_in(ONLY_SGR.sub("", output)), output
    assert len(output.splitlines()) == (3 if width >= 140 else 5)


@pytest.mark.parametrize("text", ["=1+1", "+SUM(1+1)", "-2+3+cmd|' /C calc'!A0", "@SUM(1)", "\t=1", "\r=1",
                                  "\tplain", "  =1+1", "\n-1", " \t@x"])
def test_a_cell_a_spreadsheet_would_take_as_a_formula_gets_a_leading_quote(text):
    """OWASP's rule for CSV: text starting with = + - @, a tab or a CR, also after whitespace, is kept as text."""
    assert spreadsheet_cell(text) == "'" + text


@pytest.mark.parametrize("value", ["acme/payroll", "main", "", " ", "a=b", "1-2", "'=already", -5, -2.5, 0, True,
                                   None])
def test_other_text_and_every_number_are_left_as_they_are(value):
    """Plain names, a formula character past the first, and numbers (a negative one too: a number, not text)."""
    assert spreadsheet_cell(value) is value
