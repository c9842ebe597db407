"""The real ``copilot-otel`` command line, run in a subprocess with a clean environment."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

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
