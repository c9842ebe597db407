"""The README's install-and-run command, run as written in a fresh, container-like home: a new user's home
(its files from /etc/skel, as useradd makes it), the system's Python, nothing installed before. The daemon
it starts answers /healthz; afterwards a login shell finds `copilot-otel` on PATH."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.support.commands import REPO
from tests.support.net import LOOPBACK, free_port, wait_until

SKEL = Path("/etc/skel")


def readme_install_block() -> str:
    """The first sh block of the README's install section, as a user would paste it."""
    text = (REPO / "README.md").read_text()
    section = text[text.index("## Install and run"):]
    return re.search(r"```sh\n(.*?)```", section, re.S).group(1)


def source_tree(target: Path) -> Path:
    """The checkout as it is now (tracked and new files, no .venv, no build output), as a user's clone."""
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=REPO, capture_output=True,
                            text=True, check=True).stdout.split("\n")
    for name in filter(None, listed):
        if name.startswith(("tests/cli/", "tests/fixtures/")) or not (REPO / name).is_file():
            continue
        (target / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, target / name)
    return target


def healthz(port: int) -> str | None:
    """What /healthz answers (status and body), or None while nothing listens."""
    try:
        with urllib.request.urlopen(f"http://{LOOPBACK}:{port}/healthz", timeout=2) as response:
            return f"{response.status} {response.read().decode().strip()}"
    except urllib.error.HTTPError as exc:
        return f"{exc.code} {exc.read().decode().strip()}"
    except OSError:
        return None


def test_the_readme_install_starts_the_daemon_and_leaves_copilot_otel_on_path(tmp_path):
    """python3 -m venv, pip install ., the link into ~/.local/bin, `copilot-otel run`: the daemon answers
    /healthz ok on its defaults (but a free port), and a new login shell runs `copilot-otel`."""
    if not (SKEL / ".profile").is_file() or shutil.which("python3", path="/usr/bin:/bin") is None:
        pytest.skip("needs a Debian-like /etc/skel/.profile and a system python3")
    home = tmp_path / "home"
    shutil.copytree(SKEL, home)
    source = source_tree(tmp_path / "copilot-otel")
    # A fresh user: no PATH additions, no virtualenv, only this machine's package index settings (PIP_*).
    env = {"HOME": str(home), "PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8",
           **{key: value for key, value in os.environ.items() if key.startswith("PIP_")}}
    (home / ".copilot" / "session-state").mkdir(parents=True)  # a Copilot CLI user's home
    port = free_port()
    output = tmp_path / "install.log"
    with output.open("wb") as log:
        # Its own session: the command's bash, pip and the daemon stop together, by this pid.
        install = subprocess.Popen(["bash", "-e", "-c", readme_install_block()], cwd=source,
                                   env={**env, "COPILOT_OTEL_METRICS_ADDRESS": f"{LOOPBACK}:{port}"},
                                   stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            answer = wait_until(lambda: healthz(port) or install.poll() is not None, timeout=900, interval=0.5,
                                what="the daemon's /healthz after the install")
            assert answer == "200 ok", f"{answer!r}: " + output.read_text()[-3000:]
        finally:
            os.killpg(install.pid, signal.SIGTERM)
            assert install.wait(timeout=30) in (0, -signal.SIGTERM), output.read_text()[-3000:]
    login = subprocess.run(["bash", "-l", "-c", "command -v copilot-otel && copilot-otel --version"], cwd=home,
                           env=env, capture_output=True, text=True, timeout=120)
    assert login.returncode == 0, login.stderr
    found, version = login.stdout.split("\n")[:2]
    assert found == str(home / ".local" / "bin" / "copilot-otel")
    assert version.startswith("copilot-otel, version ")
