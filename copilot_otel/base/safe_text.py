"""Text from a session log made safe for a terminal: every control and invisible format character shown
escaped (``\\x1b``, ``\\u202e``), printable text unchanged.

A tool name (an MCP server chooses it), a folder, a branch or a model name is written by someone
else; printed raw it could set the clipboard (OSC 52), the window title, clear the screen, hide
text or reverse it (bidi overrides). What is escaped: C0 and C1 controls and DEL, Unicode format
characters (bidi controls, zero-width characters, tags), line and paragraph separators, and lone
surrogates (undecodable bytes of a path). ``--json`` output keeps its values and escapes the same
characters as ``\\uXXXX``; log lines are escaped by :class:`SafeFormatter`.
"""

from __future__ import annotations

import logging
import re
from functools import cache

from .redact import redact

# Categories Cc, Cf, Zl, Zp and Cs (Unicode 15.1; tests/unit/test_safe_text.py checks them against the
# running Python's unicodedata), written out: computing them costs a third of a second at each start.
_RANGES = ((0x00, 0x1F), (0x7F, 0x9F), (0xAD, 0xAD), (0x600, 0x605), (0x61C, 0x61C), (0x6DD, 0x6DD),
           (0x70F, 0x70F), (0x890, 0x891), (0x8E2, 0x8E2), (0x180E, 0x180E), (0x200B, 0x200F),
           (0x2028, 0x202E), (0x2060, 0x2064), (0x2066, 0x206F), (0xD800, 0xDFFF), (0xFEFF, 0xFEFF),
           (0xFFF9, 0xFFFB), (0x110BD, 0x110BD), (0x110CD, 0x110CD), (0x13430, 0x1343F), (0x1BCA0, 0x1BCA3),
           (0x1D173, 0x1D17A), (0xE0001, 0xE0001), (0xE0020, 0xE007F))


def _char_class(ranges) -> str:
    return "".join(f"\\U{a:08x}" if a == b else f"\\U{a:08x}-\\U{b:08x}" for a, b in ranges)


# Both patterns are compiled when first needed: most text is printable (safe() then needs neither), and
# compiling them at import cost every command about 12 M instructions.
@cache
def unsafe() -> re.Pattern[str]:
    """The characters safe() escapes, as one character class."""
    return re.compile(f"[{_char_class(_RANGES)}]")


@cache
def _unsafe_in_json() -> re.Pattern[str]:
    # In JSON written by orjson, C0 characters are escaped already; the raw ones are its own newlines.
    return re.compile(f"[{_char_class(((0x7F, 0x9F), *_RANGES[2:]))}]")


_SHORT = {"\t": "\\t", "\n": "\\n", "\r": "\\r"}


def _escaped(match: re.Match) -> str:
    char = match.group()
    if char in _SHORT:
        return _SHORT[char]
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def safe(text: str) -> str:
    """``text`` with every control and invisible format character escaped; printable text unchanged."""
    if text.isprintable():  # C speed; every character escaped here is one isprintable() refuses
        return text
    return unsafe().sub(_escaped, text)


def say(message: str) -> None:
    """One line on stderr, ``copilot-otel: ...``, whatever it quotes (paths, ids, reasons) escaped for the terminal
    and its secrets hidden (an endpoint's password, a key: ``redact.redact``)."""
    import click

    click.echo(f"copilot-otel: {safe(redact(message))}", err=True)


def safe_lines(text: str) -> str:
    """Like :func:`safe`, keeping the newlines (a traceback)."""
    return "\n".join(safe(line) for line in text.split("\n"))


_FORMULA = ("=", "+", "-", "@")
_LEADING_SPACE = " \t\r\n\v\f"


def spreadsheet_cell(value):
    """A CSV cell a spreadsheet opens as what it is: text it would take as a formula (OWASP's rule: starting with
    ``=``, ``+``, ``-``, ``@``, a tab or a CR, also after leading whitespace) gets a leading ``'``. Only text:
    numbers (a negative one too) and other values are returned unchanged."""
    if isinstance(value, str) and (value.startswith(("\t", "\r")) or value.lstrip(_LEADING_SPACE).startswith(_FORMULA)):
        return "'" + value
    return value


def _json_escaped(match: re.Match) -> str:
    code = ord(match.group())
    if code < 0x10000:
        return f"\\u{code:04x}"
    code -= 0x10000
    return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"


def safe_json(document: bytes) -> bytes:
    """JSON (orjson's) with the characters a terminal would act on written as ``\\uXXXX``: the same values."""
    if document.isascii() and b"\x7f" not in document:
        return document  # every character it escapes is DEL or beyond ASCII: checked in C, not by the pattern
    text = document.decode()
    pattern = _unsafe_in_json()
    return pattern.sub(_json_escaped, text).encode() if pattern.search(text) else document


class SafeFormatter(logging.Formatter):
    """Log lines with whatever they quote escaped and their secrets hidden (``redact.redact``: a URL's password
    and query values, ``token=`` and the like): a message is always one line, a traceback keeps its lines."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        return safe(redact(super().formatMessage(record)))

    def formatException(self, ei) -> str:
        return safe_lines(redact(super().formatException(ei)))

    def formatStack(self, stack_info: str) -> str:
        return safe_lines(redact(super().formatStack(stack_info)))
