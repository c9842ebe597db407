"""A real OTLP receiver on loopback, for tests: Rotel, read back through a gRPC sink (traces; metrics too).

The receiver the code under test talks to is **Rotel** (https://github.com/streamfold/rotel),
a Rust OpenTelemetry collector, run from the ``rotel-agent`` binary shipped inside the
``rotel`` PyPI wheel (``rotel/rotel-agent``). It serves

* OTLP/gRPC  on ``127.0.0.1:<grpc_port>``  (``grpc_endpoint`` = ``http://127.0.0.1:<port>``)
* OTLP/HTTP  on ``127.0.0.1:<http_port>``  (``http_endpoint`` = ``http://127.0.0.1:<port>/v1/traces``)

Rotel has no file exporter, and its ``--debug-log`` is a human-readable dump, so to read back
*exactly* what it accepted, Rotel is started with its OTLP exporter pointed at a small
in-process gRPC server (the *sink*) built on the official ``opentelemetry-proto`` service
definitions (``trace_service_pb2_grpc.TraceServiceServicer``). The sink stores every
``ExportTraceServiceRequest`` and exposes the spans as plain ``ReceivedSpan`` dataclasses::

    code under test --OTLP grpc/http--> rotel-agent (real receiver) --OTLP grpc--> sink (test)

    with OtlpReceiver() as rx:
        exporter = OTLPSpanExporter(endpoint=rx.grpc_endpoint, insecure=True)
        ...
        spans = rx.wait_for_spans(3, timeout=5)
        assert spans[0].parent_span_id is None
        points = rx.wait_for_metric("copilot_llm_calls")   # OTLP metrics, on the same ports

    with rx.outage():            # backend down: both ports refuse connections
        ...                      # (rotel stopped; stored spans are kept)
    # back up, on the SAME ports

Details:

* Like the OpenTelemetry Collector, the receiver refuses requests over 4 MiB on its gRPC port
  (``max_grpc_request_mib``, passed to Rotel as ``--otlp-grpc-max-recv-msg-size-mib``; Rotel,
  built on tonic, answers OUT_OF_RANGE "decoded message length too large" where the Collector's
  grpc-go answers RESOURCE_EXHAUSTED). Its HTTP port has Rotel's own body limit (a 30 MB request
  gets 413; 5 MB passes).
* Rotel is started with ``--disable-batching`` by default, so every request it accepts is
  forwarded at once (no 200 ms batch delay); pass ``batch_timeout="200ms"`` to test with
  Rotel's normal batching. On ``down()``/``stop()`` Rotel gets SIGTERM and flushes what it
  accepted to the sink before it exits, so nothing it acknowledged is lost; ``down(graceful
  =False)`` sends SIGKILL instead.
* Rotel panics when given port 0, so free ports are picked by binding ``127.0.0.1:0`` and
  releasing them; if another process grabs one in between, Rotel exits with "Address already in
  use" and the start is retried on new ports. ``up()`` after ``down()`` reuses the old ports.
* Readiness is detected by polling TCP connects on both ports (about 30 ms after spawn).
* Processes are stopped by their pid only (SIGTERM, then SIGKILL after a timeout); an
  ``atexit`` hook stops receivers a crashed test forgot. ``pause()``/``resume()`` send
  SIGSTOP/SIGCONT: the kernel still accepts connections but nothing answers (a hung backend).
* ``ROTEL_*`` environment variables are removed from Rotel's environment so the caller's
  shell cannot reconfigure it. The binary links ``libpython3.X.so``; the running
  interpreter's ``LIBDIR`` is added to ``LD_LIBRARY_PATH`` when it holds that library.
* The sink's gRPC server uses an executor owned by this class and is stopped with its threads
  joined, so no Python thread outlives ``stop()``.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import importlib.util
import os
import signal
import socket
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from concurrent import futures
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2, metrics_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.proto.common.v1 import common_pb2
from opentelemetry.proto.trace.v1 import trace_pb2

from tests.support.net import free_ports

__all__ = [
    "OtlpReceiver",
    "ReceivedEvent",
    "ReceivedLink",
    "ReceivedMetric",
    "ReceivedPoint",
    "ReceivedSpan",
    "ReceiverError",
    "decode_any_value",
    "rotel_agent_path",
]

SINK_WORKERS = 4  # the counting sink's gRPC threads

LOOPBACK = "127.0.0.1"


class ReceiverError(RuntimeError):
    """The receiver could not be started, or a wait timed out (message holds Rotel's log)."""


# --------------------------------------------------------------------------- data model


@dataclass(frozen=True)
class ReceivedEvent:
    name: str
    time_unix_nano: int
    attributes: dict[str, Any]


@dataclass(frozen=True)
class ReceivedLink:
    trace_id: str
    span_id: str
    attributes: dict[str, Any]
    trace_state: str = ""


@dataclass(frozen=True)
class ReceivedSpan:
    """One span as the receiver got it. Ids are lowercase hex (32/16 chars).

    ``kind`` is the SpanKind name without prefix (``"INTERNAL"``, ``"SERVER"``, ``"CLIENT"``,
    ``"PRODUCER"``, ``"CONSUMER"``, ``"UNSPECIFIED"``), ``status_code`` is ``"UNSET"``,
    ``"OK"`` or ``"ERROR"`` (both match ``opentelemetry.trace`` enum ``.name``). Attribute
    values are decoded to str/bool/int/float/bytes, lists for arrays, dicts for kvlists.
    """

    trace_id: str
    span_id: str
    parent_span_id: str | None  # None for a root span
    name: str
    kind: str
    start_time_unix_nano: int
    end_time_unix_nano: int
    attributes: dict[str, Any]
    status_code: str
    status_message: str
    resource: dict[str, Any]
    scope_name: str = ""
    scope_version: str = ""
    trace_state: str = ""
    flags: int = 0
    events: tuple[ReceivedEvent, ...] = ()
    links: tuple[ReceivedLink, ...] = ()
    dropped_attributes_count: int = 0
    dropped_events_count: int = 0
    dropped_links_count: int = 0

    @property
    def duration_ns(self) -> int:
        return self.end_time_unix_nano - self.start_time_unix_nano

    @property
    def is_root(self) -> bool:
        return self.parent_span_id is None

    @property
    def trace_id_int(self) -> int:
        return int(self.trace_id, 16)

    @property
    def span_id_int(self) -> int:
        return int(self.span_id, 16)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def decode_any_value(value: common_pb2.AnyValue) -> Any:
    which = value.WhichOneof("value")
    if which is None:
        return None
    if which == "array_value":
        return [decode_any_value(v) for v in value.array_value.values]
    if which == "kvlist_value":
        return _decode_attributes(value.kvlist_value.values)
    return getattr(value, which)


def _decode_attributes(kvs: Any) -> dict[str, Any]:
    return {kv.key: decode_any_value(kv.value) for kv in kvs}


def _enum_suffix(enum_type: Any, number: int, prefix: str) -> str:
    try:
        name = enum_type.Name(number)
    except ValueError:
        return str(number)
    return name[len(prefix):] if name.startswith(prefix) else name


def spans_from_request(request: trace_service_pb2.ExportTraceServiceRequest) -> list[ReceivedSpan]:
    """Flatten one ``ExportTraceServiceRequest`` into ``ReceivedSpan`` objects (in order)."""
    out: list[ReceivedSpan] = []
    for rs in request.resource_spans:
        resource = _decode_attributes(rs.resource.attributes)
        for ss in rs.scope_spans:
            for s in ss.spans:
                out.append(
                    ReceivedSpan(
                        trace_id=s.trace_id.hex(),
                        span_id=s.span_id.hex(),
                        parent_span_id=s.parent_span_id.hex() or None,
                        name=s.name,
                        kind=_enum_suffix(trace_pb2.Span.SpanKind, s.kind, "SPAN_KIND_"),
                        start_time_unix_nano=s.start_time_unix_nano,
                        end_time_unix_nano=s.end_time_unix_nano,
                        attributes=_decode_attributes(s.attributes),
                        status_code=_enum_suffix(trace_pb2.Status.StatusCode, s.status.code, "STATUS_CODE_"),
                        status_message=s.status.message,
                        resource=resource,
                        scope_name=ss.scope.name,
                        scope_version=ss.scope.version,
                        trace_state=s.trace_state,
                        flags=s.flags,
                        events=tuple(
                            ReceivedEvent(e.name, e.time_unix_nano, _decode_attributes(e.attributes))
                            for e in s.events
                        ),
                        links=tuple(
                            ReceivedLink(link.trace_id.hex(), link.span_id.hex(), _decode_attributes(link.attributes),
                                         link.trace_state)
                            for link in s.links
                        ),
                        dropped_attributes_count=s.dropped_attributes_count,
                        dropped_events_count=s.dropped_events_count,
                        dropped_links_count=s.dropped_links_count,
                    )
                )
    return out


@dataclass(frozen=True)
class ReceivedPoint:
    """One data point of a received metric: a sum's or gauge's ``value``; a histogram's count, sum, bounds and
    per-bucket counts."""

    attributes: dict[str, Any]
    value: float | int | None = None
    count: int = 0
    sum: float = 0.0
    bounds: tuple[float, ...] = ()
    bucket_counts: tuple[int, ...] = ()
    start_time_unix_nano: int = 0
    time_unix_nano: int = 0
    exemplars: tuple[tuple[str, str, float], ...] = ()  # (trace id hex, span id hex, value)


@dataclass(frozen=True)
class ReceivedMetric:
    """One metric of one export request: ``kind`` is sum, gauge or histogram."""

    name: str
    unit: str
    kind: str
    points: tuple[ReceivedPoint, ...]
    resource: dict[str, Any]
    monotonic: bool = False
    cumulative: bool = False
    description: str = ""


def metrics_from_request(request: metrics_service_pb2.ExportMetricsServiceRequest) -> list[ReceivedMetric]:
    """Flatten one ``ExportMetricsServiceRequest`` (sums, gauges and histograms) into ``ReceivedMetric``s."""
    out = []
    for rm in request.resource_metrics:
        resource = _decode_attributes(rm.resource.attributes)
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                kind = m.WhichOneof("data")
                assert kind is not None, f"metric {m.name} has no data"
                data = getattr(m, kind)
                points = tuple(
                    ReceivedPoint(_decode_attributes(p.attributes), count=p.count, sum=p.sum,
                                  bounds=tuple(p.explicit_bounds),
                                  bucket_counts=tuple(p.bucket_counts), start_time_unix_nano=p.start_time_unix_nano,
                                  time_unix_nano=p.time_unix_nano, exemplars=_exemplars(p)) if kind == "histogram"
                    else ReceivedPoint(_decode_attributes(p.attributes), getattr(p, p.WhichOneof("value")),
                                       start_time_unix_nano=p.start_time_unix_nano, time_unix_nano=p.time_unix_nano,
                                       exemplars=_exemplars(p))
                    for p in data.data_points)
                out.append(ReceivedMetric(m.name, m.unit, kind, points, resource, getattr(data, "is_monotonic", False),
                                          getattr(data, "aggregation_temporality", 0) == 2, m.description))
    return out


def _exemplars(point: Any) -> tuple[tuple[str, str, float], ...]:
    return tuple((e.trace_id.hex(), e.span_id.hex(), getattr(e, e.WhichOneof("value")) if e.WhichOneof("value")
                  else 0.0)
                 for e in point.exemplars)


# --------------------------------------------------------------------------- sink


class _Sink(trace_service_pb2_grpc.TraceServiceServicer):
    """Stores what Rotel forwards. All access goes through ``cond``."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.requests: list[trace_service_pb2.ExportTraceServiceRequest] = []
        self.spans: list[ReceivedSpan] = []
        self.metrics: list[ReceivedMetric] = []  # by _MetricsSink

    def Export(self, request, context):
        spans = spans_from_request(request)
        with self.cond:
            self.requests.append(request)
            self.spans.extend(spans)
            self.cond.notify_all()
        return trace_service_pb2.ExportTraceServiceResponse()


class _MetricsSink(metrics_service_pb2_grpc.MetricsServiceServicer):
    """Stores the metrics Rotel forwards, in the trace sink (its ``cond``)."""

    def __init__(self, sink: _Sink) -> None:
        self.sink = sink

    def Export(self, request, context):
        metrics = metrics_from_request(request)
        with self.sink.cond:
            self.sink.metrics.extend(metrics)
            self.sink.cond.notify_all()
        return metrics_service_pb2.ExportMetricsServiceResponse()


# --------------------------------------------------------------------------- helpers


def rotel_agent_path() -> Path:
    """Path of the ``rotel-agent`` binary from the installed ``rotel`` wheel."""
    spec = importlib.util.find_spec("rotel")
    if spec is None or not spec.submodule_search_locations:
        raise ReceiverError("the `rotel` package is not installed (pip install rotel)")
    for loc in spec.submodule_search_locations:
        p = Path(loc) / "rotel-agent"
        if p.is_file():
            return p
    raise ReceiverError("the `rotel` package has no rotel-agent binary for this platform")


def _port_open(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(0.2)
        return s.connect_ex((LOOPBACK, port)) == 0


def _wait_all_threads_stopped(pid: int, timeout: float = 5.0) -> None:
    """SIGSTOP is asynchronous: wait until every thread of ``pid`` is in state T (stopped)."""
    deadline = time.monotonic() + timeout
    task_dir = Path(f"/proc/{pid}/task")
    if not task_dir.is_dir():  # not Linux: best effort
        return
    while True:
        states = []
        for stat in task_dir.glob("*/stat"):
            with contextlib.suppress(OSError):
                # "pid (comm) S ..." - comm may contain spaces/parens, the state follows the last ")"
                states.append(stat.read_text().rsplit(")", 1)[1].split()[0])
        if states and all(st in ("T", "t") for st in states):
            return
        if time.monotonic() > deadline:
            raise ReceiverError(f"rotel-agent (pid {pid}) did not stop: thread states {states}")
        time.sleep(0.002)  # a poll with its own deadline and error (the thread states seen)


def _agent_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ROTEL_")}
    env.setdefault("RUST_BACKTRACE", "1")
    # rotel-agent is linked against libpython3.X.so (for its optional Python processors).
    libdir = sysconfig.get_config_var("LIBDIR")
    ldlib = sysconfig.get_config_var("INSTSONAME") or sysconfig.get_config_var("LDLIBRARY")
    if libdir and ldlib and (Path(libdir) / ldlib).exists():
        parts = [p for p in env.get("LD_LIBRARY_PATH", "").split(os.pathsep) if p]
        if libdir not in parts:
            env["LD_LIBRARY_PATH"] = os.pathsep.join(parts + [libdir])
    return env


_live: set[OtlpReceiver] = set()
_live_lock = threading.Lock()


@atexit.register
def _stop_forgotten() -> None:  # pragma: no cover - safety net only
    with _live_lock:
        live = list(_live)
    for rx in live:
        with contextlib.suppress(Exception):
            rx.stop()


# --------------------------------------------------------------------------- receiver


class LoopbackEndpoints:
    """The addresses of an OTLP server whose ``grpc_port`` and ``http_port`` are bound on loopback."""

    grpc_port: int
    http_port: int

    @property
    def grpc_endpoint(self) -> str:
        """For OTLP/gRPC exporters: ``http://127.0.0.1:<grpc_port>`` (insecure)."""
        return f"http://{LOOPBACK}:{self.grpc_port}"

    @property
    def http_base(self) -> str:
        """``http://127.0.0.1:<http_port>`` (``OTEL_EXPORTER_OTLP_ENDPOINT`` style base)."""
        return f"http://{LOOPBACK}:{self.http_port}"


class OtlpReceiver(LoopbackEndpoints):
    """Rotel on 127.0.0.1 (OTLP/gRPC + OTLP/HTTP) with its traces readable from Python."""

    def __init__(
        self,
        *,
        batch_timeout: str | None = None,
        startup_timeout: float = 10.0,
        stop_timeout: float = 10.0,
        debug_log: bool = False,
        agent_path: str | os.PathLike[str] | None = None,
        max_grpc_request_mib: int = 4,
        metrics: bool = True,
    ) -> None:
        """``batch_timeout``: None disables Rotel's batching (forward each request at once);
        a Rotel duration such as ``"200ms"`` enables it. ``debug_log=True`` makes Rotel also
        print every span it receives (detailed) into its log (see ``log_text()``).
        ``max_grpc_request_mib``: the largest gRPC request accepted (the Collector's default, 4).
        ``metrics=False``: a traces-only receiver (Rotel's ``--otlp-receiver-metrics-disabled``), as a gateway
        without a metrics pipeline is: a metrics push gets gRPC UNIMPLEMENTED, or HTTP 404."""
        self.metrics_receiver = metrics
        self.batch_timeout = batch_timeout
        self.max_grpc_request_mib = max_grpc_request_mib
        self.startup_timeout = startup_timeout
        self.stop_timeout = stop_timeout
        self.debug_log = debug_log
        self.agent_path = Path(agent_path) if agent_path else rotel_agent_path()

        self.grpc_port: int = 0
        self.http_port: int = 0
        self.sink_port: int = 0
        self.startup_seconds: float | None = None  # last spawn -> both ports accepting
        self.starts = 0

        self._sink = _Sink()
        self._server: grpc.Server | None = None
        self._executor: futures.ThreadPoolExecutor | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._paused = False
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        self._log_path: Path | None = None
        self._lock = threading.RLock()

    # ---------------------------------------------------------------- endpoints

    @property
    def http_endpoint(self) -> str:
        """For OTLP/HTTP trace exporters: ``http://127.0.0.1:<http_port>/v1/traces``."""
        return f"{self.http_base}/v1/traces"

    @property
    def pid(self) -> int | None:
        """Pid of the running rotel-agent, or None while down."""
        return self._proc.pid if self._proc is not None and self._proc.poll() is None else None

    @property
    def is_up(self) -> bool:
        return self.pid is not None

    # ---------------------------------------------------------------- lifecycle

    def __enter__(self) -> OtlpReceiver:
        self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def start(self) -> OtlpReceiver:
        """Start the sink and Rotel on new free ports. Returns self."""
        with self._lock:
            if self._server is not None:
                raise ReceiverError("receiver already started")
            self._tmp = tempfile.TemporaryDirectory(prefix="otlp-receiver-")
            self._log_path = Path(self._tmp.name) / "rotel.log"
            try:
                self._start_sink()
                last: Exception | None = None
                for _ in range(5):
                    self.grpc_port, self.http_port = free_ports(2)
                    try:
                        self._spawn()
                        break
                    except _PortTaken as e:  # lost a port race: pick new ports
                        last = e
                else:
                    raise ReceiverError(f"could not bind free ports: {last}")
            except BaseException:
                self.stop()
                raise
            with _live_lock:
                _live.add(self)
            return self

    def stop(self) -> None:
        """Stop Rotel (flushing to the sink), then the sink. Idempotent. Data stays readable."""
        with self._lock:
            try:
                self._kill_agent(graceful=True)
            finally:
                if self._server is not None:
                    self._server.stop(grace=None).wait()
                    self._server = None
                if self._executor is not None:
                    self._executor.shutdown(wait=True)
                    self._executor = None
                if self._tmp is not None:
                    self._tmp.cleanup()
                    self._tmp = None
                with _live_lock:
                    _live.discard(self)

    def down(self, graceful: bool = True) -> None:
        """Simulate the backend going down: stop Rotel, ports refuse connections.

        ``graceful`` sends SIGTERM (Rotel flushes what it accepted); False sends SIGKILL.
        Spans already received stay readable."""
        with self._lock:
            self._kill_agent(graceful=graceful)

    def up(self) -> None:
        """Bring the backend back on the SAME ports (raises if another process took one)."""
        with self._lock:
            if self._server is None:
                raise ReceiverError("receiver not started")
            if self.is_up:
                return
            try:
                self._spawn()
            except _PortTaken as e:
                raise ReceiverError(str(e)) from None

    def restart(self, graceful: bool = True) -> None:
        self.down(graceful=graceful)
        self.up()

    @contextlib.contextmanager
    def outage(self, graceful: bool = True) -> Iterator[OtlpReceiver]:
        """``with rx.outage(): ...`` - backend down inside the block, up again after it."""
        self.down(graceful=graceful)
        try:
            yield self
        finally:
            self.up()

    def pause(self) -> None:
        """SIGSTOP Rotel: connections are accepted by the kernel but never answered."""
        with self._lock:
            pid = self.pid
            if pid is None:
                raise ReceiverError("receiver is down")
            os.kill(pid, signal.SIGSTOP)
            self._paused = True
            _wait_all_threads_stopped(pid)

    def resume(self) -> None:
        with self._lock:
            pid = self.pid
            if pid is not None and self._paused:
                os.kill(pid, signal.SIGCONT)
            self._paused = False

    @contextlib.contextmanager
    def hung(self) -> Iterator[OtlpReceiver]:
        """``with rx.hung(): ...`` - backend unresponsive inside the block."""
        self.pause()
        try:
            yield self
        finally:
            self.resume()

    # ---------------------------------------------------------------- reading

    def spans(self) -> list[ReceivedSpan]:
        """Snapshot of all spans received so far (arrival order)."""
        with self._sink.cond:
            return list(self._sink.spans)

    def requests(self) -> list[trace_service_pb2.ExportTraceServiceRequest]:
        """Copies of the raw ``ExportTraceServiceRequest`` messages Rotel forwarded.

        With batching disabled there is one per accepted client request."""
        with self._sink.cond:
            reqs = list(self._sink.requests)
        out = []
        for r in reqs:
            c = trace_service_pb2.ExportTraceServiceRequest()
            c.CopyFrom(r)
            out.append(c)
        return out

    def spans_named(self, name: str) -> list[ReceivedSpan]:
        return [s for s in self.spans() if s.name == name]

    def span(self, name: str) -> ReceivedSpan:
        """The single span with this name (AssertionError if zero or several)."""
        found = self.spans_named(name)
        assert len(found) == 1, f"expected exactly one span named {name!r}, got {len(found)}: {self._names()}"
        return found[0]

    def traces(self) -> dict[str, list[ReceivedSpan]]:
        """Spans grouped by trace id."""
        out: dict[str, list[ReceivedSpan]] = {}
        for s in self.spans():
            out.setdefault(s.trace_id, []).append(s)
        return out

    def clear(self) -> None:
        with self._sink.cond:
            self._sink.spans.clear()
            self._sink.requests.clear()
            self._sink.metrics.clear()

    def metrics(self) -> list[ReceivedMetric]:
        """Every metric of every metrics request received so far (arrival order: a later push repeats a name)."""
        with self._sink.cond:
            return list(self._sink.metrics)

    def wait_for_metric(self, name: str, timeout: float = 10.0,
                        predicate: Callable[[ReceivedMetric], bool] | None = None) -> ReceivedMetric:
        """Block until a metric ``name`` (matching ``predicate``) arrives; the latest such one."""
        deadline = time.monotonic() + timeout
        with self._sink.cond:
            while True:
                found = [m for m in self._sink.metrics if m.name == name and (predicate is None or predicate(m))]
                if found:
                    return found[-1]
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self._sink.cond.wait(min(remaining, 0.25))
        raise ReceiverError(f"timed out after {timeout}s waiting for metric {name!r}; received: "
                            f"{sorted({m.name for m in self.metrics()})}\n--- rotel log ---\n{self.log_text()[-4000:]}")

    def wait_for_spans(
        self,
        n: int,
        timeout: float = 10.0,
        predicate: Callable[[ReceivedSpan], bool] | None = None,
    ) -> list[ReceivedSpan]:
        """Block until at least ``n`` spans (matching ``predicate``, if given) were received.

        Wakes on every arrival (no fixed sleeps). Returns the matching spans; raises
        ``ReceiverError`` (with what did arrive and Rotel's log) on timeout."""
        deadline = time.monotonic() + timeout

        def matching() -> list[ReceivedSpan]:
            return [s for s in self._sink.spans if predicate is None or predicate(s)]

        with self._sink.cond:
            while True:
                found = matching()
                if len(found) >= n:
                    return found
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self._sink.cond.wait(min(remaining, 0.25))
        raise ReceiverError(
            f"timed out after {timeout}s waiting for {n} span(s); {len(found)} matching, "
            f"received: {self._names()}; receiver up={self.is_up}\n--- rotel log ---\n{self.log_text()[-4000:]}"
        )

    def wait_for_requests(self, n: int, timeout: float = 10.0) -> int:
        """Block until at least ``n`` export requests reached the sink; returns the count."""
        deadline = time.monotonic() + timeout
        with self._sink.cond:
            while len(self._sink.requests) < n:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise ReceiverError(
                        f"timed out waiting for {n} request(s); got {len(self._sink.requests)}"
                    )
                self._sink.cond.wait(min(remaining, 0.25))
            return len(self._sink.requests)

    def log_text(self) -> str:
        """Rotel's stdout+stderr since ``start()`` (empty once stopped)."""
        if self._log_path is None or not self._log_path.exists():
            return ""
        return self._log_path.read_text(errors="replace")

    def _names(self) -> list[str]:
        with self._sink.cond:
            return [s.name for s in self._sink.spans]

    # ---------------------------------------------------------------- internals

    def _start_sink(self) -> None:
        self._executor = futures.ThreadPoolExecutor(max_workers=SINK_WORKERS, thread_name_prefix="otlp-sink")
        # Every worker thread started now, not at the first request that finds the others busy: a receiver a
        # module's tests share then holds all its threads from before the first test (the leak check counts a
        # thread that starts during a test as that test's).
        started = threading.Barrier(SINK_WORKERS + 1)
        for _ in range(SINK_WORKERS):
            self._executor.submit(started.wait, 10)
        started.wait(10)
        server = grpc.server(
            self._executor,
            options=[
                ("grpc.max_receive_message_length", 64 * 1024 * 1024),
                ("grpc.so_reuseport", 0),
            ],
        )
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(self._sink, server)
        metrics_service_pb2_grpc.add_MetricsServiceServicer_to_server(_MetricsSink(self._sink), server)
        self.sink_port = server.add_insecure_port(f"{LOOPBACK}:0")
        if not self.sink_port:
            raise ReceiverError("could not bind the sink's gRPC port")
        server.start()
        self._server = server

    def _command(self) -> list[str]:
        assert self._tmp is not None
        cmd = [
            str(self.agent_path), "start",
            "--otlp-grpc-endpoint", f"{LOOPBACK}:{self.grpc_port}",
            "--otlp-grpc-max-recv-msg-size-mib", str(self.max_grpc_request_mib),
            "--otlp-http-endpoint", f"{LOOPBACK}:{self.http_port}",
            "--otlp-receiver-logs-disabled",
            *(() if self.metrics_receiver else ("--otlp-receiver-metrics-disabled",)),
            "--pid-file", str(Path(self._tmp.name) / "rotel.pid"),
            "--log-file", str(Path(self._tmp.name) / "rotel-daemon.log"),
            "--exporter", "otlp",
            "--otlp-exporter-endpoint", f"http://{LOOPBACK}:{self.sink_port}",
            "--otlp-exporter-protocol", "grpc",
            "--otlp-exporter-compression", "none",
            "--otlp-exporter-retry-initial-backoff", "50ms",
            "--otlp-exporter-retry-max-backoff", "500ms",
        ]
        if self.batch_timeout is None:
            cmd.append("--disable-batching")
        else:
            cmd += ["--batch-timeout", self.batch_timeout]
        if self.debug_log:
            cmd += ["--debug-log", "traces", "--debug-log-verbosity", "detailed"]
        return cmd

    def _environment(self) -> dict[str, str]:
        """Rotel's environment: this process's, without ROTEL_* settings (a gateway adds its own)."""
        return _agent_env()

    def _spawn(self) -> None:
        assert self._log_path is not None
        t0 = time.monotonic()
        with open(self._log_path, "ab") as log:
            log.write(f"--- start #{self.starts + 1}: grpc={self.grpc_port} http={self.http_port}\n".encode())
            log.flush()
            proc = subprocess.Popen(
                self._command(),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self._environment(),
                close_fds=True,
            )
        self._proc = proc
        self._paused = False
        deadline = t0 + self.startup_timeout
        while True:
            rc = proc.poll()
            if rc is not None:
                self._proc = None
                text = self.log_text()
                tail = text[-2000:]
                if "Address already in use" in text.rsplit("--- start #", 1)[-1]:
                    raise _PortTaken(f"rotel-agent could not bind its ports (exit {rc}):\n{tail}")
                raise ReceiverError(f"rotel-agent exited with {rc} during startup:\n{tail}")
            if _port_open(self.grpc_port) and _port_open(self.http_port):
                break
            if time.monotonic() > deadline:
                self._kill_agent(graceful=False)
                raise ReceiverError(
                    f"rotel-agent not listening after {self.startup_timeout}s:\n{self.log_text()[-2000:]}"
                )
            time.sleep(0.005)  # a poll with its own deadline and error (the agent's log)
        self.startup_seconds = time.monotonic() - t0
        self.starts += 1

    def _kill_agent(self, graceful: bool) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        try:
            if proc.poll() is None:
                if self._paused:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(proc.pid, signal.SIGCONT)
                if graceful:
                    proc.send_signal(signal.SIGTERM)
                    try:
                        proc.wait(self.stop_timeout)
                        return
                    except subprocess.TimeoutExpired:
                        pass
                proc.kill()
            proc.wait(self.stop_timeout)
        finally:
            self._paused = False


class _PortTaken(ReceiverError):
    pass


if __name__ == "__main__":  # manual check: python tests/support/otlp_receiver.py
    with OtlpReceiver() as rx:
        assert rx.startup_seconds is not None  # set by the start
        print(f"rotel-agent pid={rx.pid} grpc={rx.grpc_endpoint} http={rx.http_endpoint} "
              f"sink=127.0.0.1:{rx.sink_port} startup={rx.startup_seconds * 1000:.1f} ms")
        sys.stdout.flush()
