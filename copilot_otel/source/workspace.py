"""A session's name, from the ``workspace.yaml`` the CLI keeps next to its events.jsonl.

The CLI (1.0.50 on; 1.0.24 and older write no name) names each session: its first prompt until
a name is generated or the user gives one (``name:``, with ``user_named: true``). The name tells
sessions apart in `sessions`, `inspect` and the web view, and is never exported. A name the user
gave is shown always; any other is the prompt's text (or made from it), shown only with content
capture on, as the prompt itself would be.
"""

from __future__ import annotations

import codecs
import logging
import os
import re
from pathlib import Path

from msgspec.structs import replace

from ..base import boundedyaml
from ..base.logs import ReportedOnce
from ..base.regular import read_regular, reason
from ..model.summary import SessionSummary

FILE_NAME = "workspace.yaml"
MAX_BYTES = 64 << 10  # a workspace.yaml is a few hundred bytes; a bigger one is not read
MAX_NAME_CHARS = 200
MAX_SAID = 1000  # paths whose trouble was logged (past that, no more is said)
_SAID = ReportedOnce(logging.getLogger(__name__))
_NOT_NAMED = re.compile(rb"^user_named: false\r?$", re.M)


def _never_user_named(data: bytes) -> bool:
    """Whether the YAML ``data`` cannot say ``user_named: true``, seen without parsing it: every ``user_named`` in
    it begins a line ``user_named: false`` (what the CLI writes for a name it made), and nothing else could
    spell the key (no escape, not UTF-16)."""
    return (b"\\" not in data and not data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE))
            and data.count(b"user_named") == len(_NOT_NAMED.findall(data)))


def read_name(folder: Path, *, capture: bool = False) -> str | None:
    """The session's name from ``folder``/workspace.yaml: one the user gave, or with ``capture`` (content capture
    on) any; None if there is none to show (or it cannot be read)."""
    path = Path(folder) / FILE_NAME
    try:
        data = read_regular(path, MAX_BYTES, follow=False)  # a FIFO, a link or a huge file: no name, said once
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        _say_once(path, reason(exc))
        return None
    if not capture and _never_user_named(data):  # no name to show: nothing to parse
        return None
    try:
        document = boundedyaml.load(data)  # its import of yaml (~0.1 G instructions) is paid only here
    except Exception as exc:  # noqa: BLE001 - YAMLError, and what the parser raises on its own: KeyError for "!!bool "
        if getattr(exc, "beyond_bounds", False):  # a bomb is named; a name the CLI wrote oddly is only not shown
            _say_once(path, f"not read{boundedyaml.describe(exc)}")
        return None
    name = document.get("name") if isinstance(document, dict) else None
    if not isinstance(name, str) or not (capture or document.get("user_named") is True):
        return None
    name = " ".join(name.split())  # one line, whatever the prompt held
    return name[:MAX_NAME_CHARS] or None


def _say_once(path: Path, why: str) -> None:
    """Log that ``path`` gives no name, and why: once per path (a listing asks again and again)."""
    if len(_SAID.paths) < MAX_SAID:
        _SAID.report(path, f"{path}: {why}; the session is shown without a name")


def named(summary: SessionSummary, folder: Path, *, capture: bool = False) -> SessionSummary:
    """``summary`` with the name its folder's workspace.yaml gives the session (read_name)."""
    name = read_name(folder, capture=capture)
    return summary if name == summary.name else replace(summary, name=name)


class NameCache:
    """The name of one session folder, read again only when its workspace.yaml changed (a stat per ask)."""

    __slots__ = ("_key", "name", "capture")

    def __init__(self, capture: bool = False) -> None:
        self._key: tuple[int, int, int] | None = None
        self.name: str | None = None
        self.capture = capture

    def of(self, folder: Path) -> str | None:
        try:
            st = os.stat(os.path.join(folder, FILE_NAME))
        except OSError:
            self._key, self.name = None, None
            return None
        key = (st.st_ino, st.st_size, st.st_mtime_ns)
        if key != self._key:
            self._key, self.name = key, read_name(folder, capture=self.capture)
        return self.name
