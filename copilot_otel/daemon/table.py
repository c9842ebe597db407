"""The daemon's sessions, keyed by log path: who follows each one, which are open, and what the reader publishes.

Only the reader thread changes the table. After each pass it swaps in one frozen
:class:`~copilot_otel.catalog.published.Published` (``publish``), which is all the scrape and web threads read.
"""

from __future__ import annotations

from pathlib import Path
from types import MappingProxyType
from typing import Any

from msgspec.structs import replace

from ..catalog.published import Published
from ..model.summary import SessionSummary
from ..source.liveness import Liveness
from .follow import Follower


class SessionTable:
    """Every followed session, the subsets housekeeping visits, and the copies the reader publishes."""

    def __init__(self) -> None:
        self.followers: dict[Path, Follower] = {}
        # The sessions whose state can change without a new event (an idle loop to confirm, a process
        # that may die) or that a scrape reports. Housekeeping and scrapes visit only these, so
        # thousands of finished sessions cost nothing between their writes.
        self.open: dict[Path, Follower] = {}
        self.abandoned: dict[Path, Follower] = {}
        # The reader's own copies, published after each pass: the live sessions, every known session at a glance
        # (kept when its model is compacted away), and the logs whose summary counts only what followed the
        # checkpoint it resumed from.
        self.liveness: dict[Path, Liveness] = {}
        self.summaries: dict[Path, SessionSummary] = {}
        self.partial: set[Path] = set()
        self.changed = False  # a summary or the set of logs changed since the last publication
        self.published = Published()  # what other threads read: replaced whole, never changed
        # The generation a deleted log would start again at, were it written anew.
        self.generations: dict[Path, int] = {}

    def publish(self) -> None:
        """Swap in what other threads read: the sessions' liveness every pass, summaries when one changed (a copy)."""
        liveness, before = tuple(self.liveness.values()), self.published
        if self.changed or len(liveness) != len(before.liveness):
            self.changed = False
            self.published = Published(before.generation + 1, liveness, MappingProxyType(dict(self.summaries)),
                                       frozenset(self.partial))
        else:
            self.published = replace(before, liveness=liveness)

    def summarize(self, follower: Follower) -> None:
        """Its summary as it stands after a read."""
        self.summaries[follower.path] = follower.summary()
        if follower.whole:
            self.partial.discard(follower.path)
        else:
            self.partial.add(follower.path)
        self.changed = True

    def keep_waiting(self, path: Path, before: SessionSummary) -> None:
        """What a session was doing when its process died stays in its summary (the web view and `sessions`
        show it), as ``before`` had it."""
        self.summaries[path] = replace(self.summaries[path], waiting_on=before.waiting_on,
                                       waiting_since_ns=before.waiting_since_ns)
        self.changed = True

    def rename(self, follower: Follower) -> None:
        """Its name again, if its workspace.yaml changed with no new event (a rename): the views show it."""
        summary = self.summaries.get(follower.path)
        names = follower.names
        assert names is not None  # made by Follower.__post_init__
        if summary is not None and (name := names.of(follower.path.parent)) != summary.name:
            self.summaries[follower.path] = replace(summary, name=name)
            self.changed = True

    def close(self, follower: Follower) -> None:
        """Nothing can change it without a new event: housekeeping and scrapes leave it alone."""
        self.open.pop(follower.path, None)
        self.liveness.pop(follower.path, None)

    def compact(self, follower: Follower) -> None:
        """Its model set aside (kept as its summary) when nothing in it is open."""
        if follower.compact():
            self.close(follower)

    def remove(self, path: Path) -> Follower | None:
        """A log no longer followed: out of every map (its summary too); the follower it had, if any."""
        follower = self.followers.pop(path, None)
        for keyed in (self.open, self.abandoned, self.liveness, self.summaries):
            keyed.pop(path, None)
        self.partial.discard(path)
        self.changed = True
        return follower

    def move(self, old: Path, new: Path) -> None:
        """A followed log now at ``new``: every entry of ``old`` goes with it."""
        by_path: tuple[dict[Path, Any], ...] = (self.followers, self.open, self.abandoned, self.liveness,
                                                self.summaries)
        for keyed in by_path:
            if old in keyed:
                keyed[new] = keyed.pop(old)
        if old in self.partial:
            self.partial.symmetric_difference_update((old, new))
        self.changed = True
