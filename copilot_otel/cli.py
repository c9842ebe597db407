"""Commands and flags: every --flag also reads COPILOT_OTEL_FLAG; builds a Config; exit codes."""

from __future__ import annotations

import logging
import os
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

import click

from . import __version__
from .config import (
    DEFAULT_CONTENT_MAX_CHARS,
    DEFAULT_IDLE_QUIET,
    DEFAULT_MAX_BUFFERED_SPANS,
    DEFAULT_MAX_LABEL_VALUES,
    DEFAULT_MAX_LINE_BYTES,
    DEFAULT_MAX_REQUEST_BYTES,
    DEFAULT_METRICS_ADDRESS,
    DEFAULT_RESCAN_INTERVAL,
    DEFAULT_STUCK_AFTER,
    DEFAULT_VIEW_ADDRESS,
    ENV_COPILOT_HOME,
    MIN_IDLE_QUIET,
    MIN_MAX_LINE_BYTES,
    MIN_MAX_REQUEST_BYTES,
    Config,
    ConfigError,
    env_flag,
)

EXIT_OK = 0
EXIT_EXPORT_FAILED = 1
EXIT_USAGE = 2

log = logging.getLogger("copilot_otel")


TRACE_URL_HELP = ("Link each trace of the web view here: an http(s) URL with {trace_id} in it, "
                  "e.g. http://127.0.0.1:16686/trace/{trace_id} (Jaeger).")


def _option(name: str, **kwargs):
    """A --name option that also reads COPILOT_OTEL_NAME (plus any extra envvar given)."""
    extra = kwargs.pop("also_env", None)
    envvar = [env_flag(name)] + ([extra] if extra else [])
    return click.option(f"--{name}", envvar=envvar, show_envvar=True, **kwargs)


def common_options(func):
    """Options shared by every command that reads sessions and exports traces."""
    for decorator in reversed(
        [
            # Not checked here: a home that cannot be read yet is waited for, not refused.
            _option("copilot-home", type=click.Path(path_type=Path, readable=False), default=None,
                    also_env=ENV_COPILOT_HOME,
                    help="Copilot's home folder (default ~/.copilot)."),
            _option("state-dir", type=click.Path(path_type=Path), default=None,
                    help="Where copilot-otel keeps its checkpoint and default trace file "
                         "(default ~/.local/state/copilot-otel)."),
            _option("traces-file", type=click.Path(path_type=Path), default=None,
                    help="Write traces as OTLP JSON lines to this file instead of OTLP."),
            _option("max-line-bytes", type=click.IntRange(min=MIN_MAX_LINE_BYTES), default=DEFAULT_MAX_LINE_BYTES,
                    help="Lines longer than this are counted and skipped."),
            _option("max-request-bytes", type=click.IntRange(min=MIN_MAX_REQUEST_BYTES),
                    default=DEFAULT_MAX_REQUEST_BYTES,
                    help="Largest trace export request (encoded); larger batches are split. A backend's own "
                         "limit (the Collector's: 4 MiB) is also honoured when it answers 413 or RESOURCE_EXHAUSTED."),
            _option("content-max-chars", type=click.IntRange(min=1), default=DEFAULT_CONTENT_MAX_CHARS,
                    help="With OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true, truncate each "
                         "captured prompt, argument or result to this many characters."),
            _option("log-level", type=click.Choice(["debug", "info", "warning", "error"]), default="info"),
        ]
    ):
        func = decorator(func)
    return func


def _repository_option(func):
    return _option("no-repository-label", is_flag=True, default=False,
                   help="Leave the repository label of the metrics empty (Prometheus then shows none).")(func)


def build_config(*, exports: bool = True, **flags) -> Config:
    """One validated Config from the environment with the flags on top; a ConfigError says what to fix."""
    return Config.from_env(exports=exports, **flags)


def _setup_logging(level: str) -> None:
    """The command owns the process: configure logging, and the process-wide library settings."""
    logging.basicConfig(level=level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # The OTel SDK logs a malformed header with its value, which may be a token: never let it through.
    logging.getLogger("opentelemetry.util.re").setLevel(logging.ERROR)


def _no_created_series() -> None:
    """*_created series double the series count and no dashboard here uses them (a process-wide switch)."""
    from prometheus_client import disable_created_metrics

    disable_created_metrics()


@contextmanager
def _progress(interactive: bool, total: int) -> Iterator[Callable[[Path], None]]:
    """A progress bar on a terminal (rich, imported only then); elsewhere nothing."""
    if not interactive:
        yield lambda _path: None
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn("[progress.description]{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), transient=True) as progress:
        task = progress.add_task("replaying sessions", total=total)
        yield lambda _path: progress.advance(task)


def _check_writable_file(flag: str, path: Path) -> None:
    """A file we will write at the end must be writable now: fail before the work, not after it."""
    if path.is_dir():
        raise ConfigError(f"{flag} {path}: is a folder; give the path of a file")
    folder = path.parent
    if not folder.is_dir():
        raise ConfigError(f"{flag} {path}: the folder {folder} does not exist")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise ConfigError(f"{flag} {path}: cannot write in {folder}")


def _fail(message: str, code: int = EXIT_USAGE) -> None:
    click.echo(f"copilot-otel: {message}", err=True)
    sys.exit(code)


class _Commands(click.Group):
    """The command group: a usage error (unknown flag, bad value) is one line on stderr, exit 2."""

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        try:
            code = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except click.UsageError as exc:
            where = exc.ctx.command_path if exc.ctx is not None else "copilot-otel"
            _fail(f"{exc.format_message()} (see '{where} --help')")
        except click.ClickException as exc:
            _fail(exc.format_message(), exc.exit_code)
        except click.Abort:
            _fail("aborted", 1)
        if not standalone_mode:
            return code
        sys.exit(code if isinstance(code, int) else 0)


@click.group(cls=_Commands, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="copilot-otel")
def main() -> None:
    """Turn GitHub Copilot CLI session events into OpenTelemetry traces and Prometheus metrics."""


@main.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path, allow_dash=True))
@common_options
@_option("metrics-file", type=click.Path(path_type=Path), default=None,
         help="Also write the run's Prometheus metrics to this file (node_exporter textfile format).")
@_option("workers", type=click.IntRange(min=0), default=0, show_default=True,
         help="Processes that share the work (0: one per CPU when there are many sessions, else one); "
              "the output is the same for any number.")
@_repository_option
def replay(paths, log_level, metrics_file, workers, **options) -> None:
    """Export the traces of session folders, events.jsonl files, a COPILOT_HOME, or - (stdin)."""
    from .deadletter import FILE_NAME as DEAD_LETTER_FILE
    from .deadletter import DeadLetter
    from .replay import SourceError, replay_files, replay_stream, resolve
    from .resource import resource_attributes
    from .sinks import ExportError, make_sink
    from .workers import WorkerError

    _setup_logging(log_level)
    from_stdin = [str(p) for p in paths] == ["-"]
    try:
        config = build_config(**options)
        if metrics_file is not None:
            _check_writable_file("--metrics-file", metrics_file)
        files = [] if from_stdin else resolve(paths)
        sink = make_sink(traces_file=config.traces_file, otlp=config.otlp, default_file=config.default_traces_file,
                         max_request_bytes=config.max_request_bytes)
    except (ConfigError, SourceError) as exc:
        _fail(str(exc))
        return
    from .otlp_json import OtlpJsonEncoder

    dead_letter = DeadLetter(config.state_dir / DEAD_LETTER_FILE, OtlpJsonEncoder(resource_attributes()))
    model_options = {"options": config.model, "max_line_bytes": config.max_line_bytes, "refused": dead_letter.add,
                     "retry_for": config.otlp.timeout if config.otlp.endpoint else 0.0}
    interactive = sys.stderr.isatty()
    try:
        if from_stdin:
            stats = replay_stream(sys.stdin.buffer.read(), sink, **model_options)
        else:
            with _progress(interactive, len(files)) as advance:
                stats = replay_files(files, sink, on_file=advance, workers=workers or None,
                                     keep_metrics=metrics_file is not None or config.metrics_otlp is not None,
                                     max_request_bytes=config.max_request_bytes, **model_options)
        sink.shutdown()
    except (ExportError, WorkerError) as exc:
        _fail(f"export failed: {exc}", EXIT_EXPORT_FAILED)
        return
    except OSError as exc:  # the dead-letter file could not be written
        _fail(f"export failed: cannot keep refused spans in {dead_letter.path}: {exc.strerror or exc}",
              EXIT_EXPORT_FAILED)
        return
    finally:
        dead_letter.close()
    if (metrics_file is not None or config.metrics_otlp is not None) and not _replay_metrics(stats, config,
                                                                                               metrics_file):
        _fail("export failed: the OTLP metrics endpoint did not accept the metrics", EXIT_EXPORT_FAILED)
        return
    rejected = sum(stats.rejected.values())
    click.echo(f"copilot-otel: exported {stats.spans - stats.refused} spans from {stats.files} session(s), "
               f"{stats.events} events" + (f", {rejected} malformed line(s) skipped" if rejected else "")
               + f" -> {sink.description}", err=True)
    if stats.refused:
        _fail(f"export failed: the trace backend refused {stats.refused} span(s) for good; they are kept in "
              f"{dead_letter.path} (last reason: {dead_letter.last_reason})", EXIT_EXPORT_FAILED)


def _replay_metrics(stats, config: Config, metrics_file: Path | None) -> bool:
    """The metrics of a replay: to a node_exporter textfile, and over OTLP (OTEL_METRICS_EXPORTER=otlp);
    False if the push failed."""
    from prometheus_client import write_to_textfile

    _no_created_series()

    from .metrics import Metrics
    from .resource import resource_attributes

    metrics = Metrics(process=False, repository_label=not config.no_repository_label, resource=resource_attributes())
    for update in stats.metrics:
        metrics.apply(update)
    for reason, count in stats.rejected.items():
        metrics.lines_rejected.labels(reason).inc(count)
    for event_type, count in stats.out_of_order.items():
        metrics.events_out_of_order.labels(event_type).inc(count)
    if metrics_file is not None:
        write_to_textfile(str(metrics_file), metrics.registry)
    if config.metrics_otlp is None:
        return True
    from .otlp_metrics import MetricsPusher, make_exporter  # the OTel SDK: only to push
    from .sinks import build_resource

    return MetricsPusher(metrics.registry, make_exporter(config.metrics_otlp), build_resource()).stop()


@main.command()
@click.argument("session")
@common_options
def inspect(session, log_level, **options) -> None:
    """Print one session (an id, a session folder or an events.jsonl) as a tree."""
    from .liveness import session_alive
    from .sources import SourceError, find_event_files, session_id_of
    from .tree import inspect_session

    _setup_logging(log_level)
    try:
        config = build_config(exports=False, **options)  # inspect exports nothing: OTLP settings do not matter
    except ConfigError as exc:
        _fail(str(exc))
        return
    candidate = Path(session).expanduser()
    if not candidate.exists():
        candidate = config.copilot_home / "session-state" / session
    try:
        files = find_event_files(candidate)
    except SourceError:
        _fail(f"{session}: not a session id under {config.copilot_home / 'session-state'}, "
              "nor a session folder or events.jsonl")
        return
    if len(files) != 1:
        _fail(f"{session}: holds {len(files)} sessions; name one")
        return
    path = files[0]
    from rich.console import Console

    inspect_session(path, session_id_of(path), console=Console(), running=session_alive(path.parent),
                    max_line_bytes=config.max_line_bytes)


@main.command()
@common_options
@_option("metrics-address", default=DEFAULT_METRICS_ADDRESS, show_default=True,
         help="HOST:PORT for /metrics and /healthz.")
@_option("stuck-after", type=float, default=DEFAULT_STUCK_AFTER, show_default=True,
         help="Seconds without events before a working session counts as stuck.")
@_option("poll", is_flag=True, default=False, help="Do not use inotify; find changes by rescanning only.")
@_option("rescan-interval", type=float, default=DEFAULT_RESCAN_INTERVAL, show_default=True,
         help="Seconds between rescans that back up the file watcher.")
@_option("from-end", is_flag=True, default=False,
         help="On first start, skip the history already in the files.")
@_option("idle-quiet", type=click.FloatRange(min=MIN_IDLE_QUIET), default=DEFAULT_IDLE_QUIET, show_default=True,
         help="Seconds of silence after a final answer that confirm the agent loop went idle.")
@_option("max-buffered-spans", type=click.IntRange(min=1), default=DEFAULT_MAX_BUFFERED_SPANS, show_default=True,
         help="Spans held while the trace backend is down; past this, reading pauses (nothing is dropped).")
@_option("trace-url", default=None, help=TRACE_URL_HELP)
@_option("max-label-values", type=click.IntRange(min=1), default=DEFAULT_MAX_LABEL_VALUES, show_default=True,
         help="Distinct values a metric label (tool, model, agent, repository) may take; the rest count as 'other'.")
@_repository_option
def run(log_level, metrics_address, stuck_after, poll, rescan_interval, from_end, idle_quiet, max_buffered_spans,
        trace_url, max_label_values, **options) -> None:
    """The daemon: follow every session under COPILOT_HOME, export spans, serve /metrics and the web view."""
    from .daemon import run_daemon

    _no_created_series()
    _setup_logging(log_level)
    try:
        config = build_config(metrics_address=metrics_address, stuck_after=stuck_after, poll=poll,
                              rescan_interval=rescan_interval, from_start=not from_end, idle_quiet=idle_quiet,
                              max_buffered_spans=max_buffered_spans, trace_url=trace_url,
                              max_label_values=max_label_values, **options)
    except ConfigError as exc:
        _fail(str(exc))
        return
    sys.exit(run_daemon(config))


@main.command()
@click.argument("paths", nargs=-1, type=click.Path(path_type=Path))
@_option("copilot-home", type=click.Path(path_type=Path), default=None, also_env=ENV_COPILOT_HOME,
         help="Copilot's home folder, shown when no PATH is given (default ~/.copilot).")
@_option("address", default=DEFAULT_VIEW_ADDRESS, show_default=True, help="HOST:PORT to serve the pages on.")
@_option("trace-url", default=None, help=TRACE_URL_HELP)
@_option("stuck-after", type=float, default=DEFAULT_STUCK_AFTER, show_default=True,
         help="Seconds without events before a working session counts as stuck.")
@_option("max-line-bytes", type=click.IntRange(min=MIN_MAX_LINE_BYTES), default=DEFAULT_MAX_LINE_BYTES,
         help="Lines longer than this are counted and skipped.")
@_option("content-max-chars", type=click.IntRange(min=1), default=DEFAULT_CONTENT_MAX_CHARS,
         help="With OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true, cut each captured text to this length.")
@_option("log-level", type=click.Choice(["debug", "info", "warning", "error"]), default="info")
def view(paths, address, log_level, **options) -> None:
    """Serve the web view over session logs (folders, events.jsonl files or a COPILOT_HOME), without the daemon."""
    from .web import run_view

    _setup_logging(log_level)
    try:
        config = build_config(exports=False, metrics_address=address, **options)
    except ConfigError as exc:
        _fail(str(exc))
        return
    sys.exit(run_view(config, list(paths)))


if __name__ == "__main__":  # pragma: no cover
    main()
