"""Tests for the Rotel-backed OTLP receiver harness (tests/support/otlp_receiver.py).

Spans are sent with the real ``opentelemetry-exporter-otlp`` exporters from an SDK
``TracerProvider``; the same spans are also captured in memory so ids and times can be
compared exactly with what the receiver reports.
"""

from __future__ import annotations

import os
import socket
import threading
import time

import grpc
import pytest
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Link, SpanKind, Status, StatusCode

try:  # works whether tests/ is a package or just on sys.path
    from tests.support.net import wait_until
    from tests.support.otlp_receiver import OtlpReceiver, ReceivedSpan, ReceiverError
except ImportError:  # pragma: no cover
    from net import wait_until  # type: ignore[no-redef]
    from otlp_receiver import OtlpReceiver, ReceivedSpan, ReceiverError  # type: ignore[no-redef]

pytest.importorskip("rotel")


def make_exporter(protocol: str, rx: OtlpReceiver, timeout: float = 5):
    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

        return OTLPSpanExporter(endpoint=rx.grpc_endpoint, insecure=True, timeout=timeout)
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    return OTLPSpanExporter(endpoint=rx.http_endpoint, timeout=timeout)


def emit_tree(protocol: str, rx: OtlpReceiver, tag: str = "t"):
    """Export parent -> child (+ event, link, error) through the real OTLP exporter.

    Returns the SDK's own ReadableSpans (child first, as ended) for comparison."""
    memory = InMemorySpanExporter()
    exporter = make_exporter(protocol, rx)
    provider = TracerProvider(
        resource=Resource.create({"service.name": f"svc-{tag}", "deployment.environment": "test", "res.int": 7})
    )
    provider.add_span_processor(SimpleSpanProcessor(memory))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("copilot-otel.test", "1.2.3")
    with tracer.start_as_current_span(
        f"{tag}.parent",
        kind=SpanKind.SERVER,
        attributes={"a.str": "s", "a.int": 5, "a.float": 1.5, "a.bool": True, "a.list": ["x", "y"], "a.ints": [1, 2]},
    ) as parent, tracer.start_as_current_span(
        f"{tag}.child", kind=SpanKind.CLIENT, links=[Link(parent.get_span_context(), {"l": "v"})]
    ) as child:
        child.set_attribute("gen_ai.usage.input_tokens", 123)
        child.add_event("ev", {"k": 1})
        child.set_status(Status(StatusCode.ERROR, "boom"))
    provider.shutdown()
    return memory.get_finished_spans()


def hexid(n: int, width: int) -> str:
    return format(n, f"0{width}x")


@pytest.fixture
def rx():
    with OtlpReceiver() as receiver:
        yield receiver


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_roundtrip_ids_parent_attributes_times(rx: OtlpReceiver, protocol: str):
    sdk_child, sdk_parent = emit_tree(protocol, rx, tag=protocol)
    spans = rx.wait_for_spans(2, timeout=10)
    assert len(spans) == 2
    parent = rx.span(f"{protocol}.parent")
    child = rx.span(f"{protocol}.child")
    assert isinstance(parent, ReceivedSpan)

    assert parent.trace_id == hexid(sdk_parent.context.trace_id, 32)
    assert parent.span_id == hexid(sdk_parent.context.span_id, 16)
    assert parent.parent_span_id is None and parent.is_root
    assert child.trace_id == parent.trace_id
    assert child.span_id == hexid(sdk_child.context.span_id, 16)
    assert child.parent_span_id == parent.span_id
    assert child.trace_id_int == sdk_child.context.trace_id

    assert parent.start_time_unix_nano == sdk_parent.start_time
    assert parent.end_time_unix_nano == sdk_parent.end_time
    assert child.start_time_unix_nano == sdk_child.start_time
    assert child.end_time_unix_nano == sdk_child.end_time
    assert child.duration_ns == sdk_child.end_time - sdk_child.start_time > 0

    assert parent.kind == SpanKind.SERVER.name == "SERVER"
    assert child.kind == "CLIENT"
    assert parent.attributes == {
        "a.str": "s", "a.int": 5, "a.float": 1.5, "a.bool": True, "a.list": ["x", "y"], "a.ints": [1, 2]
    }
    assert type(parent.attributes["a.int"]) is int and type(parent.attributes["a.bool"]) is bool
    assert child.attributes == {"gen_ai.usage.input_tokens": 123}
    assert parent.status_code == "UNSET" and parent.status_message == ""
    assert child.status_code == StatusCode.ERROR.name and child.status_message == "boom"

    assert child.events[0].name == "ev" and child.events[0].attributes == {"k": 1}
    assert child.events[0].time_unix_nano == sdk_child.events[0].timestamp
    assert child.links[0].span_id == parent.span_id and child.links[0].attributes == {"l": "v"}

    for s in (parent, child):
        assert s.resource["service.name"] == f"svc-{protocol}"
        assert s.resource["deployment.environment"] == "test"
        assert s.resource["res.int"] == 7
        assert s.resource["telemetry.sdk.language"] == "python"
        assert s.resource == dict(sdk_parent.resource.attributes)  # Rotel adds/drops nothing
        assert (s.scope_name, s.scope_version) == ("copilot-otel.test", "1.2.3")

    d = child.to_dict()
    assert d["parent_span_id"] == parent.span_id and d["events"][0]["name"] == "ev"
    assert rx.traces() == {parent.trace_id: spans}
    # one export request per span (SimpleSpanProcessor) and batching disabled in Rotel
    assert len(rx.requests()) == 2


def test_binds_only_loopback_and_distinct_ports(rx: OtlpReceiver):
    ports = {rx.grpc_port, rx.http_port, rx.sink_port}
    assert len(ports) == 3 and 0 not in ports
    listening = {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        if not os.path.exists(table):
            continue
        with open(table) as f:
            next(f)
            for line in f:
                cols = line.split()
                local, state = cols[1], cols[3]
                if state != "0A":  # LISTEN
                    continue
                addr, port = local.rsplit(":", 1)
                listening.setdefault(int(port, 16), set()).add(addr)
    loopback = {"0100007F", "0000000000000000FFFF00000100007F"}  # 127.0.0.1, ::ffff:127.0.0.1
    for port in ports:
        assert listening.get(port) and listening[port] <= loopback, (port, listening.get(port))


def test_wait_for_spans_polls_and_times_out_quickly(rx: OtlpReceiver):
    t0 = time.monotonic()
    with pytest.raises(ReceiverError, match="timed out"):
        rx.wait_for_spans(1, timeout=0.3)
    assert time.monotonic() - t0 < 2

    # wakes as soon as spans arrive, with a predicate
    done = threading.Event()

    def send_later():
        emit_tree("grpc", rx, tag="late")
        done.set()

    t = threading.Thread(target=send_later)
    t.start()
    found = rx.wait_for_spans(1, timeout=10, predicate=lambda s: s.name == "late.parent")
    t.join()
    assert [s.name for s in found] == ["late.parent"]
    rx.clear()
    assert rx.spans() == [] and rx.requests() == []


def _refused(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex(("127.0.0.1", port)) != 0


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_outage_and_recovery_on_same_ports(rx: OtlpReceiver, protocol: str):
    emit_tree(protocol, rx, tag="before")
    rx.wait_for_spans(2)
    ports, pid = (rx.grpc_port, rx.http_port), rx.pid

    with rx.outage():
        assert not rx.is_up and rx.pid is None
        assert _refused(rx.grpc_port) and _refused(rx.http_port)
        # the real exporter sees the backend as down
        exporter = make_exporter(protocol, rx, timeout=0.5)
        provider = TracerProvider()
        tracer = provider.get_tracer("t")
        with tracer.start_as_current_span("lost") as span:
            pass
        assert exporter.export([span]) == SpanExportResult.FAILURE
        exporter.shutdown()
        provider.shutdown()
        assert len(rx.spans()) == 2  # what was received before stays readable

    assert rx.is_up and (rx.grpc_port, rx.http_port) == ports and rx.pid != pid
    assert rx.starts == 2
    emit_tree(protocol, rx, tag="after")
    rx.wait_for_spans(4)
    assert {s.name for s in rx.spans()} == {"before.parent", "before.child", "after.parent", "after.child"}
    assert "lost" not in {s.name for s in rx.spans()}


def test_up_fails_clearly_when_a_port_was_taken(rx: OtlpReceiver):
    rx.down()
    squatter = socket.socket()
    try:
        squatter.bind(("127.0.0.1", rx.http_port))
        squatter.listen()
        with pytest.raises(ReceiverError, match="Address already in use"):
            rx.up()
        assert not rx.is_up
    finally:
        squatter.close()
    rx.up()
    emit_tree("http", rx, tag="back")
    assert len(rx.wait_for_spans(2)) == 2


def test_graceful_down_flushes_rotel_batches():
    with OtlpReceiver(batch_timeout="30s") as rx:
        emit_tree("http", rx, tag="batched")
        time.sleep(0.2)  # nothing arrives meanwhile: that is what is tested
        assert rx.spans() == []  # still held in Rotel's 30 s batch
        t0 = time.monotonic()
        rx.down()
        # SIGTERM makes Rotel flush what it accepted before exiting
        assert len(rx.wait_for_spans(2, timeout=5)) == 2
        assert time.monotonic() - t0 < 10
        assert len(rx.requests()) == 1  # both spans in one batch
        rx.up()
        emit_tree("grpc", rx, tag="again")
    # stop() flushed the second batch too
    assert {s.name for s in rx.spans()} >= {"again.parent", "again.child"}


def test_pause_simulates_a_hung_backend(rx: OtlpReceiver):
    request = trace_service_pb2.ExportTraceServiceRequest()
    with grpc.insecure_channel(f"127.0.0.1:{rx.grpc_port}") as channel:
        stub = trace_service_pb2_grpc.TraceServiceStub(channel)
        stub.Export(request, timeout=5)  # connected and answering
        with rx.hung():
            assert not _refused(rx.grpc_port)  # the kernel still accepts connections
            with pytest.raises(grpc.RpcError) as err:
                stub.Export(request, timeout=0.5)
            assert err.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        stub.Export(request, timeout=5)


def test_stop_leaves_no_process_or_thread():
    before = set(threading.enumerate())
    rx = OtlpReceiver()
    with rx:
        pid = rx.pid
        assert pid and os.path.exists(f"/proc/{pid}")
        emit_tree("http", rx, tag="x")
        rx.wait_for_spans(2)
        rx.pause()  # stop() must also end a paused process
    assert rx.pid is None and not os.path.exists(f"/proc/{pid}")
    wait_until(lambda: not set(threading.enumerate()) - before, timeout=5, interval=0.01,
               what="the receiver's threads to end", seen=lambda: set(threading.enumerate()) - before)
    assert len(rx.spans()) == 2  # still readable after stop
    rx.stop()  # idempotent


def test_startup_is_fast_and_receivers_are_isolated():
    with OtlpReceiver() as a, OtlpReceiver() as b:
        assert a.startup_seconds is not None and a.startup_seconds < 2.0
        assert {a.grpc_port, a.http_port}.isdisjoint({b.grpc_port, b.http_port})
        emit_tree("grpc", a, tag="a")
        emit_tree("http", b, tag="b")
        assert {s.name for s in a.wait_for_spans(2)} == {"a.parent", "a.child"}
        assert {s.name for s in b.wait_for_spans(2)} == {"b.parent", "b.child"}


def test_caller_rotel_env_is_ignored(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("ROTEL_EXPORTER", "blackhole")
    monkeypatch.setenv("ROTEL_OTLP_GRPC_ENDPOINT", "0.0.0.0:4317")
    with OtlpReceiver() as rx:
        emit_tree("grpc", rx, tag="env")
        assert len(rx.wait_for_spans(2)) == 2


def _request_of(size: int) -> trace_service_pb2.ExportTraceServiceRequest:
    request = trace_service_pb2.ExportTraceServiceRequest()
    span = request.resource_spans.add().scope_spans.add().spans.add()
    span.trace_id, span.span_id, span.name = b"\x01" * 16, b"\x02" * 8, "big"
    pad = span.attributes.add()
    pad.key, pad.value.string_value = "pad", "x" * size
    return request


def test_grpc_requests_over_4_mib_are_refused_like_the_collector(rx: OtlpReceiver):
    """As the Collector does by default, a gRPC request over 4 MiB is refused and nothing of it is
    stored; one just under the limit is taken."""
    channel = grpc.insecure_channel(f"127.0.0.1:{rx.grpc_port}")
    try:
        stub = trace_service_pb2_grpc.TraceServiceStub(channel)
        stub.Export(_request_of((4 << 20) - 200), timeout=10)
        with pytest.raises(grpc.RpcError) as refused:
            stub.Export(_request_of(5 << 20), timeout=10)
    finally:
        channel.close()
    assert refused.value.code() in (grpc.StatusCode.OUT_OF_RANGE, grpc.StatusCode.RESOURCE_EXHAUSTED)
    assert "too large" in refused.value.details()
    assert [s.name for s in rx.wait_for_spans(1, timeout=5)] == ["big"]
