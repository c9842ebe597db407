"""Where finished spans go: an OTLP JSON lines file, the SDK's OTLP exporters (gRPC, HTTP), or memory."""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Protocol, Sequence

from . import __version__
from .config import ENV_OTLP_TRACES_ENDPOINT, ConfigError, OtlpSettings
from .otlp_json import SCOPE_NAME, OtlpJsonEncoder
from .private import private_dir
from .records import KIND_CLIENT, STATUS_ERROR, STATUS_OK, SpanRecord
from .resource import resource_attributes
from .rotation import RotatingFile, Rotation

if TYPE_CHECKING:
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import ReadableSpan

log = logging.getLogger(__name__)


class ExportError(RuntimeError):
    """Spans could not be delivered to their destination."""


def build_resource() -> "Resource":
    """Our resource as the SDK's Resource (OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES honoured)."""
    from opentelemetry.sdk.resources import Resource

    return Resource(resource_attributes())


# ---------------------------------------------------------------- SDK spans (imported only to send OTLP)

def to_readable_span(record: SpanRecord, resource: "Resource") -> "ReadableSpan":
    """A span record as the SDK's ReadableSpan, for the stock OTLP exporters."""
    from opentelemetry.sdk.trace import Event as OTelEvent
    from opentelemetry.sdk.trace import ReadableSpan
    from opentelemetry.sdk.util.instrumentation import InstrumentationScope
    from opentelemetry.trace import Link, SpanContext, SpanKind, Status, StatusCode, TraceFlags

    kinds = {KIND_CLIENT: SpanKind.CLIENT}
    statuses = {STATUS_OK: StatusCode.OK, STATUS_ERROR: StatusCode.ERROR}
    flags = TraceFlags(TraceFlags.SAMPLED)
    parent = (
        SpanContext(record.trace_id, record.parent_span_id, is_remote=False, trace_flags=flags)
        if record.parent_span_id is not None
        else None
    )
    return ReadableSpan(
        name=record.name,
        context=SpanContext(record.trace_id, record.span_id, is_remote=False, trace_flags=flags),
        parent=parent,
        resource=resource,
        attributes=dict(record.attributes),
        events=[OTelEvent(e.name, dict(e.attributes), e.time_ns) for e in record.events],
        links=[Link(SpanContext(trace_id, span_id, is_remote=False, trace_flags=flags)) for trace_id, span_id in record.links],
        kind=kinds.get(record.kind, SpanKind.INTERNAL),
        status=Status(statuses[record.status], record.status_message or None)
        if record.status in statuses
        else Status(StatusCode.UNSET),
        start_time=record.start_ns,
        end_time=record.end_ns,
        instrumentation_scope=InstrumentationScope(SCOPE_NAME, __version__),
    )


# ---------------------------------------------------------------- sinks

class SpanSink(Protocol):
    """Where finished spans go. ``export`` raises ExportError when delivery failed."""

    description: str

    def export(self, records: Sequence[SpanRecord]) -> None: ...

    def shutdown(self) -> None: ...


class MemorySink:
    """Keeps exported spans in a list: for tests, and apps that inspect their own agents' spans."""

    description = "memory"

    def __init__(self) -> None:
        self.records: list[SpanRecord] = []
        self._lock = threading.Lock()

    def export(self, records: Sequence[SpanRecord]) -> None:
        """Append the batch."""
        with self._lock:
            self.records.extend(records)

    def shutdown(self) -> None:
        """Nothing to release."""


class FileSink:
    """Appends OTLP JSON lines to a file, one ExportTraceServiceRequest per batch; the file is
    created 0600 and rotates as ``rotation`` says."""

    def __init__(self, path: Path, *, resource: Mapping[str, Any] | None = None,
                 rotation: Rotation = Rotation()) -> None:
        self.path = Path(path)
        self.description = str(self.path)
        self.encoder = OtlpJsonEncoder(resource if resource is not None else resource_attributes())
        self._lock = threading.Lock()
        try:
            private_dir(self.path.parent)
            self._file = RotatingFile(self.path, rotation)
        except OSError as exc:
            raise ConfigError(f"cannot write traces to {self.path} ({exc.strerror or exc}); "
                              "choose another file with --traces-file, or another --state-dir") from None

    def export(self, records: Sequence[SpanRecord]) -> None:
        """Write the batch as one line and flush it to the OS."""
        if records:
            self.write_encoded(self.encoder.encode(records))

    def write_encoded(self, lines: bytes) -> None:
        """Append requests already encoded by ``self.encoder`` (whole lines), and flush them to the OS."""
        try:
            with self._lock:
                self._file.write(lines)
        except OSError as exc:
            raise ExportError(f"cannot write traces to {self.path}: {exc}") from exc

    def shutdown(self) -> None:
        """Flush to disk and close."""
        with self._lock:
            self._file.close()


class _Complaints(logging.Filter):
    """While an OtlpSink exports in a thread, what the SDK's exporter logs there (a line per failed
    attempt, retries included) becomes the reason in the sink's ExportError instead of lines of its own."""

    LOGGERS = ("opentelemetry.exporter.otlp.proto.grpc.exporter",
               "opentelemetry.exporter.otlp.proto.http.trace_exporter")

    def __init__(self) -> None:
        super().__init__()
        self._local = threading.local()
        for name in self.LOGGERS:
            logging.getLogger(name).addFilter(self)

    def filter(self, record: logging.LogRecord) -> bool:
        heard = getattr(self._local, "heard", None)
        if heard is None:
            return True
        heard.append(record.getMessage())
        return False

    def collect(self) -> list[str]:
        """Start collecting this thread's exporter messages into the list returned."""
        self._local.heard = []
        return self._local.heard

    def stop(self) -> None:
        self._local.heard = None


_COMPLAINTS = _Complaints()


class OtlpSink:
    """Sends spans with the SDK's OTLP exporter over gRPC or HTTP/protobuf."""

    def __init__(self, settings: OtlpSettings, *, resource: "Resource | None" = None,
                 timeout: float | None = None) -> None:
        if not settings.endpoint:
            raise ValueError("OtlpSink needs an endpoint")
        self._resource = resource or build_resource()
        endpoint = settings.endpoint
        if settings.protocol == "grpc":
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as Exporter
        else:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as Exporter

            # The generic endpoint is a base URL; the signal-specific one is used as given.
            if not os.environ.get(ENV_OTLP_TRACES_ENDPOINT):
                endpoint = endpoint.rstrip("/") + "/v1/traces"
        # timeout None: the exporter reads OTEL_EXPORTER_OTLP_(TRACES_)TIMEOUT, else 10 s.
        self._exporter = Exporter(endpoint=endpoint, timeout=timeout)
        self.description = f"{endpoint} ({settings.protocol})"

    def export(self, records: Sequence[SpanRecord]) -> None:
        """Send one batch; raise ExportError unless the backend accepted it."""
        if not records:
            return
        spans = [to_readable_span(r, self._resource) for r in records]
        heard = _COMPLAINTS.collect()
        try:
            result = self._exporter.export(spans)
        except Exception as exc:  # the exporter should not raise, but a sink must not crash the caller
            raise ExportError(f"OTLP export to {self.description} raised {type(exc).__name__}") from exc
        finally:
            _COMPLAINTS.stop()
        from opentelemetry.sdk.trace.export import SpanExportResult

        if result is not SpanExportResult.SUCCESS:
            reason = (f": {heard[-1]}" + (f" (first: {heard[0]})" if heard[0] != heard[-1] else "")) if heard else ""
            raise ExportError(f"OTLP export to {self.description} failed{reason}")

    def shutdown(self) -> None:
        """Close the exporter's channel."""
        self._exporter.shutdown()


def make_sink(*, traces_file: Path | None, otlp: OtlpSettings, default_file: Path,
              rotation: Rotation = Rotation()) -> SpanSink:
    """The destination the configuration names; a JSON-lines file when nothing is configured."""
    if traces_file is not None:
        return FileSink(traces_file, rotation=rotation)
    if otlp.endpoint:
        return OtlpSink(otlp)
    return FileSink(default_file, rotation=rotation)

