"""What copilot-otel creates is its user's alone: folders 0700, files 0600, whatever the umask; and
nothing it writes can be steered by another user.

The Copilot CLI keeps its logs 0600 in 0700 folders; the spans, checkpoints and state made
from them (prompts and tool output among them, with content capture on) get the same.
Only what is created here gets these modes: an existing folder or file keeps its own. A file is
opened without following a link at its end, and used only if it is a regular file of ours with
no other link, that no other user may write; the folders it lives in are checked by
:mod:`copilot_otel.base.strictmodes`.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from .strictmodes import UnsafePath, check_folder, owner_name, writable_by_others

PRIVATE_DIR = 0o700
PRIVATE_FILE = 0o600
# Never through a link at the end; never blocking on a FIFO planted where a file should be.
_SAFE_OPEN = os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK


def private_dir(path: Path) -> Path:
    """Create ``path`` and its missing parents as 0700 folders; return it. Raises OSError."""
    path = Path(path)
    missing = []
    probe = path
    while not probe.exists():
        missing.append(probe)
        if probe.parent == probe:
            break
        probe = probe.parent
    for folder in reversed(missing):
        try:
            os.mkdir(folder, PRIVATE_DIR)
        except FileExistsError:
            continue
        os.chmod(folder, PRIVATE_DIR)  # mkdir's mode went through the umask
    return path


def state_folder(path: Path, *, strict: bool = True) -> Path:
    """The state folder, made 0700 if missing, once checked (``strict``): ours, and no other user may change it
    or a folder above it (strictmodes.py). Raises UnsafePath, or OSError if it cannot be made."""
    if strict:
        check_folder(path, own=True)
    return private_dir(path)


def _refusal(path: Path, st: os.stat_result) -> str | None:
    """Why an opened file is not ours to write, or None."""
    if not stat.S_ISREG(st.st_mode):
        return f"{path} is not a regular file"
    if st.st_uid != os.geteuid():
        return f"{path} belongs to {owner_name(st.st_uid)}, not to you"
    if st.st_nlink > 1:
        return f"{path} has {st.st_nlink - 1} other hard link(s): it may be another file's name too"
    if writable_by_others(st):
        return f"{path} may be written by other users (mode {stat.S_IMODE(st.st_mode):04o}; chmod go-w it)"
    return None


def _open_existing(path: Path, flags: int) -> int:
    try:
        return os.open(path, flags | _SAFE_OPEN)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENXIO, errno.EMLINK):  # a link; a FIFO or socket
            kind = "a symbolic link" if os.path.islink(path) else "not a regular file"
            raise UnsafePath(f"{path} is {kind}: copilot-otel writes only to a regular file of its own") from None
        raise


def open_private(path: Path, flags: int = os.O_WRONLY | os.O_APPEND) -> int:
    """A descriptor of ``path`` opened with ``flags``; a file created here is 0600. An existing one must be a
    regular file of ours, with no other link, no other user may write, reached without a link at its end:
    else UnsafePath (an OSError) says which. Raises OSError."""
    try:
        fd = os.open(path, flags | _SAFE_OPEN | os.O_CREAT | os.O_EXCL, PRIVATE_FILE)
        created = True
    except FileExistsError:
        fd, created = _open_existing(path, flags), False
    try:
        if created:
            os.fchmod(fd, PRIVATE_FILE)  # a umask such as 0277 would have left it read-only
        refusal = _refusal(Path(path), os.fstat(fd))
        if refusal:
            raise UnsafePath(refusal)
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_private(path: Path) -> bytes | None:
    """The content of ``path`` if it is a file of ours (as open_private checks it), None if there is none.
    Raises OSError (UnsafePath: not ours)."""
    try:
        fd = _open_existing(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        refusal = _refusal(Path(path), os.fstat(fd))
        if refusal:
            raise UnsafePath(refusal)
        with os.fdopen(os.dup(fd), "rb") as handle:
            return handle.read()
    finally:
        os.close(fd)


def touch_private(path: Path) -> Path:
    """Make sure ``path`` exists, created 0600 if it did not (for files a library creates, e.g. SQLite)."""
    os.close(open_private(path, os.O_RDONLY))
    return path


def write_private(path: Path, data: bytes, *, mode: int = PRIVATE_FILE) -> None:
    """Replace ``path`` with ``data`` at once (a new temp file of a name no one can guess, then a rename): a
    reader never sees half of it. ``mode``: 0600, or more for a file another user must read."""
    _publish(path, data, mode, lambda temp: os.replace(temp, path))


def write_new_private(path: Path, data: bytes) -> bool:
    """Create ``path`` 0600 holding ``data`` whole, unless it exists (then it is left as it is): written to a temp
    file of a name no one can guess, then linked in place, which never follows or replaces what is there. True if
    this call created it. Raises OSError."""

    def link(temp: str) -> bool:
        try:
            os.link(temp, path, follow_symlinks=False)
        except FileExistsError:
            return False
        return True

    return _publish(path, data, PRIVATE_FILE, link)


def _publish(path: Path, data: bytes, mode: int, put_in_place):
    """Write ``data`` to a new temp file beside ``path`` (``mode``, synced), then ``put_in_place(temp)``; the temp
    file never outlives the call. Returns what ``put_in_place`` returns."""
    import tempfile  # here: with shutil, random, bz2 and lzma it cost every start 15 M instructions (issue 25)

    fd, temp = tempfile.mkstemp(dir=Path(path).parent, prefix=f".{Path(path).name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            os.fchmod(fd, mode)
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        return put_in_place(temp)
    finally:
        Path(temp).unlink(missing_ok=True)
