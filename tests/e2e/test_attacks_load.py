"""Load that must not lock the owner out: a flood of wrong passwords from another user, connections that
never start their TLS handshake, a flood of blank lines, and new sessions the watcher does not report.

Each test runs the real daemon (a subprocess) on loopback; the loads are bounded in count and time and end
themselves. The attacker is a forked child running as nobody where the attack needs another user
(tests/support/nobody.py). The figures at full scale are bench/attack_bench.py's (docs/benchmarks.md).
"""

from __future__ import annotations

import base64
import os
import resource
import shutil
import socket
import ssl
import subprocess
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import bcrypt
import pytest

from tests.support.daemon import DaemonProcess
from tests.support.files import append, new_session
from tests.support.net import LOOPBACK, close_at_once, wait_until
from tests.support.nobody import serve_as_nobody, stop_child
from tests.support.scrape import parse, value
from tests.support.spans import expected_keys, spans_now, wait_for_keys
from tests.support.tls import self_signed

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "cli" / "1.0.102"


def real_log(scenario: str) -> bytes:
    """A stored real CLI 1.0.102 log."""
    return next((FIXTURES / scenario / "session-state").glob("*/events.jsonl")).read_bytes()


class ServingDaemon(DaemonProcess):
    """The daemon behind a web config: ready once its token file is written (the server started)."""

    def _ready(self) -> bool:
        self._exited()
        return (self.state_dir / f"web-{self.port}.json").exists()


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def get(url: str, headers: dict, context: ssl.SSLContext | None = None, timeout: float = 30) -> tuple[int, bytes]:
    request = urllib.request.Request(url, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=timeout, context=context) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def scrape_status(url: str, context: ssl.SSLContext) -> int | str:
    """One scrape with Prometheus's default timeout (10 s): its status, or why it failed."""
    try:
        return get(url, {}, context, timeout=10)[0]
    except OSError as exc:
        return type(exc).__name__


# ------------------------------------------------------------------------ a login flood


def _guess_forever(port: int) -> None:
    """As nobody: wrong passwords, a new one on a new connection each time, as fast as answers come."""
    number = 0
    while True:
        number += 1
        head = (f"GET /metrics HTTP/1.1\r\nHost: {LOOPBACK}:{port}\r\nConnection: close\r\n"
                f"Authorization: {basic('prometheus', f'guess-{os.getpid()}-{number}')}\r\n\r\n").encode()
        try:
            sock = socket.socket()  # not create_connection: its name lookup needs a codec nobody cannot import
            try:
                sock.settimeout(10)
                sock.connect((LOOPBACK, port))
                sock.sendall(head)
                while sock.recv(65536):
                    pass
            finally:
                close_at_once(sock)  # thousands of them: none left in TIME_WAIT
        except OSError:
            time.sleep(0.01)  # refused (the daemon busy): the flood goes on


def test_a_flood_of_wrong_passwords_from_another_user_never_keeps_a_right_one_out(tmp_path):
    """Eight processes of another user send wrong basic-auth passwords (each a new one, so that none is
    remembered) as fast as they are answered. Scrapers that log in for the first time, each as a user of
    its own, get 200 every time: the checks take turns between the users who ask, so the flood keeps only
    itself waiting (its excess is refused, counted auth_busy)."""
    users = {f"scraper{n}": f"right password {n}" for n in range(6)}
    hashes = {user: bcrypt.hashpw(password.encode(), bcrypt.gensalt(10)).decode() for user, password in users.items()}
    config = tmp_path / "web-config.yml"
    config.write_text("basic_auth_users:\n" + "".join(f"  {user}: {hashed}\n" for user, hashed in hashes.items()))
    (tmp_path / "home" / "session-state").mkdir(parents=True)
    with ServingDaemon(tmp_path / "home", tmp_path / "state", traces_file=tmp_path / "traces.jsonl",
                       args=("--web-config-file", str(config))) as daemon:
        flooders = [serve_as_nobody(lambda port: port, _guess_forever, daemon.port) for _ in range(8)]
        try:
            time.sleep(1.0)  # the flood is under way
            answers = [get(daemon.metrics_url, {"Authorization": basic(user, password)})[0]
                       for user, password in users.items() for _again in range(2)]
        finally:
            for pid in flooders:
                stop_child(pid)
        status, body = get(daemon.metrics_url, {"Authorization": basic("scraper0", users["scraper0"])})
    samples = parse(body.decode())
    assert answers == [200] * len(answers)
    assert status == 200
    assert value(samples, "copilot_otel_http_errors_total", reason="unauthorized") >= 8, "the flood was checked"
    assert value(samples, "copilot_otel_http_errors_total", reason="auth_busy") >= 8, "the flood asked for more"


# ------------------------------------------------------------------------ TLS handshakes that never start


def _open_idle(port: int, count: int, held: list[socket.socket], stop: threading.Event) -> None:
    """Open ``count`` connections that never send a byte, as fast as they are accepted; keep them open."""
    for _ in range(count):
        if stop.is_set():
            return
        try:
            held.append(socket.create_connection((LOOPBACK, port), timeout=5))
        except OSError:
            time.sleep(0.01)  # refused: the flood goes on


def test_connections_that_never_start_their_handshake_do_not_keep_a_tls_scraper_out(tmp_path):
    """The daemon under a hard limit of 4,096 open files; 6,000 connections that never send a ClientHello
    arrive, and a TLS scraper scrapes on new connections with Prometheus's 10 s timeout, 5 times while they
    arrive and 6 times once they are all open. Every scrape succeeds, the daemon's descriptors stay bounded
    (pending handshakes are capped, the oldest closed), and it counts what it closed."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard < 8192:
        pytest.skip(f"the test process may open only {hard} files")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 8192), hard))
    cert, key = self_signed(tmp_path / "tls")
    config = tmp_path / "web-config.yml"
    config.write_text(f"tls_server_config:\n  cert_file: {cert}\n  key_file: {key}\n")
    (tmp_path / "home" / "session-state").mkdir(parents=True)
    context = ssl.create_default_context(cafile=str(cert))
    held: list[socket.socket] = []
    stop = threading.Event()
    with ServingDaemon(tmp_path / "home", tmp_path / "state", traces_file=tmp_path / "traces.jsonl",
                       args=("--web-config-file", str(config)),
                       prefix=("prlimit", "--nofile=4096:4096", "--")) as daemon:
        url = f"https://{LOOPBACK}:{daemon.port}/metrics"
        opener = threading.Thread(target=_open_idle, args=(daemon.port, 6000, held, stop))
        opener.start()
        try:
            wait_until(lambda: len(held) >= 500, timeout=30, what="the first idle connections")
            answers, most_files = [], 0
            for scrape in range(11):
                if scrape == 5:
                    opener.join(timeout=60)
                answers.append(scrape_status(url, context))
                most_files = max(most_files, len(os.listdir(f"/proc/{daemon.pid}/fd")))
            idle = len(held)
            status, body = get(url, {}, context)
        finally:
            stop.set()
            opener.join(timeout=60)
            for sock in held:
                close_at_once(sock)  # 6,000 of them: none left in TIME_WAIT
    samples = parse(body.decode())
    assert idle == 6000
    assert answers == [200] * 11 and status == 200
    assert most_files < 2048, f"the daemon held {most_files} descriptors"
    assert value(samples, "copilot_otel_http_errors_total", reason="handshake_evicted") > 0


# ------------------------------------------------------------------------ blank lines


def test_a_flood_of_blank_lines_holds_no_session_back_and_numbers_every_line(tmp_path):
    """One session's log receives blank and whitespace-only lines at 10 MB/s; a session created meanwhile is
    exported while the flood goes on. The blank lines are skipped (never counted as rejected) but numbered:
    a bad line after them is named by its true line number."""
    home, traces = tmp_path / "home", tmp_path / "traces.jsonl"
    flood = new_session(home, "a-flood")
    blanks = b"\n" * (1 << 20) + b"  \t\r\n" * 4096
    per_write = blanks.count(b"\n")
    stop = threading.Event()
    writes = [0]

    def flooder() -> None:
        while not stop.is_set() and writes[0] < 200:  # at most 200 MB, 20 s
            append(flood, blanks)
            writes[0] += 1
            time.sleep(0.1)  # the scenario: 10 MB/s

    with DaemonProcess(home, tmp_path / "state", traces_file=traces,
                       args=("--idle-quiet", "0.3", "--rescan-interval", "1")) as daemon:
        thread = threading.Thread(target=flooder)
        thread.start()
        try:
            wait_until(lambda: writes[0] >= 5, timeout=10, what="the flood under way")
            normal = new_session(home, "b-normal")
            append(normal, real_log("plain"))
            wait_for_keys(traces, expected_keys([normal]), timeout=30)
            still_flooding = thread.is_alive()
        finally:
            stop.set()
            thread.join()
        append(flood, b"not json\n")
        line = writes[0] * per_write + 1
        daemon.wait_for_metric("copilot_otel_lines_rejected_total", 1, timeout=60, reason="not_json")
        samples = daemon.scrape()
        said = daemon.log_text()
    assert still_flooding, "the flood ended before the new session was exported"
    assert sum(v for (name, _labels), v in samples.items() if name == "copilot_otel_lines_rejected_total") == 1
    assert f"{flood}:{line}: skipped line (not_json)" in said


# ------------------------------------------------------------------------ sessions the watcher does not see


def _with_watches(count: int) -> tuple[str, ...]:
    """A prefix that runs a command in a user namespace of its own whose inotify watch limit is ``count``
    (the limit is per user namespace: the machine's own is left alone)."""
    unshare = shutil.which("unshare")
    prefix = (unshare or "unshare", "--user", "--map-root-user", "sh", "-c",
              f'echo {count} > /proc/sys/user/max_inotify_watches && exec "$@"', "sh")
    if unshare is None or subprocess.run([*prefix, "true"], capture_output=True).returncode != 0:
        pytest.skip("cannot make a user namespace with its own inotify watch limit here")
    return prefix


def test_sessions_in_folders_the_watcher_cannot_watch_are_found_within_seconds(tmp_path):
    """The daemon may hold 20 inotify watches, and 100 session folders are there at start: most are not
    watched (watchdog skips a folder it cannot watch, silently). The full rescan is 120 s away. A live
    session in one of them, and a session made later in a new folder (its log written after the folder),
    are still exported within seconds: new folder names and the logs of new and live sessions are looked
    at every few seconds."""
    home, traces = tmp_path / "home", tmp_path / "traces.jsonl"
    plain = real_log("plain")
    lines = plain.splitlines(keepends=True)
    for n in range(100):
        path = new_session(home, f"history-{n:03d}")
        path.write_bytes(plain if n != 57 else b"".join(lines[:3]))  # history-057 is live, mid-session
    live = home / "session-state" / "history-057" / "events.jsonl"
    with DaemonProcess(home, tmp_path / "state", traces_file=traces,
                       args=("--idle-quiet", "0.3", "--rescan-interval", "120"),
                       prefix=_with_watches(20)) as daemon:
        daemon.wait_for_metric("copilot_otel_files_watched", 100, timeout=60)
        late = new_session(home, "late")
        time.sleep(1.0)  # the watcher has seen the folder and could not watch it; nothing is in it yet
        late.write_bytes(plain)
        append(live, b"".join(lines[3:]))
        wanted = set(expected_keys([late, live]))  # the history's spans are in the file too
        wait_until(lambda: set(spans_now(traces)) >= wanted, timeout=30, what="the late and the live session")
        waited = time.monotonic() - daemon.started_at
    assert waited < 120, "found only by the full rescan"
