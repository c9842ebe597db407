"""discover.py: what keeps the daemon from seeing sessions, which /healthz reports: a COPILOT_HOME missing
for longer than a grace period, an unreadable session folder, a watch that could not be set up."""

from __future__ import annotations

import errno

from copilot_otel.source.discover import MISSING_GRACE, Discoverer


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_missing_copilot_home_is_a_problem_only_after_the_grace(tmp_path):
    """A misspelled COPILOT_HOME reads nothing: fine for MISSING_GRACE seconds (a CLI about to create it),
    then a problem naming it; once it exists without sessions yet, no problem."""
    clock = Clock()
    discoverer = Discoverer(tmp_path / "home" / "session-state", poll=True, clock=clock)
    discoverer.rescan()
    assert discoverer.problem() is None
    clock.now += MISSING_GRACE + 1
    discoverer.rescan()
    assert discoverer.problem() == f"{tmp_path / 'home'} does not exist (is COPILOT_HOME or --copilot-home right?)"
    (tmp_path / "home").mkdir()
    discoverer.rescan()
    assert discoverer.problem() is None
    (tmp_path / "home" / "session-state").mkdir()
    discoverer.rescan()
    assert discoverer.problem() is None


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
