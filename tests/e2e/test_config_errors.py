"""Configuration errors `run` says in its log, and those that need a process of their own: one clear line,
exit 2. A COPILOT_HOME that does not exist yet is not an error: the daemon warns once and waits for the
Copilot CLI to create it. The refusals said on stderr by every command are in tests/component/test_config_errors.py,
in process.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from tests.support.commands import assert_one_clear_line as one_clear_line
from tests.support.commands import run_copilot_otel
from tests.support.daemon import AS_NOBODY, DaemonProcess, cannot_run_as_nobody
from tests.support.files import new_session
from tests.support.net import free_port
from tests.support.spans import expected_keys, wait_for_keys


def assert_one_clear_line(result: subprocess.CompletedProcess, says=(), fix=()) -> str:
    """Exit 2, one line on stderr naming the problem and a fix, no traceback; return the line."""
    return one_clear_line(result.returncode, result.stderr.decode(errors="replace"), says, fix)


def test_port_in_use(tmp_path):
    """Another process already listens on the metrics port: one line naming the address and the flag."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        result = run_copilot_otel("run", "--copilot-home", str(tmp_path / "home"), "--state-dir",
                                  str(tmp_path / "state"),
                         "--metrics-address", f"127.0.0.1:{port}")
    assert_one_clear_line(result, (f"127.0.0.1:{port}", "in use"), ("--metrics-address",))


# ------------------------------------------------------------------------ unwritable places


def test_run_with_state_dir_not_writable(blocked, tmp_path):
    """A state directory that cannot be created or written: one line naming it and --state-dir."""
    result = run_copilot_otel("run", "--copilot-home", str(tmp_path / "home"), "--state-dir", str(blocked / "state"),
                     "--metrics-address", f"127.0.0.1:{free_port()}")
    assert_one_clear_line(result, (str(blocked / "state"), "not writable"), ("--state-dir",))


def test_run_with_state_dir_not_writable_for_this_user(tmp_path):
    """A state directory owned by someone else (here: root, with the daemon run as nobody): not ours, refused."""
    if os.geteuid() != 0:
        pytest.skip("needs root to run the daemon as another user")
    reason = cannot_run_as_nobody()
    if reason:
        pytest.skip(reason)
    world = Path(tempfile.mkdtemp(prefix="copilot-otel-state-"))
    try:
        world.chmod(0o755)
        (world / "state").mkdir(mode=0o755)
        result = run_copilot_otel("run", "--copilot-home", str(world / "home"), "--state-dir", str(world / "state"),
                         "--metrics-address", f"127.0.0.1:{free_port()}",
                         prefix=AS_NOBODY)
    finally:
        shutil.rmtree(world)
    assert_one_clear_line(result, (str(world / "state"), "belongs to user root, not yours"), ("--state-dir",))


def test_run_traces_file_not_writable(blocked, tmp_path):
    """A --traces-file that cannot be created: one line naming it and --traces-file, exit 2."""
    target = blocked / "traces.jsonl"
    result = run_copilot_otel("run", "--copilot-home", str(tmp_path / "home"), "--metrics-address",
                              f"127.0.0.1:{free_port()}", "--state-dir", str(tmp_path / "state"), "--traces-file",
                              str(target))
    assert_one_clear_line(result, (str(target),), ("--traces-file",))


# ------------------------------------------------------------------------ COPILOT_HOME not there yet


def test_missing_copilot_home_is_a_warning_and_a_wait(cli_corpus, tmp_path):
    """A COPILOT_HOME that does not exist: the daemon starts, serves /healthz, warns once however
    many rescans pass, and follows the sessions once the CLI creates it."""
    home, traces = tmp_path / "not-yet" / "copilot", tmp_path / "traces.jsonl"
    with DaemonProcess(home, tmp_path / "state", traces_file=traces,
                       args=("--idle-quiet", "0.3", "--rescan-interval", "0.2")) as daemon:
        time.sleep(1.5)  # several rescans
        waiting = [line for line in daemon.log_text().splitlines() if " WARNING " in line and str(home) in line]
        path = new_session(home, "created-later")
        path.write_bytes(cli_corpus["plain"].events_path.read_bytes())
        wait_for_keys(traces, expected_keys([path]))
    assert len(waiting) == 1, waiting
    assert "does not exist" in waiting[0]
