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


def lock_folder(path: str | os.PathLike) -> int:
    """A descriptor of the folder ``path``, exclusively locked without waiting. Raises Held (the pid the kernel
    names as its holder, '?' if it does not say) when another process holds it, or the OSError of the open.

    The lock is on the folder itself: a file in it can be unlinked (a tmp cleaner, an ``rm *.lock``) and made
    anew by the next comer, who would lock the new one; the folder cannot be, while it holds the files in use.
    A symlink to the folder and a bind mount of it reach the same inode, and so the same lock."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        st = os.fstat(fd)
        os.close(fd)
        if exc.errno in (errno.EWOULDBLOCK, errno.EACCES):
            raise Held(flock_holder(st)) from None
        raise
    except BaseException:
        os.close(fd)
        raise
    return fd


def flock_holder(st: os.stat_result, *, table: str = "/proc/locks") -> str:
    """The pid that holds a flock on the file ``st`` describes, from the kernel's table of locks; '?' if unknown
    (no /proc, or a holder in a pid namespace this process cannot see)."""
    wanted = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    try:
        with open(table, encoding="ascii", errors="replace") as rows:
            for row in rows:
                fields = row.split()
                # "1: FLOCK  ADVISORY  WRITE 1234 fe:00:5678 0 EOF"; a waiter's row has "->" after the number
                if len(fields) >= 6 and fields[1] == "FLOCK" and fields[5] == wanted and fields[4] not in ("0", "-1"):
                    return fields[4]
    except OSError:
        pass
    return "?"
