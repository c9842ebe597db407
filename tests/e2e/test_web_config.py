"""--web-config-file, the Prometheus exporters' web config: a real Prometheus scrapes the real daemon over
TLS with basic auth (real certificates made by openssl, bcrypt hashes), client certificates are verified,
every route asks for the login, the view still asks for its token, and a bad file stops the start with one
line and exit 2."""

from __future__ import annotations

import base64
import json
import socket
import ssl
import urllib.error
import urllib.request
from pathlib import Path

import bcrypt
import pytest

from tests.support.commands import run_copilot_otel
from tests.support.daemon import DaemonProcess, view_token
from tests.support.files import ended_session
from tests.support.net import LOOPBACK, wait_until
from tests.support.prometheus_harness import Prometheus
from tests.support.tls import make_ca, make_cert

PASSWORD = "correct horse battery staple"


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> dict[str, Path]:
    """A CA; a server certificate for 127.0.0.1 and localhost; client certificates named prometheus and intruder."""
    folder = tmp_path_factory.mktemp("pki")
    ca = make_ca(folder)
    server = make_cert(folder, "server", ca, "IP:127.0.0.1,DNS:localhost", "serverAuth")
    client = make_cert(folder, "prometheus", ca, "DNS:prometheus", "clientAuth")
    intruder = make_cert(folder, "intruder", ca, "DNS:intruder", "clientAuth")
    return {"ca": ca[0], "cert": server[0], "key": server[1], "client": client[0], "client_key": client[1],
            "intruder": intruder[0], "intruder_key": intruder[1]}


def web_config(folder: Path, text: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "web-config.yml"
    path.write_text(text)
    return path


class TlsDaemon(DaemonProcess):
    """The daemon serving HTTPS: it is ready once its token file is written (after the server started)."""

    def _ready(self) -> bool:
        self._exited()
        return (self.state_dir / f"web-{self.port}.json").exists()


def get(url: str, context: ssl.SSLContext, headers: dict | None = None) -> tuple[int, dict, bytes]:
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=10, context=context) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), error.read()


def basic(user: str, password: str) -> dict:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


@pytest.fixture(scope="module")
def tls_daemon(pki, tmp_path_factory):
    """The daemon with TLS, basic auth (user prometheus, bcrypt cost 10) and an HSTS header from the file."""
    root = tmp_path_factory.mktemp("tls")
    (root / "home" / "session-state").mkdir(parents=True)
    hashed = bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(10)).decode()
    config = web_config(root / "config", f"""
tls_server_config:
  cert_file: {pki['cert']}
  key_file: {pki['key']}
  min_version: TLS12
http_server_config:
  headers:
    Strict-Transport-Security: max-age=31536000
basic_auth_users:
  prometheus: {hashed}
""")
    with TlsDaemon(root / "home", root / "state", traces_file=root / "traces.jsonl",
                   args=("--web-config-file", str(config))) as daemon:
        yield daemon


def test_prometheus_scrapes_over_tls_with_basic_auth(tls_daemon, pki, tmp_path):
    """A real Prometheus with the scrape config a fleet uses for any exporter (https, the CA, basic auth)
    scrapes the daemon; the same job with a wrong password, or over plain http, is down."""
    target = [f"127.0.0.1:{tls_daemon.port}"]
    tls = {"ca_file": str(pki["ca"])}
    jobs = [{"job_name": "wrong-password", "scheme": "https", "tls_config": tls,
             "static_configs": [{"targets": target}],
             "basic_auth": {"username": "prometheus", "password": "guess"}},
            {"job_name": "plain-http", "static_configs": [{"targets": target}]}]
    with Prometheus(tmp_path / "prometheus", target, scrape={
            "scheme": "https", "tls_config": tls, "basic_auth": {"username": "prometheus", "password": PASSWORD}},
            extra_jobs=jobs) as prometheus:
        wait_until(lambda: len(prometheus.values("up", "job")) == 3, timeout=60, what="three scrapes")
        wait_until(lambda: prometheus.values("copilot_otel_build_info"), timeout=60, what="a scraped metric")
        assert prometheus.values("up", "job") == {"copilot-otel": 1.0, "wrong-password": 0.0, "plain-http": 0.0}


def test_every_route_asks_for_the_login_and_the_view_still_for_its_token(tls_daemon, pki):
    """Without the login every route, /metrics and /healthz included, answers 401 with a Basic challenge;
    with it they answer, the file's headers are on every response, and the view's data still wants its token
    (in the pages' own header: Authorization holds the login)."""
    context = ssl.create_default_context(cafile=str(pki["ca"]))
    base = f"https://{LOOPBACK}:{tls_daemon.port}"
    login = basic("prometheus", PASSWORD)
    for path in ("/metrics", "/healthz", "/", "/api/sessions", "/static/view.css"):
        for headers in ({}, basic("prometheus", "guess"), basic("nobody-here", PASSWORD)):
            status, answer, _body = get(base + path, context, headers)
            assert status == 401 and answer["WWW-Authenticate"].startswith("Basic "), (path, headers)
    status, headers, body = get(base + "/metrics", context, login)
    assert status == 200 and b"copilot_otel_build_info" in body
    assert headers["Strict-Transport-Security"] == "max-age=31536000"
    assert get(base + "/api/sessions", context, login)[0] == 401
    token = view_token(tls_daemon.state_dir, tls_daemon.port)
    assert json.loads((tls_daemon.state_dir / f"web-{tls_daemon.port}.json").read_text())["url"] == base + "/"
    assert get(base + "/api/sessions", context, {**login, "X-Copilot-Otel-Token": "A" * 43})[0] == 401
    assert get(base + "/api/sessions", context, {**login, "X-Copilot-Otel-Token": token})[0] == 200
    status, headers, _body = get(base + "/", context, login)
    assert status == 200 and "Set-Cookie" not in headers  # a shell; nothing the browser keeps by itself


def test_chromium_behind_the_login_opens_the_view_with_its_token(tls_daemon, browser):
    """A real Chromium that logs in (basic auth over TLS) and lands with the token sees the sessions: the pages
    send the token in their own header, so the Authorization header keeps the login."""
    ended_session(tls_daemon.home, "behind-login", repository="octo/tls")
    login = {"username": "prometheus", "password": PASSWORD}
    with browser.another(http_credentials=login, ignore_https_errors=True) as context:
        page = context.new_page()
        errors = []
        page.on("pageerror", lambda error: errors.append(str(error)))
        page.goto(f"https://{LOOPBACK}:{tls_daemon.port}/#token={view_token(tls_daemon.state_dir, tls_daemon.port)}")
        page.wait_for_selector('tr.session[data-id="behind-login"]')
        page.wait_for_selector("#status.live")
        assert errors == [] and context.cookies() == []


@pytest.fixture(scope="module")
def mtls_daemon(pki, tmp_path_factory):
    """The daemon asking every client for a certificate of the CA naming `prometheus`, over TLS 1.3 only."""
    root = tmp_path_factory.mktemp("mtls")
    (root / "home" / "session-state").mkdir(parents=True)
    config = web_config(root / "config", f"""
tls_server_config:
  cert_file: {pki['cert']}
  key_file: {pki['key']}
  client_auth_type: RequireAndVerifyClientCert
  client_ca_file: {pki['ca']}
  client_allowed_sans: [prometheus]
  min_version: TLS13
""")
    with TlsDaemon(root / "home", root / "state", traces_file=root / "traces.jsonl",
                   args=("--web-config-file", str(config))) as daemon:
        yield daemon


def _client(pki, cert: str | None, *, max_version=ssl.TLSVersion.TLSv1_3) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(pki["ca"]))
    context.maximum_version = max_version
    if cert is not None:
        context.load_cert_chain(pki[cert], pki[f"{cert}_key"])
    return context


def _handshake_fails(port: int, context: ssl.SSLContext) -> bool:
    """True when the server ends the TLS connection before answering a request."""
    try:
        with socket.create_connection((LOOPBACK, port), timeout=10) as raw, \
                context.wrap_socket(raw, server_hostname=LOOPBACK) as tls:
            tls.sendall(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
            return not tls.recv(100).startswith(b"HTTP/1.1")
    except (ssl.SSLError, ConnectionError):
        return True


def test_client_certificates_are_verified_and_named(mtls_daemon, pki):
    """RequireAndVerifyClientCert: no certificate, or TLS 1.2 under min_version TLS13, gets no answer; a
    certificate of the CA not named in client_allowed_sans gets 403; prometheus's gets in."""
    base = f"https://{LOOPBACK}:{mtls_daemon.port}"
    assert _handshake_fails(mtls_daemon.port, _client(pki, None))
    assert _handshake_fails(mtls_daemon.port, _client(pki, "client", max_version=ssl.TLSVersion.TLSv1_2))
    assert get(base + "/metrics", _client(pki, "intruder"))[0] == 403
    status, _headers, body = get(base + "/metrics", _client(pki, "client"))
    assert status == 200 and b"copilot_otel_build_info" in body


BAD_FILES = {
    "unknown key": ("tls_server_config:\n  cert_file: a\n  key_file: b\n  colour: blue\n", "unknown key 'colour'"),
    "unknown section": ("basic_auth:\n  a: b\n", "unknown key 'basic_auth'"),
    "not YAML": ("tls_server_config: [\n", "not valid YAML"),
    "no key file": ("tls_server_config:\n  cert_file: {cert}\n", "missing key_file"),
    "missing file": ("tls_server_config:\n  cert_file: nowhere.crt\n  key_file: {key}\n", "no such file"),
    "key of another certificate": ("tls_server_config:\n  cert_file: {cert}\n  key_file: {client_key}\n",
                                   "do not make a certificate and its key"),
    "plain password": ("basic_auth_users:\n  alice: hunter2\n", "is not a bcrypt hash"),
    "CA without verification": ("tls_server_config:\n  cert_file: {cert}\n  key_file: {key}\n"
                                "  client_ca_file: {ca}\n", "client_auth_type is NoClientCert"),
    "unverified client certificates": ("tls_server_config:\n  cert_file: {cert}\n  key_file: {key}\n"
                                       "  client_auth_type: RequireAnyClientCert\n", "would not be verified"),
    "bad TLS version": ("tls_server_config:\n  cert_file: {cert}\n  key_file: {key}\n  min_version: TLS14\n",
                        "'TLS14' is not one of"),
    "Go cipher names": ("tls_server_config:\n  cert_file: {cert}\n  key_file: {key}\n"
                        "  cipher_suites: [TLS_AES_128_GCM_SHA256]\n", "cipher_suites"),
    "rate limit": ("rate_limit:\n  interval: 1s\n  burst: 5\n", "rate_limit is not supported"),
}


@pytest.mark.parametrize("case", sorted(BAD_FILES))
def test_a_bad_web_config_stops_the_start_with_one_line(case, pki, tmp_path):
    """Each mistake in the file is one line naming the file and what to fix, exit 2, before anything runs."""
    text, said = BAD_FILES[case]
    config = web_config(tmp_path, text.format(**{k: str(v) for k, v in pki.items()}))
    result = run_copilot_otel("run", "--copilot-home", str(tmp_path / "home"), "--state-dir", str(tmp_path / "state"),
                              "--metrics-address", "127.0.0.1:0", env={"COPILOT_OTEL_WEB_CONFIG_FILE": str(config)},
                              timeout=60)
    lines = result.stderr.decode().strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1, result.stderr.decode()
    assert f"--web-config-file {config}: " in lines[0] and said in lines[0], lines[0]
