"""`sessions`: every session on one line, newest first, from the running daemon or from the files.

With a daemon of this user's (its Unix socket in the state folder, checked by uid on both ends)
that follows the same COPILOT_HOME, its web view's /api/sessions answers (it holds the summaries,
and its thresholds are the ones that page people); otherwise the session logs are read here
(:class:`~copilot_otel.catalog.cache.Catalog`, cached in the state folder) and named by the same rule.
A TCP port is never asked: anyone may listen on it first.
"""

from __future__ import annotations

import fnmatch
import logging
import os
import socket
import time
from collections.abc import Iterable
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

import orjson
from msgspec import Struct

from ..base.display import ago, clock_time, count, where
from ..base.parsing import DURATION_HINT, duration_seconds
from ..base.peers import NotOurs, connect_own, describe_uid, listener_uid
from ..base.safe_text import safe
from ..catalog.board import MAX_PAGE_SIZE, NO_REPOSITORY
from ..catalog.cache import Catalog
from ..catalog.status import SessionStatus, status_of
from ..model.summary import CREDITS_LEGEND, credits_noted, credits_text
from ..source.liveness import StuckPolicy
from ..vocab import ABANDONED, ENDED, STUCK, WAITING_TOOL, WAITING_USER, WORKING

if TYPE_CHECKING:
    from rich.console import Console

log = logging.getLogger(__name__)

API_PATH = "/api/sessions"
LIVE = "live"  # --state live: every state but ended
PLACE_CHARS = 40  # the repository / folder column is padded to this at most (a longer one pushes the name on)
NAME_CHARS = 24  # one line a session only when this much of the longest name fits (else it goes on a second line)
_STYLES = {WORKING: "cyan", WAITING_TOOL: "cyan", WAITING_USER: "magenta", STUCK: "bold red", ABANDONED: "bold red",
           ENDED: "dim"}


class Listing(Struct, frozen=True):
    """The sessions, where they came from, and the logs that could not be read (path, reason)."""

    statuses: list[SessionStatus]
    source: str
    unreadable: list[tuple[str, str]]


def parse_since(text: str, *, now: float | None = None) -> float:
    """'90s', '30m', '2h', '1d', '1w' ago, or an ISO date/time ('2026-12-01', '2026-12-01T10:00'): epoch seconds."""
    now = time.time() if now is None else now
    ago = duration_seconds(text)
    if ago is not None:
        return now - ago
    try:
        return datetime.fromisoformat(text.strip()).timestamp()
    except ValueError:
        raise ValueError(f"--since {text!r}: expected {DURATION_HINT}, or a date such as "
                         "2026-12-01 or 2026-12-01T10:00") from None


def from_daemon(socket_path: Path, copilot_home: Path, *, address: tuple[str, int] | None = None,
                timeout: float = 30.0) -> tuple[list[SessionStatus] | None, str | None]:
    """(the daemon's statuses, None): every page of /api/sessions, asked on its Unix socket; or (None, why not)
    when no daemon of this user answers there for this COPILOT_HOME. ``why`` is None when there is simply no
    daemon; it names a stranger on the socket or on ``address`` (a port squatter), or a daemon that differs."""
    try:
        sock = connect_own(socket_path, timeout)
    except NotOurs as exc:
        if not exc.absent:
            return None, str(exc)
        return None, _stranger_on(address, exc) if address is not None else None
    import http.client  # only when a daemon answers: a listing from the files never pays for it

    connection = _socket_connection(sock, timeout)
    rows: list[dict] = []
    try:
        while True:
            connection.request("GET", f"{API_PATH}?limit={MAX_PAGE_SIZE}&offset={len(rows)}",
                               headers={"Host": "localhost"})
            response = connection.getresponse()
            body = response.read()
            if response.status != 200:
                return None, f"your daemon at {socket_path} answered HTTP {response.status}"
            document = orjson.loads(body)
            theirs = document.get("copilot_home")
            if theirs is None or os.path.realpath(theirs) != os.path.realpath(copilot_home):
                return None, f"your daemon follows {theirs}, not {copilot_home}"
            rows.extend(document["sessions"])
            if not document["sessions"] or len(rows) >= document["total"]:
                return [SessionStatus.from_json(row) for row in rows], None
    except (OSError, http.client.HTTPException, ValueError, KeyError, TypeError) as exc:
        return None, f"your daemon at {socket_path} did not answer ({exc})"
    finally:
        connection.close()


def _stranger_on(address: tuple[str, int], absent: NotOurs) -> str | None:
    """Why the daemon's port is no source: who holds it, when something does and no socket of ours is there."""
    host, port = address
    holder = listener_uid(port)
    if holder is None:
        return None
    if holder != os.getuid():
        return f"{host}:{port} is served by {describe_uid(holder)}, not by your daemon ({absent})"
    return f"something of yours listens on {host}:{port}, but {absent} (a daemon with another --state-dir?)"


def _socket_connection(sock, timeout: float):
    """HTTP/1.1 over an already connected (and checked) Unix socket."""
    import http.client

    class _SocketConnection(http.client.HTTPConnection):
        _connected: socket.socket | None = None

        def connect(self) -> None:
            self.sock, self._connected = self._connected, None
            if self.sock is None:
                raise ConnectionError("the daemon closed the connection")

    connection = _SocketConnection("localhost", timeout=timeout)
    connection._connected = sock
    return connection


def from_files(root: Path, *, policy: StuckPolicy, cache_file: Path | None, since: float = 0.0,
               max_line_bytes: int | None = None) -> Listing:
    """Every session log under ``root`` summarized (cached) and named by the daemon's rules."""
    catalog = Catalog(root, cache_file=cache_file,
                      **({"max_line_bytes": max_line_bytes} if max_line_bytes else {}))
    now = time.time()
    statuses, unreadable = [], []
    for item in catalog.scan(since_ns=int(since * 1e9)):
        if item.summary is None:
            unreadable.append((str(item.path), item.error or "unreadable"))
            continue
        statuses.append(status_of(item.summary, item.path, policy=policy, now=now))
    return Listing(statuses, f"the files under {root}", unreadable)


def select(statuses: Iterable[SessionStatus], *, states: Iterable[str] = (), repository: str | None = None,
           since: float = 0.0) -> list[SessionStatus]:
    """The statuses that pass the filters, the most recently active first (by last event, as `inspect latest`)."""
    wanted = set(states)
    if LIVE in wanted:
        wanted.discard(LIVE)
        wanted.update(s for s in (WORKING, WAITING_TOOL, WAITING_USER, "idle", STUCK, ABANDONED))
    out = []
    for status in statuses:
        summary = status.summary
        if wanted and status.state not in wanted:
            continue
        if repository and not place_matches(summary, repository):
            continue
        if since and summary.last_event_ns < since * 1e9:
            continue
        out.append(status)
    return sorted(out, key=lambda s: (s.summary.last_event_ns, s.summary.started_ns), reverse=True)


def place_matches(summary, pattern: str) -> bool:
    """Is a session (a SessionSummary) where ``pattern`` says? A repository: 'owner/name', just 'name', or a
    glob ('acme/*'), case aside. A session in no repository: its working folder, a path (an absolute one also
    selects what lies under it), its last part, or a glob. 'none': the sessions in no repository."""
    if pattern.strip().lower() == NO_REPOSITORY:
        return not summary.repository
    if summary.repository:
        return _name_matches(summary.repository.lower(), pattern.lower(), "/")
    cwd = summary.cwd or ""
    if not cwd:
        return False
    folder = pattern.rstrip("/") if len(pattern) > 1 else pattern
    if os.path.isabs(folder) and not _glob(folder) and (cwd == folder or cwd.startswith(folder.rstrip("/") + "/")):
        return True
    return _name_matches(cwd.rstrip("/") or cwd, folder, "/")


def _glob(pattern: str) -> bool:
    return any(c in pattern for c in "*?[")


def _name_matches(actual: str, pattern: str, sep: str) -> bool:
    """The whole of ``actual``, or its last part, is ``pattern`` (or matches it, a glob)."""
    if _glob(pattern):
        return fnmatch.fnmatchcase(actual, pattern) or fnmatch.fnmatchcase(actual.rsplit(sep, 1)[-1], pattern)
    return actual == pattern or actual.rsplit(sep, 1)[-1] == pattern


def render(statuses: list[SessionStatus], console: Console, *, now: float | None = None) -> None:
    """One line per session when every column and NAME_CHARS of the names fit (else two: the facts that do not
    fit go on a dim second line), each cut to the terminal's width, never wrapped. Piped, the same lines without
    colour."""
    from rich.text import Text

    now = time.time() if now is None else now
    head = (f"{'SESSION':<8}  {'STATE':<12}  {'LAST':<8} {'TURNS':>5} {'TOKENS':>7} {'PREMIUM':>7} {'CREDITS':>8}  "
            f"{'LAST END':<13}")
    places = max((len(where(status.summary) or "-") for status in statuses), default=1)
    places = max(len("REPOSITORY / FOLDER"), min(places, PLACE_CHARS))
    names = min(NAME_CHARS, max((len(status.summary.name or "-") for status in statuses), default=1))
    wide = console.width >= len(head) + 2 + 12 + 2 + 18 + 2 + places + 2 + max(names, len("NAME"))
    if wide:
        head += f"  {'STARTED':<12}  {'MODEL':<18}  {'REPOSITORY / FOLDER':<{places}}  NAME"
    lines: list[tuple[str, str]] = [(head, "bold")]
    legend = False
    for status in statuses:
        s = status.summary
        premium = f"{s.premium_requests:g}" if s.premium_requests else "-"
        credits = credits_text(s.nano_aiu, s.credits_status) if s.nano_aiu or s.credits_status else "-"
        legend = legend or credits_noted(credits)
        line = (f"{s.session_id[:8]:<8}  {status.state:<12}  {ago(s.last_event_ns, now):<8} {s.turns:>5} "
                f"{count(s.tokens):>7} {premium:>7} {credits:>8}  {s.last_end or '-':<13}")
        started = clock_time(s.started_ns, now)
        if wide:
            asks = f"  (asks {s.asking})" if s.asking and status.state == WAITING_USER else ""
            lines.append((f"{line}  {started:<12}  {(s.model or '-')[:18]:<18}  {where(s) or '-':<{places}}  "
                          f"{s.name or '-'}{asks}", _STYLES.get(status.state, "")))
            continue
        lines.append((line, _STYLES.get(status.state, "")))
        facts = [x for x in (f"started {started}", s.model, where(s), s.name and f"“{s.name}”") if x]
        if status.waiting_on and status.state in (WAITING_TOOL, STUCK, ABANDONED):
            facts.insert(0, f"on {status.waiting_on}")
        elif s.asking and status.state == WAITING_USER:
            facts.insert(0, f"asks {s.asking}")
        lines.append(("          " + " · ".join(facts), "dim"))
    if legend:
        lines.append((CREDITS_LEGEND, "dim"))
    lines = [(safe(line).rstrip(), style) for line, style in lines]  # text from the logs: escaped
    if console.is_terminal:
        text = Text("\n").join(Text(line, style=style) for line, style in lines)
        console.print(text, no_wrap=True, overflow="ellipsis", crop=True)
        return
    width = console.width  # piped: COLUMNS, else 80; rich would spend a second on thousands of lines
    console.file.write("".join((line if len(line) <= width else line[:width - 1] + "…") + "\n"
                               for line, _style in lines))
