"""Loopback ports and waiting."""

from __future__ import annotations

import contextlib
import socket
import struct
import time
import urllib.request
from collections.abc import Callable
from typing import TypeVar

LOOPBACK = "127.0.0.1"

T = TypeVar("T")


def free_ports(count: int) -> list[int]:
    """``count`` distinct loopback ports that nothing listens on (bound together, then released)."""
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket()
            sock.bind((LOOPBACK, 0))
            sockets.append(sock)
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def free_port() -> int:
    """A loopback port that nothing listens on (bound, then released)."""
    return free_ports(1)[0]


def close_at_once(sock: socket.socket) -> None:
    """Close ``sock`` with a reset (SO_LINGER 0), leaving no TIME_WAIT that holds a port for a minute: what a test
    that opens thousands of connections does, so that test jobs beside it still find free ports."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


# wait_until's polls when the caller names no interval: the first soon after the first look (most waits end within
# milliseconds), each next one twice as late, then every POLL_EVERY.
FIRST_POLL = 0.002
POLL_EVERY = 0.05


def wait_until(predicate: Callable[[], T], timeout: float = 20.0, interval: float | None = None,
               what: str = "", *, seen: Callable[[], object] | None = None) -> T:
    """Poll until ``predicate()`` is truthy; return its value, or fail naming ``what`` and what it saw last:
    ``seen()`` if given (what a yes/no predicate looked at), else the predicate's last value. ``interval``: the
    time between polls; without it, FIRST_POLL doubling up to POLL_EVERY."""
    deadline = time.monotonic() + timeout
    pause = interval if interval is not None else FIRST_POLL
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            last = seen() if seen is not None else value
            raise AssertionError(f"timed out after {timeout} s waiting for {what or predicate}; last saw: {last!r}")
        time.sleep(pause)  # the poll itself
        if interval is None:
            pause = min(pause * 2, POLL_EVERY)


def wait_until_steady(read: Callable[[], T | None], *, polls: int = 3, timeout: float = 30.0, interval: float = 0.5,
                      what: str = "") -> T:
    """Poll ``read()`` until it gave the same value ``polls`` times running (None never counts); return it.
    For what settles on its own schedule (a daemon confirming what it read): wait for it to stop moving."""
    seen: list[T | None] = []

    def steady() -> bool:
        value = read()
        seen[:] = [*seen[-(polls - 1):], value]
        return len(seen) == polls and value is not None and all(v == value for v in seen)

    wait_until(steady, timeout=timeout, interval=interval, what=what, seen=lambda: seen)
    value = seen[-1]
    assert value is not None  # steady() holds only for a value
    return value


def port_taken(log: str) -> bool:
    """A server's log says it could not listen: the port picked for it was taken by another process since."""
    return "address already in use" in log.lower()


def retry_taken_port(start: Callable[[], T], taken: Callable[[], bool], repick: Callable[[], None],
                     attempts: int = 5) -> T:
    """``start()`` a server on the ports picked for it; when that failed and ``taken()`` (it exited saying a
    port is in use: another process took it between the pick and the bind), ``repick()`` and start again."""
    for attempt in range(1, attempts + 1):
        try:
            return start()
        except Exception:
            if attempt == attempts or not taken():
                raise
            repick()
    raise AssertionError("unreachable")


def answers_ok(url: str, timeout: float = 1.0) -> bool:
    """A GET of ``url`` is answered 200 (a server's readiness route); False while nothing answers."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return response.status == 200
    except OSError:
        return False
