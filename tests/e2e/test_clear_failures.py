"""Clear failures: anything unreadable is one line naming the file and the reason, never a traceback, in
`inspect`, `replay` and `sessions`. Run as nobody when the tests run as root (root reads any file)."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

from tests.support.commands import run_copilot_otel
from tests.support.daemon import AS_NOBODY, cannot_run_as_nobody


@pytest.fixture
def world(cli_corpus):
    """A COPILOT_HOME everyone may read, with two real sessions, in a folder everyone may traverse."""
    if os.geteuid() == 0 and cannot_run_as_nobody():
        pytest.skip(cannot_run_as_nobody())
    path = Path(tempfile.mkdtemp(prefix="copilot-otel-clear-"))
    home = path / "home"
    for scenario in ("plain", "multi_turn"):
        run = cli_corpus[scenario]
        shutil.copytree(run.session_dir, home / "session-state" / run.session_id)
    for sub in [path, *path.rglob("*")]:
        sub.chmod(0o755 if sub.is_dir() else 0o644)
    yield path
    for sub in [path, *path.rglob("*")]:
        if sub.is_dir() and not sub.is_symlink():
            sub.chmod(0o755)
    shutil.rmtree(path)


def as_user(*args: str):
    """copilot-otel ARGS as nobody (when root), with a state folder it may write."""
    return run_copilot_otel(*args, prefix=AS_NOBODY if os.geteuid() == 0 else ())


def one_line(result, *words: str) -> str:
    lines = [line for line in result.stderr.decode().splitlines() if line.strip()]
    assert "Traceback" not in result.stderr.decode()
    matching = [line for line in lines if all(word in line for word in words)]
    assert len(matching) == 1, lines
    return matching[0]


def test_an_unreadable_log(world, cli_corpus):
    """inspect: exit 2 with the file and the reason; replay: the other sessions are exported, the unreadable
    one named, exit 1; sessions: the others listed, the unreadable one named."""
    state = world / "state"
    state.mkdir(mode=0o700)
    if os.geteuid() == 0:
        os.chown(state, 65534, 65534)  # the user's own state folder (nobody's: the commands run as nobody)
    unreadable = world / "home" / "session-state" / cli_corpus["plain"].session_id / "events.jsonl"
    unreadable.chmod(0o000)
    inspected = as_user("inspect", str(unreadable))
    assert inspected.returncode == 2
    one_line(inspected, str(unreadable), "Permission denied")
    replayed = as_user("replay", str(world / "home"), "--traces-file", str(state / "t.jsonl"), "--state-dir",
                       str(state))
    assert replayed.returncode == 1
    assert "exported" in one_line(replayed, "from 1 session(s)")
    one_line(replayed, str(unreadable), "cannot read it (Permission denied)")
    listed = as_user("sessions", "--copilot-home", str(world / "home"), "--from-files", "--state-dir", str(state))
    assert listed.returncode == 0 and cli_corpus["multi_turn"].session_id[:8] in listed.stdout.decode()
    one_line(listed, str(unreadable), "Permission denied")


@pytest.mark.parametrize("command", ["inspect", "sessions", "replay"])
def test_an_unreadable_copilot_home_says_so(world, command):
    """Not "no events.jsonl found": the folder and the reason, in one line, exit 2."""
    home = world / "home"
    home.chmod(0o000)
    args = {"inspect": ("inspect", "latest", "--copilot-home", str(home)),
            "sessions": ("sessions", "--copilot-home", str(home), "--from-files", "--state-dir", str(world / "s")),
            "replay": ("replay", str(home), "--state-dir", str(world / "s"))}[command]
    result = as_user(*args)
    assert result.returncode == 2, result.stderr.decode()
    line = one_line(result, "cannot read it")
    assert str(home) in line and ("Permission denied" in line or "permission denied" in line)
