"""A lock file that says who holds it: an exclusive flock, and the holder's pid written inside."""

from __future__ import annotations

import errno
import fcntl
import os


class Held(Exception):
    """Another process holds the lock; ``pid`` is what it wrote in the file ('?' if nothing)."""

    def __init__(self, pid: str) -> None:
        super().__init__(pid)
        self.pid = pid


def lock(fd: int) -> None:
    """Take the lock on ``fd`` without waiting. Raises Held (``fd`` closed) when another process holds it."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
        os.close(fd)
        if exc.errno in (errno.EWOULDBLOCK, errno.EACCES):
            raise Held(holder) from None
        raise


def say_holder(fd: int) -> None:
    """Write this process's pid into the locked file."""
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
