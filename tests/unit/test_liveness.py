"""liveness.py: what a session's process (alive or gone) makes of it, with the clock and the probe injected."""

from __future__ import annotations

import os

import pytest

from copilot_otel.source.liveness import (
    ABANDON,
    ABANDONED_RETENTION,
    DORMANT,
    DORMANT_AFTER,
    GRACE_SECONDS,
    Liveness,
    StuckPolicy,
    live_state,
    lock_pids,
    locks_expected,
    pid_alive,
    verdict,
)
from copilot_otel.vocab import ABANDONED, IDLE, STUCK, WAITING_TOOL, WAITING_USER, WORKING

NOW = 1_800_000_000.0
STUCK_AFTER = 600.0
STUCK_AFTER_TOOL = 1800.0
POLICY = StuckPolicy(STUCK_AFTER, STUCK_AFTER_TOOL, {"bash": 3600.0})


def view(state: str, *, quiet_for: float, pids=(101,), abandoned_at: float | None = None,
         tool: str | None = None) -> Liveness:
    """A session whose last event was ``quiet_for`` seconds before NOW (waiting on ``tool``)."""
    return Liveness("s-1", state, int((NOW - quiet_for) * 1e9), tuple(pids), abandoned_at, True, tool, "acme/api")


def alive(*pids: int):
    return lambda pid: pid in pids


@pytest.mark.parametrize("state", [WORKING, WAITING_TOOL, WAITING_USER, IDLE])
def test_a_live_session_reports_its_own_state(state):
    """A session whose process lives and that was heard from recently is in the model's state, not stalled."""
    assert live_state(view(state, quiet_for=5), now=NOW, policy=POLICY, alive=alive(101)) == (state, 0.0)


@pytest.mark.parametrize("state,tool,threshold", [(WORKING, None, STUCK_AFTER), (WAITING_TOOL, "view",
                                                                                 STUCK_AFTER_TOOL),
                                                  (WAITING_TOOL, "bash", 3600.0), (WAITING_TOOL, None,
                                                                                   STUCK_AFTER_TOOL)])
def test_past_its_threshold_a_session_at_work_is_stuck(state, tool, threshold):
    """Working: --stuck-after; waiting on a tool: that tool's own threshold, else --stuck-after-tool.
    Past it without an event, the session is stuck, with the seconds it has been quiet."""
    quiet = threshold + 30
    assert live_state(view(state, quiet_for=quiet, tool=tool), now=NOW, policy=POLICY, alive=alive(101)) == (
        STUCK, pytest.approx(quiet))
    assert live_state(view(state, quiet_for=threshold - 1, tool=tool), now=NOW, policy=POLICY,
                      alive=alive(101))[0] == state


def test_a_long_build_is_not_stuck_at_the_working_threshold():
    """A tool quiet for longer than --stuck-after but within --stuck-after-tool is only waiting on it."""
    assert live_state(view(WAITING_TOOL, quiet_for=STUCK_AFTER * 2, tool="bash"), now=NOW, policy=POLICY,
                      alive=alive(101)) == (WAITING_TOOL, 0.0)


def test_policy_thresholds():
    """Each state's threshold: none for a session waiting on its user or idle."""
    assert POLICY.threshold(WORKING) == STUCK_AFTER
    assert POLICY.threshold(WAITING_TOOL, "bash") == 3600.0
    assert POLICY.threshold(WAITING_TOOL, "edit") == STUCK_AFTER_TOOL
    assert POLICY.threshold(WAITING_USER) is None and POLICY.threshold(IDLE) is None


@pytest.mark.parametrize("state", [WAITING_USER, IDLE])
def test_waiting_for_the_person_or_idle_is_never_stuck(state):
    """However long a session waits for its user, or sits idle, it is not stuck."""
    assert live_state(view(state, quiet_for=10 * STUCK_AFTER), now=NOW, policy=POLICY,
                      alive=alive(101)) == (state, 0.0)


def test_a_session_without_a_live_process_is_not_live():
    """No pid alive (or none known): the session is not reported at all."""
    assert live_state(view(WORKING, quiet_for=5), now=NOW, policy=POLICY, alive=alive()) is None
    assert live_state(view(WORKING, quiet_for=5, pids=()), now=NOW, policy=POLICY, alive=alive()) is None


def test_any_live_holder_is_enough():
    """With several lock files, one live pid makes the session live."""
    assert live_state(view(WORKING, quiet_for=5, pids=(101, 202)), now=NOW, policy=POLICY,
                      alive=alive(202)) == (WORKING, 0.0)


def test_an_abandoned_session_stays_visible_for_a_while():
    """Abandoned sessions are reported, with how long they have been quiet, until the retention passes."""
    recent = view(WORKING, quiet_for=120, abandoned_at=NOW - 60)
    old = view(WORKING, quiet_for=ABANDONED_RETENTION + 120, abandoned_at=NOW - ABANDONED_RETENTION)
    never_probed = []
    assert live_state(recent, now=NOW, policy=POLICY, alive=never_probed.append) == (
        ABANDONED, pytest.approx(120))
    assert live_state(old, now=NOW, policy=POLICY, alive=never_probed.append) is None
    assert never_probed == []


class Probe:
    """An ``alive()`` that answers as told and counts its calls."""

    def __init__(self, answer: bool) -> None:
        self.answer = answer
        self.calls = 0

    def __call__(self) -> bool:
        self.calls += 1
        return self.answer


def decide(*, mid_turn: bool = False, awaiting: bool = False, since_event: float, quiet: float, probe: Probe):
    return verdict(mid_turn=mid_turn, awaiting_confirmation=awaiting, since_event=since_event, quiet=quiet,
                   alive=probe)


def test_a_process_that_died_mid_turn_abandons_the_session():
    """Mid-turn with no live process, past the grace period: abandoned."""
    assert decide(mid_turn=True, since_event=GRACE_SECONDS + 1, quiet=0, probe=Probe(False)) == ABANDON


def test_a_live_process_mid_turn_is_no_verdict():
    """Mid-turn with its process alive: nothing to decide (stuck is for the scrape)."""
    assert decide(mid_turn=True, since_event=3600, quiet=3600, probe=Probe(True)) is None


def test_within_the_grace_period_the_process_is_not_even_probed():
    """Just after an event a missing lock may be a CLI still starting: no probe, no verdict."""
    probe = Probe(False)
    assert decide(mid_turn=True, since_event=GRACE_SECONDS / 2, quiet=0, probe=probe) is None
    assert probe.calls == 0


def test_a_quiet_session_with_nothing_open_and_no_process_is_dormant():
    """Nothing open, quiet on both clocks for DORMANT_AFTER, process gone: set aside."""
    assert decide(since_event=DORMANT_AFTER + 1, quiet=DORMANT_AFTER, probe=Probe(False)) == DORMANT


@pytest.mark.parametrize("since_event,quiet,awaiting,answer", [
    (DORMANT_AFTER + 1, DORMANT_AFTER - 0.1, False, False),  # read just now (a backlog read late)
    (DORMANT_AFTER - 0.1, DORMANT_AFTER, False, False),  # its last event is recent
    (DORMANT_AFTER + 1, DORMANT_AFTER, True, False),  # the loop's end still waits for confirmation
    (DORMANT_AFTER + 1, DORMANT_AFTER, False, True),  # its process lives
])
def test_what_keeps_a_session_from_being_dormant(since_event, quiet, awaiting, answer):
    """Recent reading, a recent event, an end to confirm or a live process: no verdict."""
    assert decide(since_event=since_event, quiet=quiet, awaiting=awaiting, probe=Probe(answer)) is None


def test_lock_pids_reads_the_lock_file_names(tmp_path):
    """inuse.<pid>.lock names a holder; other files, and lock names that are not a pid, do not."""
    for name in ("inuse.123.lock", "inuse.456.lock", "inuse.abc.lock", "events.jsonl", "inuse.789.lock.tmp"):
        (tmp_path / name).write_text("")
    assert sorted(lock_pids(tmp_path)) == [123, 456]
    assert lock_pids(tmp_path / "missing") == []


def test_pid_alive():
    """This process is alive; pid 0 and negative pids never are."""
    assert pid_alive(os.getpid()) is True
    assert pid_alive(0) is False and pid_alive(-1) is False


def test_locks_expected_by_version():
    """A lock seen, or a CLI from 1.0.24 on (or of unknown version), writes lock files; 1.0.2 does not."""
    assert locks_expected([], (1, 0, 102)) and locks_expected([], None) and locks_expected([7], (1, 0, 2))
    assert not locks_expected([], (1, 0, 2)) and locks_expected([], (1, 0, 2), seen=True)


@pytest.mark.parametrize("stamped", [-3000.0, 0.0, 7200.0], ids=["50min-behind", "on-time", "2h-ahead"])
def test_a_daemons_view_is_stalled_from_when_its_last_event_arrived(stamped):
    """With the daemon's monotonic arrival time (seen_at), silence ignores the event's own timestamp: 50 min
    behind or 2 h ahead of the wall clock, the session is working 10 s after arrival and stuck 601 s after."""
    def daemon_view(seen_at: float) -> Liveness:
        return Liveness("s-1", WORKING, int((NOW + stamped) * 1e9), (101,), seen_at=seen_at)

    assert live_state(daemon_view(5000.0), now=NOW, policy=POLICY, alive=alive(101), monotonic=5010.0) == (WORKING, 0.0)
    assert live_state(daemon_view(5000.0), now=NOW, policy=POLICY, alive=alive(101), monotonic=5601.0) == (STUCK, 601.0)
    abandoned = Liveness("s-1", WORKING, int((NOW + stamped) * 1e9), (), abandoned_at=5000.0, seen_at=5000.0)
    assert live_state(abandoned, now=NOW, policy=POLICY, alive=alive(), monotonic=5010.0) == (ABANDONED, 10.0)
    assert live_state(abandoned, now=NOW, policy=POLICY, alive=alive(),
                      monotonic=5000.0 + ABANDONED_RETENTION) is None
