"""What the HTTP server needs to survive hostile clients and aiohttp does not have built in.

aiohttp (pinned in pyproject.toml) parses requests and closes idle keep-alive connections
(``keepalive_timeout``, counted from the connection's start or its last response, so it also
cuts off a request head that never completes). What it lacks, added here around its public
protocol object and middleware API:

- a deadline for a request head, counted from its first byte (a trickle does not extend it)
  and a cap on the bytes a head may take;
- a cap on open connections: at the cap the connection idle the longest is closed, or the new
  one refused when every connection is busy (the server sizes the cap at 8 or more accept
  bursts, so a burst cannot push out a scraper before its request is read);
- TLS handshakes done here (``loop.start_tls`` on each accepted connection) rather than by
  ``create_server(ssl=...)``, which holds a connection whose ClientHello never comes out of
  every count: each handshake must end within the head's deadline, and at most
  ``handshake_limit`` are pending at once; at that cap the oldest pending one is closed, so
  connections that never start a handshake cannot crowd out a scraper's, nor the connections
  that finished theirs (they count against the connection cap only once done);
- a deadline for writing a response to a client that does not read it;
- quiet failures: one debug line and a counted reason per bad request or broken
  connection, a traceback only the first time a handler fails in a new way.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import resource
import ssl
import sys
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

from aiohttp import web
from aiohttp.http import HttpProcessingError
from prometheus_client import CollectorRegistry, Counter

log = logging.getLogger(__name__)

REASONS = ("bad_request", "header_timeout", "header_too_large", "write_timeout", "connection_evicted",
           "connection_refused", "render_busy", "handler_error", "loop_error", "host_refused", "unauthorized",
           "auth_busy", "peer_refused", "handshake_failed", "handshake_evicted")

_counters: weakref.WeakKeyDictionary[CollectorRegistry, Counter] = weakref.WeakKeyDictionary()
_counters_lock = threading.Lock()


def http_errors(registry: CollectorRegistry) -> Counter:
    """copilot_otel_http_errors_total{reason} on ``registry`` (one per registry, however many servers)."""
    with _counters_lock:
        counter = _counters.get(registry)
        if counter is None:
            counter = Counter("copilot_otel_http_errors_total",
                              "HTTP connections closed or requests failed by the metrics server, by reason.",
                              ["reason"], registry=registry)
            for reason in REASONS:
                counter.labels(reason)
            _counters[registry] = counter
        return counter


def raise_open_files_limit() -> int:
    """Raise this process's soft RLIMIT_NOFILE to its hard limit; return the soft limit now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 16)
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError) as exc:
            log.debug("cannot raise the open-files limit from %d to %d: %s", soft, target, exc)
    return soft


class Connections:
    """The open connections of one server.

    ``factory(make_protocol)`` is the protocol factory for ``loop.create_server``: each
    connection is aiohttp's own protocol object inside a thin :class:`_Connection` that watches
    its head deadline and size. ``middleware`` marks a connection busy while a request is
    handled and enforces the write deadline.
    """

    def __init__(self, *, limit: int, header_timeout: float, max_head_bytes: int, write_timeout: float,
                 count: Callable[[str], None], handshake_limit: int = 128) -> None:
        self.limit = limit
        self.handshake_limit = handshake_limit
        self._handshakes: dict[_Connection, None] = {}  # pending TLS handshakes, the oldest first
        self.header_timeout = header_timeout
        self.max_head_bytes = max_head_bytes
        self._write_timeout = write_timeout
        self.count = count
        self._open: dict[Any, _Connection] = {}  # aiohttp protocol -> its connection
        self._idle: dict[_Connection, None] = {}  # insertion order: the longest idle first

    def factory(self, make_protocol: Callable[[], asyncio.Protocol], *,
                admit: Callable[[Any], str | None] | None = None,
                tls: ssl.SSLContext | None = None) -> Callable[[], asyncio.Protocol]:
        """A protocol factory that wraps each of ``make_protocol``'s protocols.

        ``admit(transport)`` may refuse a connection before aiohttp sees it: it returns the
        reason to count (e.g. a Unix socket's peer of another uid), or None to let it in.
        ``tls``: each connection's TLS handshake is done here, under the handshake cap.
        """
        return lambda: _Connection(self, make_protocol(), admit, tls)

    def opened(self, conn: _Connection) -> bool:
        """Admit a new connection, at the cap closing the longest idle one; False to refuse it."""
        if len(self._open) >= self.limit:
            oldest = next(iter(self._idle), None)
            if oldest is None:
                self.count("connection_refused")
                return False
            self.closed(oldest)
            oldest.close()
            self.count("connection_evicted")
        self._open[conn.protocol] = conn
        self._idle[conn] = None
        return True

    def closed(self, conn: _Connection) -> None:
        self._open.pop(conn.protocol, None)
        self._idle.pop(conn, None)
        self._handshakes.pop(conn, None)

    def handshaking(self, conn: _Connection) -> None:
        """A TLS handshake begins; at the cap the oldest pending one is closed to make room."""
        if len(self._handshakes) >= self.handshake_limit:
            oldest = next(iter(self._handshakes))
            del self._handshakes[oldest]
            self.count("handshake_evicted")
            oldest.evict()
        self._handshakes[conn] = None

    def handshake_over(self, conn: _Connection) -> None:
        self._handshakes.pop(conn, None)

    @property
    def pending_handshakes(self) -> int:
        """TLS handshakes begun and not yet ended."""
        return len(self._handshakes)

    def busy(self, conn: _Connection, busy: bool) -> None:
        if conn.protocol not in self._open:
            return
        self._idle.pop(conn, None)
        if not busy:
            self._idle[conn] = None

    @web.middleware
    async def middleware(self, request: web.Request, handler) -> web.StreamResponse:
        """Marks the connection busy; sends a handler's response within the write deadline.

        A response the handler prepared itself (a stream, such as Server-Sent Events) is its own
        business: it gets no write deadline.
        """
        conn = self._open.get(request.protocol)
        if conn is not None:
            conn.request_started()
        try:
            response = await handler(request)
            if not response.prepared:
                try:
                    async with asyncio.timeout(self._write_timeout):
                        await response.prepare(request)
                        await response.write_eof()
                except TimeoutError:
                    # The client does not read: drop the connection and what it buffered.
                    self.count("write_timeout")
                    if request.transport is not None:
                        request.transport.abort()
                except ConnectionError:
                    pass  # gone; aiohttp notices when it finishes the response
            return response
        finally:
            if conn is not None:
                conn.request_finished()


class _Connection(asyncio.Protocol):
    """aiohttp's protocol for one connection, plus the request-head deadline and size cap."""

    __slots__ = (
        "_admit",
        "_admitted",
        "_busy",
        "_deadline",
        "_handshake",
        "_head_bytes",
        "_table",
        "_tls",
        "_transport",
        "protocol",
    )

    def __init__(self, table: Connections, protocol: asyncio.Protocol,
                 admit: Callable[[Any], str | None] | None = None, tls: ssl.SSLContext | None = None) -> None:
        self._table = table
        self._tls = tls
        self.protocol = protocol
        self._admit = admit
        self._transport: asyncio.Transport | None = None
        self._deadline: asyncio.TimerHandle | None = None
        self._head_bytes = 0
        self._busy = False
        self._admitted = False
        self._handshake: str | None = None  # with TLS: 'pending', 'evicted' (closed by the cap), 'done'

    def connection_made(self, transport) -> None:
        self._transport = transport
        refused = self._admit(transport) if self._admit is not None else None
        if refused is not None:
            self._table.count(refused)
            transport.abort()
            return
        if self._tls is not None and self._handshake is None:
            transport.pause_reading()  # the ClientHello is for the TLS layer, set up on the next turn
            self._handshake = "pending"
            self._table.handshaking(self)
            asyncio.get_running_loop().create_task(self._start_tls(transport))
            return
        self._admit_open(transport)

    async def _start_tls(self, raw) -> None:
        table = self._table
        assert self._tls is not None  # only a TLS listener's connections start a handshake
        try:
            secured = await asyncio.get_running_loop().start_tls(
                raw, self, self._tls, server_side=True, ssl_handshake_timeout=table.header_timeout)
        except (OSError, ssl.SSLError, TimeoutError) as exc:  # timed out, not TLS, or gone
            if self._handshake != "evicted":
                table.count("handshake_failed")
            log.debug("TLS handshake ended without a connection: %r", exc)
            table.handshake_over(self)
            raw.abort()
            return
        table.handshake_over(self)
        if self._handshake == "evicted" or raw.is_closing():
            return
        self._handshake = "done"
        self._transport = secured
        self._admit_open(secured)

    def _admit_open(self, transport) -> None:
        if not self._table.opened(self):
            transport.abort()  # aiohttp never sees it
            return
        self._admitted = True
        self.protocol.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        if not self._busy:
            if self._deadline is None:  # the first byte of a request head
                loop = asyncio.get_running_loop()
                self._deadline = loop.call_later(self._table.header_timeout, self._head_late)
            self._head_bytes += len(data)
            if self._head_bytes > self._table.max_head_bytes:
                self._table.count("header_too_large")
                self.close()
                return
        self.protocol.data_received(data)

    def eof_received(self):
        return self.protocol.eof_received()

    def pause_writing(self) -> None:
        self.protocol.pause_writing()

    def resume_writing(self) -> None:
        self.protocol.resume_writing()

    def connection_lost(self, exc) -> None:
        self._cancel_deadline()
        self._table.closed(self)
        if self._admitted:
            self._admitted = False
            self.protocol.connection_lost(exc)

    def request_started(self) -> None:
        self._cancel_deadline()
        self._busy = True
        self._head_bytes = 0
        self._table.busy(self, True)

    def request_finished(self) -> None:
        self._busy = False
        self._table.busy(self, False)

    def evict(self) -> None:
        """Close a connection whose TLS handshake is still pending (the cap needs its place)."""
        self._handshake = "evicted"
        self.close()

    def close(self) -> None:
        self._cancel_deadline()
        if self._transport is not None and not self._transport.is_closing():
            self._transport.abort()  # nothing worth flushing: no response was started

    def _head_late(self) -> None:
        self._deadline = None
        if not self._busy:
            self._table.count("header_timeout")
            self.close()

    def _cancel_deadline(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None


class QuietLog(logging.LoggerAdapter):
    """aiohttp's server logger: bad requests and broken connections are counted and logged at
    debug; a handler's failure is logged with its traceback the first time it happens."""

    def __init__(self, logger: logging.Logger, count: Callable[[str], None]) -> None:
        super().__init__(logger, {})
        self._count = count
        self._seen: set[tuple[str, str]] = set()

    def exception(self, msg, *args, exc_info=True, **kwargs) -> None:
        exc = exc_info if isinstance(exc_info, BaseException) else sys.exc_info()[1]
        if isinstance(exc, (HttpProcessingError, ConnectionError)):
            self._count("bad_request")
            self.debug(msg + ": %s", *args, exc)
            return
        self._count("handler_error")
        key = (type(exc).__name__, str(exc)[:200])
        if key in self._seen or len(self._seen) > 100:
            self.debug(msg + ": %r", *args, exc)
            return
        self._seen.add(key)
        self.error(msg + " (logged once; later ones at debug)", *args, exc_info=exc_info, **kwargs)

    def debug(self, msg, *args, exc_info=None, **kwargs) -> None:
        if isinstance(exc_info, HttpProcessingError):  # aiohttp says non-HTTP traffic at debug
            self._count("bad_request")
            exc_info = None
        super().debug(msg, *args, exc_info=exc_info, **kwargs)


class LoopErrors:
    """The server loop's exception handler: one warning line per kind of error a minute, counted."""

    def __init__(self, count: Callable[[str], None], *, every: float = 60.0) -> None:
        self._count = count
        self._every = every
        self._last: dict[str, float] = {}

    def __call__(self, loop: asyncio.AbstractEventLoop, context: dict) -> None:
        self._count("loop_error")
        message = str(context.get("message", "error"))
        exc = context.get("exception")
        now = time.monotonic()
        if now - self._last.get(message, -self._every) >= self._every and len(self._last) < 100:
            self._last[message] = now
            log.warning("metrics server: %s%s", message, f": {exc!r}" if exc is not None else "")


class Workers:
    """A few daemon threads that run blocking calls for the loop (so a server that is never
    stopped, as in a library user's process, cannot hold up the interpreter's exit)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, threads: int, name: str) -> None:
        self._loop = loop
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._threads = [threading.Thread(target=self._work, name=f"{name}-{i}", daemon=True)
                         for i in range(threads)]
        for thread in self._threads:
            thread.start()

    def submit(self, fn: Callable, *args) -> asyncio.Future:
        """Run ``fn(*args)`` in a worker; the future is settled on the loop."""
        future = self._loop.create_future()
        self._jobs.put((future, fn, args))
        return future

    def close(self, timeout: float) -> None:
        """Let the workers finish what they run, then end them."""
        for _ in self._threads:
            self._jobs.put(None)
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
            if thread.is_alive():
                log.warning("metrics server: %s still busy after %.0f s; left behind", thread.name, timeout)

    def _work(self) -> None:
        while (job := self._jobs.get()) is not None:
            future, fn, args = job
            outcome: tuple[Any, BaseException | None]
            try:
                outcome = (fn(*args), None)
            except BaseException as exc:  # noqa: BLE001 - handed to the awaiting handler
                outcome = (None, exc)
            try:
                self._loop.call_soon_threadsafe(_settle, future, *outcome)
            except RuntimeError:  # the loop is closed: nobody waits
                pass


def _settle(future: asyncio.Future, result, exc) -> None:
    if future.done():
        return
    if exc is not None:
        future.set_exception(exc)
    else:
        future.set_result(result)
