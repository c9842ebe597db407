"""Trace backends that answer as told, on loopback: to see what the daemon does with each answer.

``AnsweringHttp`` answers every OTLP/HTTP request with one status; ``AnsweringGrpc`` every
TraceService/Export call with one gRPC code (RetryInfo attached if asked; over TLS if given a certificate);
``HangingGrpc`` takes every call and never answers; ``MetricsHttp`` takes every metrics push and keeps it.
``StrictBackend`` sits in
front of a real receiver (tests/support/otlp_receiver.py) and refuses, with HTTP 400, any request holding a
span whose name contains a word, as a backend that validates spans would; other requests it
forwards and relays the receiver's answer. Each stops by itself at the end of its ``with`` block.
"""

from __future__ import annotations

import threading
import urllib.request
from concurrent import futures
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import grpc
from google.rpc.error_details_pb2 import RetryInfo
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from tests.support.net import LOOPBACK


class KeepingHttp:
    """HTTP on loopback that keeps the body of every POST (``requests``) and answers it with ``answer(body)``:
    (status, payload)."""

    def __init__(self, answer) -> None:
        self.requests: list[bytes] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                owner.requests.append(body)
                status, payload = answer(body)
                self.send_response(status)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        self._server = ThreadingHTTPServer((LOOPBACK, 0), Handler)
        self.base = f"http://{LOOPBACK}:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05})

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)


class AnsweringHttp(KeepingHttp):
    """OTLP/HTTP on loopback that answers every request with ``status``."""

    def __init__(self, status: int) -> None:
        super().__init__(lambda _body: (status, ExportTraceServiceResponse().SerializeToString()
                                        if status == 200 else b"refused"))


class MetricsHttp(KeepingHttp):
    """OTLP/HTTP metrics on loopback: keeps each request's body (``requests``), answers it as a backend that took it."""

    def __init__(self) -> None:
        from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceResponse

        super().__init__(lambda _body: (200, ExportMetricsServiceResponse().SerializeToString()))


class StrictBackend(KeepingHttp):
    """Refuses (400) requests holding a span named with ``word``; forwards the others to ``receiver``."""

    def __init__(self, receiver, word: str) -> None:
        self.refused = 0

        def answer(body: bytes) -> tuple[int, bytes]:
            request = ExportTraceServiceRequest.FromString(body)
            names = [span.name for rs in request.resource_spans for ss in rs.scope_spans for span in ss.spans]
            if any(word in name for name in names):
                self.refused += 1
                return 400, b"invalid span"
            forwarded = urllib.request.Request(receiver.http_endpoint, data=body, method="POST",
                                               headers={"Content-Type": "application/x-protobuf"})
            with urllib.request.urlopen(forwarded, timeout=10) as response:
                return response.status, response.read()

        super().__init__(answer)


class AnsweringGrpc:
    """TraceService/Export on loopback that fails every call with ``code`` and ``details`` (RetryInfo
    attached if asked; ``tls``: (certificate, key) PEM files to serve TLS with)."""

    def __init__(self, code: grpc.StatusCode, *, retry_info: bool = False, details: str = "",
                 tls: tuple | None = None) -> None:
        def export(_request: bytes, context: grpc.ServicerContext) -> bytes:
            if retry_info:
                info = RetryInfo()
                info.retry_delay.seconds = 1
                context.set_trailing_metadata((("google.rpc.retryinfo-bin", info.SerializeToString()),))
            context.abort(code, details or f"told to answer {code.name}")

        handler = grpc.method_handlers_generic_handler(
            "opentelemetry.proto.collector.trace.v1.TraceService",
            {"Export": grpc.unary_unary_rpc_method_handler(export)})
        self._executor = futures.ThreadPoolExecutor(max_workers=2)
        self._server = grpc.server(self._executor, handlers=[handler])
        if tls is None:
            self.port = self._server.add_insecure_port(f"{LOOPBACK}:0")
        else:
            cert, key = (Path(path).read_bytes() for path in tls)
            self.port = self._server.add_secure_port(f"{LOOPBACK}:0", grpc.ssl_server_credentials([(key, cert)]))
        self.endpoint = f"http://{LOOPBACK}:{self.port}"

    def __enter__(self):
        self._server.start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.stop(grace=None).wait()
        self._executor.shutdown(wait=True)


class HangingGrpc:
    """TraceService/Export on loopback that takes every call and holds it unanswered until it stops."""

    def __init__(self) -> None:
        self.calls = 0
        self._release = threading.Event()

        def export(_request: bytes, context: grpc.ServicerContext) -> bytes:
            self.calls += 1
            while context.is_active() and not self._release.wait(0.05):
                pass
            context.abort(grpc.StatusCode.UNAVAILABLE, "stopping")

        handler = grpc.method_handlers_generic_handler(
            "opentelemetry.proto.collector.trace.v1.TraceService",
            {"Export": grpc.unary_unary_rpc_method_handler(export)})
        self._executor = futures.ThreadPoolExecutor(max_workers=4)
        self._server = grpc.server(self._executor, handlers=[handler])
        self.endpoint = f"http://{LOOPBACK}:{self._server.add_insecure_port(f'{LOOPBACK}:0')}"

    def __enter__(self):
        self._server.start()
        return self

    def __exit__(self, *exc) -> None:
        self._release.set()
        self._server.stop(grace=None).wait()
        self._executor.shutdown(wait=True)
