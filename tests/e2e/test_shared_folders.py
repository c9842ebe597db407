"""Issue 21, item 10: files in shared folders. Another user (nobody: the tests run as root, so files and
folders are planted as nobody with chown) owns the trace file, plants a link or a hard link where it will
be written (at a fake ~/.bashrc of ours), makes the state folder writable or owns it, or plants backups
that look newer than ours: `run` and `replay` refuse in one line with exit 2 and touch nothing; a sticky
shared folder (like /tmp) may hold the trace file, which is then ours; rotation deletes only backups it
wrote. `sessions` (which only caches there) lists without its cache, saying why."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from tests.support.commands import run_copilot_otel, run_replay
from tests.support.daemon import DaemonProcess
from tests.support.files import EVENTS_FILE, SESSION_STATE
from tests.support.net import free_port, wait_until
from tests.support.otlp_json import read_spans

NOBODY = 65534
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "cli" / "1.0.102"
pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="plants files as another user: needs root")


def real_log(scenario: str) -> bytes:
    return next((FIXTURES / scenario / SESSION_STATE).glob(f"*/{EVENTS_FILE}")).read_bytes()


@pytest.fixture
def home(tmp_path) -> Path:
    """A COPILOT_HOME with one finished real session."""
    home = tmp_path / "home"
    folder = home / SESSION_STATE / "plain-session"
    folder.mkdir(parents=True)
    (folder / EVENTS_FILE).write_bytes(real_log("plain"))
    return home


@pytest.fixture
def shared(tmp_path) -> Path:
    """A folder every user may write in, sticky as /tmp is."""
    path = tmp_path / "shared"
    path.mkdir()
    path.chmod(0o1777)
    return path


def as_nobody(*paths: Path) -> None:
    for path in paths:
        os.lchown(path, NOBODY, NOBODY)


def one_line(result, *words: str) -> str:
    """Exit 2, no traceback, exactly one line on stderr, holding ``words``; the line."""
    stderr = result.stderr.decode(errors="replace")
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert result.returncode == 2, f"exit {result.returncode}: {stderr[-2000:]}"
    assert "Traceback" not in stderr and len(lines) == 1, stderr[-2000:]
    for word in words:
        assert word in lines[0], f"{word!r} not in: {lines[0]}"
    return lines[0]


def run_daemon(home: Path, state: Path, *args: str):
    """`copilot-otel run` expected to refuse at start (bounded, in case it does not)."""
    return run_copilot_otel("run", "--copilot-home", str(home), "--state-dir", str(state), "--metrics-address",
                            f"127.0.0.1:{free_port()}", *args, timeout=60)


def test_a_trace_file_another_user_owns_is_refused(home, shared, tmp_path):
    """A 0666 trace file of nobody's in a shared folder: appended to before; now replay and run refuse it in
    one line naming its owner, and it is left as it was."""
    traces = shared / "traces.jsonl"
    traces.write_bytes(b"theirs\n")
    traces.chmod(0o666)
    as_nobody(traces)
    for result in (run_replay(str(home), "--traces-file", str(traces), "--state-dir", str(tmp_path / "state")),
                   run_daemon(home, tmp_path / "state", "--traces-file", str(traces))):
        one_line(result, str(traces), "belongs to user nobody", "--traces-file")
    assert traces.read_bytes() == b"theirs\n" and traces.stat().st_uid == NOBODY


@pytest.mark.parametrize("planted", ["nobody's link", "our own link", "hard link", "fifo"])
def test_what_is_planted_at_the_trace_files_path_is_refused_and_its_target_untouched(home, shared, tmp_path,
                                                                                    planted):
    """A link to a fake ~/.bashrc of ours at the trace file's path (planted by nobody, or even made by us), a
    hard link to it, a FIFO: refused in one line; the .bashrc keeps its bytes, nothing blocks."""
    bashrc = tmp_path / "victim" / ".bashrc"
    bashrc.parent.mkdir()
    bashrc.write_bytes(b"# my shell settings\n")
    traces = shared / "traces.jsonl"
    if planted == "fifo":
        os.mkfifo(traces)
        said = "not a regular file"
    elif planted == "hard link":
        os.link(bashrc, traces)
        said = "other hard link"
    else:
        traces.symlink_to(bashrc)
        if planted == "nobody's link":
            as_nobody(traces)
        said = "symbolic link"
    for result in (run_replay(str(home), "--traces-file", str(traces), "--state-dir", str(tmp_path / "state")),
                   run_daemon(home, tmp_path / "state", "--traces-file", str(traces))):
        one_line(result, str(traces), said)
    assert bashrc.read_bytes() == b"# my shell settings\n"


def _world_writable(state: Path) -> str:
    state.mkdir()
    state.chmod(0o777)
    return "may be written by other users (mode 0777"


def _sticky(state: Path) -> str:
    state.mkdir()
    state.chmod(0o1777)
    return "may be written by other users (mode 1777"


def _nobodys(state: Path) -> str:
    state.mkdir(mode=0o700)
    as_nobody(state)
    return "belongs to user nobody, not yours"


def _in_a_shared_folder(state: Path) -> str:
    state.parent.chmod(0o777)  # not sticky: anyone may rename our folder away and put theirs in its place
    state.mkdir(mode=0o700)
    return f"{state.parent} may be written by other users (mode 0777"


def _parent_of_nobodys(state: Path) -> str:
    as_nobody(state.parent)
    state.mkdir(mode=0o700)
    return f"{state.parent} belongs to user nobody"


@pytest.mark.parametrize("make", [_world_writable, _sticky, _nobodys, _in_a_shared_folder, _parent_of_nobodys],
                         ids=lambda make: make.__name__.strip("_"))
def test_a_state_folder_another_user_could_change_is_refused(home, tmp_path, make):
    """The state folder (checkpoint, lock, dead letters, replay ledgers, default trace file) must be ours
    and writable by no one else, nor may a folder above it be: run and replay refuse in one line, exit 2,
    creating nothing; `sessions` lists anyway, without reading or writing its cache there, and says so."""
    state = tmp_path / "box" / "state"
    state.parent.mkdir()
    said = make(state)
    one_line(run_daemon(home, state), "refusing the state directory", str(state), said, "--state-dir")
    one_line(run_replay(str(home), "--state-dir", str(state), "--traces-file", str(tmp_path / "t.jsonl")),
             "refusing the state directory", said)
    listed = run_copilot_otel("sessions", "--copilot-home", str(home), "--state-dir", str(state), "--from-files")
    assert listed.returncode == 0 and "plain-se" in listed.stdout.decode()
    (line,) = listed.stderr.decode().splitlines()
    assert "not using the summary cache" in line and said in line
    assert os.listdir(state) == [] and not (tmp_path / "t.jsonl").exists()


def test_a_sticky_shared_folder_may_hold_the_trace_file(home, shared, tmp_path):
    """As /tmp: others may add names there, not take ours away; replay and the daemon write the trace file
    there, created 0600 and ours."""
    traces = shared / "traces.jsonl"
    result = run_replay(str(home), "--traces-file", str(traces), "--state-dir", str(tmp_path / "state"))
    assert result.returncode == 0, result.stderr.decode()
    replayed = len(read_spans(traces))
    assert replayed > 0
    st = traces.stat()
    assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (0, 0o600)
    with DaemonProcess(home, tmp_path / "daemon-state", traces_file=traces, args=("--rescan-interval", "1")):
        wait_until(lambda: len(read_spans(traces)) >= 2 * replayed, what="the daemon's spans")


def test_planted_backups_are_never_counted_nor_deleted(home, shared, tmp_path):
    """Ten empty files named as backups from the year 2999, in the trace file's sticky folder, five planted by
    nobody and five even by us: rotation (2 backups kept) once deleted every real backup for them; now it
    counts and deletes only the backups it wrote, and the planted files stay as they are."""
    traces = shared / "traces.jsonl"
    args = (str(home), "--traces-file", str(traces), "--state-dir", str(tmp_path / "state"),
            "--traces-file-max-bytes", "1000", "--traces-file-backups", "2", "--restart")  # each run writes all again

    def replay_and_rotate() -> None:
        result = run_replay(*args)
        assert result.returncode == 0, result.stderr.decode()

    for _ in range(3):
        replay_and_rotate()
    planted = [shared / f"traces-2999-01-01T00-00-0{n}.000.jsonl" for n in range(10)]
    for n, path in enumerate(planted):
        path.write_bytes(b"")
        if n < 5:
            as_nobody(path)
    for _ in range(3):
        replay_and_rotate()
    assert all(path.exists() and path.read_bytes() == b"" for path in planted)
    real = sorted(path for path in shared.glob("traces-*.jsonl") if path not in planted)
    assert len(real) == 2, os.listdir(shared)
    assert all(len(read_spans(path)) > 0 for path in real)
    manifest = json.loads((shared / ".traces.jsonl.backups").read_bytes())
    assert [name for name, _inode in manifest] == [path.name for path in real]


def test_the_metrics_textfile_is_written_through_no_planted_name(home, shared, tmp_path):
    """replay --metrics-file in a sticky shared folder: written whole, ours, readable by node_exporter (0644),
    through a temporary file of a name no one can guess (prometheus_client's write_to_textfile used
    <path>.<pid>.<thread>); one of nobody's, or a link, at its path is refused before the replay, untouched."""
    metrics = shared / "copilot.prom"
    result = run_replay(str(home), "--traces-file", str(tmp_path / "t.jsonl"), "--state-dir", str(tmp_path / "state"),
                        "--metrics-file", str(metrics))
    assert result.returncode == 0, result.stderr.decode()
    st = metrics.stat()
    assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (0, 0o644) and "copilot_turns_total" in metrics.read_text()
    assert sorted(os.listdir(shared)) == ["copilot.prom"]
    theirs, link = shared / "theirs.prom", shared / "link.prom"
    theirs.write_bytes(b"# theirs\n")
    as_nobody(theirs)
    link.symlink_to(tmp_path / "victim.prom")
    for path, said in ((theirs, "belongs to user nobody"), (link, "symbolic link")):
        refused = run_replay(str(home), "--traces-file", str(tmp_path / "t2.jsonl"), "--state-dir",
                             str(tmp_path / "state"), "--metrics-file", str(path))
        one_line(refused, "--metrics-file", str(path), said)
    assert theirs.read_bytes() == b"# theirs\n" and not (tmp_path / "victim.prom").exists()
    assert not (tmp_path / "t2.jsonl").exists()


def test_no_strict_modes_accepts_a_shared_volume_and_still_checks_the_files(home, tmp_path):
    """--no-strict-modes (COPILOT_OTEL_NO_STRICT_MODES=true), as ssh's StrictModes no, for a volume only its pod
    reaches: a Kubernetes emptyDir is made root's and 0777 (2777 with fsGroup). The daemon and replay use it;
    a link planted at the trace file's path there is still refused."""
    volume = tmp_path / "empty-dir"
    volume.mkdir()
    volume.chmod(0o2777)
    with DaemonProcess(home, volume, env={"COPILOT_OTEL_NO_STRICT_MODES": "true"}, args=("--rescan-interval", "1")):
        wait_until(lambda: (volume / "traces.jsonl").exists() and len(read_spans(volume / "traces.jsonl")) > 0,
                   what="spans in the volume")
    result = run_replay(str(home), "--state-dir", str(volume), "--no-strict-modes")
    assert result.returncode == 0, result.stderr.decode()
    (volume / "link.jsonl").symlink_to(tmp_path / "victim")
    refused = run_replay(str(home), "--state-dir", str(volume), "--no-strict-modes", "--traces-file",
                         str(volume / "link.jsonl"))
    one_line(refused, "symbolic link")
    assert not (tmp_path / "victim").exists()
