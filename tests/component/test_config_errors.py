"""Configuration errors stop start-up with one clear line: what is wrong, and how to fix it.

Every case runs the real command line in this process (click's CliRunner, the environment a test process
gets): exit code 2, one line on stderr, nothing started, no exception. The refusals that need a process of
their own (`run`'s refusals said in its log: a port in use, an unwritable state folder or trace file; another
user; a daemon that waits for COPILOT_HOME) are in tests/e2e/test_config_errors.py.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from click.testing import Result

from tests.support.commands import assert_one_clear_line
from tests.support.inprocess import run_command
from tests.support.net import free_port

FIXTURE = next((Path(__file__).resolve().parent.parent / "fixtures" / "cli" / "1.0.102" / "plain" / "session-state")
               .iterdir())


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


def refused(result: Result, says=(), fix=()) -> str:
    """Refused at start-up (exit 2, one clear line), not crashed: an exception other than the exit is a failure."""
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exc_info
    return assert_one_clear_line(result.exit_code, result.stderr, says, fix)


@pytest.fixture
def session(tmp_path) -> Path:
    """A session folder the real CLI wrote (a copy: nothing may touch the stored one)."""
    copy = tmp_path / "session" / FIXTURE.name
    shutil.copytree(FIXTURE, copy)
    return copy


@pytest.mark.parametrize("name", sorted(BAD_SETTINGS))
def test_run_refuses_a_bad_setting(name, tmp_path):
    """`run` with a bad setting: one line saying what is wrong and how to fix it, exit 2."""
    bad = BAD_SETTINGS[name]
    result = run_command("run", "--copilot-home", str(tmp_path / "home"), "--state-dir", str(tmp_path / "state"),
                         "--metrics-address", f"127.0.0.1:{free_port()}", *bad.args, env=bad.env)
    refused(result, bad.says, bad.fix)


@pytest.mark.parametrize("name", sorted(set(BAD_SETTINGS) - RUN_ONLY))
def test_replay_refuses_a_bad_setting(name, session, tmp_path):
    """`replay` with a bad OTLP setting: the same one line, exit 2, nothing exported."""
    bad = BAD_SETTINGS[name]
    result = run_command("replay", str(session), "--state-dir", str(tmp_path / "state"), *bad.args, env=bad.env)
    refused(result, bad.says, bad.fix)
    assert not (tmp_path / "state" / "traces.jsonl").exists()


def test_replay_metrics_file_in_a_folder_is_refused_before_exporting(session, tmp_path):
    """replay --metrics-file naming a folder: one line, exit 2, and nothing exported (it used to fail
    only after the export had run)."""
    folder = tmp_path / "metrics"
    folder.mkdir()
    result = run_command("replay", str(session), "--state-dir", str(tmp_path / "state"), "--metrics-file",
                         str(folder))
    refused(result, ("--metrics-file", str(folder), "folder"))
    assert not (tmp_path / "state" / "traces.jsonl").exists()


def test_inspect_is_not_broken_by_a_bad_otlp_setting(session):
    """`inspect` exports nothing, so a bad OTLP variable in the environment must not crash it:
    it either prints the tree or says what is wrong in one line."""
    result = run_command("inspect", str(session), env={"OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"})
    if result.exit_code != 0:
        refused(result, ("http/json",))
    else:
        assert result.exception is None, result.exc_info


# ------------------------------------------------------------------------ unwritable places


def test_replay_with_state_dir_not_writable(blocked, session):
    """replay's default trace file lives in the state directory: if that cannot be written,
    one line naming it and --state-dir (or --traces-file), exit 2."""
    result = run_command("replay", str(session), "--state-dir", str(blocked / "state"))
    refused(result, (str(blocked / "state"),), ("--state-dir", "--traces-file"))


def test_replay_traces_file_not_writable(blocked, session, tmp_path):
    """A --traces-file that cannot be created: one line naming it and --traces-file, exit 2."""
    target = blocked / "traces.jsonl"
    result = run_command("replay", str(session), "--state-dir", str(tmp_path / "state"), "--traces-file", str(target))
    refused(result, (str(target),), ("--traces-file",))
