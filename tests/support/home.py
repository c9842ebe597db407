"""A home of the test run's own: the tests never write into the real ``$HOME``.

``isolate()`` points ``HOME`` and the XDG base folders at one temporary folder for the whole run, before
any test starts a process: the commands under test (their state folder, replay records, summaries), the
Copilot CLI (its unpacked package, ~235 MB, under ``$XDG_CACHE_HOME/copilot``, and its device id), npm's
cache (``~/.npm``), pip's and Chromium's files all land there. ``scripts/test.sh`` makes the folder and
exports ``TEST_RUN_HOME``, so every layer (and pytest-xdist's workers, which inherit the environment)
shares one, and the CLI's package is unpacked once per run, not per test; a plain ``pytest`` makes its
own and removes it at exit.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path

RUN_HOME = "TEST_RUN_HOME"  # not COPILOT_OTEL_*: the tests scrub those from the commands they run
# XDG_RUNTIME_DIR is left alone: it is no folder under the home, and systemd's user manager needs the real one.
XDG_FOLDERS = {"XDG_CONFIG_HOME": ".config", "XDG_CACHE_HOME": ".cache", "XDG_DATA_HOME": ".local/share",
               "XDG_STATE_HOME": ".local/state"}


def isolate(environ=os.environ) -> Path:
    """Point HOME and the XDG folders at the run's home (made on first call); returns it."""
    chosen = environ.get(RUN_HOME)
    if chosen:
        home = Path(chosen)
    else:
        home = Path(tempfile.mkdtemp(prefix="copilot-otel-test-home-"))
        environ[RUN_HOME] = str(home)
        creator = os.getpid()  # forked children inherit the atexit hook: only the maker removes the folder

        def remove() -> None:
            if os.getpid() == creator:
                shutil.rmtree(home, ignore_errors=True)

        atexit.register(remove)
    environ["HOME"] = str(home)
    for variable, below in XDG_FOLDERS.items():
        environ[variable] = str(home / below)
    return home
