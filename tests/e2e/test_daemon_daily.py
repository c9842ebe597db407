"""The daemon in daily use, run for real: one info line per session started and ended (none for history),
lag measured only while a session is at work, what it creates private and its trace file rotated,
/healthz saying why sessions cannot be seen, and no library warning on stderr."""

from __future__ import annotations

import os
import re
import shutil
import stat
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from copilot_otel.delivery.rotation import backups_of
from tests.support.copilot_cli import prompt_for
from tests.support.daemon import AS_NOBODY, DaemonProcess, cannot_run_as_nobody
from tests.support.net import wait_until
from tests.support.otlp_json import read_spans
from tests.support.scrape import value

FAST = ("--idle-quiet", "0.3", "--rescan-interval", "0.5")


def mode(path: Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def health(daemon: DaemonProcess) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(daemon.health_url, timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def test_one_line_per_session_and_lag_only_while_one_works(cli, provider, cli_corpus, tmp_path):
    """History read at start-up says nothing per session and reports no lag, however old its events; a
    session run while the daemon follows gets one 'started' and one 'ended' line, and lag is measured
    while it works."""
    home = tmp_path / "home"
    for run in list(cli_corpus.values())[:3]:
        shutil.copytree(run.session_dir, home / "session-state" / run.session_id)
    with DaemonProcess(home, tmp_path / "state", traces_file=tmp_path / "t.jsonl", args=FAST,
                       log_level="info") as daemon:
        daemon.wait_for_metric("copilot_otel_files_watched", 3, timeout=30)
        time.sleep(1.5)  # rescans of a quiet home: nothing to log, no lag
        assert value(daemon.scrape(), "copilot_otel_lag_seconds") == 0
        assert " session " not in daemon.log_text()
        process = cli.start(prompt_for("sleep_tool", 4), home=home, port=provider.port, cwd=tmp_path / "work")
        wait_until(lambda: value(daemon.scrape(), "copilot_sessions", state="waiting_tool") == 1, timeout=90,
                   what="the session to wait on its tool")
        wait_until(lambda: value(daemon.scrape(), "copilot_otel_lag_seconds") >= 1, what="lag while it works")
        process.wait()
        wait_until(lambda: f"session {process.session_id} ended" in daemon.log_text(), what="the ended line")
        wait_until(lambda: value(daemon.scrape(), "copilot_otel_lag_seconds") == 0, what="no lag once idle")
        log = daemon.log_text()
    mine = [line.split(" ", 3)[3] for line in log.splitlines() if f"session {process.session_id}" in line]
    assert len(mine) == 2, mine
    assert re.fullmatch(rf"copilot_otel.sessions: session {process.session_id} started \(test-model, .*work\)",
                        mine[0])
    assert re.fullmatch(rf"copilot_otel.sessions: session {process.session_id} ended \(shut down\) after .+: "
                        r"1 interaction, 2 turns, 1 tool call, [\d.]+k tokens", mine[1])
    assert not [line for line in log.splitlines() if " session " in line and process.session_id not in line]


def test_what_the_daemon_creates_is_private_and_its_trace_file_rotates(cli_corpus, tmp_path):
    """Under umask 022 the state folder is 0700 and the checkpoint (with its WAL), the default trace file and
    its rotated backups 0600; the trace file rotates past --traces-file-max-bytes, keeping the newest
    --traces-file-backups, named as the Collector names them, and no span is lost from what is kept."""
    home = tmp_path / "home"
    for n in range(6):
        for run in cli_corpus.values():
            shutil.copytree(run.session_dir, home / "session-state" / f"{run.session_id}-{n}")
    sessions = len(os.listdir(home / "session-state"))
    state = tmp_path / "state"
    old = os.umask(0o022)
    try:
        with DaemonProcess(home, state, args=FAST + ("--traces-file-max-bytes", "20000", "--traces-file-backups",
                                                     "1000")) as daemon:
            daemon.wait_for_metric("copilot_otel_files_watched", sessions, timeout=60)
            wait_until(lambda: value(daemon.scrape(), "copilot_otel_export_queue_spans") == 0
                       and value(daemon.scrape(), "copilot_otel_spans_exported_total") > 0, what="the export")
            daemon.stop()
    finally:
        os.umask(old)
    traces = state / "traces.jsonl"
    files = [*backups_of(traces), traces]
    assert len(files) > 3
    assert mode(state) == 0o700
    assert {mode(p) for p in [*files, state / "checkpoint.sqlite", *state.glob("checkpoint.sqlite-*")]} == {0o600}
    assert all(re.fullmatch(r"traces-\d{4}-\d\d-\d\dT\d\d-\d\d-\d\d\.\d{3}\.jsonl", p.name) for p in files[:-1])
    spans = [span for path in files for span in read_spans(path)]
    assert len({(s.trace_id, s.span_id) for s in spans}) == len(spans) > 0
    assert all(p.stat().st_size <= 20000 for p in files if p.read_bytes().count(b"\n") > 1)


@pytest.fixture
def world_dir():
    """A directory everyone may traverse (pytest's tmp_path is private to root)."""
    path = Path(tempfile.mkdtemp(prefix="copilot-otel-health-"))
    path.chmod(0o755)
    yield path
    for sub in [path, *path.rglob("*")]:
        if sub.is_dir() and not sub.is_symlink():
            sub.chmod(0o755)
    shutil.rmtree(path)


def test_healthz_says_why_sessions_cannot_be_seen(world_dir):
    """An unreadable COPILOT_HOME makes /healthz 503 naming it and the reason, at once; readable again, it is
    ok. (Run as nobody when the tests run as root, so that chmod 000 means unreadable.)"""
    if os.geteuid() == 0 and cannot_run_as_nobody():
        pytest.skip(cannot_run_as_nobody())
    home, state = world_dir / "home", world_dir / "state"
    (home / "session-state").mkdir(parents=True)
    state.mkdir()
    if os.geteuid() == 0:
        os.chown(state, 65534, 65534)
    home.chmod(0o000)
    as_nobody = AS_NOBODY if os.geteuid() == 0 else ()
    with DaemonProcess(home, state, args=FAST, prefix=as_nobody) as daemon:
        _code, text = wait_until(lambda: (lambda h: h if h[0] == 503 else None)(health(daemon)), what="a 503")
        assert f"cannot read {home}" in text and "Permission denied" in text
        home.chmod(0o755)
        wait_until(lambda: health(daemon) == (200, "ok\n"), what="ok again")
    assert "Traceback" not in daemon.log_text()


def test_no_library_warning_while_folders_churn(cli_corpus, tmp_path):
    """Session folders created, moved and deleted in quick succession under the watch (watchdog then warns
    of re-registered callbacks): nothing but the daemon's own log lines reaches stderr."""
    home = tmp_path / "home"
    (home / "session-state").mkdir(parents=True)
    source = cli_corpus["plain"].session_dir
    with DaemonProcess(home, tmp_path / "state", traces_file=tmp_path / "t.jsonl", args=FAST,
                       log_level="info") as daemon:
        for n in range(60):
            folder = home / "session-state" / f"churn-{n % 4}"
            shutil.copytree(source, folder, dirs_exist_ok=True)
            (folder / "sub" / "deeper").mkdir(parents=True, exist_ok=True)
            if n % 3 == 0:
                folder.rename(folder.with_name(folder.name + "-moved"))
                shutil.rmtree(folder.with_name(folder.name + "-moved"))
            elif n % 3 == 1:
                shutil.rmtree(folder)
        time.sleep(1.5)  # rescans after the churn: anything it logs is written by now
        log = daemon.log_text()
    stray = [line for line in log.splitlines() if line.strip() and not re.match(r"\d{4}-\d\d-\d\d \d\d:", line)]
    assert "Warning" not in log and stray == [], stray[:5]
