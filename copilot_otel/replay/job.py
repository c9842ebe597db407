"""One `copilot-otel replay`, from start to exit code: for session logs, what is left to send (the
ledger of an interrupted run), sending it (rate, throttling, deadline), progress on a terminal or
one summary line, and the sessions not delivered when it gives up; or a headless run's stream on
stdin; then the run's metrics (a textfile, an OTLP push) when asked for.
"""

from __future__ import annotations

import logging
import sqlite3
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from msgspec import Struct, field

from ..base.private_files import write_private
from ..base.safe_text import say as _say
from ..base.workers import WorkerError
from ..config import Config
from ..delivery.deadletter import FILE_NAME as DEAD_LETTER_FILE
from ..delivery.deadletter import DeadLetter
from ..delivery.sinks import FileSink
from ..otlp.contract import ExportError, SpanSink
from ..otlp.json_encoder import OtlpJsonEncoder
from ..otlp.resource import build_resource, resource_of
from ..source.sources import session_id_of
from .batches import Batch, ReplayStats
from .delivery import GaveUp, LogSender, ReplaySender
from .ledger import Ledger, identity_of, same_log
from .runner import BATCH, replay_files, replay_stream

log = logging.getLogger(__name__)

EXIT_OK, EXIT_FAILED, EXIT_INTERRUPTED = 0, 1, 130
NAMED = 10  # sessions named in a failure message; the rest are counted
TEXTFILE_MODE = 0o644  # a node_exporter textfile: read by the exporter's own user
METRICS_REFUSED = "export failed: the OTLP metrics endpoint did not accept the metrics"


class Outcome(Struct):
    """How a replay went: its figures, what was left undelivered, and the exit code."""

    stats: ReplayStats
    total: int = 0  # sessions the replay was asked for
    code: int = EXIT_OK
    delivered: int = 0  # spans this run delivered
    completed: int = 0  # sessions this run delivered whole
    before: int = 0  # sessions an interrupted run had delivered already
    again: bool = False  # --restart into a trace file that held spans already: they are written a second time
    retries: int = 0
    seconds: float = 0.0
    undelivered: list[Path] = field(default_factory=list)
    unreadable: list[tuple[str, str]] = field(default_factory=list)
    reason: str = ""
    logs: int = 0  # log records delivered (OTEL_LOGS_EXPORTER=otlp)


class _Quiet:
    """No progress display (not a terminal): rich is not even imported."""

    def __enter__(self) -> _Quiet:
        return self

    def __exit__(self, *exc_info) -> None:
        pass

    def add_task(self, *args, **kwargs) -> int:
        return 0

    def update(self, *args, **kwargs) -> None:
        pass


@contextmanager
def _progress(interactive: bool) -> Iterator:
    """Sessions, spans, their rate, the time left and the time taken, on a terminal; log lines meanwhile
    print above the bar (rich's stderr, not the one logging was set up with)."""
    if not interactive:
        yield _Quiet()
        return
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    with Progress(TextColumn("{task.description}"), BarColumn(bar_width=None), MofNCompleteColumn(),
                  TextColumn("sessions  {task.fields[spans]} spans  {task.fields[rate]}/s"),
                  TimeRemainingColumn(), TimeElapsedColumn(), console=Console(file=sys.stderr),
                  transient=True) as progress:
        handlers = [h for h in logging.getLogger().handlers
                    if type(h) is logging.StreamHandler and h.stream is progress.console.file]
        for handler in handlers:
            handler.setStream(sys.stderr)  # rich's proxy while the bar is drawn
        try:
            yield progress
        finally:
            for handler in handlers:
                handler.setStream(progress.console.file)


def replay_logs(files: list[Path], sink: SpanSink, config: Config, *, workers: int | None = None, rate: float = 0.0,
                give_up_after: float, restart: bool = False, keep_metrics: bool = False,
                interactive: bool = False) -> Outcome:
    """Send every log's spans through ``sink``, continuing an interrupted replay of the same logs to the
    same destination unless ``restart``; never raises for a delivery problem: the Outcome says."""
    # A file keeps what was written to it: its ledger is the file's (whatever the logs), kept once complete, and
    # started anew only when the file is (new or emptied) or with --restart. An OTLP backend's is the replay's.
    into_file = isinstance(sink, FileSink)
    ledger = _ledger_of(files, sink, config, restart)
    progress = ledger.load() if ledger is not None else {}
    identities = {str(path): identity_of(path) for path in files}
    todo = _todo(files, progress)
    outcome = Outcome(ReplayStats(metrics=[] if keep_metrics else None), len(files), before=len(files) - len(todo),
                      again=isinstance(sink, FileSink) and restart and not sink.fresh)
    _say_before(outcome, sink.description, into_file)
    started = time.monotonic()
    with _progress(interactive) as bar:
        sender, logs, dead_letter = _send(todo, sink, config, outcome, bar, started, ledger=ledger,
                                          identities=identities, workers=workers, rate=rate,
                                          give_up_after=give_up_after, keep_metrics=keep_metrics)
    _conclude(outcome, files, todo, sender, logs, dead_letter, started)
    if ledger is not None:
        ledger.close(remove=not outcome.undelivered and not into_file)
    return outcome


def _ledger_of(files: list[Path], sink: SpanSink, config: Config, restart: bool) -> Ledger | None:
    """The ledger of a replay of ``files`` into ``sink`` with these settings (a fresh one with ``restart`` or a new
    or emptied file)."""
    settings = f"{config.model.capture_content}:{config.model.content_max_chars}"
    if config.model.logs:  # what a replay without log records delivered is not done for one with them
        settings += ":logs"
    into_file = isinstance(sink, FileSink)
    return _open_ledger(Ledger.path_for(config.state_dir, sink.description, () if into_file else files, settings),
                        restart or (isinstance(sink, FileSink) and sink.fresh))


def _todo(files: list[Path], progress: dict) -> list[tuple[Path, int]]:
    """The logs left to send, each with the spans of it delivered before (the ledger's ``progress``)."""
    todo: list[tuple[Path, int]] = []
    for path in files:
        known = progress.get(str(path))
        if known is None or not same_log(known.identity, path):
            todo.append((path, 0))
        elif not known.done:
            todo.append((path, known.sent))
    return todo


def _say_before(outcome: Outcome, destination: str, into_file: bool) -> None:
    """Say what an earlier run delivered (left out now), or that --restart writes a file's spans again."""
    if outcome.again:
        log.warning("--restart: %s holds spans already; every session is written again after them (the same ids: "
                    "a backend keeps one of each, a reader of the file sees each twice)", destination)
    if outcome.before and into_file:
        log.info("%d of %d sessions were written to %s before and are left out (--restart writes them again)",
                 outcome.before, outcome.total, destination)
    elif outcome.before:
        log.info("continuing an interrupted replay: %d of %d sessions were delivered before", outcome.before,
                 outcome.total)


def _send(todo: list[tuple[Path, int]], sink: SpanSink, config: Config, outcome: Outcome, bar, started: float, *,
          ledger: Ledger | None, identities: dict, workers: int | None, rate: float, give_up_after: float,
          keep_metrics: bool) -> tuple[ReplaySender, LogSender | None, DeadLetter]:
    """Send ``todo`` with progress on ``bar``; how it failed goes in ``outcome``. (sender, log sender, dead letters)."""
    task = bar.add_task("replaying", total=len(todo), spans=0, rate=0)

    def delivered(batch: Batch) -> None:
        elapsed = max(time.monotonic() - started, 1e-6)
        bar.update(task, advance=sum(1 for _p, _n, last in batch.parts if last), description="replaying",
                   spans=sender.spans, rate=f"{sender.spans / elapsed:.0f}")

    def waiting(_reason: str, seconds: float) -> None:
        bar.update(task, description=f"refused, retry {seconds:.0f}s")

    dead_letter = DeadLetter(config.state_dir / DEAD_LETTER_FILE, OtlpJsonEncoder(resource_of(config)))
    sender = ReplaySender(ledger=ledger, identities=identities, sent={str(p): s for p, s in todo}, rate=rate,
                          give_up_after=give_up_after, refused=dead_letter.add, on_delivered=delivered,
                          on_waiting=waiting)
    batch = min(BATCH, max(1, int(rate))) if rate > 0 else BATCH
    logs = log_sender(config, give_up_after)
    try:
        outcome.stats = replay_files(todo, sink, options=config.model, max_line_bytes=config.max_line_bytes,
                                     workers=workers, keep_metrics=keep_metrics, batch=batch, send=sender,
                                     max_request_bytes=config.max_request_bytes, unreadable=outcome.unreadable,
                                     send_logs=logs)
    except OSError as exc:  # the dead-letter file could not be written
        outcome.code = EXIT_FAILED
        outcome.reason = f"export failed: cannot keep refused spans in {dead_letter.path}: {exc.strerror or exc}"
    except GaveUp as exc:
        outcome.code, outcome.reason = EXIT_FAILED, f"export failed, gave up: {exc}"
    except WorkerError as exc:
        outcome.code, outcome.reason = EXIT_FAILED, f"export failed: {exc}"
    except KeyboardInterrupt:
        outcome.code, outcome.reason = EXIT_INTERRUPTED, "interrupted"
    finally:
        dead_letter.close()
        if logs is not None:
            logs.sink.shutdown()
    return sender, logs, dead_letter


def _conclude(outcome: Outcome, files: list[Path], todo: list[tuple[Path, int]], sender: ReplaySender,
              logs: LogSender | None, dead_letter: DeadLetter, started: float) -> None:
    """The figures of a replay that ran, what it left undelivered, and its exit code and reason."""
    outcome.delivered, outcome.retries, outcome.completed = sender.spans, sender.retries, len(sender.done)
    outcome.logs = logs.sent if logs is not None else 0
    outcome.seconds = time.monotonic() - started
    finished = {str(p) for p in files} - {str(p) for p, _skip in todo} | sender.done
    outcome.undelivered = [path for path in files if str(path) not in finished]
    if outcome.unreadable and outcome.code == EXIT_OK:
        outcome.code, outcome.reason = EXIT_FAILED, f"{len(outcome.unreadable)} session log(s) could not be read"
    if outcome.stats.refused and outcome.code == EXIT_OK:
        outcome.code = EXIT_FAILED
        outcome.reason = (f"export failed: the trace backend refused {outcome.stats.refused} span(s) for good; they "
                          f"are kept in {dead_letter.path} (last reason: {dead_letter.last_reason})")
    if outcome.stats.dropped and outcome.code == EXIT_OK:
        outcome.code, outcome.reason = EXIT_FAILED, dropped_reason(outcome.stats)
    if logs is not None and logs.lost and outcome.code == EXIT_OK:
        outcome.code, outcome.reason = EXIT_FAILED, lost_logs_reason(logs)


def log_sender(config: Config, give_up_after: float) -> LogSender | None:
    """Where the replay's log records go (OTEL_LOGS_EXPORTER=otlp), or None: they are not exported."""
    if config.logs_otlp is None:
        return None
    from ..delivery.otlp_logs import OtlpLogSink

    return LogSender(OtlpLogSink(config.logs_otlp, resource=resource_of(config),
                                 max_request_bytes=config.max_request_bytes), give_up_after)


def lost_logs_reason(logs: LogSender) -> str:
    """Why a replay that delivered its spans failed all the same: the logs backend refused or dropped records."""
    return f"export incomplete: the logs backend refused or dropped {logs.lost} log record(s) ({logs.reason})"


def dropped_reason(stats: ReplayStats) -> str:
    """Why a replay whose every request was answered did not deliver everything: the backend dropped spans."""
    return (f"export incomplete: the trace backend accepted the requests but dropped {stats.dropped} span(s) (OTLP "
            f"partial success: {stats.drop_message or 'no reason given'}); it does not say which, so they cannot be "
            "kept or sent again")


def _open_ledger(path: Path, restart: bool) -> Ledger | None:
    """The ledger of this replay (a fresh one with ``restart``); None, said once, if the state folder cannot keep
    it. Raises LedgerBusy when another replay of the same logs to the same destination runs."""
    try:
        return Ledger(path, restart=restart)
    except (OSError, sqlite3.Error) as exc:
        log.warning("cannot keep the replay's progress in %s (%s): an interrupted replay will start over",
                    path, getattr(exc, "strerror", None) or exc)
        return None


def report(outcome: Outcome, destination: str, metrics_file: Path | None = None) -> None:
    """The summary line (what --restart wrote twice, what --metrics-file left out), and for a replay that did not
    finish, which sessions were not delivered."""
    stats = outcome.stats
    rejected = sum(stats.rejected.values())
    rate = outcome.delivered / outcome.seconds if outcome.seconds > 0 else 0.0
    extras = [f"{rejected} malformed line(s) skipped" if rejected else "",
              f"{stats.dropped} span(s) dropped by the backend" if stats.dropped else "",
              f"{outcome.before} session(s) delivered by an earlier run" if outcome.before else "",
              "written again after what the file held (--restart)" if outcome.again else "",
              f"{metrics_file} counts only the {outcome.completed} session(s) written now" if metrics_file is not None
              and outcome.before else "",
              f"{outcome.retries} retries" if outcome.retries else "",
              f"{outcome.logs} log records" if outcome.logs else ""]
    events = "" if outcome.undelivered else f", {stats.events} events"  # counted as whole shards finish
    _say(f"exported {outcome.delivered - stats.refused - stats.dropped} spans from {outcome.completed} session(s)"
         f"{events}" + "".join(f", {x}" for x in extras if x)
         + f" -> {destination} in {outcome.seconds:.1f} s ({rate:.0f} spans/s)")
    for path, reason in outcome.unreadable:
        _say(f"{path}: cannot read it ({reason})")
    if outcome.code == EXIT_OK:
        return
    missing = outcome.undelivered
    if not missing:
        _say(outcome.reason)
        return
    named = ", ".join(session_id_of(p) for p in missing[:NAMED]) + (
        f" and {len(missing) - NAMED} more" if len(missing) > NAMED else "")
    _say(f"{outcome.reason}; {len(missing)} of {outcome.total} session(s) not delivered: {named}")
    _say("run the same command again to continue where it stopped")


def replay_stdin(sink: SpanSink, config: Config, metrics_file: Path | None) -> int:
    """`replay -`: the headless stream, exported at once (spans refused for good kept in the dead-letter
    file); its summary or what failed on stderr; the exit code."""
    dead_letter = DeadLetter(config.state_dir / DEAD_LETTER_FILE, OtlpJsonEncoder(resource_of(config)))
    logs = log_sender(config, config.logs_otlp.timeout if config.logs_otlp is not None else 0.0)
    try:
        stats = replay_stream(sys.stdin.buffer.read(), sink, options=config.model, max_line_bytes=config.max_line_bytes,
                              refused=dead_letter.add, retry_for=config.otlp.timeout if config.otlp.endpoint else 0.0,
                              send_logs=logs)
        sink.shutdown()
    except (ExportError, GaveUp) as exc:
        return _failed(f"export failed: {exc}")
    except OSError as exc:  # the dead-letter file could not be written
        return _failed(f"export failed: cannot keep refused spans in {dead_letter.path}: {exc.strerror or exc}")
    finally:
        dead_letter.close()
        if logs is not None:
            logs.sink.shutdown()
    if not write_metrics(stats, config, metrics_file):
        return _failed(METRICS_REFUSED)
    if logs is not None and logs.lost:
        return _failed(lost_logs_reason(logs))
    dropped = f", {stats.dropped} span(s) dropped by the backend" if stats.dropped else ""
    _say(f"exported {stats.spans - stats.refused - stats.dropped} spans from the stream, {stats.events} events{dropped}"
         f" -> {sink.description}")
    if stats.refused:
        return _failed(f"export failed: the trace backend refused {stats.refused} span(s) for good; they are kept "
                       f"in {dead_letter.path} (last reason: {dead_letter.last_reason})")
    if stats.dropped:
        return _failed(dropped_reason(stats))
    return EXIT_OK


def _failed(message: str) -> int:
    _say(message)
    return EXIT_FAILED


def write_metrics(stats: ReplayStats, config: Config, metrics_file: Path | None) -> bool:
    """The replay's metrics to a node_exporter textfile (``metrics_file``) and over OTLP
    (OTEL_METRICS_EXPORTER=otlp), when asked for; False if the push failed."""
    if metrics_file is None and config.metrics_otlp is None:
        return True
    from prometheus_client import generate_latest
    from prometheus_client.openmetrics.exposition import ALLOWUTF8

    from ..metrics.registry import Metrics, disable_created_series
    from ..model.pipeline import Outputs

    disable_created_series()
    metrics = Metrics(process=False, repository_label=not config.no_repository_label, resource=resource_of(config))
    metrics.apply_outputs(Outputs(metrics=list(stats.metrics or ()), rejected=stats.rejected,
                                  out_of_order=stats.out_of_order, clamped=stats.clamped))
    if metrics_file is not None:
        # As write_to_textfile writes it, less its temporary file of a guessable name (a link planted there in a
        # shared folder would be written through): node_exporter, another user, reads it.
        write_private(metrics_file, generate_latest(metrics.registry, ALLOWUTF8), mode=TEXTFILE_MODE)
    if config.metrics_otlp is None:
        return True
    from ..metrics.otlp_push import MetricsPusher, make_exporter  # the OTel SDK: only to push

    pusher = MetricsPusher(metrics.registry, make_exporter(config.metrics_otlp), build_resource(resource_of(config)),
                           genai=metrics.genai)
    return pusher.stop(timeout=config.metrics_otlp.timeout)
