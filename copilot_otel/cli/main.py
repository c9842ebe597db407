"""Commands and flags: every --flag also reads COPILOT_OTEL_FLAG; builds a Config; exit codes."""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click
import orjson
from click.core import ParameterSource

from ..base.safe_text import safe, safe_json, safe_lines
from ..base.safe_text import say as _say
from ..base.strictmodes import check_output_file, check_state_dir
from ..config import (
    DEFAULT_CONTENT_MAX_CHARS,
    DEFAULT_GIVE_UP_AFTER,
    DEFAULT_IDLE_QUIET,
    DEFAULT_MAX_BUFFERED_SPANS,
    DEFAULT_MAX_LABEL_VALUES,
    DEFAULT_METRICS_ADDRESS,
    DEFAULT_RESCAN_INTERVAL,
    DEFAULT_VIEW_ADDRESS,
    ENV_COPILOT_HOME,
    MIN_IDLE_QUIET,
    Config,
    ConfigError,
    parse_address,
)
from ..version import __version__
from ..vocab import SESSION_STATES
from .flags import (
    BUDGETS_FILE,
    COPILOT_HOME,
    DURATION,
    HIDE_NAMES,
    LOG_LEVEL,
    MAX_LINE_BYTES,
    METRICS_ADDRESS,
    PATH,
    STATE_DIR,
    STRICT_MODES,
    TRACE_URL_HELP,
    WEB_VIEW_COST,
    Duration,
    access_options,
    export_options,
    option,
    reading_options,
    repository_option,
    stuck_options,
)

if TYPE_CHECKING:  # each command imports what it uses when it runs
    from ..catalog.snapshot import SessionReader
    from ..catalog.status import SessionStatus
    from ..source.liveness import StuckPolicy

EXIT_OK = 0
EXIT_EXPORT_FAILED = 1
EXIT_USAGE = 2

log = logging.getLogger("copilot_otel")


def build_config(*, exports: bool = True, **flags) -> Config:
    """One validated Config from the environment with the flags on top; a ConfigError says what to fix."""
    if "allowed_host" in flags:  # --allowed-host, repeatable: Config.allowed_hosts
        flags["allowed_hosts"] = flags.pop("allowed_host")
    return Config.from_env(exports=exports, **flags)


def _setup_logging(level: str) -> None:
    """The command owns the process: configure logging, and the process-wide library settings."""
    from ..base.safe_text import SafeFormatter

    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(SafeFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))  # log text escaped
    logging.basicConfig(level=level.upper(), handlers=[handler])
    # The OTel SDK logs a malformed header with its value, which may be a token: never let it through.
    logging.getLogger("opentelemetry.util.re").setLevel(logging.ERROR)


def _fail(message: str, code: int = EXIT_USAGE) -> None:
    _say(message)
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
@click.argument("paths", nargs=-1, type=click.Path(path_type=Path, allow_dash=True, readable=False))
@reading_options
@export_options
@option("metrics-file", type=PATH, default=None,
        help="Also write the run's Prometheus metrics to this file (node_exporter textfile format).")
@option("workers", type=click.IntRange(min=0), default=0, show_default=True,
        help="Processes that share the work (0: one per CPU when there are many sessions, else one); "
             "the output is the same for any number.")
@option("rate", type=click.FloatRange(min=0), default=0, show_default=True,
        help="Send at most this many spans a second (0: as fast as the backend takes them).")
@option("give-up-after", type=Duration(0.0), default=DEFAULT_GIVE_UP_AFTER, show_default=True,
        help="Seconds a backend may refuse or throttle one batch before the replay stops, naming the "
             "sessions not delivered (a re-run continues with them).")
@option("restart", is_flag=True, help="Forget an interrupted replay of the same sessions and send everything.")
@repository_option
@STRICT_MODES
def replay(paths, log_level, metrics_file, workers, rate, give_up_after, restart, **options) -> None:
    """Export the traces of session folders, events.jsonl files, a COPILOT_HOME (the default), or - (stdin).

    A replay that stops (Ctrl-C, a crash, a backend that refused for too long) is continued by
    running the same command again: what was delivered is not sent twice.
    """
    from ..base.workers import one_run_collector
    from ..delivery.sinks import make_sink
    from ..otlp.resource import resource_of
    from ..replay.job import METRICS_REFUSED, replay_logs, replay_stdin, report, write_metrics
    from ..replay.ledger import LedgerBusy
    from ..replay.runner import SourceError, resolve

    one_run_collector()
    _setup_logging(log_level)
    from_stdin = [str(p) for p in paths] == ["-"]
    try:
        config = build_config(**options)
        strict = not config.no_strict_modes
        check_state_dir(config.state_dir, strict=strict)
        if metrics_file is not None:
            check_output_file("--metrics-file", metrics_file, strict=strict)
        files = [] if from_stdin else resolve(paths or [config.copilot_home])
        sink = make_sink(traces_file=config.traces_file, otlp=config.otlp, default_file=config.default_traces_file,
                         max_request_bytes=config.max_request_bytes, rotation=config.traces_rotation,
                         strict=strict, resource=resource_of(config))
    except (ConfigError, SourceError) as exc:
        _fail(str(exc))
        return
    if from_stdin:
        sys.exit(replay_stdin(sink, config, metrics_file))
    keep_metrics = metrics_file is not None or config.metrics_otlp is not None
    try:
        outcome = replay_logs(files, sink, config, workers=workers or None, rate=rate, give_up_after=give_up_after,
                              restart=restart, keep_metrics=keep_metrics, interactive=sys.stderr.isatty())
    except LedgerBusy as exc:
        sink.shutdown()
        _fail(str(exc))
        return
    sink.shutdown()
    if not write_metrics(outcome.stats, config, metrics_file):
        _fail(METRICS_REFUSED, EXIT_EXPORT_FAILED)
    report(outcome, sink.description, metrics_file)
    sys.exit(outcome.code)


@main.command()
@click.argument("session")
@reading_options
@stuck_options
@option("json", is_flag=True, help="Print the session as one JSON object.")
@option("follow", is_flag=True, help="Redraw the tree while the session runs (Ctrl-C to stop).")
@HIDE_NAMES
def inspect(session, log_level, json, follow, **options) -> None:
    """Show one session as a tree of interactions, turns, LLM calls and tools.

    SESSION is a session id, any unique start of one, `latest` (the session written to last),
    a session folder or an events.jsonl. Tool arguments are shown only with
    OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true.
    """
    from ..catalog.snapshot import SessionReader
    from ..config import capture_content_from_env
    from ..model.options import ModelOptions
    from ..source.sources import SourceError, UnreadableLog

    _setup_logging(log_level)
    as_json = json
    if as_json and follow:
        _fail("--json and --follow do not go together: --json prints one snapshot")
        return
    try:
        config = build_config(exports=False, **options)  # inspect exports nothing: OTLP settings do not matter
        path = _session_log(session, config)
        warnings: list[tuple] = []  # held until the file is known to be a session log
        reader = SessionReader(path, options=ModelOptions(capture_content_from_env(), INSPECT_CONTENT_CHARS),
                               max_line_bytes=config.max_line_bytes, warn=lambda *args: warnings.append(args),
                               names=not config.hide_names)
        reader.update()
        if (why := reader.not_a_log()) is not None:
            raise SourceError(why)
    except (ConfigError, SourceError) as exc:
        _fail(str(exc))
        return
    for args in warnings:
        logging.getLogger("copilot_otel.snapshot").warning(*args)
    reader.warn = logging.getLogger("copilot_otel.snapshot").warning
    try:
        _show_session(reader, config.stuck_policy, follow=follow, as_json=as_json)
    except UnreadableLog as exc:
        _fail(str(exc), EXIT_EXPORT_FAILED)


def _show_session(reader: SessionReader, policy: StuckPolicy, *, follow: bool, as_json: bool) -> None:
    """`inspect`'s output: the tree redrawn while the session runs, one JSON object, or the tree once."""
    if follow:
        from rich.console import Console

        from .live_tree import follow_session

        follow_session(reader, policy=policy, console=Console())
    elif as_json:
        from .layout import to_json

        document = orjson.dumps(to_json(reader.snapshot(policy=policy)), option=orjson.OPT_INDENT_2)
        click.echo(safe_json(document).decode())
    else:
        from rich.console import Console

        from .tree import build_tree

        Console().print(build_tree(reader.snapshot(policy=policy)))


INSPECT_CONTENT_CHARS = 200  # tool arguments and task summaries on one terminal line


def _session_log(text: str, config: Config) -> Path:
    """The events.jsonl a SESSION argument names: a path, else an id, a unique prefix or `latest`."""
    from ..source.sources import SESSION_STATE, SourceError, find_event_files, find_session

    if not text.strip():
        raise SourceError("SESSION is empty: give a session id (or its start), `latest`, a session folder or an "
                          "events.jsonl")
    candidate = Path(text).expanduser()
    if os.path.lexists(candidate) and (os.sep in text or text.endswith(".jsonl") or candidate.is_dir()):
        files = find_event_files(candidate)
        if len(files) != 1:
            raise SourceError(f"{text}: holds {len(files)} sessions; name one")
        return files[0]
    return find_session(config.copilot_home / SESSION_STATE, text)


@main.command()
@COPILOT_HOME
@STATE_DIR
@STRICT_MODES
@METRICS_ADDRESS
@stuck_options
@option("state", multiple=True, type=click.Choice([*SESSION_STATES, "live"]),
        help="Only sessions in this state (repeat for several; `live`: every state but ended).")
@option("repository", metavar="REPOSITORY|FOLDER",
        help="Only sessions in this repository (owner/name, name or a glob), or, outside git, in this folder "
             "(a path, its last part or a glob); `none`: the sessions in no repository.")
@option("since", metavar="WHEN", help="Only sessions active since then: 30m, 2h, 1d, or 2026-12-01.")
@option("json", is_flag=True, help="Print a JSON array, one object per session.")
@option("from-files", is_flag=True, help="Read the session logs even when a daemon runs.")
@HIDE_NAMES
@LOG_LEVEL
def sessions(state, repository, since, json, from_files, log_level, **options) -> None:
    """List sessions, newest first: state, activity, turns, tokens, premium requests, how the last
    interaction ended, model and repository.

    From your running daemon (`copilot-otel run` with the same --state-dir and COPILOT_HOME, asked on
    its Unix socket there) when there is one, else from the session logs. Whatever listens on
    --metrics-address is never asked (anyone may take the port); if a stranger holds it, this says so.
    """
    from ..source.sources import SESSION_STATE, SourceError
    from .listing import from_daemon, parse_since, render, select

    states, as_json = state, json
    _setup_logging(log_level)
    try:
        config = build_config(exports=False, **options)
        since_time = parse_since(since) if since else 0.0
    except (ConfigError, ValueError) as exc:
        _fail(str(exc))
        return
    root = config.copilot_home / SESSION_STATE
    statuses, why = (None, None) if from_files else from_daemon(config.daemon_socket, config.copilot_home,
                                                                 address=config.metrics_address)
    if why is not None:
        click.echo(f"copilot-otel: {why}; reading the session logs", err=True)
    unreadable: list[tuple[str, str]] = []
    if statuses is None:
        try:
            statuses, unreadable = _sessions_from_files(config, root, since_time)
        except SourceError as exc:
            _fail(str(exc))
            return
    elif options.get("stuck_after") is not None or options.get("stuck_after_tool") is not None:
        statuses = [status.under(config.stuck_policy) for status in statuses]  # the thresholds given, not the daemon's
    if config.hide_names:
        statuses = [status.nameless() for status in statuses]
    for path, reason in unreadable:
        _say(f"{path}: cannot read it ({reason})")
    chosen = select(statuses, states=states, repository=repository, since=since_time)
    if as_json:
        document = orjson.dumps([status.to_json() for status in chosen], option=orjson.OPT_INDENT_2)
        click.echo(safe_json(document).decode())
    elif chosen:
        from rich.console import Console

        render(chosen, Console())
    else:
        click.echo(safe("no sessions" + (" match" if states or repository or since else f" under {root}")), err=True)


def _sessions_from_files(config: Config, root: Path,
                         since: float) -> tuple[list[SessionStatus], list[tuple[str, str]]]:
    """`sessions` without a daemon: (every session's status, the logs that cannot be read and why), read from the
    logs under ``root`` with the summary cache when the state folder can keep it; raises SourceError."""
    from .listing import from_files as read_files

    cache_file: Path | None = config.summary_cache
    try:
        check_state_dir(config.state_dir, strict=not config.no_strict_modes)
    except ConfigError as exc:  # a listing needs no cache: list without it, neither read nor written
        _say(f"not using the summary cache: {exc}")
        cache_file = None
    listing = read_files(root, policy=config.stuck_policy, cache_file=cache_file, since=since)
    return listing.statuses, listing.unreadable


@main.command()
@COPILOT_HOME
@STATE_DIR
@STRICT_MODES
@option("by", type=click.Choice(("day", "week", "month")), default="day", show_default=True,
        help="One row per day, ISO week (Monday to Sunday) or month, in --tz.")
@option("group", metavar="FIELDS", default="",
        help="Also split the rows by some of model,repository,branch,session (comma separated).")
@option("since", metavar="WHEN", help="Only what was used from then on: 7d, 2h, 2026-12-01 or 2026-12-01T10:00.")
@option("until", metavar="WHEN", help="Only what was used before then (a date: to the end of that day).")
@option("tz", metavar="ZONE", help="The time zone of the days and of dates given (an IANA name, or UTC); "
                                   "default: this machine's.")
@option("json", is_flag=True, help="Print one JSON document.")
@option("csv", is_flag=True, help="Print CSV, one line per row.")
@LOG_LEVEL
def usage(by, group, since, until, tz, json, csv, log_level, **options) -> None:
    """What this machine's Copilot sessions used, by day, week or month: AI credits and dollars, premium
    requests, tokens (cache read and write too), LLM calls and lines changed, from the session logs (no daemon
    needed).

    Each LLM call counts on the day it ended (a session past midnight counts on both days); what a CLI wrote
    only in its session totals, on the day of that shutdown. Running and crashed sessions are counted and
    marked.
    """
    import time

    from ..source.sources import SESSION_STATE, SourceError
    from .usage import build, parse_when, problems_text, to_csv, to_json, zone_of

    _setup_logging(log_level)
    if json and csv:
        _fail("--json and --csv do not go together")
        return
    try:
        config = build_config(exports=False, **options)
        zone, zone_name = zone_of(tz)
        now = time.time()
        since_time = parse_when("since", since, zone, now=now) if since else None
        until_time = parse_when("until", until, zone, now=now, end=True) if until else None
        groups = tuple(g.strip() for g in group.split(",") if g.strip())
        cache_file: Path | None = config.summary_cache
        try:
            check_state_dir(config.state_dir, strict=not config.no_strict_modes)
        except ConfigError as exc:  # a report needs no cache: read without it
            _say(f"not using the summary cache: {exc}")
            cache_file = None
        report = build(config.copilot_home / SESSION_STATE, by=by, groups=groups, zone=zone, zone_name=zone_name,
                       since=since_time, until=until_time, cache_file=cache_file, policy=config.stuck_policy)
    except (ConfigError, SourceError, ValueError) as exc:
        _fail(str(exc))
        return
    for line in problems_text(report):
        _say(line)
    if json:
        click.echo(safe_json(orjson.dumps(to_json(report), option=orjson.OPT_INDENT_2)).decode())
    elif csv:
        click.echo(safe_lines(to_csv(report)), nl=False)
    else:
        from rich.console import Console

        from .usage import render

        render(report, Console())


@main.command(epilog=WEB_VIEW_COST)
@reading_options
@export_options
@METRICS_ADDRESS
@stuck_options
@option("poll", is_flag=True, default=False, help="Do not use inotify; find changes by rescanning only.")
@option("rescan-interval", type=DURATION, default=DEFAULT_RESCAN_INTERVAL, show_default=True,
        help="Seconds between rescans that back up the file watcher.")
@option("from-end", is_flag=True, default=False,
        help="On first start, skip the history already in the files.")
@option("backfill", is_flag=True, default=False,
        help="Also export the sessions whose last event is older than the state folder's first start and that "
             "were not written since, those an earlier start left out included (left out by default: a restored "
             "home's old sessions are not this machine's).")
@option("idle-quiet", type=Duration(MIN_IDLE_QUIET), default=DEFAULT_IDLE_QUIET, show_default=True,
        help="Seconds of silence after a final answer that confirm the agent loop went idle.")
@option("max-buffered-spans", type=click.IntRange(min=1), default=DEFAULT_MAX_BUFFERED_SPANS, show_default=True,
        help="Spans held while the trace backend is down; past this, reading pauses (nothing is dropped).")
@option("trace-url", default=None, help=TRACE_URL_HELP)
@option("max-label-values", type=click.IntRange(min=1), default=DEFAULT_MAX_LABEL_VALUES, show_default=True,
        help="Distinct values a metric label (tool, model, agent, repository) may take; the rest count as 'other'.")
@repository_option
@access_options
@BUDGETS_FILE
@HIDE_NAMES
@STRICT_MODES
def run(log_level, poll, rescan_interval, from_end, backfill, idle_quiet, max_buffered_spans, trace_url,
        max_label_values, **options) -> None:
    """The daemon: follow every session under COPILOT_HOME, export spans, serve /metrics and the web view.

    The web view's data (/api/) answers only with the token made at each start (`copilot-otel open`
    opens the page with it); /metrics and /healthz answer scrapers. The commands reach the daemon
    on its Unix socket in the state folder.
    """
    from ..daemon.service import run_daemon
    from ..metrics.registry import disable_created_series

    disable_created_series()
    _setup_logging(log_level)
    try:
        config = build_config(poll=poll, rescan_interval=rescan_interval, from_start=not from_end, backfill=backfill,
                              idle_quiet=idle_quiet, max_buffered_spans=max_buffered_spans, trace_url=trace_url,
                              max_label_values=max_label_values, **options)
    except ConfigError as exc:
        _fail(str(exc))
        return
    sys.exit(run_daemon(config))


@main.command(epilog=WEB_VIEW_COST)
@click.argument("paths", nargs=-1, type=PATH)
@option("copilot-home", type=PATH, default=None, also_env=ENV_COPILOT_HOME,
        help="Copilot's home folder, shown when no PATH is given (default ~/.copilot).")
@option("address", default=DEFAULT_VIEW_ADDRESS, show_default=True, help="HOST:PORT to serve the pages on.")
@STATE_DIR
@access_options
@option("trace-url", default=None, help=TRACE_URL_HELP)
@stuck_options
@MAX_LINE_BYTES
@option("content-max-chars", type=click.IntRange(min=1), default=DEFAULT_CONTENT_MAX_CHARS,
        help="With OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true, cut each captured text to this length.")
@HIDE_NAMES
@LOG_LEVEL
def view(paths, address, log_level, **options) -> None:
    """Serve the web view over session logs (folders, events.jsonl files or a COPILOT_HOME), without the daemon.

    The pages show data only with the token made at start: `copilot-otel open` opens them with it (the
    daemon's first, if it runs too; `--metrics-address HOST:PORT`, this --address, names this one).
    """
    from ..web.routes import run_view

    _setup_logging(log_level)
    try:
        config = build_config(exports=False, metrics_address=address, **options)
    except ConfigError as exc:
        _fail(str(exc))
        return
    sys.exit(run_view(config, list(paths)))


@main.command("open")
@STATE_DIR
@option("metrics-address", default=DEFAULT_METRICS_ADDRESS, show_default=True,
        help="HOST:PORT of the daemon (its --metrics-address), or of a `view` (its --address). Not given: the "
             "daemon's if it runs, else a `view` running with this --state-dir.")
@option("print-url", is_flag=True, help="Print the URL with its token instead of opening a browser.")
def open_view(print_url, **options) -> None:
    """Open the web view in your browser with its token (which the daemon or `view` keeps in the state folder).

    The browser is given a 0600 page in the state folder that sends it on with the token, never the token
    itself: another user can read every command line. The token goes only to a server of your own user: if
    another user holds the port, nothing is opened.
    """
    from ..base.peers import describe_uid, listener_uid
    from ..web.access import opener_file, read_token_file, token_file, with_token, write_opener

    try:
        config = build_config(exports=False, **options)
    except ConfigError as exc:  # a bad flag or setting: a usage error, as for every command
        _fail(str(exc))
        return
    host, port = config.metrics_address
    if click.get_current_context().get_parameter_source("metrics_address") is ParameterSource.DEFAULT:
        port = _running_port(config.state_dir, port) or port  # none named: the daemon's, else a running `view`
    try:
        url, token = read_token_file(token_file(config.state_dir, port))
    except ConfigError as exc:
        _fail(str(exc), EXIT_EXPORT_FAILED)
        return
    holder = listener_uid(port)
    if holder is not None and holder != os.getuid():
        _fail(f"{host}:{port} is held by {describe_uid(holder)}, not by your daemon: not giving it the token",
              EXIT_EXPORT_FAILED)
    if holder is None and os.path.exists("/proc/net/tcp"):
        _fail(f"nothing listens on {host}:{port}: the daemon (or `view`) that made the token is not running",
              EXIT_EXPORT_FAILED)
    if print_url:
        click.echo(with_token(url, token))
        return
    opener = opener_file(config.state_dir, port)
    try:
        check_state_dir(config.state_dir)
        write_opener(opener, url, token)
    except (ConfigError, OSError) as exc:
        _fail(f"cannot write {opener}: {getattr(exc, 'strerror', None) or exc}; use --print-url", EXIT_EXPORT_FAILED)
    import webbrowser

    if webbrowser.open(opener.as_uri()):
        click.echo(f"opened {url} in your browser", err=True)
    else:
        click.echo(f"no browser found here; open {with_token(url, token)}")


def _running_port(state_dir: Path, preferred: int) -> int | None:
    """The port of a server of yours that left its token in ``state_dir``: ``preferred`` (the daemon's) if it runs,
    else a `view` (its default port first, then the newest token file); None if none runs."""
    from ..base.peers import listener_uid

    found = {}
    for path in Path(state_dir).glob("web-*.json"):
        number = path.stem.removeprefix("web-")
        if number.isdigit():
            try:
                found[int(number)] = path.stat().st_mtime
            except OSError:
                continue
    view_port = parse_address(DEFAULT_VIEW_ADDRESS)[1]
    ordered = sorted(found, key=lambda p: (p != preferred, p != view_port, -found[p]))
    return next((p for p in ordered if listener_uid(p) == os.getuid()), None)


if __name__ == "__main__":  # pragma: no cover
    main()
