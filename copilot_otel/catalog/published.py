"""What the daemon's reader publishes for the other threads (scrapes, the web view): one frozen object, swapped whole.

The reader builds a new :class:`Published` after each pass and replaces the old one in a single assignment, so a
reader on another thread that takes ``daemon.published`` once sees the sessions' liveness, summaries and
generation agree.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType

from msgspec import Struct, field

from ..model.summary import SessionSummary
from ..source.liveness import Liveness


class Published(Struct, frozen=True):
    """The daemon's sessions as its reader left them after a pass; nothing in it changes once published."""

    generation: int = 0  # moves when a summary or the set of live sessions changed (the web view polls it)
    liveness: tuple[Liveness, ...] = ()  # the live sessions (their state is computed from these when asked)
    summaries: Mapping[Path, SessionSummary] = field(default_factory=lambda: MappingProxyType({}))  # every known one
    partial: frozenset[Path] = frozenset()  # logs whose summary counts only what followed the checkpoint resumed from
