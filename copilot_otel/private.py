"""What copilot-otel creates is its user's alone: folders 0700, files 0600, whatever the umask.

The Copilot CLI keeps its logs 0600 in 0700 folders; the spans, checkpoints and state made
from them (prompts and tool output among them, with content capture on) get the same.
Only what is created here gets these modes: an existing folder or file keeps its own.
"""

from __future__ import annotations

import os
from pathlib import Path

PRIVATE_DIR = 0o700
PRIVATE_FILE = 0o600


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


def open_private(path: Path, flags: int = os.O_WRONLY | os.O_APPEND) -> int:
    """A descriptor of ``path`` opened with ``flags``; a file created here is 0600. Raises OSError."""
    try:
        fd = os.open(path, flags | os.O_CREAT | os.O_EXCL, PRIVATE_FILE)
    except FileExistsError:
        return os.open(path, flags)
    try:
        os.fchmod(fd, PRIVATE_FILE)  # a umask such as 0277 would have left it read-only
    except OSError:
        os.close(fd)
        raise
    return fd


def touch_private(path: Path) -> Path:
    """Make sure ``path`` exists, created 0600 if it did not (for files a library creates, e.g. SQLite)."""
    os.close(open_private(path, os.O_RDONLY))
    return path


def write_private(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` at once (temp file + rename): a reader never sees half of it."""
    temp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = open_private(temp, os.O_WRONLY | os.O_TRUNC)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, path)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
