"""Backends that answer an OTLP/HTTP request with something that is not an OTLP answer, on loopback.

``LyingBackend`` is a small real HTTP server that answers every POST with one ``Answer``: an HTML
page, a JSON error, random bytes labelled protobuf, a valid body of the wrong type, a redirect, or a
correct answer sent one byte every few seconds (``trickle``). With ``receiver`` (a real Rotel,
tests/support/otlp_receiver.py) it forwards the first ``honest_for`` requests and relays Rotel's answer, then
lies; ``honest()`` makes it forward every request from then on, at the same address, so a replay's
ledger (kept per destination) carries over. ``partial`` forwards and then answers an OTLP partial
success of its own. ``Silent`` accepts connections and never answers. Each stops by itself at the end
of its ``with`` block, its handler threads joined. ``tls`` (certificate, key) makes it serve HTTPS.
"""

from __future__ import annotations

import random
import socket
import ssl
import threading
import urllib.error
import urllib.request
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

from tests.support.net import LOOPBACK


@dataclass(frozen=True)
class Answer:
    """One HTTP answer: status, Content-Type (None: no such header), body, extra headers; ``trickle``: seconds
    between the body's bytes (the headers go at once, Content-Length saying the whole body)."""

    status: int = 200
    content_type: str | None = "application/x-protobuf"
    body: bytes = b""
    headers: tuple[tuple[str, str], ...] = ()
    trickle: float = 0.0


def partial_success(rejected: int, message: str) -> bytes:
    """An ExportTraceServiceResponse saying ``rejected`` spans were dropped, and why."""
    response = ExportTraceServiceResponse()
    response.partial_success.rejected_spans = rejected
    response.partial_success.error_message = message
    return response.SerializeToString()


def _random_body() -> bytes:
    """340 random bytes (fixed seed) that do not decode as an ExportTraceServiceResponse."""
    body = random.Random(21).randbytes(340)
    try:
        ExportTraceServiceResponse.FromString(body)
    except DecodeError:
        return body
    raise AssertionError("pick another seed: these bytes decode")


PORTAL = (b"<!DOCTYPE html><html><head><title>Sign in to the network</title></head>"
          b"<body><form action='/login'>Accept the terms</form></body></html>")
# What a lying or mistaken backend answers, by name.
LIES = {
    "html": Answer(200, "text/html; charset=utf-8", PORTAL),
    "json_error": Answer(200, "application/json", b'{"error":"quota exceeded"}'),
    "random_bytes": Answer(200, "application/x-protobuf", _random_body()),
    "wrong_type": Answer(200, "text/plain", partial_success(0, "all good")),
    "redirect": Answer(302, "text/html", b"", (("Location", "http://portal.invalid/login"),)),
}
# Answers that are deliveries though they are not what the specification asks for, by name.
ODD_BUT_TRUE = {
    "empty_without_type": Answer(200, None, b""),  # seen from minimal receivers; the empty message
    "protobuf_with_charset": Answer(200, "application/x-protobuf; charset=utf-8", b""),
    # Langfuse (web/src/pages/api/public/otel/v1/traces, createAuthedProjectAPIRoute): a JSON object to a
    # protobuf request: {} without spans, {"message":"OK"} without a queue, else its queue job.
    "langfuse_ok": Answer(200, "application/json; charset=utf-8", b'{"message":"OK"}'),
    "langfuse_job": Answer(200, "application/json; charset=utf-8",
                           b'{"name":"otel-ingestion-job","data":{"fileKey":"otel/p/2026/12/04/00/00/x.json"},'
                           b'"opts":{"attempts":5},"id":"42","progress":0,"returnvalue":null,"stacktrace":[]}'),
}


class LyingBackend:
    """OTLP/HTTP on loopback answering ``answer`` (after ``honest_for`` requests forwarded to ``receiver``)."""

    def __init__(self, answer: Answer | None, *, receiver=None, honest_for: int = 0,
                 partial: tuple[int, str] | None = None, tls: tuple | None = None) -> None:
        self.answer, self.receiver, self.partial = answer, receiver, partial
        self.honest_left = honest_for
        self.requests = 0
        self.lies = 0
        self._lock = threading.Lock()
        self.closing = threading.Event()
        self.connections: set[socket.socket] = set()
        self._server = ThreadingHTTPServer((LOOPBACK, 0), _handler(self))
        self._server.daemon_threads = False  # so that server_close() joins the handler threads
        scheme = "http"
        if tls is not None:  # (certificate, key): HTTPS
            context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            context.load_cert_chain(*map(str, tls))
            self._server.socket = context.wrap_socket(self._server.socket, server_side=True)
            scheme = "https"
        self.base = f"{scheme}://{LOOPBACK}:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="lying-backend")

    @property
    def traces_url(self) -> str:
        return f"{self.base}/v1/traces"

    def honest(self) -> None:
        """Forward every request from now on (and relay the receiver's answer)."""
        with self._lock:
            self.answer, self.partial = None, None

    def decide(self) -> tuple[Answer | None, tuple[int, str] | None]:
        """For one request: the lie to tell (None: forward), and the partial success to answer after forwarding."""
        with self._lock:
            self.requests += 1
            if self.honest_left > 0:
                self.honest_left -= 1
                return None, None
            if self.answer is not None:
                self.lies += 1
            return self.answer, self.partial

    def forward(self, path: str, headers: dict, body: bytes) -> Answer:
        """Send the request on to the receiver; its answer."""
        request = urllib.request.Request(f"{self.receiver.http_base}{path}", data=body, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                return Answer(response.status, response.headers.get("Content-Type"), response.read())
        except urllib.error.HTTPError as error:
            return Answer(error.code, error.headers.get("Content-Type"), error.read())

    def __enter__(self) -> LyingBackend:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.closing.set()
        self._server.shutdown()
        with self._lock:
            for conn in self.connections:  # idle keep-alive connections: their handlers wait on a read
                try:
                    conn.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
        self._server.server_close()
        self._thread.join(5)


def _handler(owner: LyingBackend):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args) -> None:
            pass

        def setup(self) -> None:
            super().setup()
            with owner._lock:
                owner.connections.add(self.connection)

        def finish(self) -> None:
            with owner._lock:
                owner.connections.discard(self.connection)
            try:
                super().finish()
            except OSError:
                pass

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            lie, partial = owner.decide()
            if lie is None:
                headers = {k: v for k, v in self.headers.items() if k.lower() in ("content-type", "content-encoding")}
                answer = owner.forward(self.path, headers, body)
                if partial is not None and answer.status == 200:
                    answer = Answer(200, "application/x-protobuf", partial_success(*partial))
            else:
                answer = lie
            self.send_response(answer.status)
            if answer.content_type is not None:
                self.send_header("Content-Type", answer.content_type)
            for key, value in answer.headers:
                self.send_header(key, value)
            self.send_header("Content-Length", str(len(answer.body)))
            self.end_headers()
            self.wfile.flush()
            if not answer.trickle:
                self.wfile.write(answer.body)
                return
            self.close_connection = True
            for byte in answer.body:
                if owner.closing.wait(answer.trickle):
                    return
                try:
                    self.wfile.write(bytes([byte]))
                    self.wfile.flush()
                except OSError:
                    return  # the client gave up

    return Handler


class Silent:
    """Accepts TCP connections on loopback and never reads or answers (a hung backend)."""

    def __init__(self) -> None:
        self._listener = socket.socket()
        self._listener.bind((LOOPBACK, 0))
        self._listener.listen(16)
        self._listener.settimeout(0.1)
        self.port = self._listener.getsockname()[1]
        self.base = f"http://{LOOPBACK}:{self.port}"
        self.accepted: list[socket.socket] = []
        self._closing = threading.Event()
        self._thread = threading.Thread(target=self._accept, name="silent-backend")

    def _accept(self) -> None:
        while not self._closing.is_set():
            try:
                conn, _ = self._listener.accept()
            except (TimeoutError, OSError):
                continue
            self.accepted.append(conn)

    def __enter__(self) -> Silent:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._closing.set()
        self._thread.join(5)
        for conn in self.accepted:
            conn.close()
        self._listener.close()
