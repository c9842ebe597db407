"""A session's name, from the ``workspace.yaml`` the CLI keeps next to its events.jsonl.

The CLI (1.0.50 on; 1.0.24 and older write no name) names each session: its first prompt until
a name is generated or the user gives one (``name:``, with ``user_named: true``). The name tells
sessions apart in the owner's own views (`sessions`, `inspect`, the web view and its /api, which
answer only the owner), whoever made it; it is never exported, and ``--hide-names`` leaves it out
of those views too (screen sharing).
"""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path

from msgspec.structs import replace

from ..base import boundedyaml
from ..base.logs import ReportedOnce
from ..base.regular_files import read_regular, reason
from ..model.summary import SessionSummary

FILE_NAME = "workspace.yaml"
MAX_BYTES = 64 << 10  # a workspace.yaml is a few hundred bytes; a bigger one is not read
MAX_NAME_CHARS = 200
MAX_SAID = 1000  # paths whose trouble was logged (past that, no more is said)
_SAID = ReportedOnce(logging.getLogger(__name__))


def read_name(folder: Path) -> str | None:
    """The session's name from ``folder``/workspace.yaml (the user's or the CLI's); None if it has none (or it
    cannot be read)."""
    path = Path(folder) / FILE_NAME
    try:
        data = read_regular(path, MAX_BYTES, follow=False)  # a FIFO, a link or a huge file: no name, said once
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        _say_once(path, reason(exc))
        return None
    simple = simple_name(data)
    if simple is None or isinstance(simple, str):
        return _shown(simple)
    try:
        document = boundedyaml.load(data)  # its import of yaml (~0.1 G instructions) is paid only here
    except Exception as exc:  # noqa: BLE001 - YAMLError, and what the parser raises on its own: KeyError for "!!bool "
        if getattr(exc, "beyond_bounds", False):  # a bomb is named; a name the CLI wrote oddly is only not shown
            _say_once(path, f"not read{boundedyaml.describe(exc)}")
        return None
    name = document.get("name") if isinstance(document, dict) else None
    return _shown(name if isinstance(name, str) else None)


def _shown(name: str | None) -> str | None:
    if name is None:
        return None
    name = " ".join(name.split())  # one line, whatever the prompt held
    return name[:MAX_NAME_CHARS] or None


# What the CLI writes is a flat mapping of one-line scalars. Such a document is read here, as PyYAML's safe
# loader reads it (tests/unit/test_workspace_name.py checks that on generated documents): a listing of 400
# sessions does not import yaml and build 400 documents. Anything else (a folded long name, a comment, an
# escape, a value YAML would read as another type) goes to the YAML parser.
NOT_SIMPLE = object()
_LINE = re.compile(r"([A-Za-z_][A-Za-z0-9_]{0,63}): ([^\n]+)\n?")
_SINGLE = re.compile(r"'((?:[^']|'')*)'")
_DOUBLE = re.compile(r'"([^"\\]*)"')
# PyYAML's reader refuses some of these characters (Reader.NON_PRINTABLE); the others (tabs, CR, NEL, the
# Unicode line and paragraph separators, a byte order mark) are left to it too. (The class of those refused, not
# of those taken: a class of wide ranges takes milliseconds to compile.)
_UNUSUAL = re.compile("[\\x00-\\x09\\x0b-\\x1f\\x7f-\\x9f\\u2028\\u2029\\ud800-\\udfff\\ufeff\\ufffe\\uffff]")
_INDICATORS = frozenset("-?:,[]{}#&*!|>'\"%@` ")  # what a plain scalar may not start with
_NOT_TEXT_START = frozenset("<~=+-.0123456789")  # the starts of numbers, dates, nulls, merge and value keys
_WORDS = frozenset(w for word in ("yes", "no", "true", "false", "on", "off", "null")
                   for w in (word, word.capitalize(), word.upper()))  # PyYAML's bools and nulls


def simple_name(data: bytes) -> str | object | None:
    """The ``name`` of a flat mapping of one-line scalars, as a str (None: it has no string name); NOT_SIMPLE
    when ``data`` is anything else."""
    try:
        text = data.decode()
    except UnicodeDecodeError:
        return NOT_SIMPLE
    if not text or text.startswith("\ufeff") or _UNUSUAL.search(text):
        return NOT_SIMPLE
    name: str | None = None
    at = 0
    while at < len(text):
        if text[at] == "\n":  # a blank line
            at += 1
            continue
        line = _LINE.match(text, at)
        if line is None:
            return NOT_SIMPLE
        at = line.end()
        key, value = line.group(1), line.group(2)
        scalar = _scalar(value, text=key == "name")
        if scalar is NOT_SIMPLE:
            return NOT_SIMPLE
        if key == "name":
            name = scalar if isinstance(scalar, str) else None
    return name


def _scalar(value: str, *, text: bool) -> str | object | None:
    """A one-line scalar as a str; NOT_SIMPLE if it is not one this reader takes. ``text``: the value must be read
    as text, so a plain one that YAML could read as a number, date or null is not taken (a bool or null: None)."""
    first = value[0]
    if first == "'":
        quoted = _SINGLE.fullmatch(value)
        return quoted.group(1).replace("''", "'") if quoted else NOT_SIMPLE
    if first == '"':
        quoted = _DOUBLE.fullmatch(value)
        return quoted.group(1) if quoted else NOT_SIMPLE
    if first in _INDICATORS or value[-1] in " :" or ": " in value or " #" in value:
        return NOT_SIMPLE
    if text and first in _NOT_TEXT_START:
        return NOT_SIMPLE
    return None if value in _WORDS else value


def _say_once(path: Path, why: str) -> None:
    """Log that ``path`` gives no name, and why: once per path (a listing asks again and again)."""
    if len(_SAID.paths) < MAX_SAID:
        _SAID.report(path, f"{path}: {why}; the session is shown without a name")


def named(summary: SessionSummary, folder: Path) -> SessionSummary:
    """``summary`` with the name its folder's workspace.yaml gives the session (read_name)."""
    name = read_name(folder)
    return summary if name == summary.name else replace(summary, name=name)


class NameCache:
    """The name of one session folder, read again only when its workspace.yaml changed (a stat per ask)."""

    __slots__ = ("_key", "name")

    def __init__(self) -> None:
        self._key: tuple[int, int, int] | None = None
        self.name: str | None = None

    def of(self, folder: Path) -> str | None:
        try:
            st = os.stat(os.path.join(folder, FILE_NAME))
        except OSError:
            self._key, self.name = None, None
            return None
        key = (st.st_ino, st.st_size, st.st_mtime_ns)
        if key != self._key:
            self._key, self.name = key, read_name(folder)
        return self.name
