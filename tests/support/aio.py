"""Run a coroutine to the end whatever this thread's asyncio state.

Playwright's sync API (the session-scoped browser of tests/conftest.py) leaves an event loop set as
running in the main thread for as long as the browser lives, and ``asyncio.run`` refuses to start
under it ("cannot be called from a running event loop"). A test that drives the SDK therefore runs
its coroutine in a fresh loop on a thread of its own, so the order of the tests does not matter.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def run(coroutine: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run(coroutine)`` on a new thread; its result, or its exception raised here."""
    outcome: dict[str, Any] = {}

    def main() -> None:
        try:
            outcome["result"] = asyncio.run(coroutine)
        except BaseException as exc:  # noqa: BLE001 - handed to the caller, traceback and all
            outcome["error"] = exc

    thread = threading.Thread(target=main, name="asyncio-run")
    thread.start()
    thread.join()
    if "error" in outcome:
        raise outcome["error"]
    return outcome["result"]
