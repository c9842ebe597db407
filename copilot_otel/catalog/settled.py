"""A session log read to its end, summed up as the daemon holds it once its housekeeping is done.

The daemon confirms an interaction's end after ``--idle-quiet`` seconds of silence, and ends what a
session left open when its process is found gone mid-turn (as incomplete). A summary of the log read
from the files (`sessions --from-files`, `inspect`, `view`, the sessions the daemon did not read
whole) knows neither; :func:`settled` applies both, by the daemon's rules, so that every view says
the same of a session: how its last interaction ended, and whether the session ended.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from msgspec.structs import replace

from ..config import DEFAULT_IDLE_QUIET
from ..decode.normalize import parse_version
from ..model.summary import SessionSummary
from ..source.liveness import ABANDONED_RETENTION, GRACE_SECONDS, lock_pids, locks_expected, pid_alive
from ..vocab import END_INCOMPLETE, IDLE


def process_gone(summary: SessionSummary, folder: Path, silent: float, alive: Callable[[int], bool]) -> bool:
    """Is the CLI process that wrote the session gone? Its lock files say; a CLI that writes none only after
    ABANDONED_RETENTION of silence (the daemon's rule, liveness.verdict)."""
    pids = lock_pids(folder)
    if pids:
        return not any(alive(pid) for pid in pids)
    return locks_expected(pids, parse_version(summary.cli_version)) or silent >= ABANDONED_RETENTION


def settled(summary: SessionSummary, folder: Path, *, now: float | None = None,
            idle_quiet: float = DEFAULT_IDLE_QUIET, alive: Callable[[int], bool] = pid_alive) -> SessionSummary:
    """``summary`` (of the log in ``folder`` read to its end) as the daemon would hold it now."""
    if summary.ended is not None or (summary.confirms is None and summary.state == IDLE):
        return summary
    silent = (time.time() if now is None else now) - summary.last_event_ns / 1e9
    if summary.confirms is not None:
        if silent < idle_quiet:
            return summary
        return replace(summary, last_end=summary.confirms, confirms=None, cut_off_end=None)
    if silent <= GRACE_SECONDS or not process_gone(summary, folder, silent, alive):
        return summary
    return replace(summary, ended=END_INCOMPLETE, last_end=summary.cut_off_end or summary.last_end, confirms=None,
                   cut_off_end=None)
