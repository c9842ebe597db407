"""The web view's routes: the sessions page, a session's waterfall, their JSON and their live streams.

It adds read-only GET routes to the daemon's own HTTP server (``server.MetricsServer``): the
pages are static files (``static/``, no build step) whose scripts read the JSON API and
follow Server-Sent Events. The data comes from a ``Source`` (``overview``) and, for the
waterfall, from a :class:`~copilot_otel.web.waterfall.TraceCache`. Values from session logs reach
the page only as JSON, which the scripts put into the page as text, never as markup.

What one client costs is bounded: an answer holds at most ``PAGE_SPANS`` spans and is made piece
by piece as the client reads it (``webio``); a live view of a session is sent only what changed in
that session, when it changed; the sessions page's data is made once per change for every view
that shows the same page.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from itertools import islice
from pathlib import Path
from typing import Any

import orjson
from aiohttp import web

from ..base.redact import redact
from ..catalog.board import STATE_ORDER, Board, page, row_json
from ..metrics.budgets import progress
from .overview import Source
from .server import SERVER
from .streams import CHUNK, Changes, EventStream, Pieces, Releaser, serve_stream
from .waterfall import PAGE_SPANS, Page, TraceCache

log = logging.getLogger(__name__)

STATIC = Path(__file__).with_name("static")
ASSETS = {"view.css": "text/css; charset=utf-8", "common.js": "text/javascript; charset=utf-8",
          "sessions.js": "text/javascript; charset=utf-8", "session.js": "text/javascript; charset=utf-8",
          "favicon.svg": "image/svg+xml"}
PAGES = ("sessions.html", "session.html")
SESSION_ID = r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}"
MAX_STREAMS = 64  # open streams at once; more are refused (503), the page then retries
PAGE_CACHE = 16  # sessions pages (state, repository, offset, limit) kept rendered for the board now
JSON = "application/json"
NO_STORE = {"Cache-Control": "no-store"}


class WebView:
    """The view's routes over ``source``; ``trace_url`` links a trace id to Jaeger or Tempo.

    Who may see them (the token, the Host check) is the server's business: ``access.Gate``.
    """

    def __init__(self, source: Source, *, trace_url: str | None = None, cache: TraceCache | None = None,
                 budgets: tuple = (), resource: Mapping[str, Any] | None = None) -> None:
        self.source = source
        self.budgets, self.resource = budgets, resource or {}  # --budgets-file: each one's progress
        self.trace_url = trace_url
        self.cache = cache or TraceCache(source.options, max_line_bytes=source.max_line_bytes)
        self._files = {name: (STATIC / name).read_bytes() for name in (*ASSETS, *PAGES)}
        self._streams = 0
        self._scanning = False
        self._scanned = False  # the first scan is waited for; later ones run beside the requests
        self._background: asyncio.Task | None = None  # held: the loop keeps only a weak reference to a task
        self._changes: Changes | None = None
        self._releaser: Releaser | None = None
        # Sessions pages of a board, for one second: the stuck and silent durations in them move with time.
        self._rendered: tuple[Board | None, int, dict[tuple, bytes]] = (None, 0, {})

    def routes(self) -> list[web.RouteDef]:
        """The aiohttp routes to pass to ``MetricsServer(routes=...)``."""
        return [
            web.get("/", self._sessions_page),
            web.get(f"/session/{{session_id:{SESSION_ID}}}", self._session_page),
            web.get("/api/sessions", self._sessions_json),
            web.get("/api/sessions/stream", self._sessions_stream),
            web.get(f"/api/session/{{session_id:{SESSION_ID}}}", self._session_json),
            web.get(f"/api/session/{{session_id:{SESSION_ID}}}/stream", self._session_stream),
            *(web.get(f"/static/{name}", self._asset) for name in ASSETS),
        ]

    # ------------------------------------------------------------ pages and assets

    async def _sessions_page(self, request: web.Request) -> web.Response:
        return self._html("sessions.html")

    async def _session_page(self, request: web.Request) -> web.Response:
        """The session's page: the same shell for any id (its script asks the API, with the token, what is there)."""
        return self._html("session.html")

    async def _asset(self, request: web.Request) -> web.Response:
        name = request.path.rsplit("/", 1)[-1]
        return web.Response(body=self._files[name], headers={"Content-Type": ASSETS[name], "Cache-Control": "no-cache"})

    def _html(self, name: str) -> web.Response:
        return web.Response(body=self._files[name], headers={"Content-Type": "text/html; charset=utf-8", **NO_STORE})

    # ------------------------------------------------------------ the sessions

    async def _sessions_json(self, request: web.Request) -> web.Response:
        query = _sessions_query(request)
        await self._rescan(request.app[SERVER])
        board = await request.app[SERVER].run_blocking(self.source.board)
        body = await self._sessions_body(request, board, query)
        return web.Response(body=_with_now(body), headers={"Content-Type": JSON, **NO_STORE})

    async def _sessions_body(self, request: web.Request, board: Board, query: dict) -> bytes:
        """The page of ``board`` that ``query`` asks for, without its time (made once per board and second)."""
        problem = getattr(self.source, "problem", lambda: None)()
        key = (*sorted(query.items()), problem)  # the same board says a problem that came (or went) since
        second = int(time.monotonic())
        held, held_second, bodies = self._rendered
        if held is not board or held_second != second:
            bodies = {}
            self._rendered = (board, second, bodies)
        body = bodies.get(key)
        if body is None:
            body = await request.app[SERVER].run_blocking(self._render_sessions, board, query, problem)
            if self._rendered[0] is board and self._rendered[1] == second and len(bodies) < PAGE_CACHE:
                bodies[key] = body
        return body

    def _render_sessions(self, board: Board, query: dict, problem: str | None = None) -> bytes:
        body = page(board, **query)
        del body["now_ms"]  # added as it is sent
        home = getattr(self.source, "copilot_home", None)
        if home is not None:  # `copilot-otel sessions` asks a daemon only about the COPILOT_HOME it reads
            body["copilot_home"] = str(home)
        if self.budgets:
            body["budgets"] = progress(self.budgets, self.resource, (r.summary for r in board.rows), time.time())
        if problem:  # the page says it (not "live", not "no session matches"), as /healthz does
            body["problem"] = redact(problem)
        return orjson.dumps(body)

    async def _sessions_stream(self, request: web.Request) -> web.StreamResponse:
        query = _sessions_query(request)

        last: list[bytes | None] = [None]

        async def push(stream: EventStream, board: Board) -> bool:
            body = await self._sessions_body(request, board, query)
            if body != last[0]:  # the page shows nothing new: nothing is sent
                last[0] = body
                await stream.send([_with_now(body)])
            return False

        return await self._stream(request, push)

    # ------------------------------------------------------------ one session

    async def _row(self, request: web.Request):
        await self._rescan(request.app[SERVER])
        board = await request.app[SERVER].run_blocking(self.source.board)
        wanted = request.match_info["session_id"]
        row = board.by_id.get(wanted)
        if row is None:  # a unique start of an id names that session, as on the page and in `inspect`
            matches = list(islice((session_id for session_id in board.by_id if session_id.startswith(wanted)), 2))
            if len(matches) == 1:
                return board.by_id[matches[0]]
            why = (f"several sessions start with {wanted}" if matches
                   else f"no session {wanted} (nor one starting with it)")
            raise web.HTTPNotFound(body=orjson.dumps({"error": why, "matches": matches}),
                                   headers={"Content-Type": JSON, **NO_STORE})
        return row

    async def _session_json(self, request: web.Request) -> web.StreamResponse:
        """At most ``limit`` (and PAGE_SPANS) finished spans from ``since``; the answer's ``trace.next`` and
        ``token`` say where to go on from, ``trace.more`` whether there is more."""
        row = await self._row(request)
        since = _int(request.query.get("since", "0"), "since")
        limit = min(_int(request.query.get("limit", str(PAGE_SPANS)), "limit"), PAGE_SPANS) or PAGE_SPANS
        trace, size = await request.app[SERVER].run_blocking(self._sized_page, row.path, row.summary.session_id,
                                                             since, request.query.get("token"), limit)
        head = self._session_head(row)
        size += len(head) + 1
        body = Pieces(_chain(head, trace.pieces(CHUNK), b"}"), size, JSON, self._busy(request))
        return web.Response(body=body, headers=NO_STORE)

    def _busy(self, request: web.Request) -> Releaser:
        """What is told when answers begin and end (so that memory goes back once they all ended)."""
        if self._releaser is None:
            self._releaser = Releaser(request.app[SERVER].run_blocking)
        return self._releaser

    def _sized_page(self, path: Path, session_id: str, since: int, token: str | None, limit: int) -> tuple[Page, int]:
        page = self.cache.trace(path, session_id, since=since, token=token).page(since, token, limit)
        return page, page.size()

    def _pages(self, path: Path, session_id: str, since: int, token: str | None) -> list[Page]:
        """Every finished span from ``since`` (shared with the trace), in pages of PAGE_SPANS (or PAGE_BYTES)."""
        return self.cache.trace(path, session_id, since=since, token=token).page(since, token, None, None).split()

    def _session_head(self, row) -> bytes:
        """The answer's JSON up to its trace: the session's row, and what the page needs to know."""
        head = {"session": row_json(row) if row is not None else None, "trace_url": self.trace_url,
                "capture": self.source.options.capture_content, "now_ms": int(time.time() * 1000)}
        return orjson.dumps(head)[:-1] + b',"trace":'

    async def _session_stream(self, request: web.Request) -> web.StreamResponse:
        """The session's spans, then, each time its row moves, what is new since: the spans that ended, the
        open ones, the row. A reconnecting client says where it stopped (Last-Event-ID, or since and token)."""
        row = await self._row(request)
        path, session_id = row.path, row.summary.session_id
        position = (request.query.get("token"), _int(request.query.get("since", "0"), "since"))
        last_id = request.headers.get("Last-Event-ID", "")
        if ":" in last_id:  # a reconnecting EventSource says where it stopped
            token, _sep, since = last_id.partition(":")
            position = (token, _int(since, "Last-Event-ID"))
        server = request.app[SERVER]
        shown = object()  # the row last sent (a board reuses a row that did not change)
        pending: list[Page] = []  # what is read but not sent yet, a page at a time

        async def push(stream: EventStream, board: Board) -> bool:
            nonlocal position, shown
            now = board.by_id.get(session_id)
            if not pending:
                if now is shown:
                    return False  # nothing moved in this session
                token, since = position
                pending.extend(await server.run_blocking(self._pages, path, session_id, since, token))
            shown = now
            sent = pending.pop(0)
            position = sent.position
            await stream.send(_chain(self._session_head(now), sent.pieces(CHUNK), b"}"), "{}:{:d}".format(*position))
            return bool(pending)

        self.cache.follow(path)
        try:
            return await self._stream(request, push)
        finally:
            self.cache.unfollow(path)

    # ------------------------------------------------------------ streams

    async def _stream(self, request: web.Request, push) -> web.StreamResponse:
        """A live view (``webio.serve_stream``), unless MAX_STREAMS are open."""
        if self._streams >= MAX_STREAMS:
            raise web.HTTPServiceUnavailable(text="too many live views open\n", headers={"Retry-After": "5"})
        server = request.app[SERVER]
        if self._changes is None:
            self._changes = Changes(self.source, lambda: self._rescan(server), server.run_blocking)
        self._streams += 1
        busy = self._busy(request)
        busy.begin()
        try:
            return await serve_stream(request, self._changes, push)
        finally:
            self._streams -= 1
            busy.end()

    async def _rescan(self, server) -> None:
        """Let a source that scans files (``view PATH``, or the logs a daemon resumed mid-file) look again
        when it is due, one scan at a time. The first scan is waited for: nothing was summed up before it.
        Later ones run in the background (a scan of 10,000 logs takes a few hundred milliseconds), and the
        board moves, for the next request and every stream, when one ends."""
        if self._scanning or not self.source.stale():
            return
        self._scanning = True
        if self._scanned:
            self._background = asyncio.get_running_loop().create_task(self._scan(server))
        else:
            await self._scan(server)

    async def _scan(self, server) -> None:
        try:
            await server.run_blocking(self.source.scan)
            await server.run_blocking(self.cache.sweep)
            self._scanned = True
        except Exception:  # a bug in a background scan must not go unsaid, nor stop the next one
            if not self._scanned:
                raise
            log.exception("cannot scan the session logs")
        finally:
            self._scanning = False


def _chain(head: bytes, middle, tail: bytes):
    yield head
    yield from middle
    yield tail


def _with_now(body: bytes) -> bytes:
    """A JSON object with the server's time in milliseconds added first (the page's clock skew)."""
    return b'{"now_ms":%d,' % int(time.time() * 1000) + body[1:]


def _sessions_query(request: web.Request) -> dict:
    q = request.query
    state = q.get("state") or None
    if state is not None and state not in STATE_ORDER:
        raise web.HTTPBadRequest(text=f"state must be one of {', '.join(STATE_ORDER)}\n")
    return {"state": state, "repository": q.get("repository") or None, "offset": _int(q.get("offset", "0"), "offset"),
            "limit": _int(q.get("limit", "100"), "limit")}


def _int(text: str, name: str) -> int:
    if not text.isdigit() or len(text) > 9:
        raise web.HTTPBadRequest(text=f"{name} must be a whole number\n")
    return int(text)


def run_view(config, paths: list[Path]) -> int:
    """`copilot-otel view PATH...`: serve the pages over replayed logs until SIGINT/SIGTERM; exit code."""
    import signal
    import threading

    from prometheus_client import CollectorRegistry

    from ..config import ConfigError
    from ..source.sources import SourceError, resolve
    from .endpoint import Endpoint
    from .overview import HistorySessions

    targets = paths or [config.copilot_home]

    def files() -> list[Path]:
        try:
            return resolve(targets)
        except SourceError:  # gone since the start: no sessions there now
            return []

    try:
        resolve(targets)  # a bad path is said now, not on the first page
        source = HistorySessions(files, config.model, policy=config.stuck_policy,
                                 max_line_bytes=config.max_line_bytes, hide_names=config.hide_names)
        source.scan()
        view = WebView(source, trace_url=config.trace_url)
        endpoint = Endpoint(config, CollectorRegistry(), view.routes(), address_flag="--address")
    except (ConfigError, SourceError) as exc:
        log.error("%s", exc)
        return 2
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    endpoint.start()
    log.info("%d sessions from %s on %s", len(source.board().rows), ", ".join(map(str, targets)),
             endpoint.shown_url())
    endpoint.say_url()
    try:
        while not stop.wait(1.0):
            pass
    finally:
        endpoint.stop()
    return 0
