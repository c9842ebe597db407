"""attach(): traces, metrics and (OTEL_LOGS_EXPORTER=otlp) logs of a live `github-copilot-sdk` session, with its
ephemeral events.

    from copilot_otel import attach
    handle = attach(session)            # after client.create_session(...)
    ...
    handle.detach()                     # flushes what it buffered

The SDK calls our handler on its own thread for every event, including those the
file never gets (``session.idle``, ``assistant.usage``, ``model.call_failure``). The
handler never raises into the SDK and never blocks it: spans, and log records when a logs
sink is set, go to bounded queues exported by background threads.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from msgspec.structs import replace
from prometheus_client import CollectorRegistry, Counter

from .base.parsing import ConfigError
from .config import Config
from .decode.events import DecodeError
from .decode.lines import decode_object
from .delivery.queue import ExportQueue
from .delivery.sinks import make_sink
from .metrics.collectors import LiveSession
from .metrics.registry import Metrics
from .model.logs import LogRecord
from .model.pipeline import Outputs, drive, finish
from .model.sessions import SessionModel
from .otlp.contract import RecordSink, SpanSink
from .otlp.resource import resource_of
from .otlp.settings import OtlpSettings
from .vocab import IDLE

if TYPE_CHECKING:
    from .web.server import MetricsServer

# The public names; the configuration and sink types are here because attach() takes them (their own modules are
# internal: docs/contributing.md).
__all__ = [
    "Attachment",
    "Config",
    "ConfigError",
    "LogRecord",
    "OtlpSettings",
    "RecordSink",
    "SpanSink",
    "attach",
    "attach_async",
]

log = logging.getLogger(__name__)

_shared_lock = threading.Lock()
_shared: dict[int, _Shared] = {}  # id(registry) -> what all attachments on it share
_default: _Shared | None = None


class _Shared:
    """The Metrics of one registry, and the attachments whose live state it reports."""

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics
        self.attachments: set[Attachment] = set()
        self.handler_errors = Counter("copilot_otel_handler_errors", "Exceptions caught in the SDK event handler.",
                                      registry=metrics.registry)
        metrics.add_live_sessions(self.snapshot)

    def snapshot(self) -> list[LiveSession]:
        """The live state of every attached session, from what each published (no model is read here)."""
        return [LiveSession(a.session_id, a.state) for a in list(self.attachments) if a.state is not None]


def _shared_for(registry: CollectorRegistry | None, *, repository_label: bool = True) -> _Shared:
    """One Metrics per registry, shared by every attachment on it (None: the library's own); the first
    attachment's configuration says whether it has a repository label."""
    global _default
    with _shared_lock:
        if registry is None:
            if _default is None:
                _default = _Shared(Metrics(repository_label=repository_label))
            return _default
        shared = _shared.get(id(registry))
        if shared is None:
            shared = _shared[id(registry)] = _Shared(Metrics(registry=registry, process=False,
                                                             repository_label=repository_label))
        return shared


class Attachment:
    """A live session being observed; ``detach()`` stops and flushes."""

    def __init__(self, session: Any, *, sink: SpanSink, shared: _Shared, config: Config,
                 owns_sink: bool = True, log_sink: RecordSink[LogRecord] | None = None,
                 owns_log_sink: bool = True) -> None:
        self.session_id = str(getattr(session, "session_id", None) or "unknown")
        options = replace(config.model, logs=log_sink is not None)
        self.model = SessionModel(self.session_id, options, live_idle=True)
        # The model's state as of the last event, published for scrapes (None once the session ended).
        self.state: str | None = IDLE
        self._shared = shared
        self.metrics = shared.metrics
        self.registry = shared.metrics.registry
        self.sink = sink
        self._owns_sink = owns_sink  # a sink the app passed in is the app's to shut down (it may be shared)
        self._lock = threading.Lock()
        self._queue = ExportQueue(sink, None, max_spans=config.max_buffered_spans,
                                  on_exported=self.metrics.spans_exported.inc,
                                  on_failed=self.metrics.spans_failed.inc)
        self._queue.start()
        self.log_sink, self._owns_log_sink = log_sink, owns_log_sink
        self._log_queue: ExportQueue[LogRecord] | None = None
        if log_sink is not None:
            self._log_queue = ExportQueue(log_sink, None, max_spans=config.max_buffered_spans,
                                          on_exported=self.metrics.logs_exported.inc,
                                          on_failed=self.metrics.logs_failed.inc,
                                          on_backend_dropped=self.metrics.logs_dropped.inc,
                                          on_dead_lettered=self.metrics.logs_dropped.inc, signal="log",
                                          item="log record")
            self._log_queue.start()
        shared.attachments.add(self)
        self._session = session
        self._unsubscribe: Callable[[], None] | None = session.on(self._on_event)
        self._detached = False

    async def catch_up(self) -> int:
        """Apply the session's history from before ``attach`` (session.start...); return how many events."""
        history = await self._session.get_events()
        applied = 0
        for sdk_event in history:
            applied += self._on_event(sdk_event, from_history=True)
        return applied

    def _on_event(self, sdk_event: Any, from_history: bool = False) -> int:
        """The SDK's callback: map, feed, enqueue. Logs and counts any exception instead of raising."""
        try:
            obj = sdk_event.to_dict()
            raw_type = getattr(sdk_event, "raw_type", None)
            if raw_type:  # a type this SDK version does not know: keep the CLI's own name
                obj["type"] = raw_type
            event = decode_object(obj)
            out = Outputs()
            with self._lock:
                if not isinstance(event, DecodeError) and from_history and self.model.seen(event.id):
                    return 0  # already delivered live
                drive(self.model, (event,), out, source=f"session {self.session_id}")
                self._publish()
            self._hand_over(out)
            return 0 if isinstance(event, DecodeError) else 1
        except Exception:
            self._shared.handler_errors.inc()
            log.exception("copilot-otel: cannot handle an event of session %s; the session goes on", self.session_id)
            return 0

    def _publish(self) -> None:
        self.state = self.model.state if self.model.ended is None else None

    def _hand_over(self, out: Outputs) -> None:
        """Count the metrics; queue the spans without ever blocking the SDK's thread."""
        self.metrics.apply_outputs(out)
        dropped = self._queue.offer_spans(out.spans)
        if dropped:
            self.metrics.spans_failed.inc(dropped)
        if self._log_queue is not None and out.logs:
            lost = self._log_queue.offer_spans(out.logs)
            if lost:
                self.metrics.logs_dropped.inc(lost)

    def flush(self, timeout: float = 5.0) -> bool:
        """Wait until every span (and log record) so far is exported."""
        flushed = self._queue.flush(timeout)
        return (self._log_queue is None or self._log_queue.flush(timeout)) and flushed

    def detach(self, timeout: float = 5.0) -> bool:
        """Unsubscribe, close what is still open, export it all; True if everything was delivered."""
        if self._detached:
            return True
        self._detached = True
        if self._unsubscribe is not None:
            try:
                self._unsubscribe()
            except Exception:
                log.exception("copilot-otel: unsubscribing from session %s failed", self.session_id)
        with self._lock:
            out = finish(self.model, Outputs())
            self._publish()
        self._hand_over(out)
        delivered = self._queue.stop(timeout)
        if self._owns_sink:
            self.sink.shutdown()
        if self._log_queue is not None:
            delivered = self._log_queue.stop(timeout) and delivered
            if self._owns_log_sink and self.log_sink is not None:
                self.log_sink.shutdown()
        self._shared.attachments.discard(self)
        return delivered

    def __enter__(self) -> Attachment:
        return self

    def __exit__(self, *exc: object) -> None:
        self.detach()


def attach(session: Any, *, config: Config | None = None, traces_file: str | Path | None = None,
           otlp: OtlpSettings | None = None, sink: SpanSink | None = None, registry: CollectorRegistry | None = None,
           capture_content: bool | None = None, content_max_chars: int | None = None,
           metrics_address: tuple[str, int] | None = None, max_buffered_spans: int | None = None,
           log_sink: RecordSink[LogRecord] | None = None) -> Attachment:
    """Observe a live github-copilot-sdk session: export its spans and count its metrics.

    ``config`` defaults to ``Config.from_env()``: the daemon's COPILOT_OTEL_* variables
    (COPILOT_OTEL_TRACES_FILE, ...), OTEL_EXPORTER_OTLP_* and
    OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT; the keyword arguments override it.
    Metrics go to ``registry`` (or a shared default one); ``metrics_address`` also serves
    /metrics there. The session's events go as log records to ``log_sink``, else over OTLP when
    OTEL_LOGS_EXPORTER=otlp (docs/logs.md). Raises ConfigError for a bad setting.
    """
    base = config or Config.from_env()
    model = replace(base.model, **{k: v for k, v in (("capture_content", capture_content),
                                                      ("content_max_chars", content_max_chars)) if v is not None})
    config = replace(base, model=model, traces_file=Path(traces_file) if traces_file else base.traces_file,
                     otlp=otlp or base.otlp, max_buffered_spans=max_buffered_spans or base.max_buffered_spans)
    owns_sink = sink is None
    if sink is None:
        sink = make_sink(traces_file=config.traces_file, otlp=config.otlp, default_file=config.default_traces_file,
                         rotation=config.traces_rotation, strict=not config.no_strict_modes,
                         resource=resource_of(config))
    owns_log_sink = log_sink is None
    if log_sink is None and config.logs_otlp is not None:
        from .delivery.otlp_logs import OtlpLogSink

        log_sink = OtlpLogSink(config.logs_otlp, resource=resource_of(config),
                               max_request_bytes=config.max_request_bytes)
    shared = _shared_for(registry, repository_label=not config.no_repository_label)
    if metrics_address is not None:
        serve_metrics(shared.metrics.registry, metrics_address, allowed_hosts=config.allowed_hosts)
    return Attachment(session, sink=sink, shared=shared, config=config, owns_sink=owns_sink, log_sink=log_sink,
                      owns_log_sink=owns_log_sink)


async def attach_async(session: Any, *, config: Config | None = None, traces_file: str | Path | None = None,
                       otlp: OtlpSettings | None = None, sink: SpanSink | None = None,
                       registry: CollectorRegistry | None = None, capture_content: bool | None = None,
                       content_max_chars: int | None = None, metrics_address: tuple[str, int] | None = None,
                       max_buffered_spans: int | None = None,
                       log_sink: RecordSink[LogRecord] | None = None) -> Attachment:
    """``attach``, then catch up on what the session said before (its session.start included)."""
    handle = attach(session, config=config, traces_file=traces_file, otlp=otlp, sink=sink, registry=registry,
                    capture_content=capture_content, content_max_chars=content_max_chars,
                    metrics_address=metrics_address, max_buffered_spans=max_buffered_spans, log_sink=log_sink)
    try:
        await handle.catch_up()
    except Exception:  # history is a bonus; live events flow regardless
        log.warning("copilot-otel: could not read the history of session %s", handle.session_id, exc_info=True)
    return handle


_servers: dict[tuple[str, int], MetricsServer] = {}


def serve_metrics(registry: CollectorRegistry, address: tuple[str, int], *,
                  allowed_hosts: tuple[str, ...] = ()) -> MetricsServer:
    """Serve /metrics and /healthz for the library's registry (once per address); like the daemon's, they answer
    only a Host that is localhost, an IP address or one of ``allowed_hosts`` (COPILOT_OTEL_ALLOWED_HOST)."""
    from .web.server import MetricsServer

    with _shared_lock:
        server = _servers.get(address)
        if server is None:
            server = MetricsServer(address, registry, allowed_hosts=allowed_hosts)
            server.start()
            _servers[address] = server
        return server
