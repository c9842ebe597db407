"""How the owner gets in: `copilot-otel open` hands the browser the page with its token (read from the state
folder), the cookie then carries it; the URL with the token is said only on a terminal."""

from __future__ import annotations

import http.cookiejar
import json
import os
import pty
import select
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from tests.support.commands import COMMAND, REPO, clean_env, run_copilot_otel
from tests.support.daemon import DaemonProcess, view_token
from tests.support.events import SessionLog
from tests.support.net import LOOPBACK, free_port, wait_until


def write_session(home: Path) -> None:
    log = SessionLog("open-session")
    log.start(repository="octo/repo", branch="main")
    log.user()
    log.answer()
    log.shutdown()
    folder = home / "session-state" / log.session_id
    folder.mkdir(parents=True)
    (folder / "events.jsonl").write_bytes(log.jsonl())


@pytest.fixture(scope="module")
def daemon(tmp_path_factory):
    root = tmp_path_factory.mktemp("open")
    write_session(root / "home")
    with DaemonProcess(root / "home", root / "state", traces_file=root / "traces.jsonl") as process:
        yield process


def browser_script(tmp_path: Path, exit_code: int = 0) -> tuple[str, Path]:
    """A stand-in browser for $BROWSER (no graphical browser runs here): it writes down the URL it was given."""
    seen = tmp_path / "seen-url"
    script = tmp_path / "browser"
    script.write_text(f"#!/bin/sh\nprintf '%s' \"$1\" > {seen}\nexit {exit_code}\n")
    script.chmod(0o755)
    return f"{script} %s", seen


def test_open_gives_the_browser_the_page_with_its_token_which_then_opens_the_view(daemon, tmp_path):
    """`open` runs $BROWSER with the page's URL and its token; following that URL as a browser does (cookies
    kept) lands on the page, and the API then answers on the cookie alone."""
    command, seen = browser_script(tmp_path)
    opened = run_copilot_otel("open", "--state-dir", str(daemon.state_dir), "--metrics-address",
                              f"{LOOPBACK}:{daemon.port}", env={"BROWSER": command})
    assert opened.returncode == 0, opened.stderr.decode()
    url = seen.read_text()
    assert url == f"http://{LOOPBACK}:{daemon.port}/?token={daemon.token}"
    jar = http.cookiejar.CookieJar()
    browser = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))
    with browser.open(url, timeout=10) as page:
        assert page.status == 200 and page.url == f"http://{LOOPBACK}:{daemon.port}/"
        assert b"<html" in page.read().lower()
    assert [c.name for c in jar] == [f"copilot-otel-token-{daemon.port}"]
    with browser.open(f"http://{LOOPBACK}:{daemon.port}/api/sessions", timeout=10) as api:
        assert [s["id"] for s in json.loads(api.read())["sessions"]] == ["open-session"]


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
        while b"?token=" not in screen and time.monotonic() < deadline and proc.poll() is None:
            if select.select([controller], [], [], 0.5)[0]:
                try:
                    screen += os.read(controller, 4096)
                except OSError:
                    break
    finally:
        proc.terminate()
        proc.wait(timeout=15)
        os.close(controller)
    assert f"http://{LOOPBACK}:{port}/?token=".encode() in screen, screen.decode(errors="replace")
    token = screen.split(b"?token=", 1)[1][:43].decode()
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
    state, port = tmp_path / "state", free_port()
    log = tmp_path / "view.log"
    with open(log, "wb") as out:
        view = subprocess.Popen([*COMMAND, "view", str(tmp_path / "home"), "--address", f"{LOOPBACK}:{port}",
                                 "--state-dir", str(state)], stdin=subprocess.DEVNULL, stdout=out, stderr=out,
                                env=clean_env(), cwd=REPO)
    try:
        wait_until(lambda: (state / f"web-{port}.json").exists(), timeout=60, what="the view's token file")
        printed = run_copilot_otel("open", "--print-url", "--state-dir", str(state))
        assert printed.returncode == 0, printed.stderr.decode() + log.read_text()
        assert printed.stdout.decode() == f"http://{LOOPBACK}:{port}/?token={view_token(state, port)}\n"
    finally:
        view.terminate()
        view.wait(timeout=15)
    gone = run_copilot_otel("open", "--print-url", "--state-dir", str(state))
    assert gone.returncode == 1 and b"is the daemon (or `view`) running" in gone.stderr
    for command in ("open", "sessions"):
        bad = run_copilot_otel(command, "--state-dir", str(state), "--metrics-address", "no-port-here")
        assert bad.returncode == 2, (command, bad.stderr)
        assert bad.stderr.decode().count("\n") == 1 and "expected HOST:PORT" in bad.stderr.decode(), bad.stderr
