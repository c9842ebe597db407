"""Only the owner's sessions are the owner's, each once (issue 43, items 1 and 2).

The tests run as root, the owner; the attacker is a real second uid (nobody, tests/support/nobody.py) that plants
session folders and logs of its own where session-state is open to it (sticky 1777, as a CI cache or a shared
group leaves it), or swaps the log of a followed session whose folder it may write. Aliases of one log (a symlink
inside session-state, a hard link, a bind mount) and a link out of the tree are made by whoever could. The daemon,
`sessions`, `usage`, `inspect` and the web view's API must count, export and list each of the owner's sessions
once and nothing of the attacker's, and say each refusal once.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.support.commands import run_copilot_otel
from tests.support.daemon import DaemonProcess, cannot_run_as_nobody
from tests.support.events import SessionLog
from tests.support.files import EVENTS_FILE, SESSION_STATE, append
from tests.support.net import LOOPBACK, wait_until
from tests.support.nobody import NOBODY, as_nobody
from tests.support.scrape import value
from tests.support.spans import expected_keys, spans_now, wait_for_keys

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or bool(cannot_run_as_nobody()),
                                reason="plants sessions as a second real uid: needs root")

FAST = ("--idle-quiet", "0.3", "--rescan-interval", "1")
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "cli" / "1.0.102"
PLANTED = "0badc0de-0000-4000-8000-000000000001"


def real_log(scenario: str) -> bytes:
    """A stored real CLI 1.0.102 log."""
    return next((FIXTURES / scenario / SESSION_STATE).glob(f"*/{EVENTS_FILE}")).read_bytes()


def claim(session_id: str) -> bytes:
    """A stranger's log claiming 40 premium requests and 40,000 AI credits in acme/payroll."""
    log = SessionLog(session_id, model="claimed-model")
    log.start(repository="acme/payroll", branch="main", gitRoot="/work")
    log.user()
    log.turn_start()
    for _ in range(40):
        log.usage(cost=1.0, nano_aiu=1_000_000_000_000)
    log.turn_end()
    log.shutdown()
    return log.jsonl()


def plant(root: str, session_id: str, data: bytes) -> str:
    """As nobody: a session folder of nobody's own in session-state, with its log (0700/0600, as the CLI makes)."""
    folder = os.path.join(root, session_id)
    os.mkdir(folder, 0o700)
    with open(os.path.join(folder, EVENTS_FILE), "wb") as handle:
        handle.write(data)
    return folder


def owned_home(world: Path, *scenarios: str, mode: int = 0o1777) -> tuple[Path, list[Path]]:
    """A COPILOT_HOME of root's (the owner) in a folder nobody may cross, its session-state at ``mode``, holding
    the owner's real sessions; and their logs."""
    home = world / "home"
    state = home / SESSION_STATE
    state.mkdir(parents=True)
    home.chmod(0o755)
    state.chmod(mode)
    logs = []
    for scenario in scenarios:
        folder = state / f"owner-{scenario}"
        folder.mkdir(mode=0o700)
        (folder / EVENTS_FILE).write_bytes(real_log(scenario))
        logs.append(folder / EVENTS_FILE)
    return home, logs


def sessions_of(home: Path, state: Path, *args: str) -> list[dict]:
    result = run_copilot_otel("sessions", "--copilot-home", str(home), "--state-dir", str(state), "--json", *args)
    assert result.returncode == 0, result.stderr.decode()
    return json.loads(result.stdout)


def usage_total(home: Path, state: Path) -> tuple[dict, str]:
    result = run_copilot_otel("usage", "--copilot-home", str(home), "--state-dir", str(state), "--json")
    assert result.returncode == 0, result.stderr.decode()
    return json.loads(result.stdout)["total"], result.stderr.decode()


def test_a_session_another_user_plants_is_never_counted_exported_or_listed_as_the_owners(world_dir, tmp_path):
    """nobody plants a session folder of its own in a sticky 1777 session-state, before the daemon starts and
    while it runs: the daemon says at start that session-state is open to others, refuses each planted log once
    (a warning naming its path and owner, copilot_otel_logs_refused_total{reason="owner"}), exports only the
    owner's spans and lists only the owner's sessions in /api/sessions; `sessions` (from the daemon and from the
    files), `usage` and `inspect` neither list nor count them."""
    home, logs = owned_home(world_dir, "plain", "multi_turn")
    root = str(home / SESSION_STATE)
    as_nobody(plant, root, PLANTED, claim(PLANTED))
    state, traces = tmp_path / "state", tmp_path / "traces.jsonl"
    with DaemonProcess(home, state, traces_file=traces, args=FAST) as daemon:
        later = "0badc0de-0000-4000-8000-000000000002"
        as_nobody(plant, root, later, claim(later))
        append(Path(root) / PLANTED / EVENTS_FILE, b"\n")  # written on: still not the owner's
        wait_until(lambda: later in daemon.log_text(), timeout=20, what="the session planted later refused")
        wait_for_keys(traces, expected_keys(logs))
        assert value(daemon.scrape(), "copilot_otel_logs_refused_total", reason="owner") == 2
        listed = json.loads(daemon.api_get("/api/sessions"))["sessions"]
        assert sorted(s["id"] for s in listed) == ["owner-multi_turn", "owner-plain"]
        address = ("--metrics-address", f"{LOOPBACK}:{daemon.port}")
        assert sorted(s["id"] for s in sessions_of(home, state, *address)) == ["owner-multi_turn", "owner-plain"]
    assert sorted(spans_now(traces)) == expected_keys(logs)
    text = daemon.log_text()
    assert "may be written by other users" in text and f"other users could plant sessions in {root}" in text
    for planted in (PLANTED, later):
        said = [line for line in text.splitlines() if f"{root}/{planted}" in line and "WARNING" in line]
        assert len(said) == 1 and "belongs to user nobody" in said[0], said
    assert sorted(s["id"] for s in sessions_of(home, state, "--from-files")) == ["owner-multi_turn", "owner-plain"]
    total, stderr = usage_total(home, state)
    # The owner's logs (BYOK) report no AI credits: their total is unknown (null), so any amount is the stranger's.
    assert total["sessions"] == 2 and total["premium_requests"] < 40 and total["nano_aiu"] is None
    assert f"{root}/{PLANTED}" in stderr and "belongs to user nobody" in stderr
    refused = run_copilot_otel("inspect", "--copilot-home", str(home), PLANTED[:8])
    assert refused.returncode == 2 and "not a session id" in refused.stderr.decode()


def test_a_followed_log_swapped_for_another_users_file_exports_nothing_of_it(world_dir, tmp_path):
    """The owner's session folder is open to others (restored 0777): while the daemon follows its log, nobody
    renames a log of its own over it. Nothing of nobody's log is exported or listed; the swap is refused once,
    naming the owner of the file; the owner's other sessions go on being followed."""
    home, logs = owned_home(world_dir, "plain", "failing_tool", mode=0o755)
    folder = logs[0].parent
    folder.chmod(0o777)
    state, traces = tmp_path / "state", tmp_path / "traces.jsonl"

    def swap(target: str, data: bytes) -> None:
        with open(target + ".new", "wb") as handle:
            handle.write(data)
        os.rename(target + ".new", target)

    owners = expected_keys(logs)
    with DaemonProcess(home, state, traces_file=traces, args=FAST) as daemon:
        wait_for_keys(traces, owners)
        as_nobody(swap, str(logs[0]), claim(folder.name))
        wait_until(lambda: "belongs to user nobody" in daemon.log_text(), timeout=20, what="the swap refused")
        later = home / SESSION_STATE / "owner-later" / EVENTS_FILE
        later.parent.mkdir(mode=0o700)
        later.write_bytes(real_log("multi_turn"))
        everything = sorted(owners + expected_keys([later]))
        wait_for_keys(traces, everything)
        assert value(daemon.scrape(), "copilot_otel_logs_refused_total", reason="owner") == 1
        listed = json.loads(daemon.api_get("/api/sessions"))["sessions"]
        assert sorted(s["id"] for s in listed) == ["owner-failing_tool", "owner-later"]
    assert sorted(spans_now(traces)) == everything
    said = [line for line in daemon.log_text().splitlines() if "belongs to user nobody" in line]
    assert len(said) == 1 and str(logs[0]) in said[0]


def test_a_link_to_another_users_folder_outside_the_tree_is_refused_everywhere(world_dir, tmp_path):
    """nobody keeps a readable session folder outside COPILOT_HOME and links it into the open session-state:
    the daemon, `sessions` and `usage` refuse it (said once, counted as outside) and count only the owner's."""
    home, logs = owned_home(world_dir, "plain")
    outside = world_dir / "theirs"
    outside.mkdir(mode=0o755)
    os.chown(outside, NOBODY, NOBODY)  # nobody's own folder, readable by all

    def keep_outside(path: str, data: bytes) -> None:
        with open(os.path.join(path, EVENTS_FILE), "wb") as handle:
            handle.write(data)
        os.symlink(path, os.path.join(str(home / SESSION_STATE), PLANTED))

    as_nobody(keep_outside, str(outside), claim(PLANTED))
    state, traces = tmp_path / "state", tmp_path / "traces.jsonl"
    with DaemonProcess(home, state, traces_file=traces, args=FAST) as daemon:
        wait_for_keys(traces, expected_keys(logs))
        daemon.wait_for_metric("copilot_otel_logs_refused_total", 1, timeout=20, reason="outside")
    assert sorted(spans_now(traces)) == expected_keys(logs)
    assert daemon.log_text().count("leads outside") == 1
    assert [s["id"] for s in sessions_of(home, state, "--from-files")] == ["owner-plain"]
    total, stderr = usage_total(home, state)
    assert total["sessions"] == 1 and "leads outside" in stderr


def _bind(source: Path, target: Path) -> bool:
    target.mkdir(mode=0o700)
    done = subprocess.run(["mount", "--bind", str(source), str(target)], capture_output=True)
    if done.returncode != 0:
        target.rmdir()
    return done.returncode == 0


def test_aliases_of_one_log_are_one_session(tmp_path):
    """`ln -s <id> current` inside session-state, a hard link of the log in another folder and (where this machine
    lets root mount) a bind mount of the folder: the daemon exports and lists the session once, and counts the
    aliases as such; `sessions` lists it once and `usage` counts its calls once."""
    home = tmp_path / "home"
    root = home / SESSION_STATE
    real = root / "f0a1b2c3-real"
    real.mkdir(parents=True)
    (real / EVENTS_FILE).write_bytes(real_log("multi_turn"))
    (root / "current").symlink_to(real.name, target_is_directory=True)
    (root / "0-hard-link").mkdir()
    os.link(real / EVENTS_FILE, root / "0-hard-link" / EVENTS_FILE)
    mounted = _bind(real, root / "1-bind-mount")
    state, traces = tmp_path / "state", tmp_path / "traces.jsonl"
    single = tmp_path / "single" / SESSION_STATE / real.name / EVENTS_FILE
    single.parent.mkdir(parents=True)
    single.write_bytes(real_log("multi_turn"))
    try:
        with DaemonProcess(home, state, traces_file=traces, args=FAST) as daemon:
            spans = wait_for_keys(traces, expected_keys([root / _first(root) / EVENTS_FILE]))
            aliases = 3 if mounted else 2
            daemon.wait_for_metric("copilot_otel_logs_refused_total", aliases, timeout=20, reason="alias")
            assert len(json.loads(daemon.api_get("/api/sessions"))["sessions"]) == 1
            assert value(daemon.scrape(), "copilot_otel_files_watched") == 1
        assert len(spans) == len(set(spans)) == len(spans_now(traces))
        assert len(sessions_of(home, state, "--from-files")) == 1
        total, _ = usage_total(home, state)
        alone, _ = usage_total(tmp_path / "single", tmp_path / "state-single")
        assert total["sessions"] == 1 and total["llm_calls"] == alone["llm_calls"] > 0
    finally:
        if mounted:
            subprocess.run(["umount", str(root / "1-bind-mount")], check=True)


def _first(root: Path) -> str:
    """The folder the daemon takes a hard-linked log at: the first of its names by path (the symlink is never
    taken)."""
    return min(name for name in os.listdir(root) if not (root / name).is_symlink())
