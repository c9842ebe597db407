"""Configuration errors stop start-up with one clear line: what is wrong, and how to fix it.

Every case runs the real command line in a subprocess (exit code 2, nothing started, no
traceback). A COPILOT_HOME that does not exist yet is not an error: the daemon warns once
and waits for the Copilot CLI to create it.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.support.commands import run_copilot_otel
from tests.support.daemon import AS_NOBODY, DaemonProcess, cannot_run_as_nobody
from tests.support.files import new_session
from tests.support.net import free_port
from tests.support.spans import expected_keys, wait_for_keys


@dataclass(frozen=True)
class Bad:
    """One bad setting: extra flags and environment, and words the one error line must hold."""

    args: tuple[str, ...] = ()
    env: dict = field(default_factory=dict)
    says: tuple[str, ...] = ()  # what is wrong (the bad value, the setting)
    fix: tuple[str, ...] = ()  # how to fix it (a flag or variable to change, an example); any one suffices


ENDPOINT_FIX = ("http://127.0.0.1:4317",)
OTLP = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4317"}
BAD_SETTINGS = {
    "endpoint_not_a_url": Bad(env={"OTEL_EXPORTER_OTLP_ENDPOINT": "not a url"}, says=("not a url",), fix=ENDPOINT_FIX),
    "endpoint_without_scheme": Bad(env={"OTEL_EXPORTER_OTLP_ENDPOINT": "localhost:4317"}, says=("localhost:4317",),
                                   fix=ENDPOINT_FIX),
    "endpoint_bad_port": Bad(env={"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:99999"}, says=("99999", "port")),
    "traces_endpoint_not_a_url": Bad(env={"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "::nonsense::"}, says=("::nonsense::",),
                                     fix=ENDPOINT_FIX),
    "unknown_protocol": Bad(env={"OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"}, says=("http/json",),
                            fix=("grpc", "http/protobuf")),
    "unknown_traces_protocol": Bad(env={"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "udp"}, says=("'udp'",),
                                   fix=("grpc", "http/protobuf")),
    "stuck_after_not_positive": Bad(args=("--stuck-after", "0"), says=("--stuck-after",), fix=("positive",)),
    "stuck_after_from_env": Bad(env={"COPILOT_OTEL_STUCK_AFTER": "-5"}, says=("--stuck-after", "-5"), fix=("positive",
                                                                                                           )),
    "metrics_address_not_host_port": Bad(args=("--metrics-address", "nonsense"), says=("nonsense",),
                                         fix=("HOST:PORT",)),
    # issue 17, defect 12: each of these gave a traceback and exit 1, or was silently accepted
    "endpoint_unclosed_ipv6": Bad(env={"OTEL_EXPORTER_OTLP_ENDPOINT": "http://[::1"}, says=("http://[::1",),
                                  fix=ENDPOINT_FIX),
    "timeout_not_a_number": Bad(env={**OTLP, "OTEL_EXPORTER_OTLP_TIMEOUT": "abc"},
                                says=("OTEL_EXPORTER_OTLP_TIMEOUT", "'abc'"), fix=("seconds",)),
    "traces_timeout_not_a_number": Bad(env={**OTLP, "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT": "abc"},
                                       says=("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "'abc'"), fix=("seconds",)),
    "compression_bogus_over_grpc": Bad(env={**OTLP, "OTEL_EXPORTER_OTLP_COMPRESSION": "bogus"},
                                       says=("OTEL_EXPORTER_OTLP_COMPRESSION", "'bogus'", "grpc"), fix=("gzip",)),
    "certificate_missing": Bad(env={**OTLP, "OTEL_EXPORTER_OTLP_CERTIFICATE": "/nonexistent/ca.pem"},
                               says=("OTEL_EXPORTER_OTLP_CERTIFICATE", "/nonexistent/ca.pem"), fix=("PEM",)),
    "traces_exporter_zipkin": Bad(env={"OTEL_TRACES_EXPORTER": "zipkin"}, says=("OTEL_TRACES_EXPORTER", "zipkin"),
                                  fix=("otlp",)),
    "idle_quiet_nan": Bad(args=("--idle-quiet", "nan"), says=("--idle-quiet", "nan"), fix=("positive",)),
    "idle_quiet_inf": Bad(env={"COPILOT_OTEL_IDLE_QUIET": "inf"}, says=("--idle-quiet", "inf"), fix=("positive",)),
    "stuck_after_nan": Bad(args=("--stuck-after", "nan"), says=("--stuck-after", "nan"), fix=("positive",)),
    "stuck_after_inf": Bad(env={"COPILOT_OTEL_STUCK_AFTER": "inf"}, says=("--stuck-after", "inf"), fix=("positive",)),
    "rescan_interval_nan": Bad(args=("--rescan-interval", "nan"), says=("--rescan-interval", "nan"),
                               fix=("positive",)),
    "rescan_interval_negative": Bad(args=("--rescan-interval", "-5"), says=("--rescan-interval", "-5"),
                                    fix=("positive",)),
    "unknown_flag": Bad(args=("--bogus-flag",), says=("--bogus-flag",), fix=("--help",)),
    "flag_not_a_number": Bad(args=("--max-buffered-spans", "many"), says=("'many'",), fix=("--help",)),
}
RUN_ONLY = {"stuck_after_not_positive", "stuck_after_from_env", "metrics_address_not_host_port", "idle_quiet_nan",
            "idle_quiet_inf", "stuck_after_nan", "stuck_after_inf", "rescan_interval_nan", "rescan_interval_negative",
            "flag_not_a_number"}


def assert_one_clear_line(result: subprocess.CompletedProcess, says=(), fix=()) -> str:
    """Exit 2, one line on stderr naming the problem and a fix, no traceback; return the line."""
    stderr = result.stderr.decode(errors="replace")
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert result.returncode == 2, f"exit {result.returncode}: {stderr[-2000:]}"
    assert "Traceback" not in stderr, stderr[-3000:]
    assert len(lines) == 1, f"{len(lines)} lines on stderr:\n{stderr[-2000:]}"
    for word in says:
        assert word in lines[0], f"{word!r} not in: {lines[0]}"
    if fix:
        assert any(word in lines[0] for word in fix), f"no hint ({' or '.join(fix)}) in: {lines[0]}"
    return lines[0]


@pytest.fixture
def session(cli_corpus) -> Path:
    return cli_corpus["plain"].session_dir


@pytest.mark.parametrize("name", sorted(BAD_SETTINGS))
def test_run_refuses_a_bad_setting(name, tmp_path):
    """`run` with a bad setting: one line saying what is wrong and how to fix it, exit 2."""
    bad = BAD_SETTINGS[name]
    result = run_copilot_otel("run", "--copilot-home", str(tmp_path / "home"), "--state-dir", str(tmp_path / "state"),
                     "--metrics-address", f"127.0.0.1:{free_port()}", *bad.args, env=bad.env)
    assert_one_clear_line(result, bad.says, bad.fix)


@pytest.mark.parametrize("name", sorted(set(BAD_SETTINGS) - RUN_ONLY))
def test_replay_refuses_a_bad_setting(name, session, tmp_path):
    """`replay` with a bad OTLP setting: the same one line, exit 2, nothing exported."""
    bad = BAD_SETTINGS[name]
    result = run_copilot_otel("replay", str(session), "--state-dir", str(tmp_path / "state"), *bad.args, env=bad.env)
    assert_one_clear_line(result, bad.says, bad.fix)
    assert not (tmp_path / "state" / "traces.jsonl").exists()


def test_replay_metrics_file_in_a_folder_is_refused_before_exporting(session, tmp_path):
    """replay --metrics-file naming a folder: one line, exit 2, and nothing exported (it used to fail
    only after the export had run)."""
    folder = tmp_path / "metrics"
    folder.mkdir()
    result = run_copilot_otel("replay", str(session), "--state-dir", str(tmp_path / "state"), "--metrics-file",
                              str(folder))
    assert_one_clear_line(result, ("--metrics-file", str(folder), "folder"))
    assert not (tmp_path / "state" / "traces.jsonl").exists()


def test_inspect_is_not_broken_by_a_bad_otlp_setting(session):
    """`inspect` exports nothing, so a bad OTLP variable in the environment must not crash it:
    it either prints the tree or says what is wrong in one line."""
    result = run_copilot_otel("inspect", str(session), env={"OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"})
    stderr = result.stderr.decode(errors="replace")
    assert "Traceback" not in stderr, stderr[-3000:]
    if result.returncode != 0:
        assert_one_clear_line(result, ("http/json",))


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


@pytest.fixture
def blocked(tmp_path) -> Path:
    """A regular file: any directory 'inside' it can be neither created nor written, even by root."""
    path = tmp_path / "a-file"
    path.write_text("not a directory\n")
    return path


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


def test_replay_with_state_dir_not_writable(blocked, session):
    """replay's default trace file lives in the state directory: if that cannot be written,
    one line naming it and --state-dir (or --traces-file), exit 2."""
    result = run_copilot_otel("replay", str(session), "--state-dir", str(blocked / "state"))
    assert_one_clear_line(result, (str(blocked / "state"),), ("--state-dir", "--traces-file"))


@pytest.mark.parametrize("command", ["run", "replay"])
def test_traces_file_not_writable(command, blocked, session, tmp_path):
    """A --traces-file that cannot be created: one line naming it and --traces-file, exit 2."""
    target = blocked / "traces.jsonl"
    if command == "run":
        args = ("run", "--copilot-home", str(tmp_path / "home"), "--metrics-address", f"127.0.0.1:{free_port()}")
    else:
        args = ("replay", str(session))
    result = run_copilot_otel(*args, "--state-dir", str(tmp_path / "state"), "--traces-file", str(target))
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
