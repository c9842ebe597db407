"""Only the owner gets in (issue 21, items 1, 2 and 11): another local user, a web page rebinding its DNS
name, and a squatter on the metrics port, each against the real daemon process. The other user is a
forked child running as nobody that only opens sockets and files (tests/support/nobody.py)."""

from __future__ import annotations

import http.client
import json
import os
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from copilot_otel.web.access import HOST_REFUSED, NEEDS_TOKEN, write_token_file
from tests.support.commands import REPO, clean_env, run_copilot_otel
from tests.support.daemon import DaemonProcess
from tests.support.events import SessionLog
from tests.support.net import LOOPBACK, wait_until
from tests.support.nobody import as_nobody, serve_as_nobody, serve_as_nobody_on_a_free_port, stop_child
from tests.support.scrape import value

SECRETS = ("secret-org/secret-repo", "secret-branch", "/home/alice/secret-project")
FAST = ("--idle-quiet", "0.3", "--rescan-interval", "0.5")


def secret_session(home: Path, session_id: str) -> str:
    """A finished session in a private repository, branch and folder, as the CLI keeps it (0600 in 0700)."""
    log = SessionLog(session_id)
    log.start(cwd=SECRETS[2], repository=SECRETS[0], branch=SECRETS[1], gitRoot=SECRETS[2])
    log.user("deploy the secret thing")
    log.tool_turn(("bash", "call-1"))
    log.answer()
    log.shutdown()
    folder = home / "session-state" / session_id
    folder.mkdir(parents=True, mode=0o700)
    path = folder / "events.jsonl"
    path.write_bytes(log.jsonl())
    path.chmod(0o600)
    return session_id


@pytest.fixture(scope="module")
def world():
    """A folder other users may cross (0755), holding a private COPILOT_HOME (0700) and a state folder left
    0755 by its user, so that the token file's and socket's own modes are what protect them."""
    root = Path(tempfile.mkdtemp(prefix="copilot-otel-access-"))
    root.chmod(0o755)
    home = root / "home"
    home.mkdir(mode=0o700)
    state = root / "state"
    state.mkdir(mode=0o755)
    try:
        yield root, home, state
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def daemon(world):
    root, home, state = world
    secret_session(home, "secret-session-1")
    with DaemonProcess(home, state, traces_file=root / "traces.jsonl", args=FAST) as process:
        wait_until(lambda: b"secret-session-1" in process.api_get("/api/sessions"), what="the session listed")
        yield process


def fetch_all(port: int, requests: list[tuple[str, dict]]) -> list[tuple[int, dict, bytes]]:
    """Each (path, headers) as one GET on 127.0.0.1:port: (status, headers but Date, body)."""
    out = []
    for path, headers in requests:
        connection = http.client.HTTPConnection(LOOPBACK, port, timeout=10)
        try:
            connection.request("GET", path, headers=headers)
            response = connection.getresponse()
            body = response.read() if "event-stream" not in (response.getheader("Content-Type") or "") else b""
            out.append((response.status, {k: v for k, v in response.getheaders() if k != "Date"}, body))
        finally:
            connection.close()
    return out


PROTECTED = ["/api/sessions", "/api/sessions?state=ended", "/api/sessions/stream", "/api/session/{id}",
             "/api/session/{id}?since=0", "/api/session/{id}/stream", "/api/session/{id}?token=A"]


def test_another_user_gets_one_and_the_same_401_from_every_route_of_the_view(daemon):
    """As nobody, with no token, a wrong bearer token, a forged cookie or the token's old query parameter, every
    JSON route and stream answers the same 401, byte for byte, whether the session exists or not: nothing of
    it, not even its existence, gets out. The pages are the same data-free shells for any id; /metrics,
    /healthz and the static assets stay open (no session in them)."""
    known, unknown = "secret-session-1", "no-such-session"
    forged = [{}, {"Authorization": "Bearer " + "A" * 43}, {"Cookie": f"copilot-otel-token-{daemon.port}={'A' * 43}"},
              {"Authorization": f"Basic {'QTpB'}"}]
    requests = [(path.format(id=session_id), headers) for path in PROTECTED for session_id in (known, unknown)
                for headers in forged]
    requests += [(f"/?token={'A' * 43}", {}), (f"/api/sessions?token={'A' * 43}", {})]
    shells = [(f"/session/{known}", {}), (f"/session/{unknown}", {}), ("/session/secret", {}), ("/", {})]
    before = value(daemon.scrape(), "copilot_otel_http_errors_total", reason="unauthorized")
    answers = as_nobody(fetch_all, daemon.port, requests + shells + [("/metrics", {}), ("/healthz", {}),
                                                                     ("/static/view.css", {})])
    refused, pages, opened = (answers[:len(requests)], answers[len(requests):len(requests) + len(shells)],
                              answers[len(requests) + len(shells):])
    first_page = refused.pop(-2)
    assert {a[0] for a in refused} == {401}
    assert len({(a[0], tuple(sorted(a[1].items())), a[2]) for a in refused}) == 1  # one answer for all
    assert refused[0][2] == NEEDS_TOKEN.encode()
    assert first_page[0] == 200 and b"secret-session-1" not in first_page[2]  # ?token= opens nothing
    assert {a[0] for a in pages} == {200} and len({a[2] for a in pages[:3]}) == 1  # one shell for any id
    for _status, _headers, body in pages:
        assert b"secret-session-1" not in body and not any(secret.encode() in body for secret in SECRETS)
    assert [a[0] for a in opened] == [200, 200, 200]
    for _status, headers, body in refused:
        assert not any(secret.encode() in body or any(secret in v for v in headers.values()) for secret in SECRETS)
    assert value(daemon.scrape(), "copilot_otel_http_errors_total", reason="unauthorized") - before == len(refused)
    # The owner, with the token, sees the session that nobody could not even learn exists.
    mine = fetch_all(daemon.port, [(f"/api/session/{known}", {"Authorization": f"Bearer {daemon.token}"}),
                                   (f"/api/session/{unknown}", {"Authorization": f"Bearer {daemon.token}"})])
    assert [m[0] for m in mine] == [200, 404] and SECRETS[0].encode() in mine[0][2]
    assert daemon.token not in daemon.log_text()  # not on a terminal: the token stays out of the log


def _read(path: str) -> bytes:
    with open(path, "rb") as handle:
        return handle.read()


def _connect_and_ask(path: str) -> bytes:
    """Connect to a Unix socket, ask for /api/sessions, return whatever comes back."""
    sock = socket.socket(socket.AF_UNIX)
    sock.settimeout(10)
    try:
        sock.connect(path)
        sock.sendall(b"GET /api/sessions HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
        return data
    except OSError as exc:
        return f"{type(exc).__name__}: {exc.strerror}".encode()
    finally:
        sock.close()


def test_another_user_can_read_neither_the_token_nor_the_socket(daemon):
    """The token file and the socket are 0600 even in a state folder left 0755: nobody cannot read the one
    nor connect to the other. Made connectable (0666), the socket still answers nobody nothing: the daemon
    asks the kernel who is calling (SO_PEERCRED) and closes on another uid, counted as peer_refused."""
    token_file = daemon.state_dir / f"web-{daemon.port}.json"
    sock_path = daemon.state_dir / "daemon.sock"
    for path in (token_file, sock_path):
        info = path.lstat()
        assert info.st_uid == os.getuid() and stat.S_IMODE(info.st_mode) == 0o600, path
    assert stat.S_IMODE(daemon.state_dir.stat().st_mode) == 0o755  # the folder does not protect them here
    with pytest.raises(AssertionError, match="PermissionError"):
        as_nobody(_read, str(token_file))
    assert as_nobody(_connect_and_ask, str(sock_path)).startswith(b"PermissionError")
    before = value(daemon.scrape(), "copilot_otel_http_errors_total", reason="peer_refused")
    sock_path.chmod(0o666)
    try:
        answer = as_nobody(_connect_and_ask, str(sock_path))  # closed on it: nothing, a reset or a broken pipe
        assert answer in (b"", b"ConnectionResetError: Connection reset by peer", b"BrokenPipeError: Broken pipe")
        assert value(daemon.scrape(), "copilot_otel_http_errors_total", reason="peer_refused") == before + 1
        mine = _connect_and_ask(str(sock_path))  # the owner needs no token there: the kernel vouched for it
        assert mine.startswith(b"HTTP/1.1 200") and b"secret-session-1" in mine
    finally:
        sock_path.chmod(0o600)


ROUTES = ["/", "/session/secret-session-1", "/api/sessions", "/api/session/secret-session-1",
          "/api/sessions/stream", "/api/session/secret-session-1/stream", "/metrics", "/healthz",
          "/static/view.css", "/static/sessions.js", "/nowhere"]


def test_a_rebinding_page_is_refused_on_every_route_of_a_loopback_bind(daemon):
    """A page whose DNS name now points at 127.0.0.1 sends its own name as Host: every route refuses it,
    /metrics and /healthz too (they name repositories, users, hosts), even with the token; localhost, a
    name under .localhost and IP addresses are served."""
    auth = {"Authorization": f"Bearer {daemon.token}"}
    before = value(daemon.scrape(), "copilot_otel_http_errors_total", reason="host_refused")
    evil = fetch_all(daemon.port, [(path, {"Host": host, **auth}) for path in ROUTES
                                   for host in (f"evil.example:{daemon.port}", "evil.example",
                                                "localhost.evil.example")])
    assert {(status, body) for status, _headers, body in evil} == {(403, HOST_REFUSED.encode())}
    assert value(daemon.scrape(), "copilot_otel_http_errors_total", reason="host_refused") - before == len(evil)
    fine = fetch_all(daemon.port, [("/healthz", {"Host": host}) for host in
                                   (f"localhost:{daemon.port}", "view.localhost", f"127.0.0.1:{daemon.port}",
                                    f"[::1]:{daemon.port}", "LOCALHOST")])
    assert [status for status, _h, _b in fine] == [200] * 5


_NETNS_CLIENT = r"""
import http.client, json, sys
port, token = int(sys.argv[1]), sys.argv[2]
out = []
for path in json.loads(sys.argv[3]):
    for host in ("evil.example:%d" % port, "copilot-otel:%d" % port, "127.0.0.1:%d" % port):
        for auth in ({}, {"Authorization": "Bearer " + token}):
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            c.request("GET", path, headers={"Host": host, **auth})
            r = c.getresponse()
            out.append([path, host.split(":")[0], bool(auth), r.status])
            c.close()
print(json.dumps(out))
"""


def test_a_rebinding_page_is_refused_on_every_route_of_an_all_interfaces_bind(world, tmp_path):
    """With --metrics-address 0.0.0.0:PORT (the container image's, compose's and Kubernetes' bind; run here in
    a network namespace of its own) a foreign Host is refused on every route too, a name given with
    --allowed-host (compose's Prometheus scrapes copilot-otel:9464) and IP addresses are served, and the view
    still wants its token."""
    unshare, nsenter, ip = shutil.which("unshare"), shutil.which("nsenter"), shutil.which("ip")
    if not (unshare and nsenter and ip) or subprocess.run([unshare, "--net", "true"]).returncode != 0:
        pytest.skip("cannot make a network namespace here (unshare, nsenter and ip are needed, as root)")
    home, state = tmp_path / "home", tmp_path / "state"
    secret_session(home, "secret-session-1")
    log_path = tmp_path / "daemon.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen([unshare, "--net", "sh", "-c", 'ip link set lo up && exec "$@"', "sh",
                                 sys.executable, "-m", "copilot_otel.cli.main", "run", "--copilot-home", str(home),
                                 "--state-dir", str(state), "--metrics-address", "0.0.0.0:9464",
                                 "--allowed-host", "copilot-otel", *FAST], env=clean_env(), cwd=REPO,
                                stdin=subprocess.DEVNULL, stdout=log, stderr=log)
    try:
        token_file = state / "web-9464.json"
        wait_until(lambda: token_file.exists() or proc.poll() is not None, timeout=30, what="the daemon")
        assert proc.poll() is None, log_path.read_text()
        token = json.loads(token_file.read_text())["token"]
        client = subprocess.run([nsenter, f"--net=/proc/{proc.pid}/ns/net", sys.executable, "-c", _NETNS_CLIENT,
                                 "9464", token, json.dumps(ROUTES[:4] + ROUTES[6:8])], capture_output=True,
                                timeout=60)
        assert client.returncode == 0, client.stderr.decode()
        answers = {(path, host, auth): status for path, host, auth, status in json.loads(client.stdout)}
    finally:
        proc.terminate()
        proc.wait(timeout=15)
    assert {status for (path, host, auth), status in answers.items() if host == "evil.example"} == {403}
    for host in ("copilot-otel", "127.0.0.1"):
        assert answers[("/metrics", host, False)] == answers[("/healthz", host, False)] == 200
        assert answers[("/api/sessions", host, False)] == 401 and answers[("/", host, False)] == 200  # a shell
        assert answers[("/api/sessions", host, True)] == answers[("/api/session/secret-session-1", host, True)] == 200


# ------------------------------------------------------------------------ a squatter on the port


def _listen(port: int) -> socket.socket:
    sock = socket.socket()
    sock.bind((LOOPBACK, port))
    sock.listen(16)
    return sock


def _listen_unix(path: str) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(path)
    os.chmod(path, 0o666)
    sock.listen(16)
    return sock


def _serve_invented(body: bytes):
    """Answer every request with ``body`` as JSON, forever (the child is killed by its pid)."""
    def serve(sock: socket.socket) -> None:
        head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body)
        while True:
            conn, _ = sock.accept()
            try:
                conn.settimeout(5)
                data = b""
                while b"\r\n\r\n" not in data:
                    chunk = conn.recv(65536)
                    if not chunk:
                        break
                    data += chunk
                    if b"\r\n\r\n" in data:
                        conn.sendall(head + body)
                        data = data.split(b"\r\n\r\n", 1)[1]
            except OSError:
                pass
            finally:
                conn.close()
    return serve


def _invented_rows(home: Path, tmp_path: Path) -> tuple[list[dict], bytes]:
    """The real rows (read from the files) and a squatter's answer: one invented session in their shape."""
    real = run_copilot_otel("sessions", "--json", "--from-files", "--copilot-home", str(home), "--state-dir",
                            str(tmp_path / "files"))
    rows = json.loads(real.stdout)
    invented = {**rows[0], "id": "invented-by-the-squatter", "repository": "squatter/phish"}
    return rows, json.dumps({"sessions": [invented], "total": 1, "matching": 1,
                             "copilot_home": str(home)}).encode()


def test_a_port_squatter_gets_no_token_and_feeds_sessions_nothing(tmp_path):
    """nobody takes the metrics port first and answers every request with invented sessions. The daemon
    exits 2 with one line naming nobody as the holder; `sessions` asks only its own daemon's socket, so it
    reads the files, prints the real sessions only, and says in one line who holds the port; `open` will
    not send a token there."""
    home, state = tmp_path / "home", tmp_path / "state"
    secret_session(home, "secret-session-3")
    rows, answer = _invented_rows(home, tmp_path)
    squatter, port = serve_as_nobody_on_a_free_port(_listen, _serve_invented(answer))
    try:
        started = run_copilot_otel("run", "--copilot-home", str(home), "--state-dir", str(state),
                                   "--metrics-address", f"{LOOPBACK}:{port}", timeout=60)
        assert started.returncode == 2
        errors = [line for line in started.stderr.decode().splitlines() if "ERROR" in line]
        assert len(errors) == 1 and f"{LOOPBACK}:{port}" in errors[0] and "held by uid 65534 (nobody)" in errors[0]
        listed = run_copilot_otel("sessions", "--json", "--copilot-home", str(home), "--state-dir", str(state),
                                  "--metrics-address", f"{LOOPBACK}:{port}")
        assert listed.returncode == 0 and json.loads(listed.stdout) == rows
        (said,) = listed.stderr.decode().splitlines()
        assert said.startswith(f"copilot-otel: {LOOPBACK}:{port} is served by uid 65534 (nobody), not by your daemon")
        assert said.endswith("reading the session logs")
        write_token_file(state / f"web-{port}.json", f"http://{LOOPBACK}:{port}/", "a-token-of-an-earlier-run")
        opened = run_copilot_otel("open", "--print-url", "--state-dir", str(state), "--metrics-address",
                                  f"{LOOPBACK}:{port}")
        assert opened.returncode == 1 and b"token" not in opened.stdout
        assert b"held by uid 65534 (nobody)" in opened.stderr
    finally:
        stop_child(squatter)


def test_sessions_trusts_no_socket_of_another_user(tmp_path, world, daemon):
    """A state folder others may write in (1777, like /tmp): nobody plants daemon.sock there serving invented
    sessions. `sessions` sees the file is not its user's and reads the logs; made to look like its own
    (chowned to this user), the process behind it still runs as nobody and is refused the same way. Its own
    daemon's socket is asked, and says when it follows another COPILOT_HOME."""
    home = daemon.home
    rows, answer = _invented_rows(home, tmp_path)
    shared = world[0] / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    planted = serve_as_nobody(_listen_unix, _serve_invented(answer), str(shared / "daemon.sock"))
    try:
        for owner, why in ((None, "belongs to uid 65534 (nobody), not to you"),
                           (os.getuid(), "runs as uid 65534 (nobody), not as you")):
            if owner is not None:
                os.chown(shared / "daemon.sock", owner, owner)
            listed = run_copilot_otel("sessions", "--json", "--copilot-home", str(home), "--state-dir", str(shared))
            assert listed.returncode == 0 and "invented-by-the-squatter" not in listed.stdout.decode()
            assert {row["id"] for row in json.loads(listed.stdout)} == {row["id"] for row in rows}
            said, *cache = listed.stderr.decode().splitlines()
            assert why in said and said.endswith("reading the session logs"), said
            assert [line for line in cache if "not using the summary cache" not in line] == []  # a 1777 folder
    finally:
        stop_child(planted)
    own = run_copilot_otel("sessions", "--json", "--copilot-home", str(home), "--state-dir", str(daemon.state_dir))
    assert own.returncode == 0 and own.stderr == b"" and {r["id"]
                                                          for r in json.loads(own.stdout)} == {"secret-session-1"}
    other = tmp_path / "other-home"
    (other / "session-state").mkdir(parents=True)
    elsewhere = run_copilot_otel("sessions", "--json", "--copilot-home", str(other), "--state-dir",
                                 str(daemon.state_dir))
    assert elsewhere.returncode == 0 and json.loads(elsewhere.stdout) == []
    assert f"your daemon follows {home}, not {other}" in elsewhere.stderr.decode()
