"""Loopback ports and waiting."""

from __future__ import annotations

import socket
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


def wait_until(predicate: Callable[[], T], timeout: float = 20.0, interval: float = 0.05, what: str = "") -> T:
    """Poll until ``predicate()`` is truthy; return its value, or fail naming ``what``."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what or predicate}")
        time.sleep(interval)


def wait_until_steady(read: Callable[[], T | None], *, polls: int = 3, timeout: float = 30.0, interval: float = 0.5,
                      what: str = "") -> T:
    """Poll ``read()`` until it gave the same value ``polls`` times running (None never counts); return it.
    For what settles on its own schedule (a daemon confirming what it read): wait for it to stop moving."""
    seen: list[T | None] = []

    def steady() -> bool:
        value = read()
        seen[:] = [*seen[-(polls - 1):], value]
        return len(seen) == polls and value is not None and all(v == value for v in seen)

    wait_until(steady, timeout=timeout, interval=interval, what=what)
    return seen[-1]


def answers_ok(url: str, timeout: float = 1.0) -> bool:
    """A GET of ``url`` is answered 200 (a server's readiness route); False while nothing answers."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return response.status == 200
    except OSError:
        return False
