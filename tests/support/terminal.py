"""Running a command on a pseudo-terminal and reading what it drew."""

from __future__ import annotations

import os
import re
import select
import subprocess
import time

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07")


def read_pty(fd: int, process: subprocess.Popen, timeout: float = 60) -> str:
    """Everything written to the terminal ``fd`` until ``process`` exits (or ``timeout``)."""
    chunks = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 0.1)
        if ready:
            try:
                data = os.read(fd, 65536)
            except OSError:  # the other side closed
                break
            if not data:
                break
            chunks.append(data)
        elif process.poll() is not None:
            break
    return b"".join(chunks).decode(errors="replace")


def plain(screen: str) -> str:
    """What a terminal shows, without its escape sequences."""
    return ANSI.sub("", screen)


def run_on_pty(argv: list[str], env: dict[str, str], *, cwd, timeout: float = 90) -> tuple[int, str]:
    """Run ``argv`` with a pseudo-terminal as its stdin, stdout and stderr; (exit code, what it drew).
    The process is ended by its pid if it outlives ``timeout``."""
    primary, secondary = os.openpty()
    process = subprocess.Popen(argv, env=env, stdin=secondary, stdout=secondary, stderr=secondary, cwd=cwd)
    os.close(secondary)
    try:
        screen = read_pty(primary, process, timeout=timeout)
        process.wait(timeout=30)
    finally:
        os.close(primary)
        if process.poll() is None:
            process.kill()
            process.wait()
    return process.returncode, screen
