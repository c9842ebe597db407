"""The real ``copilot-otel`` command line, run in a subprocess with a clean environment."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.support.net import LOOPBACK, free_port, port_taken, retry_taken_port, wait_until

REPO = Path(__file__).resolve().parent.parent.parent
COMMAND = (sys.executable, "-m", "copilot_otel.cli.main")
# Inherited variables that would change where copilot-otel reads from or exports to.
SCRUBBED_PREFIXES = ("OTEL_", "COPILOT_")


# `run` exports history (--backfill): the logs the tests follow are recorded ones, older than the fresh state folder
# each test starts with. A test of the default rule sets it to "false" in ``extra``.
TEST_DEFAULTS = {"COPILOT_OTEL_BACKFILL": "true"}


def clean_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """This process's environment without OTEL_* and COPILOT_* variables, plus TEST_DEFAULTS and ``extra``."""
    env = {key: value for key, value in os.environ.items() if not key.startswith(SCRUBBED_PREFIXES)}
    env.update(TEST_DEFAULTS)
    env.update(extra or {})
    return env


def run_copilot_otel(*args: str, env: dict[str, str] | None = None, stdin: bytes | None = None,
                     prefix: tuple[str, ...] = (), timeout: float = 120) -> subprocess.CompletedProcess:
    """``copilot-otel ARGS`` to completion (``prefix``: a command to run it under, e.g. setpriv)."""
    return subprocess.run([*prefix, *COMMAND, *args], capture_output=True, env=clean_env(env), timeout=timeout,
                          input=stdin, stdin=None if stdin is not None else subprocess.DEVNULL, cwd=REPO)


def run_replay(*args: str, env: dict[str, str] | None = None,
               stdin: bytes | None = None) -> subprocess.CompletedProcess:
    """``copilot-otel replay ARGS``."""
    return run_copilot_otel("replay", *args, env=env, stdin=stdin)


def run_inspect(*args: str) -> subprocess.CompletedProcess:
    """``copilot-otel inspect ARGS`` on a terminal 200 columns wide."""
    return run_copilot_otel("inspect", *args, env={"COLUMNS": "200"}, timeout=60)


def start_view(home: Path, state: Path, log: Path, timeout: float = 60) -> tuple[subprocess.Popen, int]:
    """``copilot-otel view HOME`` on a free loopback port, its output in ``log``, once it serves (its token file
    is written); (the process, its port). A port another process took since it was picked is picked anew."""
    port = free_port()
    proc: subprocess.Popen | None = None

    def start() -> subprocess.Popen:
        nonlocal proc
        with open(log, "wb") as out:
            proc = subprocess.Popen([*COMMAND, "view", str(home), "--address", f"{LOOPBACK}:{port}", "--state-dir",
                                     str(state)], cwd=REPO, env=clean_env(), stdout=out, stderr=out,
                                    stdin=subprocess.DEVNULL)
        token_file = state / f"web-{port}.json"
        try:
            wait_until(lambda: proc.poll() is not None or token_file.exists(), timeout=timeout,
                       what="`view` to serve")
        finally:
            if not token_file.exists() and proc.poll() is None:
                proc.kill()
                proc.wait(timeout=15)
        assert proc.poll() is None, f"`view` exited {proc.returncode}: {log.read_text(errors='replace')[-2000:]}"
        return proc

    def repick() -> None:
        nonlocal port
        port = free_port()

    started = retry_taken_port(start, lambda: port_taken(log.read_text(errors="replace")), repick)
    return started, port


def assert_one_clear_line(code: int, stderr: str, says=(), fix=()) -> str:
    """Exit 2, one line on stderr naming the problem (every word of ``says``) and a fix (any word of ``fix``),
    no traceback; return the line. For a refusal at start-up, run in a process or in this one."""
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert code == 2, f"exit {code}: {stderr[-2000:]}"
    assert "Traceback" not in stderr, stderr[-3000:]
    assert len(lines) == 1, f"{len(lines)} lines on stderr:\n{stderr[-2000:]}"
    for word in says:
        assert word in lines[0], f"{word!r} not in: {lines[0]}"
    if fix:
        assert any(word in lines[0] for word in fix), f"no hint ({' or '.join(fix)}) in: {lines[0]}"
    return lines[0]
