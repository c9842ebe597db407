"""Where a log seen at a new path was followed before: a renamed session folder is the same session.

A log is known by the id of its first event (identity.py). When a path the daemon has not
followed yet holds a log whose first event it knows from a path that no longer exists (the
folder was renamed, or the log moved, while the daemon ran or while it was stopped), the log
is followed on at its new path as the same session: same position, generation and span ids.
A copy next to an original that still exists is another session, as copies of one log in
several folders always were.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Protocol, TypeVar

from ..source.sources import session_id_of
from ..source.tail import FileTail
from ..state.checkpoint import FilePosition

log = logging.getLogger(__name__)



class Followed(Protocol):
    """What Moves needs of a follower: the paths it was followed at before a move."""

    moved_from: tuple[str, ...]


T = TypeVar("T", bound=Followed)


class Moves:
    """First event ids of the logs followed now and of the positions restored from the checkpoint."""

    def __init__(self, restored: dict[str, FilePosition]) -> None:
        self._restored = restored  # the daemon's: positions not taken up yet, by path (taken ones are popped)
        self._restored_by_id = {p.identity.first_id: p.path for p in restored.values() if p.identity.first_id}
        self._live: dict[str, Path] = {}  # first event id -> the path of the first follower that read it
        self._ids: dict[Path, str] = {}  # and back
        self.moved_away: set[str] = set()  # paths a log moved away from: their rows go when the new one commits

    def note(self, first_id: str, path: Path) -> None:
        """A follower at ``path`` read a log that begins with the event ``first_id``."""
        if first_id and first_id not in self._live:
            self._live[first_id] = path
            self._ids[path] = first_id

    def forget(self, path: Path) -> None:
        """The log at ``path`` is no longer followed (deleted)."""
        first_id = self._ids.pop(path, None)
        if first_id is not None:
            self._live.pop(first_id, None)

    def moved(self, first_id: str, old: Path, new: Path) -> None:
        """The log that begins with ``first_id`` is followed at ``new`` now, no longer at ``old``."""
        self.moved_away.add(str(old))
        self._ids.pop(old, None)
        if first_id:
            self._live[first_id] = new
            self._ids[new] = first_id

    def origin(self, path: Path, followers: Mapping[Path, T], *,
               within: Path | None) -> tuple[str, T | None, FilePosition | None]:
        """A log about to be followed at ``path`` for the first time: (its first event's id, the follower that
        followed it at a path now gone, or the checkpoint position it had at a path now gone)."""
        self._arrived(path, followers)
        first_id = FileTail(path, within=within).first_id()
        moved = self.live_origin(first_id, followers)
        if moved is not None:
            return first_id, moved, None
        position = self.restored_origin(first_id)
        if position is not None:
            log.info("%s holds the log followed at %s before the restart (moved while stopped); following it on as "
                     "session %s", path, position.path, position.session_id or session_id_of(Path(position.path)))
        return first_id, None, position

    def _arrived(self, path: Path, followers: Mapping[Path, T]) -> None:
        """Another log is followed where one moved away from: its rows are its own, no follower deletes them."""
        if str(path) in self.moved_away:
            self.moved_away.discard(str(path))
            for other in followers.values():
                other.moved_from = tuple(old for old in other.moved_from if old != str(path))

    def live_origin(self, first_id: str, followers: Mapping[Path, T]) -> T | None:
        """The follower of a log beginning with ``first_id`` whose path is gone (the log moved), if any."""
        path = self._live.get(first_id) if first_id else None
        if path is None:
            return None
        follower = followers.get(path)
        return follower if follower is not None and not os.path.lexists(path) else None

    def restored_origin(self, first_id: str) -> FilePosition | None:
        """A checkpoint position of a log beginning with ``first_id`` at a path that is gone (moved while the
        daemon was stopped); taken out of the restored positions."""
        old = self._restored_by_id.get(first_id) if first_id else None
        if old is None:
            return None
        position = self._restored.get(old)
        if position is None or os.path.lexists(old):
            return None
        del self._restored[old]
        self.moved_away.add(old)
        return position
