"""How the web view answers without holding its answers whole, and when its live views look again.

- :class:`Pieces`: a response body made piece by piece as the client takes it. aiohttp writes a
  piece and waits for the socket to drain before the next is made, so a client that does not read
  holds its socket buffer and about two pieces (``CHUNK`` each) of ours, never its whole answer,
  until the server's write deadline cuts it (``http_guard``).
- :func:`serve_stream`: one Server-Sent Events response (:class:`EventStream`), its messages written
  the same way, each write within ``WRITE_TIMEOUT`` or the client is dropped; it pushes when the
  board moved, at most every ``MIN_PUSH`` seconds.
- :class:`Changes`: one poller for every live view. It looks at the source every ``POLL`` seconds,
  builds the board once when the source's change key moved, and wakes the views, which then look
  only at their own part of it.
- :func:`release_memory`: glibc keeps what large frees give back in its arenas; hand it to the system.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import logging
import socket
import struct
import time
from collections.abc import Awaitable, Callable, Iterable

from aiohttp import web
from aiohttp.abc import AbstractStreamWriter
from aiohttp.payload import Payload

from ..catalog.board import Board
from .overview import Source
from .server import SERVER

log = logging.getLogger(__name__)

CHUNK = 16 * 1024  # bytes made and written at a time; a client's buffer in the daemon fills at this
SEND_BUFFER = 64 * 1024  # asked of the kernel for a client of the view (it holds twice that), not autotuned to MBs
POLL = 0.1  # seconds between two looks at the source while a live view is open
MIN_PUSH = 0.25  # seconds between two pushes on one stream
HEARTBEAT = 15.0  # seconds of silence after which a stream sends a comment (proxies, dead clients)
WRITE_TIMEOUT = 10.0  # seconds one write of a stream may wait for a client that does not read


class Pieces(Payload):
    """A body of ``size`` bytes made from ``pieces`` (an iterator) as the client reads it; ``busy``
    is told when the writing begins and ends."""

    def __init__(self, pieces: Iterable[bytes], size: int, content_type: str, busy: Releaser) -> None:
        super().__init__(iter(pieces), content_type=content_type)
        self._size = size
        self._busy = busy

    async def write(self, writer: AbstractStreamWriter) -> None:
        bound_send_buffer(writer.transport)
        self._busy.begin()
        try:
            for piece in self._value:
                # aiohttp hands in its StreamWriter, which takes drain=; the abstract writer it is typed as does not
                await writer.write(piece, drain=False)  # type: ignore[call-arg]
                await writer.drain()  # waits while the client's buffer is full
                await asyncio.sleep(0)  # and lets the others (a scrape) have the loop between two pieces
        except asyncio.CancelledError:  # the write deadline (or the client left): what the kernel holds goes too
            reset_on_close(writer.transport)
            raise
        finally:
            self._value = iter(())
            self._busy.end()

    async def write_with_length(self, writer: AbstractStreamWriter, content_length: int | None) -> None:
        await self.write(writer)

    def decode(self, encoding: str = "utf-8", errors: str = "strict") -> str:
        return b"".join(self._value).decode(encoding, errors)


class Gone(Exception):
    """The client stopped reading, or left."""


class EventStream:
    """One text/event-stream response: messages and comments, each write within ``timeout`` seconds."""

    def __init__(self, request: web.Request, response: web.StreamResponse, *, timeout: float = WRITE_TIMEOUT) -> None:
        self._request = request
        self._response = response
        self._timeout = timeout
        self.written = time.monotonic()  # when the last write ended
        bound_send_buffer(request.transport)

    async def retry(self, ms: int) -> None:
        """Tell the client how long to wait before it reconnects."""
        await self._write(b"retry: %d\n\n" % ms)

    async def send(self, pieces: Iterable[bytes], event_id: str | None = None) -> None:
        """One message whose data is the concatenation of ``pieces`` (JSON: no newline in it)."""
        await self._write((f"id: {event_id}\n" if event_id else "").encode() + b"data: ")
        for piece in pieces:
            await self._write(piece)
            await asyncio.sleep(0)  # the others (a scrape) have the loop between two pieces
        await self._write(b"\n\n")

    async def comment(self, text: str) -> None:
        await self._write(f": {text}\n\n".encode())

    async def _write(self, data: bytes) -> None:
        try:
            async with asyncio.timeout(self._timeout):
                await self._response.write(data)
            self.written = time.monotonic()
        except TimeoutError:
            if self._request.transport is not None:  # a client that does not read holds nothing of ours
                reset_on_close(self._request.transport)
                self._request.transport.abort()
            self._request.app[SERVER].count("write_timeout")
            raise Gone from None
        except ConnectionError:
            raise Gone from None


async def serve_stream(request: web.Request, changes: Changes,
                       push: Callable[[EventStream, Board], Awaitable[bool]]) -> web.StreamResponse:
    """Server-Sent Events until the client goes: ``push(stream, board)`` when the board moved (at most every
    MIN_PUSH s), or at once when it said there is more to send (True); a comment after HEARTBEAT s of silence."""
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "X-Accel-Buffering": "no",
                                           "Cache-Control": "no-store"})
    await changes.join()
    try:
        await response.prepare(request)
        stream = EventStream(request, response)
        await stream.retry(1000)
        seen, version, more = None, changes.version, False
        while True:
            if more or changes.board is not seen:
                seen, version = changes.board, changes.version
                assert seen is not None  # there since join()
                more = await push(stream, seen)
                if not more:
                    await asyncio.sleep(MIN_PUSH)
                continue
            version = await changes.wait(version, HEARTBEAT - (time.monotonic() - stream.written))
            if changes.board is seen and time.monotonic() - stream.written >= HEARTBEAT:
                await stream.comment("keepalive")
    except (ConnectionError, Gone):
        pass
    finally:
        changes.leave()
    return response


class Changes:
    """One look at the source every ``POLL`` seconds for all the live views; ``board`` is the board now.

    It runs while a view is open (``join``/``leave``). ``rescan`` is awaited first on each look (a source
    that reads files scans them when due); ``run_blocking`` runs the board's build off the loop.
    """

    def __init__(self, source: Source, rescan: Callable[[], Awaitable[None]],
                 run_blocking: Callable[..., Awaitable]) -> None:
        self._source = source
        self._rescan = rescan
        self._run_blocking = run_blocking
        self.board: Board | None = None
        self.version = 0  # moves with the board
        self._moved = asyncio.Event()
        self._users = 0
        self._task: asyncio.Task | None = None
        self._key: tuple | None = None

    async def join(self) -> None:
        """A view opens; the board is there when this returns."""
        self._users += 1
        if self._task is None:
            try:
                await self._look()
            except BaseException:
                self._users -= 1
                raise
            self._task = asyncio.get_running_loop().create_task(self._run())

    def leave(self) -> None:
        self._users -= 1
        if self._users <= 0 and self._task is not None:
            self._users = 0
            self._task.cancel()
            self._task = None

    async def wait(self, version: int, timeout: float) -> int:
        """The version once it is no longer ``version``, or after ``timeout`` seconds."""
        if self.version == version:
            moved = self._moved
            try:
                async with asyncio.timeout(max(0.0, timeout)):
                    await moved.wait()
            except TimeoutError:
                pass
        return self.version

    async def _run(self) -> None:
        failing = False
        while True:
            await asyncio.sleep(POLL)
            try:
                await self._look()
                failing = False
            except Exception:  # a bug here must be said once, and must not end every live view
                if not failing:
                    log.exception("the web view cannot look at the sessions")
                failing = True

    async def _look(self) -> None:
        await self._rescan()
        key = self._source.change_key()
        if key == self._key and self.board is not None:
            return
        board = await self._run_blocking(self._source.board)
        self._key = key
        if board is not self.board:
            self.board = board
            self.version += 1
            moved, self._moved = self._moved, asyncio.Event()
            moved.set()


def bound_send_buffer(transport) -> None:
    """Keep the kernel from taking megabytes of a client's answer that it does not read (loopback
    autotunes a send buffer up to 4 MiB): what it holds is bounded, and so is our work to fill it. Our
    own buffer for the client counts as full at CHUNK bytes."""
    if transport is None:
        return
    transport.set_write_buffer_limits(high=CHUNK)
    sock = transport.get_extra_info("socket")
    if sock is not None:
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SEND_BUFFER)
        except OSError:
            pass


class Releaser:
    """Gives the memory that answers freed back to the system, in a worker, once every answer in flight
    has ended and a second passed without a new one."""

    def __init__(self, run_blocking: Callable[..., Awaitable], *, delay: float = 1.0) -> None:
        self._run_blocking = run_blocking
        self._delay = delay
        self.open = 0
        self._task: asyncio.Task | None = None

    def begin(self) -> None:
        self.open += 1

    def end(self) -> None:
        self.open -= 1
        if self.open == 0 and self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._release())

    async def _release(self) -> None:
        try:
            await asyncio.sleep(self._delay)
            if self.open == 0:
                await self._run_blocking(release_memory)
        finally:
            self._task = None


def reset_on_close(transport) -> None:
    """Make the coming close a reset: the kernel drops what it still holds for the client at once, instead
    of trying for minutes to deliver it to a client that does not read."""
    sock = transport.get_extra_info("socket") if transport is not None else None
    if sock is not None:
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            pass


_libc: list = []


def release_memory() -> None:
    """Hand the memory glibc keeps after large frees back to the system (does nothing elsewhere)."""
    if not _libc:
        name = ctypes.util.find_library("c")
        try:
            _libc.append(ctypes.CDLL(name).malloc_trim if name else None)
        except (OSError, AttributeError):
            _libc.append(None)
    if _libc[0] is not None:
        _libc[0](0)
