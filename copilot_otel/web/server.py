"""The HTTP endpoint: /metrics (Prometheus text or OpenMetrics, gzip) and /healthz, behind ``access.Gate``.

One asyncio loop (aiohttp) in one daemon thread serves every connection, so idle or hostile
clients cost a file descriptor and a few kilobytes each, never a thread; the limits that keep
them bounded are in ``http_guard``. The registry is rendered in worker threads of its own, so a
slow scrape never holds up /healthz, and the added routes' work (the web view) runs in others, so
it never queues ahead of a scrape. A render reuses the lines of the samples that did not change
since the last one (exposition.py).
"""

from __future__ import annotations

import asyncio
import errno
import gzip
import ipaddress
import logging
import os
import socket
import threading
from collections.abc import Callable, Iterable
from pathlib import Path

from aiohttp import web
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder, gzip_accepted

from ..base.pause import PAUSE
from ..base.peers import bind_socket, peer_uid, port_holder, remove_socket
from ..base.redact import redact
from ..config import ConfigError
from .access import Gate
from .exposition import CachedExposition
from .guard import Connections, LoopErrors, QuietLog, Workers, http_errors, raise_open_files_limit
from .webconfig import WebConfig

log = logging.getLogger(__name__)

MAX_CONNECTIONS = 1024
HEADER_TIMEOUT = 10.0  # s from the first byte of a request head to its end
IDLE_TIMEOUT = 30.0  # s a connection may wait for its next request (its head included)
WRITE_TIMEOUT = 30.0  # s to send a response to a client that reads slowly
MAX_HEAD_BYTES = 32 * 1024
# TLS handshakes pending at once at most (each must end within HEADER_TIMEOUT); the oldest closed beyond
HANDSHAKES = 512
BACKLOG = 64  # accepted per loop iteration at most; fewer under a low open-files limit
LISTEN_QUEUE = 1024  # connections the kernel holds for us (they cost no descriptor until accepted)
RENDER_THREADS = 2
ROUTE_THREADS = 2  # for the added routes' blocking work (run_blocking), apart from the renders
MAX_PENDING_RENDERS = 8  # distinct formats rendering or queued; more is a flood: 503
CACHED_FORMATS = 2  # formats whose lines are kept between renders (about 6x the body in memory); others afresh
STOP_GRACE = 0.5  # s for requests in progress to finish at stop() (aiohttp waits twice this at most)


class MetricsServer:
    """Serves a registry on HOST:PORT from one event-loop thread; ``health()`` says if we are well.

    ``routes`` adds aiohttp route definitions next to /metrics and /healthz, for instance
    ``[web.get("/", index)]`` or a ``web.RouteTableDef``. Their handlers run on the server's
    loop and must not block it: ``await request.app[SERVER].run_blocking(fn, *args)`` runs slow
    work in worker threads of their own (not those that render /metrics). A handler that prepares its response
    itself (a stream such as Server-Sent Events) is not held to the write deadline; at ``stop()`` it is cancelled
    within ``2 * STOP_GRACE``. Every response carries ``X-Content-Type-Options: nosniff`` and a
    ``Content-Security-Policy`` that lets a page load only this server's scripts and styles.

    Every request passes ``access.Gate``: Host must name this machine (or one of ``allowed_hosts``)
    on every route; with a ``token``, the JSON and streams (/api/) ask for it;
    ``web_config`` adds TLS and basic auth. ``unix_socket``: also serve on a Unix socket there,
    to this uid only (the kernel's word, SO_PEERCRED), for the commands.
    """

    def __init__(self, address: tuple[str, int], registry: CollectorRegistry,
                 health: Callable[[], tuple[bool, str]] | None = None, *,
                 routes: Iterable[web.AbstractRouteDef] = (), max_connections: int = MAX_CONNECTIONS,
                 header_timeout: float = HEADER_TIMEOUT, idle_timeout: float = IDLE_TIMEOUT,
                 write_timeout: float = WRITE_TIMEOUT, max_head_bytes: int = MAX_HEAD_BYTES,
                 token: str | None = None, allowed_hosts: tuple[str, ...] = (), web_config: WebConfig | None = None,
                 unix_socket: Path | None = None, address_flag: str = "--metrics-address") -> None:
        host, port = address
        self._registry = registry
        self._health = health or _healthy
        self._routes = list(routes)
        self._max_connections = max_connections
        self._header_timeout, self._max_head_bytes, self._write_timeout = header_timeout, max_head_bytes, write_timeout
        self._idle_timeout = idle_timeout
        self._errors = http_errors(registry)
        self._web_config = web_config or WebConfig()
        self._sock = _bind(host, port, address_flag)
        self.address: tuple[str, int] = self._sock.getsockname()[:2]
        self.unix_socket = unix_socket
        self._unix: socket.socket | None = None
        self._unix_inode = 0
        try:
            if unix_socket is not None:
                self._unix, self._unix_inode = bind_socket(unix_socket)
        except OSError as exc:
            self._sock.close()
            raise ConfigError(f"cannot serve the commands' socket {unix_socket}: {exc.strerror or exc}") from None
        self._gate = Gate(token=token, allowed_hosts=allowed_hosts, web_config=self._web_config,
                          run_blocking=self._check_login, count=self._count)
        if not _is_loopback(host):
            log.warning("metrics endpoint listens on %s:%d, beyond this machine", host, self.address[1])
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._stopping: asyncio.Event | None = None
        self._workers: Workers | None = None
        self._login_workers: Workers | None = None
        self._route_workers: Workers | None = None
        self._renders: dict[tuple[str, bool], asyncio.Future] = {}
        self._expositions: dict[str, CachedExposition] = {}  # content type -> its renders' kept lines
        self._failure: BaseException | None = None

    def start(self) -> None:
        """Start serving (raising the open-files limit so the connection cap can be reached)."""
        nofile = raise_open_files_limit()
        limit, backlog, handshakes = connection_budget(nofile, self._max_connections)
        if limit < self._max_connections:
            log.info("metrics server: at most %d connections (open-files limit %d)", limit, nofile)
        self._handshakes = handshakes
        self._loop = asyncio.new_event_loop()
        self._loop.set_exception_handler(LoopErrors(self._count))
        self._workers = Workers(self._loop, RENDER_THREADS, "copilot-otel-render")
        if self._web_config.users:  # bcrypt on a thread of its own: a flood of bad logins never delays a render
            self._login_workers = Workers(self._loop, 1, "copilot-otel-login")
        if self._routes:
            self._route_workers = Workers(self._loop, ROUTE_THREADS, "copilot-otel-web")
        ready = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(limit, backlog, ready), name="copilot-otel-http",
                                        daemon=True)
        self._thread.start()
        ready.wait()
        if self._failure is not None:
            self.stop()
            raise RuntimeError(f"metrics server did not start: {self._failure}") from self._failure

    def stop(self) -> None:
        """Stop serving: close every connection and the socket, end the loop and its threads."""
        thread, self._thread = self._thread, None
        if thread is None:
            self._close_sockets()
            return
        stopping, loop = self._stopping, self._loop
        if stopping is not None and loop is not None:
            try:
                loop.call_soon_threadsafe(stopping.set)
            except RuntimeError:  # the loop already ended
                pass
        thread.join(timeout=10)
        if thread.is_alive():
            log.warning("metrics server: its loop did not end within 10 s")
        if self._workers is not None:
            self._workers.close(timeout=5)
        if self._route_workers is not None:
            self._route_workers.close(timeout=5)
        if self._login_workers is not None:
            self._login_workers.close(timeout=5)
        self._close_sockets()

    def _close_sockets(self) -> None:
        self._sock.close()
        if self._unix is not None:
            assert self.unix_socket is not None  # bound there
            remove_socket(self.unix_socket, self._unix_inode)
            self._unix.close()

    async def run_blocking(self, fn: Callable, *args):
        """Run ``fn(*args)`` in the added routes' worker threads and return its result."""
        workers = self._route_workers or self._workers
        assert workers is not None  # start() made them
        return await workers.submit(fn, *args)

    async def _check_login(self, fn: Callable, *args):
        assert self._login_workers is not None  # the gate checks a login only when web_config has users
        return await self._login_workers.submit(fn, *args)

    # ---------------------------------------------------------------- the loop thread

    def _run(self, limit: int, backlog: int, ready: threading.Event) -> None:
        loop = self._loop
        assert loop is not None  # start() made it
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(self._serve(limit, backlog, ready, loop))
        except BaseException as exc:  # noqa: BLE001 - start() reports it
            self._failure = exc
        finally:
            ready.set()
            try:
                _cancel_leftovers(loop)
            finally:
                loop.close()

    async def _serve(self, limit: int, backlog: int, ready: threading.Event, loop: asyncio.AbstractEventLoop) -> None:
        self._stopping = asyncio.Event()
        connections = Connections(limit=limit, count=self._count, handshake_limit=self._handshakes,
                                  header_timeout=self._header_timeout, max_head_bytes=self._max_head_bytes,
                                  write_timeout=self._write_timeout)
        app = web.Application(middlewares=[connections.middleware, self._gate.middleware])
        app[SERVER] = self
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/healthz", self._healthz)
        app.add_routes(self._routes)
        app.on_response_prepare.append(_security_headers)
        if self._web_config.headers:
            app.on_response_prepare.append(self._configured_headers)
        runner = web.AppRunner(app, handle_signals=False, access_log=None, shutdown_timeout=STOP_GRACE,
                               handler_cancellation=True, keepalive_timeout=self._idle_timeout,
                               lingering_time=0, logger=QuietLog(logging.getLogger("aiohttp.server"), self._count),
                               max_line_size=8190, max_field_size=8190, max_headers=64)
        await runner.setup()
        handler = runner.server
        assert handler is not None  # made by setup()
        servers = []
        try:
            tls = self._web_config.tls
            servers.append(await loop.create_server(
                connections.factory(handler, tls=tls), sock=self._sock, backlog=backlog))
            # asyncio's backlog is both how many it accepts per iteration and the listen queue;
            # a longer queue keeps a scraper's SYN from being dropped (a 1 s retry) in a flood.
            self._sock.listen(LISTEN_QUEUE)
            if self._unix is not None:
                servers.append(await loop.create_unix_server(
                    connections.factory(handler, admit=_owner_only), sock=self._unix, backlog=backlog))
            ready.set()
            await self._stopping.wait()
        finally:
            for server in servers:
                server.close()  # no new connections; the listening sockets close
            await runner.cleanup()  # idle connections close now, busy ones within 2 * STOP_GRACE
        try:
            async with asyncio.timeout(STOP_GRACE):
                for server in servers:
                    await server.wait_closed()
        except TimeoutError:
            pass

    async def _metrics(self, request: web.Request) -> web.Response:
        encoder, content_type = choose_encoder(request.headers.get("Accept", ""))
        gzipped = gzip_accepted(request.headers.get("Accept-Encoding", ""))
        key = (content_type, gzipped)
        # The reader and the exporter wait at their next checkpoint from now until the body is here, so that
        # neither the render nor this loop, when it takes the body, takes turns with them (base/pause.py).
        with PAUSE.rendering():
            render = self._renders.get(key)
            if render is None:
                if len(self._renders) >= MAX_PENDING_RENDERS:
                    self._count("render_busy")
                    raise web.HTTPServiceUnavailable(text="busy rendering other formats; retry\n",
                                                     headers={"Retry-After": "1"})
                # Scrapes that arrive while one renders the same format share its result.
                assert self._workers is not None  # start() made them
                render = self._workers.submit(_render, self._registry, self._exposition(encoder, content_type),
                                              gzipped)
                self._renders[key] = render
                render.add_done_callback(lambda done: self._render_done(key, done))
            body = await asyncio.shield(render)
        headers = {"Content-Type": content_type, "Vary": "Accept, Accept-Encoding", "Cache-Control": "no-store"}
        if gzipped:
            headers["Content-Encoding"] = "gzip"
        return web.Response(body=body, headers=headers)

    def _exposition(self, encoder: Callable[[CollectorRegistry], bytes],
                    content_type: str) -> Callable[[CollectorRegistry], bytes]:
        """The encoder of a format, its lines kept between renders (exposition.py) for the first CACHED_FORMATS."""
        cached = self._expositions.get(content_type)
        if cached is None:
            if len(self._expositions) >= CACHED_FORMATS:  # an Accept header can name any version: bounded
                return encoder
            openmetrics = content_type.startswith("application/openmetrics-text")
            cached = self._expositions[content_type] = CachedExposition(encoder, openmetrics=openmetrics)
        return cached

    def _render_done(self, key: tuple[str, bool], done: asyncio.Future) -> None:
        if self._renders.get(key) is done:
            del self._renders[key]
        if not done.cancelled():
            done.exception()  # every waiter may have gone; the failure is theirs to report

    async def _configured_headers(self, request: web.Request, response: web.StreamResponse) -> None:
        response.headers.update(self._web_config.headers)  # http_server_config.headers of the web config

    async def _healthz(self, request: web.Request) -> web.Response:
        ok, detail = self._health()
        # Anyone on the machine may read /healthz: no endpoint's password or key in it, whatever said it.
        return web.Response(status=200 if ok else 503, text=redact(detail) + "\n",
                            headers={"Cache-Control": "no-store"})

    def _count(self, reason: str) -> None:
        self._errors.labels(reason).inc()

    def count(self, reason: str) -> None:
        """Count a connection an added route closed (one of http_guard.REASONS, e.g. write_timeout)."""
        self._count(reason)


SERVER = web.AppKey("copilot_otel_server", MetricsServer)


def connection_budget(nofile: int, wanted: int) -> tuple[int, int, int]:
    """(connection cap, accept backlog, pending TLS handshakes cap) that fit an open-files limit of ``nofile``.

    asyncio accepts up to ``backlog`` connections per loop iteration, and a connection closed
    by the cap frees its descriptor three iterations later: up to 4 * backlog descriptors are
    in flight beyond the caps. Half the limit, at most, goes to connections, and the caps stay
    8 bursts or more where the limit allows, so that new connections cannot push one out in the
    few iterations between its request's (or its ClientHello's) arrival and its handling.
    """
    backlog = max(4, min(BACKLOG, nofile // 16))
    spare = nofile - 4 * backlog - 64
    handshakes = max(4, min(HANDSHAKES, 8 * backlog, spare // 3))
    return max(4, min(wanted, nofile // 2, spare - handshakes)), backlog, handshakes


def _render(registry: CollectorRegistry, encoder: Callable[[CollectorRegistry], bytes], gzipped: bool) -> bytes:
    body = encoder(registry)
    return gzip.compress(body, compresslevel=6, mtime=0) if gzipped else body


# The web view's pages load only their own scripts and styles, and talk only to this server.
CONTENT_SECURITY_POLICY = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
                           "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")


async def _security_headers(request: web.Request, response: web.StreamResponse) -> None:
    response.headers["X-Content-Type-Options"] = "nosniff"
    response.headers["Content-Security-Policy"] = CONTENT_SECURITY_POLICY
    response.headers["Server"] = "copilot-otel"
    response.headers["Referrer-Policy"] = "no-referrer"


def _owner_only(transport) -> str | None:
    """Admit a Unix socket connection only from a process of this daemon's own uid."""
    sock = transport.get_extra_info("socket")
    try:
        return None if peer_uid(sock) == os.getuid() else "peer_refused"
    except OSError:
        return "peer_refused"


def _bind(host: str, port: int, flag: str) -> socket.socket:
    """A listening socket on host:port (IPv4 preferred for a name), or a ConfigError that says why (and which
    ``flag`` chooses another)."""
    try:
        infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        family, _type, _proto, _name, sockaddr = sorted(infos, key=lambda info: info[0] != socket.AF_INET)[0]
        return socket.create_server(sockaddr[:2], family=family, backlog=BACKLOG)
    except OSError as exc:
        holder = port_holder(port) if exc.errno == errno.EADDRINUSE and port else None
        held = f" (held by {holder})" if holder else ""
        raise ConfigError(f"cannot serve on {host}:{port}: {exc.strerror or exc}{held}; "
                          f"choose another port with {flag} HOST:PORT") from None


def _cancel_leftovers(loop: asyncio.AbstractEventLoop) -> None:
    tasks = [task for task in asyncio.all_tasks(loop) if not task.done()]
    for task in tasks:
        task.cancel()
    if tasks:
        loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
    loop.run_until_complete(loop.shutdown_asyncgens())


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _healthy() -> tuple[bool, str]:
    """The health of a server given no check of its own."""
    return True, "ok"
