"""A real OTLP receiver that can be made to throttle: a gate in front of Rotel (tests/support/otlp_receiver.py).

The gate serves OTLP/gRPC and OTLP/HTTP on free loopback ports. While it throttles it refuses
each request the way a backend at capacity does (Arize Phoenix answers "Server is at capacity"):
gRPC ``RESOURCE_EXHAUSTED`` or ``UNAVAILABLE``, HTTP 429 or 503 with ``Retry-After``. Otherwise
it forwards the request unchanged to Rotel and answers what Rotel answered, so what arrives is
read back from the receiver as in every other test::

    with OtlpReceiver() as rx, ThrottlingGate(rx) as gate:
        gate.refuse_for(5)                     # everything refused for 5 s
        gate.capacity(200)                     # or: at most 200 spans/s, the rest refused
        gate.accept_then_refuse(3)             # or: 3 requests pass, then all are refused
        ... export to gate.grpc_endpoint / gate.http_base ...
        rx.spans()

A refused request stores nothing, so a client that retries it delivers each span once.
"""

from __future__ import annotations

import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from concurrent import futures
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import grpc
from google.rpc.error_details_pb2 import RetryInfo
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

from tests.support.net import LOOPBACK
from tests.support.otlp_receiver import LoopbackEndpoints, OtlpReceiver

AT_CAPACITY = "Server is at capacity"


class _Policy:
    """When the gate refuses: a time window, a rate, or after a number of accepted requests."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.until = 0.0  # refuse everything before this monotonic time
        self.rate = 0.0  # spans/s accepted (0: no cap)
        self.tokens = 0.0
        self.last = time.monotonic()
        self.accept_left: int | None = None  # accept this many more requests, then refuse all
        self.refused = 0
        self.forwarded = 0
        self.attempts: list[float] = []  # the monotonic time of every request, refused or not

    def admit(self, spans: int) -> bool:
        with self.lock:
            now = time.monotonic()
            self.attempts.append(now)
            ok = now >= self.until
            if ok and self.accept_left is not None:
                ok = self.accept_left > 0
                self.accept_left -= ok
            if ok and self.rate > 0:
                self.tokens = min(self.rate, self.tokens + (now - self.last) * self.rate)
                self.last = now
                ok = self.tokens >= min(spans, self.rate)
                if ok:
                    self.tokens -= spans
            if ok:
                self.forwarded += 1
            else:
                self.refused += 1
            return ok


def _span_count(request: trace_service_pb2.ExportTraceServiceRequest) -> int:
    return sum(len(scope.spans) for resource in request.resource_spans for scope in resource.scope_spans)


class ThrottlingGate(LoopbackEndpoints):
    """OTLP/gRPC + OTLP/HTTP in front of ``receiver``; throttles as told (see the module docstring)."""

    def __init__(self, receiver: OtlpReceiver, *, grpc_code: grpc.StatusCode = grpc.StatusCode.RESOURCE_EXHAUSTED,
                 http_status: int = 429, retry_after: str | Callable[[], str] | None = "1",
                 retry_info: float | None = None) -> None:
        """``retry_after``: the Retry-After header of an HTTP refusal (None: none; a callable: made at each refusal,
        e.g. an HTTP date); ``retry_info``: the delay of the
        google.rpc.RetryInfo a gRPC refusal carries in its trailing metadata (None: none)."""
        self.receiver = receiver
        self.grpc_code = grpc_code
        self.http_status = http_status
        self.retry_after = retry_after
        self.retry_info = retry_info
        self.policy = _Policy()
        self._executor: futures.ThreadPoolExecutor | None = None
        self._grpc: grpc.Server | None = None
        self._channel: grpc.Channel | None = None
        self._http: ThreadingHTTPServer | None = None
        self._http_thread: threading.Thread | None = None
        self.grpc_port = self.http_port = 0

    # ---------------------------------------------------------------- what it refuses

    def refuse_for(self, seconds: float) -> None:
        """Refuse every request for ``seconds`` from now."""
        with self.policy.lock:
            self.policy.until = time.monotonic() + seconds

    def capacity(self, spans_per_second: float) -> None:
        """Accept at most this many spans a second (a request that does not fit is refused whole)."""
        with self.policy.lock:
            self.policy.rate, self.policy.tokens, self.policy.last = spans_per_second, 0.0, time.monotonic()

    def accept_then_refuse(self, requests: int) -> None:
        """Accept the next ``requests`` requests, then refuse every one (until ``open()``)."""
        with self.policy.lock:
            self.policy.accept_left = requests

    def open(self) -> None:
        """Stop throttling."""
        with self.policy.lock:
            self.policy.until, self.policy.rate, self.policy.accept_left = 0.0, 0.0, None

    @property
    def refused(self) -> int:
        return self.policy.refused

    @property
    def forwarded(self) -> int:
        return self.policy.forwarded

    # ---------------------------------------------------------------- lifecycle

    def __enter__(self) -> ThrottlingGate:
        self._executor = futures.ThreadPoolExecutor(max_workers=4, thread_name_prefix="otlp-gate")
        self._grpc = grpc.server(self._executor, options=[("grpc.max_receive_message_length", 64 << 20),
                                                         ("grpc.so_reuseport", 0)])
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(_GrpcGate(self), self._grpc)
        self.grpc_port = self._grpc.add_insecure_port(f"{LOOPBACK}:0")
        self._grpc.start()
        self._channel = grpc.insecure_channel(f"{LOOPBACK}:{self.receiver.grpc_port}")
        self._http = ThreadingHTTPServer((LOOPBACK, 0), _http_handler(self))
        self._http.daemon_threads = True
        self.http_port = self._http.server_address[1]
        self._http_thread = threading.Thread(target=self._http.serve_forever, kwargs={"poll_interval": 0.1},
                                             name="otlp-gate-http", daemon=True)
        self._http_thread.start()
        return self

    def __exit__(self, *exc) -> None:
        if self._http is not None:
            self._http.shutdown()
            self._http.server_close()
            if self._http_thread is not None:
                self._http_thread.join(timeout=5)
        if self._grpc is not None:
            self._grpc.stop(grace=None).wait()
        if self._channel is not None:
            self._channel.close()
        if self._executor is not None:
            self._executor.shutdown(wait=True)

    def forward_grpc(self, request):
        stub = trace_service_pb2_grpc.TraceServiceStub(self._channel)
        return stub.Export(request, timeout=10)


class _GrpcGate(trace_service_pb2_grpc.TraceServiceServicer):
    def __init__(self, gate: ThrottlingGate) -> None:
        self.gate = gate

    def Export(self, request, context):
        if not self.gate.policy.admit(_span_count(request)):
            if self.gate.retry_info is not None:
                info = RetryInfo()
                info.retry_delay.FromNanoseconds(int(self.gate.retry_info * 1e9))
                context.set_trailing_metadata((("google.rpc.retryinfo-bin", info.SerializeToString()),))
            context.abort(self.gate.grpc_code, AT_CAPACITY)
        return self.gate.forward_grpc(request)


def _http_handler(gate: ThrottlingGate):
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args) -> None:
            pass

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            try:
                request = trace_service_pb2.ExportTraceServiceRequest.FromString(body)
                spans = _span_count(request)
            except Exception:  # noqa: BLE001 - compressed, or not protobuf: count it as one
                spans = 1
            if not gate.policy.admit(spans):
                said = gate.retry_after() if callable(gate.retry_after) else gate.retry_after
                extra = {} if said is None else {"Retry-After": said}
                self._reply(gate.http_status, b"text/plain", AT_CAPACITY.encode(), extra)
                return
            headers = {k: v for k, v in self.headers.items() if k.lower() in ("content-type", "content-encoding")}
            forward = urllib.request.Request(f"{gate.receiver.http_base}{self.path}", data=body, headers=headers)
            try:
                with urllib.request.urlopen(forward, timeout=10) as response:
                    self._reply(response.status, response.headers.get("Content-Type", ""), response.read())
            except urllib.error.HTTPError as error:
                self._reply(error.code, error.headers.get("Content-Type", ""), error.read())

        def _reply(self, status: int, content_type, body: bytes, extra: dict | None = None) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type if isinstance(content_type, str) else content_type.decode())
            self.send_header("Content-Length", str(len(body)))
            for key, value in (extra or {}).items():
                self.send_header(key, value)
            self.end_headers()
            self.wfile.write(body)

    return Handler
