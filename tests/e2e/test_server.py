"""The HTTP endpoint: /metrics and /healthz on real sockets, and what hostile clients cannot do.

Every server here listens on 127.0.0.1 port 0, with short deadlines so the attacks end in
seconds; every client socket is closed by the test that opened it.
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import http.client
import logging
import os
import resource
import select
import socket
import subprocess
import sys
import threading
import time

import pytest
from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Gauge
from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_openmetrics
from prometheus_client.parser import text_string_to_metric_families as parse_text

from copilot_otel.config import ConfigError
from copilot_otel.web.server import SERVER, MetricsServer
from tests.support.net import close_at_once, wait_until

OPENMETRICS = "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5"


def _registry() -> CollectorRegistry:
    registry = CollectorRegistry()
    Counter("copilot_turns_total", "Turns.", ["agent"], registry=registry).labels("main").inc(3)
    Gauge("copilot_otel_files_watched", "Files.", registry=registry).set(7)
    return registry


async def _slow(request: web.Request) -> web.Response:
    await asyncio.sleep(30)
    return web.Response(text="late\n")


async def _big(request: web.Request) -> web.Response:
    return web.Response(body=b"x" * (64 << 20))


async def _blocking(request: web.Request) -> web.Response:
    answer = await request.app[SERVER].run_blocking(lambda: threading.current_thread().name)
    return web.json_response({"thread": answer})


async def _busy(request: web.Request) -> web.Response:
    """Holds a route worker for the seconds asked (sleeping, so the test measures queuing, not the GIL)."""
    await request.app[SERVER].run_blocking(time.sleep, float(request.query["s"]))
    return web.Response(text="done\n")


@contextlib.contextmanager
def serving(registry: CollectorRegistry | None = None, **options):
    """A started MetricsServer on a free loopback port (with /slow, /big and /blocking routes);
    ``server.registry`` is the registry it serves, for the tests' own reading."""
    registry = registry or _registry()
    routes = [web.get("/slow", _slow), web.get("/big", _big), web.get("/blocking", _blocking),
              web.get("/busy", _busy)]
    server = MetricsServer(("127.0.0.1", 0), registry, routes=routes, **options)
    server.start()
    server.registry = registry
    try:
        yield server
    finally:
        server.stop()


def request(server: MetricsServer, path: str, method: str = "GET", headers: dict | None = None,
            body: bytes | None = None, timeout: float = 5.0) -> tuple[int, http.client.HTTPMessage, bytes]:
    connection = http.client.HTTPConnection(*server.address, timeout=timeout)
    try:
        connection.request(method, path, body=body, headers=headers or {})
        response = connection.getresponse()
        return response.status, response.headers, response.read()
    finally:
        connection.close()


def errors(registry: CollectorRegistry, reason: str) -> float:
    return registry.get_sample_value("copilot_otel_http_errors_total", {"reason": reason}) or 0.0


def closed_by_peer(sock: socket.socket, timeout: float) -> bool:
    """True once the server has closed ``sock`` (EOF or reset) within ``timeout``."""
    poller = select.poll()  # select() cannot watch descriptors above 1023
    poller.register(sock, select.POLLIN)
    if not poller.poll(timeout * 1000):
        return False
    try:
        return sock.recv(65536) == b""
    except ConnectionError:
        return True


def half_sent(server: MetricsServer, count: int, prefix: bytes = b"GET /metr",
              pace: bool = False) -> list[socket.socket]:
    """``count`` connections that sent the start of a request line and stopped. ``pace``: a
    pause after every tenth, so the kernel's accept queue never overflows (when it does, the
    kernel hands some connections over a second or more later, and out of order)."""
    sockets = []
    for number in range(count):
        if pace and number % 10 == 9:
            time.sleep(0.02)  # pacing, as said above
        sock = socket.create_connection(server.address, timeout=5)
        if prefix:
            sock.sendall(prefix)
        sockets.append(sock)
    return sockets


def close_all(sockets) -> None:
    for sock in sockets:
        close_at_once(sock)


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def need_fds(count: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < count:
        pytest.skip(f"the open-files hard limit ({hard}) is below the {count} this test needs")
    if soft != resource.RLIM_INFINITY and soft < count:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(count * 2, hard), hard))


@pytest.fixture(autouse=True)
def no_warnings(caplog):
    """No test here may make the server log a warning, an error or a traceback."""
    caplog.set_level(logging.DEBUG)
    yield
    loud = [r for r in caplog.records if r.levelno >= logging.WARNING or r.exc_info]
    assert not loud, "\n".join(f"{r.name} {r.levelname} {r.getMessage()}" for r in loud)


# ---------------------------------------------------------------- what a scraper sees

def test_metrics_in_both_formats():
    """/metrics speaks Prometheus text by default and OpenMetrics when the Accept header asks."""
    with serving() as server:
        status, headers, body = request(server, "/metrics")
        assert status == 200 and headers["Content-Type"].startswith("text/plain; version=0.0.4")
        families = {family.name: family for family in parse_text(body.decode())}
        assert families["copilot_turns"].samples[0].value == 3

        status, headers, body = request(server, "/metrics", headers={"Accept": OPENMETRICS})
        assert status == 200 and headers["Content-Type"].startswith("application/openmetrics-text")
        families = {family.name: family for family in parse_openmetrics(body.decode())}
        assert families["copilot_otel_files_watched"].samples[0].value == 7


@pytest.mark.parametrize("accept", ["", OPENMETRICS])
def test_metrics_gzip_when_accepted(accept):
    """A client that accepts gzip gets the same exposition gzipped; one that does not, plain."""
    with serving() as server:
        _, _, plain = request(server, "/metrics", headers={"Accept": accept})
        status, headers, body = request(server, "/metrics", headers={"Accept": accept, "Accept-Encoding": "gzip"})
        assert status == 200 and headers["Content-Encoding"] == "gzip"
        text = gzip.decompress(body).decode()
        parse = parse_openmetrics if accept else parse_text
        assert {f.name for f in parse(text)} == {f.name for f in parse(plain.decode())}
        assert "copilot_turns_total" in text
        _, headers, _ = request(server, "/metrics", headers={"Accept": accept, "Accept-Encoding": "identity"})
        assert headers["Content-Encoding"] is None


def test_head_unknown_paths_methods_and_headers():
    """HEAD has no body; unknown paths are 404 (no listing), other methods 405; every response
    says nosniff."""
    with serving() as server:
        status, headers, body = request(server, "/metrics", method="HEAD")
        assert status == 200 and body == b"" and int(headers["Content-Length"]) > 0
        status, headers, body = request(server, "/healthz")
        assert (status, body) == (200, b"ok\n")
        responses = [request(server, "/metrics", method="HEAD"), request(server, "/healthz")]
        for path in ("/", "/nope", "/metrics/../../etc/passwd", "/static/", "/%2e%2e/"):
            status, headers, body = request(server, path)
            assert status == 404 and len(body) < 100, (path, body)
            responses.append((status, headers, body))
        for method in ("POST", "PUT", "DELETE"):
            status, headers, body = request(server, "/metrics", method=method, body=b"x=1")
            assert status == 405 and "GET" in headers["Allow"], method
            responses.append((status, headers, body))
        for _status, headers, _body in responses:
            assert headers["X-Content-Type-Options"] == "nosniff"


def test_healthz_says_unhealthy():
    """/healthz answers 503 with the health text when the daemon is not well."""
    server = MetricsServer(("127.0.0.1", 0), _registry(), lambda: (False, "reader loop stalled for 40 s"))
    server.start()
    try:
        assert request(server, "/healthz")[::2] == (503, b"reader loop stalled for 40 s\n")
    finally:
        server.stop()


def test_address_in_use_is_a_config_error():
    """A port that is taken gives a ConfigError naming the address and the flag to change it."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(ConfigError, match=f"127.0.0.1:{port}.*--metrics-address"):
            MetricsServer(("127.0.0.1", port), _registry())


def test_added_routes_and_worker_threads():
    """Routes passed in are served; ``run_blocking`` runs work off the loop, in the routes' own workers."""
    with serving() as server:
        status, _, body = request(server, "/blocking")
        assert status == 200 and b"copilot-otel-web" in body


def test_scrapes_do_not_queue_behind_the_routes_work():
    """With every route worker busy and more route work queued, a scrape renders at once in its own threads."""
    with serving() as server:
        busy = [threading.Thread(target=request, args=(server, "/busy?s=3"), kwargs={"timeout": 30})
                for _ in range(6)]
        for thread in busy:
            thread.start()
        time.sleep(0.3)  # the scenario: the workers busy when the scrape comes (nothing to observe them by)
        started = time.monotonic()
        status, _, body = request(server, "/metrics")
        took = time.monotonic() - started
        for thread in busy:
            thread.join(30)
        assert status == 200 and b"copilot_turns_total" in body
        assert took < 1.0, f"a scrape waited {took:.2f} s behind the routes' work"


# ---------------------------------------------------------------- rendering off the loop

class SlowCollector:
    """A collector that takes ``delay`` seconds per collection and counts its collections."""

    def __init__(self, delay: float) -> None:
        self.delay = delay
        self.calls = 0

    def collect(self):
        self.calls += 1
        time.sleep(self.delay)  # the thing under test: a slow collector
        return []


def test_slow_scrape_does_not_block_healthz_and_renders_are_shared():
    """While a 1 s render runs, /healthz answers at once, and scrapes that arrive meanwhile for
    the same format share that render instead of queuing their own."""
    registry = _registry()
    slow = SlowCollector(1.0)
    registry.register(slow)
    with serving(registry) as server:
        results = []
        scrapers = [threading.Thread(target=lambda: results.append(request(server, "/metrics")[0]))
                    for _ in range(5)]
        for thread in scrapers:
            thread.start()
            time.sleep(0.02)  # the scenario: scrapes arriving one after another, into one slow collect
        time.sleep(0.1)  # the scenario: all five in flight
        started = time.monotonic()
        assert request(server, "/healthz")[0] == 200
        assert time.monotonic() - started < 0.3
        for thread in scrapers:
            thread.join(10)
        assert results == [200] * 5
        assert slow.calls == 1


# ---------------------------------------------------------------- hostile clients

def test_600_half_sent_connections_neither_block_nor_stay():
    """600 connections that sent half a request line cost no thread; scrapes and /healthz still
    answer quickly, none is closed before the header deadline, and all are closed soon after it."""
    need_fds(3000)
    # The deadline is long enough that the 40 answers come before any of the 600 is cut off on a busy machine:
    # an answer that waited for the half-sent connections would take until their deadline.
    deadline = 5.0
    with serving(header_timeout=deadline) as server:
        idle, sent_at = [], []
        threads = threading.active_count()
        try:
            for _ in range(600):
                idle += half_sent(server, 1)
                sent_at.append(time.monotonic())
            assert threading.active_count() == threads  # no thread per connection
            slowest = 0.0
            for _ in range(20):
                for path in ("/metrics", "/healthz"):
                    began = time.monotonic()
                    status, _, body = request(server, path)
                    slowest = max(slowest, time.monotonic() - began)
                    assert status == 200 and body
            print(f"slowest of 40 answers with 600 half-sent connections: {slowest * 1000:.1f} ms")
            assert slowest < 2.0, f"slowest answer {slowest:.3f} s"
            for sock, sent in zip(idle, sent_at):
                if closed_by_peer(sock, 0):
                    assert time.monotonic() - sent > deadline - 0.1, "closed before the header deadline"
            for sock in idle:
                assert closed_by_peer(sock, max(0.0, sent_at[-1] + deadline + 3.0 - time.monotonic())), \
                    "half-sent connection left open"
        finally:
            close_all(idle)
        assert errors(server.registry, "header_timeout") == 600


def test_silent_connections_are_closed_after_the_idle_timeout():
    """Connections that never send a byte are closed once the idle timeout has passed (aiohttp's
    keep-alive timer, which starts when the connection opens)."""
    with serving(idle_timeout=1.0) as server:
        silent = half_sent(server, 20, prefix=b"")
        try:
            started = time.monotonic()
            assert not any(closed_by_peer(sock, 0) for sock in silent)
            for sock in silent:
                assert closed_by_peer(sock, max(0.0, started + 4.0 - time.monotonic()))
            assert time.monotonic() - started > 0.9
        finally:
            close_all(silent)


def test_slowloris_trickle_is_cut_off_at_the_deadline():
    """A client that trickles its request head one byte every 0.3 s is cut off at the header
    deadline counted from its first byte, not kept alive by the trickle; so is a keep-alive
    connection that trickles its second request."""
    with serving(header_timeout=1.0) as server:
        for first in (b"", b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n"):
            sock = socket.create_connection(server.address, timeout=5)
            try:
                if first:
                    sock.sendall(first)
                    assert sock.recv(4096).startswith(b"HTTP/1.1 200")
                head = b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nX-Pad: " + b"a" * 100
                began = time.monotonic()
                cut = None
                for byte in head:
                    try:
                        sock.sendall(bytes([byte]))
                    except ConnectionError:
                        cut = time.monotonic() - began
                        break
                    if closed_by_peer(sock, 0.3):
                        cut = time.monotonic() - began
                        break
                assert cut is not None, "the trickle was never cut off"
                assert 0.9 < cut < 2.0, cut
            finally:
                sock.close()


def test_request_head_size_is_capped():
    """A head of large headers, each within aiohttp's own limits, is cut off at 32 KiB in all."""
    with serving() as server:
        sock = socket.create_connection(server.address, timeout=5)
        try:
            sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\n")
            with pytest.raises(ConnectionError):
                for number in range(25):
                    sock.sendall(b"X-Pad-%d: " % number + b"a" * 8000 + b"\r\n")
                    time.sleep(0.02)  # the scenario: headers that come in over time
                sock.recv(1)
                sock.sendall(b"X: y\r\n")
                raise AssertionError("still open after 200 kB of headers")
        finally:
            sock.close()
        assert errors(server.registry, "header_too_large") == 1


def healthz_within(server_port: int, seconds: float) -> float:
    """Retry /healthz on new connections until it answers 200; the seconds that took."""
    started = time.monotonic()
    while True:
        connection = http.client.HTTPConnection("127.0.0.1", server_port, timeout=2)
        try:
            connection.request("GET", "/healthz")
            if connection.getresponse().status == 200:
                return time.monotonic() - started
        except OSError:
            pass
        finally:
            connection.close()
        assert time.monotonic() - started < seconds, f"/healthz did not answer within {seconds} s"
        time.sleep(0.1)  # a poll that measures how long the answer took (wait_until does not time it)


def test_connection_cap_bounds_descriptors_and_keeps_health():
    """With a cap of 50, 150 connections cost at most 50 server-side descriptors: the longest
    idle are closed first, and /healthz answers at once. While every connection is busy,
    newcomers are refused."""
    need_fds(1000)
    with serving(max_connections=50) as server:
        before = open_fds()
        old = half_sent(server, 50, prefix=b"", pace=True)
        new = []
        try:
            new = half_sent(server, 100, prefix=b"", pace=True)
            wait_until(lambda: all(closed_by_peer(sock, 0) for sock in old + new[:50]), timeout=10,
                       what="the 100 longest idle closed",
                       seen=lambda: sum(closed_by_peer(sock, 0) for sock in old + new))
            assert not any(closed_by_peer(sock, 0) for sock in new[50:])
            server_side = open_fds() - before - len(old) - len(new)
            assert server_side <= 50 + 5, server_side
            assert request(server, "/healthz")[0] == 200
            assert errors(server.registry, "connection_evicted") == 101
        finally:
            close_all(old + new)

        busy = []
        try:
            for _ in range(50):
                sock = socket.create_connection(server.address, timeout=5)
                sock.sendall(b"GET /slow HTTP/1.1\r\nHost: localhost\r\n\r\n")
                busy.append(sock)
            time.sleep(0.3)  # the scenario: 50 slow requests under way when the extra connection comes
            extra = socket.create_connection(server.address, timeout=5)
            busy.append(extra)
            assert closed_by_peer(extra, 2.0)  # every connection busy: refused
            assert errors(server.registry, "connection_refused") == 1
        finally:
            close_all(busy)
        assert healthz_within(server.address[1], 3.0) < 1.0


SERVE_UNDER_LIMIT = """
import logging, resource, sys
from prometheus_client import CollectorRegistry
from copilot_otel.web.server import MetricsServer
logging.basicConfig(level=logging.WARNING)
server = MetricsServer(("127.0.0.1", 0), CollectorRegistry())
server.start()
print(server.address[1], resource.getrlimit(resource.RLIMIT_NOFILE)[0], flush=True)
sys.stdin.read()
server.stop()
"""


def test_a_flood_of_connections_never_exhausts_a_low_open_files_limit():
    """A server process limited to 256 descriptors, hit by 600 connections opened as fast as
    possible: its descriptors stay under the limit, accept() never fails, /healthz answers
    within seconds."""
    need_fds(2000)
    limit = lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))  # noqa: E731
    proc = subprocess.Popen([sys.executable, "-c", SERVE_UNDER_LIMIT], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=limit)
    sockets = []
    try:
        port, nofile = map(int, proc.stdout.readline().split())
        assert nofile == 256
        for _ in range(600):
            sock = socket.socket()
            sock.setblocking(False)
            sock.connect_ex(("127.0.0.1", port))
            sockets.append(sock)
        most = 0
        for _ in range(20):
            most = max(most, len(os.listdir(f"/proc/{proc.pid}/fd")))
            time.sleep(0.05)  # sampling its descriptors over a second: the peak is what is measured
        healthz_within(port, 5.0)
        assert most < 256
    finally:
        close_all(sockets)
        proc.stdin.close()
        try:
            stderr = proc.stderr.read()
            proc.wait(10)
        finally:
            proc.kill()
            proc.wait()
    assert "Too many open files" not in stderr, stderr
    assert "Traceback" not in stderr, stderr


def test_client_that_does_not_read_is_cut_off():
    """A client that asks for a large response and never reads it is dropped at the write
    deadline instead of holding the connection and the buffered response for ever."""
    with serving(write_timeout=1.0) as server:
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.connect(server.address)
        try:
            sock.sendall(b"GET /big HTTP/1.1\r\nHost: localhost\r\n\r\n")
            wait_until(lambda: errors(server.registry, "write_timeout") >= 1, timeout=10, interval=0.1,
                       what="the client that does not read cut off",
                       seen=lambda: errors(server.registry, "write_timeout"))
        finally:
            sock.close()
        assert request(server, "/healthz")[0] == 200


def test_bad_requests_are_counted_not_logged_as_errors():
    """Garbage, oversized request lines and non-HTTP bytes get a 400 or a closed connection,
    a count, and no error log line or traceback (the autouse fixture checks the log)."""
    with serving() as server:
        for junk in (b"GARBAGE\r\n\r\n", b"GET /" + b"a" * 9000 + b" HTTP/1.1\r\n\r\n",
                     b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", b"GET / HTTP/1.1\r\nBad Header\r\n\r\n"):
            sock = socket.create_connection(server.address, timeout=5)
            try:
                sock.sendall(junk)
                reply = sock.recv(4096)
                assert reply == b"" or (reply.startswith(b"HTTP/1.") and b" 400 " in reply.split(b"\r\n")[0])
            except ConnectionError:
                pass
            finally:
                sock.close()
        wait_until(lambda: errors(server.registry, "bad_request") >= 3, timeout=10, what="3 bad requests counted",
                   seen=lambda: errors(server.registry, "bad_request"))


def test_stop_with_open_connections_is_prompt_and_leaves_nothing():
    """stop() with idle, half-sent and busy connections open returns within about a second,
    ends the loop and worker threads, and closes the listening socket."""
    server = MetricsServer(("127.0.0.1", 0), _registry(), routes=[web.get("/slow", _slow)])
    server.start()
    port = server.address[1]
    sockets = half_sent(server, 50) + half_sent(server, 50, prefix=b"")
    for _ in range(5):
        sock = socket.create_connection(server.address, timeout=5)
        sock.sendall(b"GET /slow HTTP/1.1\r\nHost: localhost\r\n\r\n")
        sockets.append(sock)
    try:
        assert request(server, "/metrics")[0] == 200
        time.sleep(0.2)  # the scenario: the slow requests under way when the server is stopped
        started = time.monotonic()
        server.stop()
        print(f"stop() took {time.monotonic() - started:.3f} s")
        assert time.monotonic() - started < 3.0
        assert not [t for t in threading.enumerate() if t.name.startswith("copilot-otel-")]
        assert all(closed_by_peer(sock, 2.0) for sock in sockets)
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", port), timeout=2).close()
    finally:
        close_all(sockets)


class BrokenCollector:
    def describe(self):
        return []

    def collect(self):
        raise RuntimeError("collector broke")


def test_a_failing_render_is_a_500_logged_once_with_its_traceback(caplog):
    """A collector that raises makes /metrics answer 500; the traceback is logged the first
    time only, every failure is counted, and /healthz is unaffected."""
    registry = _registry()
    broken = BrokenCollector()
    registry.register(broken)
    with serving(registry) as server:
        for _ in range(3):
            assert request(server, "/metrics")[0] == 500
        assert request(server, "/healthz")[0] == 200
        registry.unregister(broken)
        assert errors(registry, "handler_error") == 3
    logged = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(logged) == 1 and logged[0].exc_info and "collector broke" in caplog.text
    caplog.clear()  # seen: the autouse check is for unexpected log lines


def test_the_unix_socket_has_the_same_guard_and_needs_no_token(tmp_path):
    """The commands' socket is served by the same guarded loop: a request head trickled into it is cut off
    at the header deadline. A whole request there needs neither the token nor a local Host (the kernel
    vouched for the caller's uid), while TCP still asks for both. The socket file goes at stop."""
    path = tmp_path / ("deep-" * 20) / "daemon.sock"  # past the 108 bytes a socket address holds
    path.parent.mkdir(parents=True)
    with serving(header_timeout=1.0, token="the-token", unix_socket=path) as server:
        assert request(server, "/slow")[0] == 401  # TCP: a token route without its token
        assert request(server, "/healthz", headers={"Host": "evil.example"})[0] == 403
        folder = os.open(path.parent, os.O_PATH)
        try:
            address = f"/proc/self/fd/{folder}/{path.name}"
            with socket.socket(socket.AF_UNIX) as sock:
                sock.settimeout(5)
                sock.connect(address)
                sock.sendall(b"GET /blocking HTTP/1.1\r\nHost: evil.example\r\nConnection: close\r\n\r\n")
                answer = b""
                while chunk := sock.recv(65536):
                    answer += chunk
            assert answer.startswith(b"HTTP/1.1 200") and b"copilot-otel-web" in answer
            with socket.socket(socket.AF_UNIX) as sock:
                sock.connect(address)
                sock.sendall(b"GET /metrics HTTP/1.1\r\n")
                began = time.monotonic()
                assert closed_by_peer(sock, 5.0)
                assert 0.9 < time.monotonic() - began < 3.0
        finally:
            os.close(folder)
        assert path.exists()
    assert not path.exists()
