"""The web view's routes: the sessions page, a session's waterfall, their JSON and their live streams.

It adds read-only GET routes to the daemon's own HTTP server (``server.MetricsServer``): the
pages are static files (``webstatic/``, no build step) whose scripts read the JSON API and
follow Server-Sent Events. The data comes from a ``Source`` (``overview``) and, for the
waterfall, from a :class:`~copilot_otel.waterfall.TraceCache`. Values from session logs reach
the page only as JSON, which the scripts put into the page as text, never as markup.
"""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path

import orjson
from aiohttp import web

from .overview import STATE_ORDER, Source, page, row_json
from .server import SERVER
from .waterfall import TraceCache

log = logging.getLogger(__name__)

STATIC = Path(__file__).with_name("webstatic")
ASSETS = {"view.css": "text/css; charset=utf-8", "common.js": "text/javascript; charset=utf-8",
          "sessions.js": "text/javascript; charset=utf-8", "session.js": "text/javascript; charset=utf-8",
          "favicon.svg": "image/svg+xml"}
PAGES = ("sessions.html", "session.html")
SESSION_ID = r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}"
POLL = 0.1  # seconds between a stream's checks for a change
MIN_PUSH = 0.25  # seconds between two pushes on one stream
HEARTBEAT = 15.0  # seconds of silence after which a stream sends a comment (proxies, dead clients)
WRITE_TIMEOUT = 10.0  # seconds a stream waits for a client that does not read
MAX_STREAMS = 64  # open streams at once; more are refused (503), the page then retries
JSON = "application/json"
NO_STORE = {"Cache-Control": "no-store"}


class WebView:
    """The view's routes over ``source``; ``trace_url`` links a trace id to Jaeger or Tempo.

    Who may see them (the token, the Host check) is the server's business: ``access.Gate``.
    """

    def __init__(self, source: Source, *, trace_url: str | None = None, cache: TraceCache | None = None) -> None:
        self.source = source
        self.trace_url = trace_url
        self.cache = cache or TraceCache(source.options, max_line_bytes=source.max_line_bytes)
        self._files = {name: (STATIC / name).read_bytes() for name in (*ASSETS, *PAGES)}
        self._streams = 0
        self._scanning = False
        self._scanned = False  # the first scan is waited for; later ones run beside the requests
        self._background: asyncio.Task | None = None  # held: the loop keeps only a weak reference to a task

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
        await self._row(request)  # 404 for a session nobody knows
        return self._html("session.html")

    async def _asset(self, request: web.Request) -> web.Response:
        name = request.path.rsplit("/", 1)[-1]
        return web.Response(body=self._files[name], headers={"Content-Type": ASSETS[name], "Cache-Control": "no-cache"})

    def _html(self, name: str) -> web.Response:
        return web.Response(body=self._files[name], headers={"Content-Type": "text/html; charset=utf-8", **NO_STORE})

    # ------------------------------------------------------------ the sessions

    async def _sessions_json(self, request: web.Request) -> web.Response:
        query = _sessions_query(request)
        await self._rescan(request)
        body = await request.app[SERVER].run_blocking(self._render_sessions, query)
        return web.Response(body=body, headers={"Content-Type": JSON, **NO_STORE})

    def _render_sessions(self, query: dict) -> bytes:
        body = page(self.source.board(), **query)
        home = getattr(self.source, "copilot_home", None)
        if home is not None:  # `copilot-otel sessions` asks a daemon only about the COPILOT_HOME it reads
            body["copilot_home"] = str(home)
        return orjson.dumps(body)

    async def _sessions_stream(self, request: web.Request) -> web.StreamResponse:
        query = _sessions_query(request)
        return await self._stream(request, lambda _last_id: self._render_sessions(query))

    # ------------------------------------------------------------ one session

    async def _row(self, request: web.Request):
        await self._rescan(request)
        board = await request.app[SERVER].run_blocking(self.source.board)
        row = board.by_id.get(request.match_info["session_id"])
        if row is None:
            raise web.HTTPNotFound(text="no such session\n")
        return row

    async def _session_json(self, request: web.Request) -> web.Response:
        row = await self._row(request)
        since = _int(request.query.get("since", "0"), "since")
        body, _position = await request.app[SERVER].run_blocking(self._render_session, row.path,
                                                                 row.summary.session_id, since,
                                                                 request.query.get("token"))
        return web.Response(body=body, headers={"Content-Type": JSON, **NO_STORE})

    def _render_session(self, path: Path, session_id: str, since: int, token: str | None) -> tuple[bytes, tuple]:
        """The session's row and its spans from ``since``; and (token, next index) to continue from."""
        row = self.source.board().by_id.get(session_id)
        trace = self.cache.trace(path, session_id)
        spans, position = trace.snapshot(since, token)
        head = {"session": row_json(row) if row is not None else None, "trace_url": self.trace_url,
                "capture": self.source.options.capture_content, "now_ms": int(time.time() * 1000)}
        return orjson.dumps(head)[:-1] + b',"trace":' + spans + b"}", position

    async def _session_stream(self, request: web.Request) -> web.StreamResponse:
        row = await self._row(request)
        position = {"since": _int(request.query.get("since", "0"), "since"), "token": request.query.get("token")}
        last_id = request.headers.get("Last-Event-ID", "")
        if ":" in last_id:  # a reconnecting EventSource says where it stopped
            token, _sep, since = last_id.partition(":")
            position = {"since": _int(since, "Last-Event-ID"), "token": token}

        def render(_last) -> tuple[bytes, str]:
            body, (token, since) = self._render_session(row.path, row.summary.session_id, position["since"],
                                                        position["token"])
            position["since"], position["token"] = since, token
            return body, f"{token}:{since}"

        return await self._stream(request, render)

    # ------------------------------------------------------------ streams

    async def _stream(self, request: web.Request, render) -> web.StreamResponse:
        """Push ``render()`` whenever the source changed (at most every MIN_PUSH s) until the client goes."""
        if self._streams >= MAX_STREAMS:
            raise web.HTTPServiceUnavailable(text="too many live views open\n", headers={"Retry-After": "5"})
        server = request.app[SERVER]
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "X-Accel-Buffering": "no",
                                               **NO_STORE})
        self._streams += 1
        try:
            await response.prepare(request)
            await self._write(request, response, b"retry: 1000\n\n")
            last_key, last_body, last_push, last_write = None, None, 0.0, time.monotonic()
            while True:
                await self._rescan(request)
                key = self.source.change_key()
                now = time.monotonic()
                if key != last_key and now - last_push >= MIN_PUSH:
                    last_key, last_push = key, now
                    rendered = await server.run_blocking(render, last_body)
                    body, event_id = rendered if isinstance(rendered, tuple) else (rendered, None)
                    if body != last_body:
                        last_body, last_write = body, now
                        head = f"id: {event_id}\n".encode() if event_id else b""
                        await self._write(request, response, head + b"data: " + body + b"\n\n")
                elif now - last_write >= HEARTBEAT:
                    last_write = now
                    await self._write(request, response, b": keepalive\n\n")
                await asyncio.sleep(POLL)
        except (ConnectionError, _Gone):
            pass
        finally:
            self._streams -= 1
        return response

    async def _write(self, request: web.Request, response: web.StreamResponse, data: bytes) -> None:
        try:
            async with asyncio.timeout(WRITE_TIMEOUT):
                await response.write(data)
        except TimeoutError:
            if request.transport is not None:
                request.transport.abort()  # a client that does not read holds nothing of ours
            raise _Gone from None

    async def _rescan(self, request: web.Request) -> None:
        """Let a source that scans files (``view PATH``, or the logs a daemon resumed mid-file) look again
        when it is due, one scan at a time. The first scan is waited for: nothing was summed up before it.
        Later ones run in the background (a scan of 10,000 logs takes a few hundred milliseconds), and the
        board moves, for the next request and every stream, when one ends."""
        if self._scanning or not self.source.stale():
            return
        self._scanning = True
        if self._scanned:
            self._background = asyncio.get_running_loop().create_task(self._scan(request.app[SERVER]))
        else:
            await self._scan(request.app[SERVER])

    async def _scan(self, server) -> None:
        try:
            await server.run_blocking(self.source.scan)
            self.cache.sweep()
            self._scanned = True
        except Exception:  # a bug in a background scan must not go unsaid, nor stop the next one
            if not self._scanned:
                raise
            log.exception("cannot scan the session logs")
        finally:
            self._scanning = False


class _Gone(Exception):
    """The client stopped reading."""


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

    from .config import ConfigError
    from .endpoint import Endpoint
    from .overview import HistorySessions
    from .sources import SourceError, resolve

    targets = paths or [config.copilot_home]

    def files() -> list[Path]:
        try:
            return resolve(targets)
        except SourceError:  # gone since the start: no sessions there now
            return []

    try:
        resolve(targets)  # a bad path is said now, not on the first page
        source = HistorySessions(files, config.model, policy=config.stuck_policy,
                                 max_line_bytes=config.max_line_bytes)
        source.scan()
        view = WebView(source, trace_url=config.trace_url)
        endpoint = Endpoint(config, CollectorRegistry(), view.routes())
    except (ConfigError, SourceError) as exc:
        log.error("%s", exc)
        return 2
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    endpoint.start()
    log.info("%d sessions from %s on %s", len(source.board().rows), ", ".join(map(str, targets)),
             endpoint.shown_url())
    try:
        while not stop.wait(1.0):
            pass
    finally:
        endpoint.stop()
    return 0
