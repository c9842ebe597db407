"""The daemon's export side, built from the configuration: its metrics, the sinks, the dead letters and the export
queues (one per signal, sharing the checkpoint's positions when log records are sent too), started and stopped
together."""

from __future__ import annotations

import logging

from ..config import Config
from ..delivery.deadletter import FILE_NAME as DEAD_LETTER_FILE
from ..delivery.deadletter import DeadLetter
from ..delivery.queue import ExportQueue
from ..delivery.sinks import make_sink
from ..metrics.registry import Metrics
from ..model.logs import LogRecord
from ..otlp.contract import RecordSink, SpanSink
from ..otlp.json_encoder import OtlpJsonEncoder
from ..state.checkpoint import Checkpoint
from ..state.lanes import SharedCheckpoint
from .scrape_view import Readout

log = logging.getLogger("copilot_otel.daemon.daemon")  # its lines read as the daemon's, as before


def daemon_metrics(config: Config, resource: dict, readout: Readout, metrics: Metrics | None = None) -> Metrics:
    """The daemon's metrics (``metrics``, or new ones): budgets, live sessions and lag read from ``readout``."""
    metrics = metrics or Metrics(repository_label=not config.no_repository_label, resource=resource,
                                 max_label_values=config.max_label_values)
    if config.budgets:
        metrics.add_budgets(config.budgets, resource)
    metrics.add_live_sessions(readout.live_sessions)
    metrics.measure_lag_while(readout.sessions_at_work)
    return metrics


class ExportSide:
    """Where what the reader reads goes: the span sink and its queue, the log records' sink and queue when the
    models make them, the dead letters; /healthz's notes about them."""

    def __init__(self, config: Config, checkpoint: Checkpoint, metrics: Metrics, resource: dict, *,
                 sink: SpanSink | None = None, log_sink: RecordSink[LogRecord] | None = None) -> None:
        self.sink = sink or make_sink(traces_file=config.traces_file, otlp=config.otlp,
                                      default_file=config.default_traces_file,
                                      max_request_bytes=config.max_request_bytes, rotation=config.traces_rotation,
                                      strict=not config.no_strict_modes, resource=resource)
        self.dead_letter = DeadLetter(config.state_dir / DEAD_LETTER_FILE, OtlpJsonEncoder(resource))
        # The session's events as log records (OTEL_LOGS_EXPORTER=otlp): a queue of their own, so that either
        # backend failing holds back only its own signal; the checkpoint moves once both delivered (lanes.py).
        if log_sink is None and config.logs_otlp is not None:
            from ..delivery.otlp_logs import OtlpLogSink

            log_sink = OtlpLogSink(config.logs_otlp, resource=resource, max_request_bytes=config.max_request_bytes)
        self.log_sink = log_sink
        self.shared = SharedCheckpoint(checkpoint) if log_sink is not None else None
        self.queue = ExportQueue(
            self.sink, self.shared.lane(0) if self.shared is not None else checkpoint,
            max_spans=config.max_buffered_spans, dead_letter=self.dead_letter,
            on_exported=metrics.spans_exported.inc, on_failed=metrics.spans_failed.inc,
            on_commit=metrics.checkpoint_commits.inc, on_dead_lettered=metrics.spans_dead_lettered.inc,
            on_backend_dropped=metrics.spans_dropped_by_backend.inc)
        self.log_queue: ExportQueue[LogRecord] | None = ExportQueue(
            log_sink, self.shared.lane(1), max_spans=config.max_buffered_spans,
            on_exported=metrics.logs_exported.inc, on_failed=metrics.logs_failed.inc,
            on_dead_lettered=metrics.logs_dropped.inc, on_backend_dropped=metrics.logs_dropped.inc,
            signal="log", item="log record") if log_sink is not None and self.shared is not None else None

    @property
    def blocked(self) -> bool:
        """Is the reader held by back-pressure (a full queue)?"""
        return self.queue.blocked or (self.log_queue is not None and self.log_queue.blocked)

    def notes(self) -> list[str]:
        """What /healthz says of the exports: set aside, failing, waiting."""
        notes = self.queue.notes()
        if self.log_queue is not None:
            notes += self.log_queue.notes()
        return notes

    def start(self) -> None:
        """Start the export threads."""
        self.queue.start()
        if self.log_queue is not None:
            self.log_queue.start()

    def stop(self) -> None:
        """Flush what waits (5 s at most per queue; the rest is re-read on the next start), then shut down."""
        if not self.queue.stop(timeout=5.0):
            log.warning("stopped with %d spans not yet exported; they will be re-read on the next start",
                        self.queue.depth)
        if self.log_queue is not None and not self.log_queue.stop(timeout=5.0):
            log.warning("stopped with %d log records not yet exported; they will be re-read on the next start",
                        self.log_queue.depth)

    def shutdown(self) -> None:
        """Close the sinks and the dead letters (after the checkpoint is closed)."""
        self.sink.shutdown()
        if self.log_sink is not None:
            self.log_sink.shutdown()
        self.dead_letter.close()

