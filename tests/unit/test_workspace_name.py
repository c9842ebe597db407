"""A session's name read from its workspace.yaml without the YAML parser (source/workspace.simple_name) is the
name PyYAML's safe loader reads, for every document it takes; the others go to the parser."""

from __future__ import annotations

from pathlib import Path

import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from copilot_otel.base import boundedyaml
from copilot_otel.source.workspace import NOT_SIMPLE, read_name, simple_name

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def parsed_name(data: bytes) -> str | None:
    """What the YAML parser makes of the document's name (None: no string name, or no document)."""
    try:
        document = boundedyaml.load(data)
    except (yaml.YAMLError, RecursionError, KeyError, ValueError):
        return None
    name = document.get("name") if isinstance(document, dict) else None
    return name if isinstance(name, str) else None


KEYS = st.sampled_from(["name", "name", "cwd", "id", "user_named", "on", "Name", "name2", "na me", "'name'"])
TEXT = st.text(st.characters(codec="utf-8"), max_size=12)
PIECES = st.sampled_from(["'", "''", '"', "\\", ": ", " #", "#", ":", " ", "-", "[", "]", "{", "}", ",", "&a", "*a",
                          "!!str ", "|", ">", "%", "@", "`", "~", "null", "Null", "yes", "NO", "on", "y", "n", "1",
                          "0x1f", "1.5", ".inf", "2026-12-03T12:34:28.304Z", "12:30", "<<", "=", "+1", "\t", "\r",
                          "\x85", "\u2028", "\ufeff", "é", "名前", "\x00", "\x7f", "\U0001f600"])
# Mostly what prompts hold, so that many documents are simple ones; now and then a piece YAML reads its own way.
PLAIN = st.text(st.sampled_from("abcXYZ _/.,;()[]:#'\"é名0"), min_size=1, max_size=12)
VALUES = st.lists(st.one_of(PLAIN, PLAIN, PLAIN, TEXT, PIECES), max_size=6).map("".join)
LINES = st.one_of(
    st.tuples(KEYS, st.sampled_from([": ", ":", ":  ", " : "]), VALUES).map("".join),
    st.tuples(KEYS, VALUES).map(lambda kv: f"{kv[0]}: '{kv[1]}'"),
    st.tuples(KEYS, VALUES).map(lambda kv: f'{kv[0]}: "{kv[1]}"'),
    st.sampled_from(["", "---", "...", "  continued", "- item", "# a comment", "%YAML 1.1"]),
)
DOCUMENTS = st.tuples(st.lists(LINES, max_size=6), st.booleans()).map(
    lambda parts: "\n".join(parts[0]) + ("\n" if parts[1] else ""))


# 1,000 documents a run (22 s of the unit layer's CPU at 3,000 on a loaded machine); each CI run draws new ones.
@settings(max_examples=1000, deadline=None)
@given(DOCUMENTS)
def test_a_simple_document_gives_the_name_the_yaml_parser_gives(text):
    data = text.encode("utf-8", "surrogatepass")
    simple = simple_name(data)
    if simple is not NOT_SIMPLE:
        assert simple == parsed_name(data)


# Documents shaped as the CLI writes them (one key, ": ", a value, on each line), with values of what prompts
# hold: most of these are simple, so the comparison above is made on many names, not only on refusals.
CLI_LINES = st.tuples(KEYS, st.sampled_from(["{}", "'{}'", '"{}"']), PLAIN).map(
    lambda p: f"{p[0]}: " + p[1].format(p[2]))
CLI_DOCUMENTS = st.lists(CLI_LINES, min_size=1, max_size=5).map(lambda lines: "\n".join(lines) + "\n")


@settings(max_examples=1000, deadline=None)
@given(CLI_DOCUMENTS)
def test_a_document_shaped_as_the_cli_writes_gives_the_name_the_yaml_parser_gives(text):
    test_a_simple_document_gives_the_name_the_yaml_parser_gives.hypothesis.inner_test(text)


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=80))
def test_any_bytes_give_the_name_the_yaml_parser_gives(data):
    simple = simple_name(b"name: " + data)
    if simple is not NOT_SIMPLE:
        assert simple == parsed_name(b"name: " + data)


def test_every_workspace_yaml_the_real_cli_wrote_is_read_without_the_parser(tmp_path):
    """The stored fixtures of every CLI version that writes one: each is simple, and read_name (which trims it
    to one line) shows what the parser reads."""
    files = sorted(FIXTURES.glob("cli/*/*/session-state/*/workspace.yaml"))
    assert len(files) > 50
    for path in files:
        data = path.read_bytes()
        assert simple_name(data) is not NOT_SIMPLE, path
        parsed = parsed_name(data)
        assert read_name(path.parent) == (" ".join(parsed.split()) if parsed is not None else None), path


def test_what_the_cli_writes_for_a_long_or_odd_prompt_goes_to_the_parser(tmp_path):
    """A folded long name, an escaped one, a comment: the parser reads them, and read_name gives its reading."""
    cases = {
        b"id: x\nname: \"a long prompt that the CLI's YAML writer folded\n  onto a second line\"\n":
            "a long prompt that the CLI's YAML writer folded onto a second line",
        b'name: "tab\\there"\n': "tab here",
        b"name: fix it # later\n": "fix it",
        b"name: 2026-12-03\n": None,
        b"name: yes\n": None,
        b"name: y\n": "y",
    }
    for data, shown in cases.items():
        (tmp_path / "workspace.yaml").write_bytes(data)
        assert read_name(tmp_path) == shown, data
