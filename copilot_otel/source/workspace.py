"""A session's name, from the ``workspace.yaml`` the CLI keeps next to its events.jsonl.

The CLI (1.0.50 on; 1.0.24 and older write no name) names each session: its first prompt until
a name is generated or the user gives one (``name:``, with ``user_named: true``). The name tells
sessions apart in `sessions`, `inspect` and the web view, and is never exported. A name the user
gave is shown always; any other is the prompt's text (or made from it), shown only with content
capture on, as the prompt itself would be.
"""

from __future__ import annotations

import codecs
import os
import re
from pathlib import Path

from msgspec.structs import replace

from ..model.summary import SessionSummary

FILE_NAME = "workspace.yaml"
MAX_BYTES = 64 << 10  # a workspace.yaml is a few hundred bytes; a bigger one is not read
MAX_NAME_CHARS = 200
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
    try:
        with open(Path(folder) / FILE_NAME, "rb") as handle:
            data = handle.read(MAX_BYTES + 1)
    except OSError:
        return None
    if len(data) > MAX_BYTES or not capture and _never_user_named(data):  # no name to show: nothing to parse
        return None
    import yaml  # here: its import (~0.1 G instructions) is paid only where a name may be shown

    try:
        document = yaml.load(data, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # noqa: S506 - safe
    except Exception:  # noqa: BLE001 - YAMLError, and what the parser raises on its own: KeyError for "!!bool "
        return None
    name = document.get("name") if isinstance(document, dict) else None
    if not isinstance(name, str) or not (capture or document.get("user_named") is True):
        return None
    name = " ".join(name.split())  # one line, whatever the prompt held
    return name[:MAX_NAME_CHARS] or None


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
