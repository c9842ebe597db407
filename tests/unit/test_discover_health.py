"""discover.py: what keeps the daemon from seeing sessions, which /healthz reports: an unreadable session
folder, a watch that could not be set up; and a COPILOT_HOME not there yet, which it waits for. And the wait for
changes, which a stop ends at once."""

from __future__ import annotations

import errno
import time

from copilot_otel.source.discover import LOOK_EVERY, Discoverer


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_missing_copilot_home_is_waited_for_and_no_problem(tmp_path):
    """No COPILOT_HOME yet (a daemon installed on a machine where the CLI never ran): no problem however long it
    lasts, only "waiting for" the folder; then for its session-state; then nothing once that exists."""
    clock = Clock()
    home = tmp_path / "home"
    discoverer = Discoverer(home / "session-state", poll=True, clock=clock)
    discoverer.rescan()
    clock.now += 3600
    discoverer.rescan()
    assert discoverer.problem() is None
    assert discoverer.waiting() == (f"waiting for {home}: no Copilot CLI has run here yet "
                                    "(or COPILOT_HOME names another folder)")
    home.mkdir()
    discoverer.rescan()
    assert discoverer.problem() is None
    assert discoverer.waiting() == f"waiting for {home / 'session-state'}: no Copilot CLI session yet"
    (home / "session-state").mkdir()
    discoverer.rescan()
    assert discoverer.problem() is None and discoverer.waiting() is None


def test_a_watch_that_cannot_be_set_up_is_a_problem_unless_polling(tmp_path, monkeypatch):
    """inotify's watch limit reached (ENOSPC, here raised by a stand-in for watchdog's schedule: the limit is
    machine-wide and cannot be exhausted safely in a test): the problem names the folder, the reason and the
    fixes; --poll, which asks for no watch, has none."""
    from watchdog.observers import Observer

    (tmp_path / "session-state").mkdir()

    def schedule(*_args, **_kwargs):
        raise OSError(errno.ENOSPC, "inotify watch limit reached")

    monkeypatch.setattr(Observer, "schedule", schedule)
    discoverer = Discoverer(tmp_path / "session-state", rescan_interval=10)
    discoverer.rescan()
    problem = discoverer.problem()
    assert problem.startswith(f"cannot watch {tmp_path / 'session-state'} (inotify watch limit reached)")
    assert "max_user_watches" in problem and "--poll" in problem
    discoverer.stop()
    polling = Discoverer(tmp_path / "session-state", poll=True)
    polling.rescan()
    assert polling.problem() is None


def test_a_wake_ends_the_wait_for_changes_at_once(tmp_path):
    """wake() (the daemon asked to stop) makes the wait for changes return at once with nothing changed, even
    when it came just before the wait began; the wait after that waits again."""
    (tmp_path / "session-state").mkdir()
    clock = Clock()  # stands still: the next rescan is an hour away, the next look LOOK_EVERY
    discoverer = Discoverer(tmp_path / "session-state", poll=True, rescan_interval=3600, clock=clock)
    discoverer.rescan()
    discoverer.look()
    discoverer.wake()
    started = time.monotonic()
    assert discoverer.wait(30) == (set(), set())
    assert time.monotonic() - started < LOOK_EVERY / 2  # not woken, it waits until the next look is due
    started = time.monotonic()
    assert discoverer.wait(0.05) == (set(), set())
    assert time.monotonic() - started >= 0.05
