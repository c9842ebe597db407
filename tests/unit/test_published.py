"""What the daemon's reader publishes for other threads (catalog/published.py): one frozen object, swapped whole."""

from __future__ import annotations

import pytest

from copilot_otel.config import Config
from copilot_otel.daemon.daemon import Daemon
from copilot_otel.delivery.sinks import MemorySink
from tests.support.events import SessionLog
from tests.support.files import append, new_session
from tests.support.net import wait_until


def passes_until(daemon: Daemon, predicate, what: str):
    """Run the reader's passes (in this thread) until ``predicate()`` holds."""

    def one_pass():
        daemon._pass()
        return predicate()

    return wait_until(one_pass, timeout=30, interval=0, what=what)


def test_a_publication_taken_before_a_pass_stays_as_it_was_and_the_next_one_replaces_it_whole(tmp_path):
    """Another thread that took ``daemon.published`` keeps a consistent, unchanging picture (summaries read-only,
    fields frozen); after the session moves on, a pass swaps in a new object with a later generation."""
    home = tmp_path / "home"
    log = SessionLog("s1")
    log.start()
    log.user()
    log.turn_start()
    log.turn_end()
    path = new_session(home, "s1")
    path.write_bytes(log.jsonl())
    config = Config(copilot_home=home, state_dir=tmp_path / "state", backfill=True, poll=True, rescan_interval=0.2)
    daemon = Daemon(config, sink=MemorySink())
    daemon.discoverer.start()
    try:
        passes_until(daemon, lambda: path in daemon.published.summaries, "the session published")
        before = daemon.published
        assert before.summaries[path].interactions == 1 and [s.session_id for s in before.liveness] == ["s1"]
        start = len(log.lines())
        log.user()
        log.turn_start()
        append(path, log.jsonl(start))
        passes_until(daemon, lambda: daemon.published.summaries[path].interactions == 2, "the new interaction")
        after = daemon.published
        assert after is not before and after.generation > before.generation
        assert before.summaries[path].interactions == 1  # what was taken did not change under its reader
        with pytest.raises(TypeError):
            before.summaries[path] = after.summaries[path]  # type: ignore[index]
        with pytest.raises(AttributeError):  # frozen
            before.generation = 0  # type: ignore[misc]
    finally:
        daemon.request_stop()
        daemon.run()  # returns at once: flushes, commits the checkpoint, releases the state lock
