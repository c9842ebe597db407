"""A session's name, from the ``workspace.yaml`` the CLI keeps next to its events.jsonl.

The CLI (1.0.50 on; 1.0.24 and older write no name) names each session: its first prompt until
a name is generated or the user gives one (``name:``, with ``user_named: true``). The name tells
sessions apart in the owner's own views (`sessions`, `inspect`, the web view and its /api, which
answer only the owner), whoever made it; it is never exported, and ``--hide-names`` leaves it out
of those views too (screen sharing).
"""

from __future__ import annotations

import os
from pathlib import Path

from msgspec.structs import replace

from ..model.summary import SessionSummary

FILE_NAME = "workspace.yaml"
MAX_BYTES = 64 << 10  # a workspace.yaml is a few hundred bytes; a bigger one is not read
MAX_NAME_CHARS = 200


def read_name(folder: Path) -> str | None:
    """The session's name from ``folder``/workspace.yaml (the user's or the CLI's); None if it has none (or it
    cannot be read)."""
    try:
        with open(Path(folder) / FILE_NAME, "rb") as handle:
            data = handle.read(MAX_BYTES + 1)
    except OSError:
        return None
    if len(data) > MAX_BYTES:
        return None
    import yaml  # here: its import (~0.1 G instructions) is paid only where a name is read

    try:
        document = yaml.load(data, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # noqa: S506 - safe
    except Exception:  # noqa: BLE001 - YAMLError, and what the parser raises on its own: KeyError for "!!bool "
        return None
    name = document.get("name") if isinstance(document, dict) else None
    if not isinstance(name, str):
        return None
    name = " ".join(name.split())  # one line, whatever the prompt held
    return name[:MAX_NAME_CHARS] or None


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
