"""How the owner gets in: `copilot-otel open` hands the browser a private page that sends it on with the token
(read from the state folder), never the token itself; the URL with the token is said only on a terminal."""

from __future__ import annotations

import os
import pty
import select
import stat
import subprocess
import time
from pathlib import Path

import pytest

from tests.support.commands import COMMAND, REPO, clean_env, run_copilot_otel, start_view
from tests.support.daemon import one_session_daemon, view_token
from tests.support.files import ended_session
from tests.support.net import LOOPBACK, free_port, wait_until
from tests.support.nobody import as_nobody

SESSION = {"repository": "octo/repo", "branch": "main"}


def write_session(home: Path) -> None:
    ended_session(home, "open-session", **SESSION)


@pytest.fixture(scope="module")
def daemon(tmp_path_factory):
    with one_session_daemon(tmp_path_factory.mktemp("open"), "open-session", **SESSION) as process:
        yield process


def browser_script(tmp_path: Path, exit_code: int = 0, *, hold: bool = False) -> tuple[str, Path]:
    """A stand-in for $BROWSER: it writes down the URL it was given and its own command line as the kernel
    shows it (/proc/<pid>/cmdline), then, with ``hold``, waits for a file named go (at most 10 s)."""
    seen = tmp_path / "seen-url"
    script = tmp_path / "browser"
    wait = (f"i=0; while [ ! -e {tmp_path}/go ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i+1)); done\n"
            if hold else "")
    script.write_text(f"#!/bin/sh\nprintf '%s' \"$1\" > {seen}\ncat /proc/$$/cmdline > {tmp_path}/cmdline\n"
                      f"echo $$ > {tmp_path}/pid\n{wait}exit {exit_code}\n")
    script.chmod(0o755)
    return f"{script} %s", seen


def command_lines() -> dict[int, bytes]:
    """Every process's command line, as any user reads them from /proc."""
    lines = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/cmdline", "rb") as handle:
                    lines[int(name)] = handle.read()
            except OSError:
                pass
    return lines


def test_open_puts_the_token_on_no_command_line_and_the_browser_lands_logged_in(daemon, browser, tmp_path):
    """`open` gives $BROWSER the path of a 0600 page in the state folder, not the token: another user who
    reads every command line (/proc/*/cmdline) while the browser starts sees that path and no token. That page,
    opened by a real Chromium, lands on the view logged in."""
    command, seen = browser_script(tmp_path, hold=True)
    proc = subprocess.Popen([*COMMAND, "open", "--state-dir", str(daemon.state_dir), "--metrics-address",
                             f"{LOOPBACK}:{daemon.port}"], env=clean_env({"BROWSER": command}), cwd=REPO,
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        wait_until(lambda: (tmp_path / "pid").exists() or proc.poll() is not None, timeout=60,
                   what="open to start the browser")
        wait_until(lambda: (tmp_path / "pid").read_text().strip(), timeout=10, what="the browser's pid")
        lines = as_nobody(command_lines)  # while the browser and `open` run
    finally:
        (tmp_path / "go").touch()
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err.decode()
    token = daemon.token.encode()
    page = daemon.state_dir / f"open-{daemon.port}.html"
    assert seen.read_text() == page.as_uri()
    browser_pid = int((tmp_path / "pid").read_text())
    assert str(page).encode() in lines[browser_pid]  # nobody saw the browser's command line: no token in it
    assert not [pid for pid, line in lines.items() if token in line]
    assert token not in (tmp_path / "cmdline").read_bytes() and token not in out + err
    assert stat.S_IMODE(page.stat().st_mode) == 0o600 and token in page.read_bytes()
    tab = browser.page()
    tab.goto(seen.read_text())
    tab.wait_for_url(f"http://{LOOPBACK}:{daemon.port}/")  # sent on, the token gone from the address
    tab.wait_for_selector('tr.session[data-id="open-session"]')
    assert browser.context.cookies() == [] and tab.errors == []


def test_open_without_a_browser_prints_the_url(daemon, tmp_path):
    """With no browser that works, or with --print-url, the URL with its token is printed instead."""
    command, _seen = browser_script(tmp_path, exit_code=1)
    args = ("open", "--state-dir", str(daemon.state_dir), "--metrics-address", f"{LOOPBACK}:{daemon.port}")
    failed = run_copilot_otel(*args, env={"BROWSER": command})
    assert failed.returncode == 0 and failed.stdout.decode().split()[-1] == daemon.page_url()
    printed = run_copilot_otel(*args, "--print-url")
    assert printed.returncode == 0 and printed.stdout.decode() == daemon.page_url() + "\n"
    nothing = run_copilot_otel("open", "--state-dir", str(daemon.state_dir), "--metrics-address",
                               f"{LOOPBACK}:{free_port()}")
    assert nothing.returncode == 1 and b"is the daemon" in nothing.stderr


def test_the_url_with_its_token_is_said_only_on_a_terminal(tmp_path):
    """`view` on a terminal starts with the page's URL and its token, as Jupyter does; piped to a file (a
    service's journal) the line names `copilot-otel open` instead, and the token is not in it."""
    port = free_port()
    argv = [*COMMAND, "view", str(tmp_path / "home"), "--address", f"{LOOPBACK}:{port}", "--state-dir",
            str(tmp_path / "state")]
    write_session(tmp_path / "home")
    controller, terminal = pty.openpty()
    proc = subprocess.Popen(argv, stdin=terminal, stdout=terminal, stderr=terminal, env=clean_env(), cwd=REPO)
    os.close(terminal)
    screen = b""
    try:
        deadline = time.monotonic() + 30
        while b"#token=" not in screen and time.monotonic() < deadline and proc.poll() is None:
            if select.select([controller], [], [], 0.5)[0]:
                try:
                    screen += os.read(controller, 4096)
                except OSError:
                    break
    finally:
        proc.terminate()
        proc.wait(timeout=15)
        os.close(controller)
    assert f"http://{LOOPBACK}:{port}/#token=".encode() in screen, screen.decode(errors="replace")
    token = screen.split(b"#token=", 1)[1][:43].decode()
    log = tmp_path / "view.log"
    with open(log, "wb") as out:
        piped = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=out, env=clean_env(), cwd=REPO)
    try:
        wait_until(lambda: (tmp_path / "state" / f"web-{port}.json").exists() and "open" in log.read_text(),
                   timeout=30, what="the piped view's start line")
        fresh = view_token(tmp_path / "state", port)
    finally:
        piped.terminate()
        piped.wait(timeout=15)
    text = log.read_text()
    assert f"http://{LOOPBACK}:{port}/ (`copilot-otel open` opens it with its token)" in text
    assert fresh not in text and token != fresh  # a new token at each start


def test_open_finds_a_running_view_and_a_bad_address_is_a_usage_error(tmp_path):
    """With only `view` running (on a port of its own), `open --print-url` with no address finds it through its
    token in the state folder; a malformed --metrics-address is a usage error (exit 2) for `open` as for
    `sessions`."""
    write_session(tmp_path / "home")
    state, log = tmp_path / "state", tmp_path / "view.log"
    view, port = start_view(tmp_path / "home", state, log)
    try:
        printed = run_copilot_otel("open", "--print-url", "--state-dir", str(state))
        assert printed.returncode == 0, printed.stderr.decode() + log.read_text()
        assert printed.stdout.decode() == f"http://{LOOPBACK}:{port}/#token={view_token(state, port)}\n"
    finally:
        view.terminate()
        view.wait(timeout=15)
    gone = run_copilot_otel("open", "--print-url", "--state-dir", str(state))
    assert gone.returncode == 1 and b"is the daemon (or `view`) running" in gone.stderr
    for command in ("open", "sessions"):
        bad = run_copilot_otel(command, "--state-dir", str(state), "--metrics-address", "no-port-here")
        assert bad.returncode == 2, (command, bad.stderr)
        assert bad.stderr.decode().count("\n") == 1 and "expected HOST:PORT" in bad.stderr.decode(), bad.stderr
