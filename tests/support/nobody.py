"""A second local user for attacks: a forked child that drops to nobody (uid and gid 65534, no groups).

The child only opens sockets and files by path with what the parent already imported, so it needs
no readable checkout (CI's private clone works). ``as_nobody`` runs one function and returns what it
returned; ``serve_as_nobody`` keeps one running (a squatter) until the test ends it by its pid.
"""

from __future__ import annotations

import os
import pickle
import select
import signal
import time
from collections.abc import Callable
from typing import Any

from tests.support.net import free_port, port_taken, retry_taken_port

NOBODY = 65534
NOGROUP = 65534


def _drop() -> None:
    os.setgroups([])
    os.setresgid(NOGROUP, NOGROUP, NOGROUP)
    os.setresuid(NOBODY, NOBODY, NOBODY)


def as_nobody(fn: Callable[..., Any], *args, timeout: float = 60.0) -> Any:
    """``fn(*args)`` in a child running as nobody; its return value, or an AssertionError with its exception."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        try:
            os.close(read)
            _drop()
            outcome = ("ok", fn(*args))
        except BaseException as exc:  # noqa: BLE001 - handed to the parent
            outcome = ("error", f"{type(exc).__name__}: {exc}")
        try:
            data = pickle.dumps(outcome)
            while data:
                data = data[os.write(write, data):]
        finally:
            os._exit(0)
    os.close(write)
    chunks, deadline = [], time.monotonic() + timeout
    try:
        while True:
            ready, _, _ = select.select([read], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                os.kill(pid, signal.SIGKILL)
                raise AssertionError(f"the child as nobody did not finish within {timeout} s")
            chunk = os.read(read, 65536)
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(read)
        os.waitpid(pid, 0)
    kind, value = pickle.loads(b"".join(chunks))
    if kind != "ok":
        raise AssertionError(f"the child as nobody failed: {value}")
    return value


def serve_as_nobody(setup: Callable[..., Any], serve: Callable[[Any], None], *args, timeout: float = 30.0) -> int:
    """Fork a child that, as nobody, runs ``setup(*args)`` (e.g. binds a port), says it is ready, then
    ``serve(what setup returned)`` until killed; its pid (end it with ``stop_child``)."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(read)
            _drop()
            state = setup(*args)
            os.write(write, b"ready")
            os.close(write)
            serve(state)
        except BaseException as exc:  # noqa: BLE001 - said to the parent, whatever it was
            try:
                os.write(write, f"failed: {type(exc).__name__}: {exc}".encode())
            except OSError:
                pass
        finally:
            os._exit(0)
    os.close(write)
    try:
        ready, _, _ = select.select([read], [], [], timeout)
        said = os.read(read, 4096) if ready else b"(nothing)"
    finally:
        os.close(read)
    if said != b"ready":
        stop_child(pid)
        raise AssertionError(f"the child as nobody did not start: {said.decode(errors='replace')}")
    return pid


def serve_as_nobody_on_a_free_port(listen: Callable[[int], Any], serve: Callable[[Any], None]) -> tuple[int, int]:
    """``serve_as_nobody(listen, serve, port)`` on a free loopback port, picked anew while another process takes
    the one picked before the child binds it; (the child's pid, its port)."""
    port = free_port()
    failed = [""]

    def start() -> int:
        try:
            return serve_as_nobody(listen, serve, port)
        except AssertionError as error:
            failed[0] = str(error)
            raise

    def repick() -> None:
        nonlocal port
        port = free_port()

    pid = retry_taken_port(start, lambda: port_taken(failed[0]), repick)
    return pid, port


def stop_child(pid: int) -> None:
    """End a child this test forked, by its pid, and reap it."""
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    os.waitpid(pid, 0)
