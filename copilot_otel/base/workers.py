"""A pool of worker processes that maps a function over work items, results in item order.

Replay uses it to decode, model and encode shards of session files on every core. What a
worker logs (a skipped line, a model bug) comes back with its result and is logged by the
parent just before that result is handed out, so the log reads as a single-process run's.
A worker that dies makes :meth:`WorkerPool.map` raise :class:`WorkerError`.
"""

from __future__ import annotations

import gc
import logging
import os
import sys
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

# queue and signal, and these, are imported where a pool is made or a worker runs (where concurrent.futures has
# imported them already): a replay of a few sessions never pays for them
if TYPE_CHECKING:
    from concurrent.futures import Future

LOGGER = "copilot_otel"  # the records of this logger (and its children) travel back to the parent
MAX_WORKERS = 8
GC_THRESHOLD = 20_000  # gen-0 allocations between collections in a worker (default 700)
_END = object()


class WorkerError(RuntimeError):
    """A worker process died (killed, out of memory) before it finished its share."""


def available_cpus() -> int:
    """The CPUs this process may run on (its affinity mask, not the machine's count)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def _context():
    import multiprocessing

    # fork starts a worker in milliseconds with every module already imported; it is safe only
    # while this process runs no other thread (a lock held elsewhere would stay held in the child).
    if sys.platform == "linux" and threading.active_count() == 1:
        return multiprocessing.get_context("fork")
    return multiprocessing.get_context("spawn")


def _init_worker(level: int) -> None:
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle: it stops the pool
    logging.getLogger(LOGGER).setLevel(level)
    one_run_collector()  # forked, the heap it started with stays shared, out of collections


def one_run_collector() -> None:
    """The cyclic collector of a process that lives for one replay (a worker, or `replay` itself): what it
    holds now (modules, settings) is left out of collections, and it collects only when many objects pile up,
    since what a replay allocates is freed by reference counting (a replay in one process: 3 % of its
    instructions, the output the same)."""
    gc.freeze()
    gc.set_threshold(GC_THRESHOLD, 10, 10)


def _call(func: Callable[[Any], Any], item: Any) -> tuple[Any, list[logging.LogRecord]]:
    """Run ``func(item)`` in a worker, keeping what it logs to hand back with its result."""
    import logging.handlers
    import queue

    records: queue.SimpleQueue = queue.SimpleQueue()
    logger = logging.getLogger(LOGGER)
    handlers, propagate = logger.handlers, logger.propagate
    logger.handlers, logger.propagate = [logging.handlers.QueueHandler(records)], False  # prepared: they pickle
    try:
        result = func(item)
    finally:
        logger.handlers, logger.propagate = handlers, propagate
    out = []
    while not records.empty():
        out.append(records.get())
    return result, out


class WorkerPool:
    """``workers`` processes; use as a context manager, then :meth:`map`."""

    def __init__(self, workers: int) -> None:
        self.workers = workers
        context = _context()
        self.start_method = context.get_start_method()
        from concurrent.futures import ProcessPoolExecutor

        self._executor = ProcessPoolExecutor(workers, mp_context=context, initializer=_init_worker,
                                             initargs=(logging.getLogger(LOGGER).getEffectiveLevel(),))

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def close(self) -> None:
        """Stop the workers; a share not started yet is dropped, one running is waited for."""
        self._executor.shutdown(wait=True, cancel_futures=True)

    def map(self, func: Callable[[Any], Any], items: Iterable[Any]) -> Iterator[Any]:
        """``func(item)`` for each item, computed in the workers, yielded in item order.

        At most two items per worker are in flight or waiting to be taken, so a slow consumer
        (a remote backend) holds the workers back instead of piling their results up in memory.
        """
        pending: deque[Future] = deque()
        items = iter(items)

        def submit_next() -> None:
            item = next(items, _END)
            if item is not _END:
                with _reporting_death():
                    pending.append(self._executor.submit(_call, func, item))

        for _ in range(2 * self.workers):
            submit_next()
        while pending:
            with _reporting_death():
                result, records = pending.popleft().result()
            submit_next()
            for record in records:
                logging.getLogger(record.name).handle(record)
            yield result


@contextmanager
def _reporting_death() -> Iterator[None]:
    from concurrent.futures.process import BrokenProcessPool

    try:
        yield
    except BrokenProcessPool as exc:
        raise WorkerError(f"a replay worker process died ({exc})") from None
