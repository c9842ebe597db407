"""Loopback ports and waiting."""

from __future__ import annotations

import socket
import time
from typing import Callable, TypeVar

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
