"""The README's install, run as written in a fresh, container-like home: a new user's home (its files
from /etc/skel, as useradd makes it), the system's Python, nothing installed before; afterwards a login
shell finds `copilot-otel` on PATH."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support.commands import REPO

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


def test_the_readme_install_leaves_copilot_otel_on_path(tmp_path):
    """python3 -m venv, pip install ., the link into ~/.local/bin: a new login shell runs `copilot-otel`."""
    if not (SKEL / ".profile").is_file() or shutil.which("python3", path="/usr/bin:/bin") is None:
        pytest.skip("needs a Debian-like /etc/skel/.profile and a system python3")
    home = tmp_path / "home"
    shutil.copytree(SKEL, home)
    source = source_tree(tmp_path / "copilot-otel")
    # A fresh user: no PATH additions, no virtualenv, only this machine's package index settings (PIP_*).
    env = {"HOME": str(home), "PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8",
           **{key: value for key, value in os.environ.items() if key.startswith("PIP_")}}
    install = subprocess.run(["bash", "-e", "-c", readme_install_block()], cwd=source, env=env, capture_output=True,
                             text=True, timeout=900)
    assert install.returncode == 0, install.stdout[-3000:] + install.stderr[-3000:]
    login = subprocess.run(["bash", "-l", "-c", "command -v copilot-otel && copilot-otel --version"], cwd=home,
                           env=env, capture_output=True, text=True, timeout=120)
    assert login.returncode == 0, login.stderr
    found, version = login.stdout.split("\n")[:2]
    assert found == str(home / ".local" / "bin" / "copilot-otel")
    assert version.startswith("copilot-otel, version ")
