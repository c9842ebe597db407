"""Plain-text forms of durations, times and counts, shared by `inspect`, `sessions` and the daemon's log."""

from __future__ import annotations

import time


def duration(seconds: float) -> str:
    """0.4 s -> '400 ms', 12.3 -> '12.3 s', 125 -> '2m 05s', 7300 -> '2h 01m'."""
    if seconds < 1:
        return f"{max(0.0, seconds) * 1000:.0f} ms"
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m {secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours}h {minutes:02d}m"
    return f"{hours // 24}d {hours % 24:02d}h"


def ago(timestamp_ns: int, now: float) -> str:
    """How long before ``now`` a time was: 'just now', '42s ago', '5m ago', '3h ago', '2d ago'."""
    seconds = now - timestamp_ns / 1e9
    if seconds < 1:
        return "just now"
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{int(seconds // size)}{unit} ago"
    return f"{int(seconds)}s ago"


def clock_time(timestamp_ns: int, now: float) -> str:
    """A local time: 'HH:MM:SS' today, 'Mon DD HH:MM' this year, else 'YYYY-MM-DD'."""
    if not timestamp_ns:
        return "-"
    when = time.localtime(timestamp_ns / 1e9)
    today = time.localtime(now)
    if when[:3] == today[:3]:
        return time.strftime("%H:%M:%S", when)
    if when.tm_year == today.tm_year:
        return time.strftime("%b %d %H:%M", when)
    return time.strftime("%Y-%m-%d", when)


def iso_time(timestamp_ns: int) -> str | None:
    """RFC 3339 UTC with milliseconds, for JSON; None for 0 (unknown)."""
    if not timestamp_ns:
        return None
    seconds, nanos = divmod(timestamp_ns, 1_000_000_000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{nanos // 1_000_000:03d}Z"


def plural(n: int, word: str, words: str | None = None) -> str:
    """'1 turn', '2 turns' ('1 LLM call', '3 LLM calls')."""
    return f"{n} {word if n == 1 else (words or word + 's')}"


def count(value: float) -> str:
    """12 -> '12', 45_300 -> '45.3k', 2_100_000 -> '2.1M'."""
    if value < 1000:
        return f"{value:.0f}" if float(value).is_integer() else f"{value:.1f}"
    if value < 1_000_000:
        return f"{value / 1000:.1f}k"
    return f"{value / 1_000_000:.1f}M"


def where(summary) -> str:
    """Where a session (a SessionSummary) runs: 'owner/name@branch', else its working folder, else ''."""
    if summary.repository:
        return summary.repository + (f"@{summary.branch}" if summary.branch else "")
    return summary.cwd or ""
