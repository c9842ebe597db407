"""base/collector.py: the cyclic collector is off while the reader has a backlog, collects at most every
max_deferral meanwhile, and is on again once the backlog is read (or left alone if someone else turned it off)."""

from __future__ import annotations

import gc
import weakref

import pytest

from copilot_otel.base.collector import DeferredCollection


class Node:
    """Something that dies only by the cyclic collector once in a cycle."""

    def __init__(self) -> None:
        self.me = self


def a_cycle() -> weakref.ref:
    return weakref.ref(Node())


@pytest.fixture(autouse=True)
def collector_on():
    assert gc.isenabled()
    yield
    gc.enable()


def test_off_while_a_backlog_lasts_and_on_after():
    now = [0.0]
    collection = DeferredCollection(max_deferral=30.0, clock=lambda: now[0])
    collection.backlog(True)
    assert not gc.isenabled() and collection.deferred
    cycles = [a_cycle() for _ in range(5000)]  # far past the first generation's threshold
    now[0] = 10.0
    collection.backlog(True)
    assert all(cycle() is not None for cycle in cycles)  # nothing collected them
    collection.backlog(False)
    assert gc.isenabled() and not collection.deferred
    gc.collect()
    assert all(cycle() is None for cycle in cycles)


def test_a_long_backlog_is_collected_every_max_deferral():
    now = [0.0]
    collection = DeferredCollection(max_deferral=30.0, clock=lambda: now[0])
    collection.backlog(True)
    cycle = a_cycle()
    now[0] = 29.0
    collection.backlog(True)
    assert cycle() is not None
    now[0] = 30.0
    collection.backlog(True)
    assert cycle() is None and not gc.isenabled()  # collected, and off again for the next 30 s
    later = a_cycle()
    now[0] = 59.0
    collection.backlog(True)
    assert later() is not None
    collection.resume()
    assert gc.isenabled()


def test_a_collector_someone_else_turned_off_stays_off():
    gc.disable()
    collection = DeferredCollection()
    collection.backlog(True)
    collection.backlog(False)
    collection.resume()
    assert not gc.isenabled() and not collection.deferred
