"""`usage`: what this machine's sessions used, by day, week or month, as a table, JSON or CSV.

It reads the session logs through the same cached summaries as `sessions --from-files` (no daemon needed)
and adds up their amounts with catalog/usage.py. A log or a line that could not be read is counted and named
(file, line, why); the rest is reported.
"""

from __future__ import annotations

import csv
import io
import re
from datetime import date, datetime, timedelta, tzinfo
from datetime import time as day_time
from pathlib import Path

from msgspec import Struct

from ..base.display import count, plural
from ..base.parsing import DURATION_HINT, duration_seconds
from ..base.safe_text import safe, spreadsheet_cell
from ..catalog.usage import AMOUNTS, NANO_AIU_PER_CREDIT, USD_PER_CREDIT, Row, total, usage_rows
from ..source.liveness import StuckPolicy

RATE_NOTE = (f"1 AI credit = ${USD_PER_CREDIT:.2f} (GitHub's billing rate); premium requests are what sessions "
             "before AI credits were billed in")
NAMED_PROBLEMS = 10  # damaged logs and lines named on stderr; all are counted


class Problem(Struct, frozen=True):
    """A log, or a line of one, the report could not read."""

    path: str
    line: int | None
    reason: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.reason}" if self.line else f"{self.path}: {self.reason}"


class Report(Struct):
    """The rows, their total, and what could not be read."""

    by: str
    groups: tuple[str, ...]
    zone: str
    since: float | None
    until: float | None
    rows: list[Row]
    total: Row
    problems: list[Problem]
    unread_lines: int  # lines skipped in logs that were read (each log names its first few)
    damaged_logs: int = 0  # logs read with some lines skipped


def zone_of(name: str | None) -> tuple[tzinfo | None, str]:
    """The time zone --tz names (an IANA name such as Europe/Berlin, or UTC), or the local one (None)."""
    if not name:
        return None, datetime.now().astimezone().tzname() or "local"
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    try:
        return ZoneInfo(name), name
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(f"--tz {name!r}: not a time zone (an IANA name such as Europe/Berlin, or UTC)") from None


_DATE = re.compile(r"\d{4}-\d{2}-\d{2}$")


def parse_when(flag: str, text: str, zone: tzinfo | None, *, now: float, end: bool = False) -> float:
    """'2h', '7d' ago; a date (in ``zone``: its start, or with ``end`` the start of the next day, so that
    --until 2026-12-03 takes in that whole day); or a date and time: epoch seconds."""
    ago = duration_seconds(text)
    if ago is not None:
        return now - ago
    text = text.strip()
    try:
        if _DATE.match(text):
            day = date.fromisoformat(text) + timedelta(days=1 if end else 0)
            when = datetime.combine(day, day_time())
        else:
            when = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(f"--{flag} {text!r}: expected {DURATION_HINT}, or a date such as 2026-12-01 "
                         "or 2026-12-01T10:00") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=zone) if zone is not None else when.astimezone()
    return when.timestamp()


def build(root: Path, *, by: str, groups: tuple[str, ...], zone: tzinfo | None, zone_name: str,
          since: float | None, until: float | None, cache_file: Path | None, policy: StuckPolicy) -> Report:
    """The report over every session log under ``root`` (raises SourceError when it cannot be listed)."""
    from .listing import from_files

    listing = from_files(root, policy=policy, cache_file=cache_file, since=since or 0.0)
    problems = [Problem(path, None, reason) for path, reason in listing.unreadable]
    unread = damaged = 0
    for status in listing.statuses:
        summary = status.summary
        unread += summary.rejected
        damaged += summary.rejected > 0
        problems.extend(Problem(status.path or "", line, reason) for line, reason in summary.rejected_lines)
    rows = usage_rows(listing.statuses, by=by, groups=groups, zone=zone, since=since, until=until)
    return Report(by, groups, zone_name, since, until, rows, total(rows), problems, unread, damaged)


def _columns(report: Report) -> list[str]:
    return [report.by, *report.groups, "sessions", "running", "crashed", *AMOUNTS, "ai_credits", "usd",
            "credits_complete"]


def to_json(report: Report) -> dict:
    """The report as one JSON document (amounts in full: nano AIU, tokens, premium requests)."""
    rows = [row.to_json(report.by, report.groups) for row in report.rows]
    return {"by": report.by, "group": list(report.groups), "time_zone": report.zone,
            "since": _iso(report.since), "until": _iso(report.until),
            "usd_per_ai_credit": USD_PER_CREDIT, "note": RATE_NOTE, "rows": rows,
            "total": report.total.to_json(report.by, report.groups),
            "unreadable": {"logs": sum(1 for p in report.problems if p.line is None), "lines": report.unread_lines,
                           "named": [{"path": p.path, "line": p.line, "reason": p.reason} for p in report.problems]}}


def _iso(seconds: float | None) -> str | None:
    return None if seconds is None else datetime.fromtimestamp(seconds).astimezone().isoformat(timespec="seconds")


def to_csv(report: Report) -> str:
    """One line per row, with a header; the total is not a row (scripts add the rows up)."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    columns = _columns(report)
    writer.writerow(columns)
    for row in report.rows:
        values = row.to_json(report.by, report.groups)
        writer.writerow(["" if values[c] is None else spreadsheet_cell(values[c]) for c in columns])  # unknown: empty;
        # a repository may be named =HYPERLINK(...)
    return out.getvalue()


def _marks(row: Row) -> str:
    marks = [f"{len(row.running)} running" if row.running else "", f"{len(row.crashed)} crashed" if row.crashed else ""]
    return ", ".join(m for m in marks if m)


def _credits_cells(row: Row) -> tuple[str, str]:
    nano = row.value("nano_aiu")
    plus = "+" if row.unpriced else ""
    if row.credits_unknown:
        return "?", "?"
    if not nano:
        return "-", "-"
    return f"{nano / NANO_AIU_PER_CREDIT:,.2f}{plus}", f"{nano / NANO_AIU_PER_CREDIT * USD_PER_CREDIT:,.2f}{plus}"


def _pair(a: float, b: float) -> str:
    return f"{count(a)}/{count(b)}"


def _cells(row: Row, report: Report, first: str) -> list[str]:
    credits, usd = _credits_cells(row)
    premium = row.value("premium_requests")
    added, removed = row.value("lines_added"), row.value("lines_removed")
    group = list(row.group) if row.group else ["" for _ in report.groups]
    return [first, *group, str(len(row.sessions)), f"{row.value('llm_calls'):,}",
            _pair(row.value("input_tokens"), row.value("output_tokens")),
            _pair(row.value("cache_read_tokens"), row.value("cache_write_tokens")),
            f"{premium:g}" if premium else "-", credits, usd, f"+{added:,}/-{removed:,}" if added or removed else "-",
            _marks(row)]


HEADERS: tuple[str, ...] = ("SESSIONS", "CALLS", "IN/OUT", "CACHE R/W", "PREMIUM", "CREDITS", "USD", "LINES")
# The columns a terminal too narrow for the whole table goes without, first to last: never a header cut short.
LEFT_OUT_FIRST = ("LINES", "CACHE R/W", "SESSIONS", "IN/OUT", "CALLS", "USD", "PREMIUM")


def _table(report: Report, shown: tuple[str, ...]):
    from rich import box
    from rich.table import Table

    table = Table(box=box.SIMPLE_HEAD, show_edge=False, padding=0, pad_edge=False, title_justify="left",
                  title=f"Copilot usage by {report.by} ({report.zone}); tokens in/out, cache read/write")
    table.add_column(report.by.upper(), no_wrap=True, min_width=len(report.rows[0].period) if report.rows else 5)
    for group in report.groups:
        table.add_column(group.upper(), overflow="ellipsis", no_wrap=True, max_width=36, min_width=len(group))
    for header in shown:
        table.add_column(header, justify="right", no_wrap=True, min_width=len(header))
    marked = bool(report.total.running or report.total.crashed)
    if marked:
        table.add_column("", no_wrap=True, style="yellow")  # running, crashed
    keep = [True] * (1 + len(report.groups)) + [h in shown for h in HEADERS] + [marked]
    for row in report.rows:
        cells = _cells(row, report, row.period)
        table.add_row(*(safe(cell) for cell, kept in zip(cells, keep) if kept))
    table.add_section()
    table.add_row(*(cell for cell, kept in zip(_cells(report.total, report, "total"), keep) if kept), style="bold")
    return table


def _width(table) -> int:
    """The width ``table`` takes when nothing in it is cut."""
    from rich.console import Console
    from rich.measure import Measurement

    wide = Console(width=100_000, file=io.StringIO())
    return Measurement.get(wide, wide.options, table).maximum


def render(report: Report, console) -> None:
    """The report as a table (rich), its total last, then the billing rate and what the marks mean. On a terminal
    too narrow for every column, the least needed columns are left out (said below the table), never a header
    cut; piped, the whole table whatever COLUMNS says (scripts read --json or --csv)."""
    shown = HEADERS
    table = _table(report, shown)
    width = _width(table)
    if console.is_terminal:
        for header in LEFT_OUT_FIRST:
            if width <= console.width:
                break
            shown = tuple(h for h in shown if h != header)
            table = _table(report, shown)
            width = _width(table)
    else:
        console.width = max(width, console.width)
    console.print(table)
    notes = [RATE_NOTE + "."]
    left_out = [h for h in HEADERS if h not in shown]
    if left_out:
        notes.append(f"Left out at this width: {', '.join(left_out)} (a wider terminal, --json or --csv show them).")
    if report.total.unpriced:
        notes.append("+: some calls reported no amount of AI credits (the credits are at least this); ?: none did.")
    if report.total.running or report.total.crashed:
        notes.append("running: the session's CLI still holds it (its amounts so far); crashed: its process died "
                     "with work open (what it wrote before).")
    for note in notes:
        console.print(note, style="dim", highlight=False)


def problems_text(report: Report) -> list[str]:
    """What could not be read, for stderr: counted, the first NAMED_PROBLEMS named."""
    logs = sum(1 for p in report.problems if p.line is None)
    if not logs and not report.unread_lines:
        return []
    parts = [f"could not read {plural(logs, 'log')}" if logs else "",
             f"skipped {plural(report.unread_lines, 'unreadable line')} in {plural(report.damaged_logs, 'log')}"
             if report.unread_lines else ""]
    them = "it" if logs + report.unread_lines == 1 else "them"
    lines = [f"{' and '.join(p for p in parts if p)}; the report leaves {them} out:"]
    lines += [f"  {safe(str(p))}" for p in report.problems[:NAMED_PROBLEMS]]
    if len(report.problems) > NAMED_PROBLEMS:
        lines.append(f"  ... and {len(report.problems) - NAMED_PROBLEMS} more")
    return lines
