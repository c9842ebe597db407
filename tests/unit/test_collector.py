"""daemon/collector.py: the cyclic collector is off while the reader reads, collects once every max_deferral
meanwhile, and is on again when it rests (or left alone if someone else turned it off)."""

from __future__ import annotations

import gc
import weakref

import pytest

from copilot_otel.daemon.collector import DeferredCollection


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


def test_off_while_the_reader_reads_and_on_after():
    now = [0.0]
    collection = DeferredCollection(max_deferral=30.0, clock=lambda: now[0])
    collection.reading(True)
    assert not gc.isenabled() and collection.deferred
    cycles = [a_cycle() for _ in range(5000)]  # far past the first generation's threshold
    now[0] = 10.0
    collection.reading(True)
    assert all(cycle() is not None for cycle in cycles)  # nothing collected them
    collection.reading(False)
    assert gc.isenabled() and not collection.deferred
    gc.collect()
    assert all(cycle() is None for cycle in cycles)


def test_a_long_read_is_collected_every_max_deferral():
    now = [0.0]
    collection = DeferredCollection(max_deferral=30.0, clock=lambda: now[0])
    collection.reading(True)
    cycle = a_cycle()
    now[0] = 29.0
    collection.reading(True)
    assert cycle() is not None
    now[0] = 30.0
    collection.reading(True)
    assert cycle() is None and not gc.isenabled()  # collected, and off again for the next 30 s
    later = a_cycle()
    now[0] = 59.0
    collection.reading(True)
    assert later() is not None
    collection.resume()
    assert gc.isenabled()


def test_a_collector_someone_else_turned_off_stays_off():
    gc.disable()
    collection = DeferredCollection()
    collection.reading(True)
    collection.reading(False)
    collection.resume()
    assert not gc.isenabled() and not collection.deferred
