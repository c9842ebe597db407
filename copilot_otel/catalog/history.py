"""A session log read to its end without a daemon: its summary, and how the daemon would see it now.

`sessions`, `inspect`, the summary cache (catalog/cache.py) and `view PATH` all name a session's state this way.
"""

from __future__ import annotations

from pathlib import Path

from msgspec.structs import replace

from ..config import DEFAULT_MAX_LINE_BYTES
from ..decode.normalize import parse_version
from ..model.options import ModelOptions
from ..model.summary import SessionSummary
from ..source.liveness import ABANDONED_RETENTION, Liveness, lock_pids, locks_expected, pid_alive
from ..source.sources import session_id_of
from ..vocab import IDLE

REJECTED_KEPT = 5  # the first lines that could not be read are named in the summary (all are counted)


def summarize_log(path: Path, options: ModelOptions, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES, *,
                  name: bool = True) -> SessionSummary:
    """One log replayed to its end (nothing closed that its end leaves open), summed up, with the lines of it
    that could not be read (counted; the first REJECTED_KEPT named by line number and reason), and named
    (``name``: the summary cache names each session itself). Read without the model when catalog/quick.py can
    vouch for the log (the same summary), else through it."""
    if not options.capture_content:
        from .quick import quick_summary

        quick = quick_summary(path, session_id_of(path), max_line_bytes)
        if quick is not None:
            summary, rejected, lines = quick
            if name:
                from ..source.workspace import named

                summary = named(summary, path.parent)
            return replace(summary, rejected=rejected, rejected_lines=tuple(lines[:REJECTED_KEPT])) if rejected \
                else summary
    return model_summary(path, options, max_line_bytes, name=name)


def model_summary(path: Path, options: ModelOptions, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES, *,
                  name: bool = True) -> SessionSummary:
    """summarize_log through the session model, whatever the log holds."""
    from ..logreader import LogReader  # the whole model: a listing of cached summaries never loads it
    from ..source.workspace import named

    named_lines: list[tuple[int, str]] = []

    def skipped(message: str, *args) -> None:  # drive's warning of a skipped line: (source, line, reason, detail)
        if message.startswith("%s:%d: skipped line") and len(named_lines) < REJECTED_KEPT:
            named_lines.append((int(args[1]), str(args[2])))

    reader = LogReader(path, options, max_line_bytes=max_line_bytes, summaries=False, metrics=False, warn=skipped)
    out = reader.read_to_end()
    summary = reader.live_model.summary()
    if name:
        summary = named(summary, path.parent)
    rejected = sum(out.rejected.values())
    return replace(summary, rejected=rejected, rejected_lines=tuple(named_lines)) if rejected else summary


def history_liveness(path: Path, summary: SessionSummary) -> Liveness:
    """How the daemon would see a replayed session: its lock files, and whether it died mid-turn."""
    pids = tuple(lock_pids(path.parent))
    expected = locks_expected(pids, parse_version(summary.cli_version))
    state = IDLE if summary.ended else summary.state
    abandoned_at = None
    if state != IDLE and pids and not any(pid_alive(pid) for pid in pids):
        abandoned_at = summary.last_event_ns / 1e9  # mid-turn, and its process is gone
    if state != IDLE and not pids and expected and summary.last_event_ns:
        abandoned_at = summary.last_event_ns / 1e9  # the lock went with the process
    return Liveness(summary.session_id, state, summary.last_event_ns, pids, abandoned_at, expected,
                       summary.waiting_on, summary.repository)


def now_live(summary: SessionSummary, now: float) -> bool:
    """Could a replayed session still be live (not shut down, written to within the abandoned retention)?"""
    return summary.ended is None and now - summary.last_event_ns / 1e9 < ABANDONED_RETENTION
