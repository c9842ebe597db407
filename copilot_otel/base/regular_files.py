"""Reading a file that must be a regular file: opened without blocking, checked once open, read to a cap.

An ordinary ``open()`` of a FIFO planted where a file should be waits for a writer, for good, in the
thread that opened it; ``/dev/zero`` or a file of hundreds of megabytes fills memory. So every file
copilot-otel reads (its config files, a session's workspace.yaml, TLS and token files, the logs) is
opened with O_NONBLOCK, then checked with fstat to be a regular file (what the kernel opened, not
what a stat of the path said a moment before), and read only up to a size.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

NOT_REGULAR = "is not a regular file; not reading it"  # a FIFO would block the reader
OPEN_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC


class NotRegular(OSError):
    """The path is a FIFO, a device, a socket or a folder: nothing to read as a file."""

    def __init__(self) -> None:
        super().__init__(errno.EINVAL, NOT_REGULAR)


class TooLarge(OSError):
    """The file is larger than what its reader takes."""

    def __init__(self, limit: int) -> None:
        super().__init__(errno.EFBIG, f"larger than {_size(limit)}; not reading it")


def _size(limit: int) -> str:
    return f"{limit >> 20} MiB" if limit >= 1 << 20 else f"{limit >> 10} KiB" if limit >= 1 << 10 else f"{limit} bytes"


def open_regular(path: str | os.PathLike, *, follow: bool = True) -> int:
    """A descriptor of ``path`` opened read-only without blocking, if it is a regular file (``follow=False``: not
    through a symlink at its end). Raises NotRegular, or the OSError of the open (FileNotFoundError...)."""
    fd = os.open(path, OPEN_FLAGS | (0 if follow else os.O_NOFOLLOW))
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise NotRegular()
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_regular(path: str | os.PathLike, limit: int, *, follow: bool = True) -> bytes:
    """The bytes of the regular file ``path``, at most ``limit`` of them. Raises NotRegular, TooLarge (checked
    before reading, and again if it grew while read), or another OSError."""
    fd = open_regular(path, follow=follow)
    with os.fdopen(fd, "rb") as handle:
        if os.fstat(fd).st_size > limit:
            raise TooLarge(limit)
        data = handle.read(limit + 1)
    if len(data) > limit:
        raise TooLarge(limit)
    return data


def check_regular(path: str | os.PathLike) -> Path:
    """``path``, once it is known to be a readable regular file: for a path handed to a library that opens it
    itself (OpenSSL), which would block on a FIFO. Raises NotRegular or another OSError."""
    os.close(open_regular(path))
    return Path(path)


def reason(exc: OSError) -> str:
    """Why ``exc`` kept a file from being read, as a short phrase."""
    return exc.strerror or str(exc)


MAX_CONFIG_BYTES = 1 << 20  # a config file is a few kilobytes


def read_config(path: str | os.PathLike, where: str, limit: int = MAX_CONFIG_BYTES) -> str:
    """The text of the config file ``path``; a ConfigError that starts with ``where`` (the flag and the path)
    if it cannot be read: missing, not a regular file (a FIFO, /dev/zero), larger than ``limit``, not UTF-8."""
    from .parsing import ConfigError

    try:
        return read_regular(path, limit).decode("utf-8")
    except OSError as exc:
        raise ConfigError(f"{where}: cannot read it ({reason(exc)})") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{where}: cannot read it (not UTF-8 text: {exc.reason} at byte {exc.start})") from None
