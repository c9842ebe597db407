"""The HTTP endpoint: /metrics (Prometheus text or OpenMetrics) and /healthz."""

from __future__ import annotations

import ipaddress
import logging
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable, Mapping

import orjson
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder

from .config import ConfigError

log = logging.getLogger(__name__)


class MetricsServer:
    """Serves a registry on HOST:PORT in a background thread; ``health()`` says if we are well."""

    def __init__(self, address: tuple[str, int], registry: CollectorRegistry,
                 health: Callable[[], tuple[bool, str]] = lambda: (True, "ok"), *,
                 api: Mapping[str, Callable[[], object]] = {}) -> None:
        """``api``: more GET paths, each answered with the JSON of what its function returns."""
        host, port = address
        self._registry = registry
        self._health = health
        self._api = dict(api)
        handler = self._make_handler()
        try:
            self._server = ThreadingHTTPServer((host, port), handler)
        except OSError as exc:
            raise ConfigError(f"cannot serve metrics on {host}:{port}: {exc.strerror or exc}; "
                              "choose another port with --metrics-address HOST:PORT") from None
        self._server.daemon_threads = True
        self.address = self._server.server_address[:2]
        if not _is_loopback(host):
            log.warning("metrics endpoint listens on %s:%d, beyond this machine", host, self.address[1])
        self._thread = threading.Thread(target=self._server.serve_forever, name="copilot-otel-metrics",
                                        kwargs={"poll_interval": 0.2}, daemon=True)

    def _make_handler(self):
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:  # scrapes are not worth a log line each
                pass

            def do_GET(self) -> None:
                path = self.path.split("?", 1)[0]
                if path == "/metrics":
                    encoder, content_type = choose_encoder(self.headers.get("Accept", ""))
                    body = encoder(server._registry)
                    self._reply(200, content_type, body)
                elif path == "/healthz":
                    ok, detail = server._health()
                    self._reply(200 if ok else 503, "text/plain; charset=utf-8", (detail + "\n").encode())
                elif path in server._api:
                    try:
                        body = orjson.dumps(server._api[path]())
                    except Exception:
                        log.exception("%s failed", path)
                        self._reply(500, "text/plain; charset=utf-8", b"internal error; see the daemon's log\n")
                        return
                    self._reply(200, "application/json", body)
                else:
                    self._reply(404, "text/plain; charset=utf-8", b"try /metrics or /healthz\n")

            def _reply(self, code: int, content_type: str, body: bytes) -> None:
                self.send_response(code)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        return Handler

    def start(self) -> None:
        """Start serving."""
        self._thread.start()

    def stop(self) -> None:
        """Stop serving and close the socket."""
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
