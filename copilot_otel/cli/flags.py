"""The flags the commands share: each --flag also reads COPILOT_OTEL_FLAG (click options, in --help order)."""

from __future__ import annotations

from pathlib import Path

import click

from ..base.parsing import DURATION_HINT, duration_seconds
from ..config import (
    DEFAULT_CONTENT_MAX_CHARS,
    DEFAULT_MAX_LINE_BYTES,
    DEFAULT_MAX_REQUEST_BYTES,
    DEFAULT_METRICS_ADDRESS,
    DEFAULT_STUCK_AFTER,
    DEFAULT_STUCK_AFTER_TOOL,
    DEFAULT_TRACES_FILE_BACKUPS,
    DEFAULT_TRACES_FILE_MAX_BYTES,
    ENV_COPILOT_HOME,
    MIN_MAX_LINE_BYTES,
    MIN_MAX_REQUEST_BYTES,
    env_flag,
)

# Paths are checked where they are used, which says what is wrong in one line (click's check would add usage).
PATH = click.Path(path_type=Path, readable=False)


class Duration(click.ParamType):
    """Seconds, read as every duration flag reads them: 1800, 90s, 10m, 2h, 1d, 1h30m (at least ``minimum``, if any;
    else the Config's check says what the setting must be)."""

    name = "duration"

    def __init__(self, minimum: float | None = None) -> None:
        self.minimum = minimum

    def convert(self, value, param, ctx) -> float:
        if isinstance(value, (int, float)):
            return float(value)
        seconds = duration_seconds(str(value))
        if seconds is None:
            self.fail(f"{value!r} is not {DURATION_HINT}", param, ctx)
        if self.minimum is not None and seconds < self.minimum:
            self.fail(f"{value!r} is less than {self.minimum:g} s", param, ctx)
        return seconds


DURATION = Duration()


# What one client of the web view can cost (the web package's routes, streams, waterfall and server hold these).
WEB_VIEW_COST = ("What one client of the web view (/, /api/...) can cost: an answer holds at most 2,000 spans "
                 "and 4 MiB of JSON (about 1.3 MB without captured content), made as the client reads it; it asks "
                 "on for the rest. A client that does not read holds under 256 KiB of the daemon's memory and a "
                 "128 KiB kernel send buffer, and is cut after 30 s (an answer) or 10 s (a live view's write). At "
                 "most 64 live views at once (more get 503; the pages retry). The viewed sessions share 32 MiB of "
                 "spans held (about 50,000); /metrics is rendered in threads of its own.")
TRACE_URL_HELP = ("Link each trace of the web view here: an http(s) URL with {trace_id} in it, "
                  "e.g. http://127.0.0.1:16686/trace/{trace_id} (Jaeger).")


def option(name: str, **kwargs):
    """A --name option that also reads COPILOT_OTEL_NAME (plus any extra envvar given)."""
    extra = kwargs.pop("also_env", None)
    envvar = [env_flag(name)] + ([extra] if extra else [])
    return click.option(f"--{name}", envvar=envvar, show_envvar=True, **kwargs)


def options(*decorators):
    """Apply option decorators in the order written (as they appear in --help)."""
    def apply(func):
        for decorator in reversed(decorators):
            func = decorator(func)
        return func
    return apply


# Not checked here: a home that cannot be read yet is waited for (run), or named with the reason (the others).
COPILOT_HOME = option("copilot-home", type=PATH, default=None, also_env=ENV_COPILOT_HOME,
                      help="Copilot's home folder (default ~/.copilot).")
STATE_DIR = option("state-dir", type=PATH, default=None,
                   help="Where copilot-otel keeps its checkpoint, caches, default trace file, the web view's "
                        "token and the daemon's socket (default ~/.local/state/copilot-otel).")
MAX_LINE_BYTES = option("max-line-bytes", type=click.IntRange(min=MIN_MAX_LINE_BYTES), default=DEFAULT_MAX_LINE_BYTES,
                        help="Lines longer than this are counted and skipped.")
LOG_LEVEL = option("log-level", type=click.Choice(["debug", "info", "warning", "error"]), default="info")
STUCK_AFTER = option("stuck-after", type=DURATION, default=None,
                     help=f"Seconds without an event before a working session counts as stuck "
                          f"[default: {DEFAULT_STUCK_AFTER:g}].")
STUCK_AFTER_TOOL = option("stuck-after-tool", default=None, metavar="[SECONDS][,TOOL=SECONDS...]",
                          help=f"The same for a session waiting on a tool [default: {DEFAULT_STUCK_AFTER_TOOL:g}], "
                               "with per-tool thresholds, e.g. 1800,bash=3600.")
METRICS_ADDRESS = option("metrics-address", default=DEFAULT_METRICS_ADDRESS, show_default=True,
                         help="HOST:PORT for /metrics, /healthz and the web view.")

# Who the endpoint answers (`run`, `view`): the Host names besides localhost and IP addresses; TLS and basic auth.
ALLOWED_HOST = option("allowed-host", multiple=True, metavar="NAME",
                      help="Also answer requests whose Host is NAME (a scraper's or an ingress's name for this "
                           "machine; *.example.com for a domain); repeat or separate with commas. Other names are "
                           "refused (DNS rebinding); localhost and IP addresses always work.")
WEB_CONFIG_FILE = option("web-config-file", type=PATH, default=None, metavar="PATH",
                         help="TLS and basic auth for every route, in the Prometheus exporters' web config format "
                              "(tls_server_config, basic_auth_users with bcrypt hashes, http_server_config.headers).")
access_options = options(ALLOWED_HOST, WEB_CONFIG_FILE)
BUDGETS_FILE = option("budgets-file", type=PATH, default=None, metavar="PATH",
                      help="Monthly AI-credit budgets (YAML, or TOML by its .toml suffix) per repository pattern, "
                           "user.name or team, exposed as copilot_budget_* metrics and shown in the web view.")
# What every command that reads sessions takes.
reading_options = options(COPILOT_HOME, MAX_LINE_BYTES, LOG_LEVEL)
# What the commands that export traces take.
export_options = options(
    STATE_DIR,
    option("traces-file", type=PATH, default=None,
           help="Write traces as OTLP JSON lines to this file instead of OTLP."),
    option("traces-file-max-bytes", type=click.IntRange(min=0), default=DEFAULT_TRACES_FILE_MAX_BYTES,
           show_default=True, help="Rotate the trace file when it would grow past this (0: never), as the "
                                   "Collector's file exporter does: it is renamed NAME-<UTC time>.EXT."),
    option("traces-file-backups", type=click.IntRange(min=0), default=DEFAULT_TRACES_FILE_BACKUPS,
           show_default=True, help="Rotated trace files to keep."),
    option("max-request-bytes", type=click.IntRange(min=MIN_MAX_REQUEST_BYTES), default=DEFAULT_MAX_REQUEST_BYTES,
           help="Largest trace export request (encoded); larger batches are split. A backend's own "
                "limit (the Collector's: 4 MiB) is also honoured when it answers 413 or RESOURCE_EXHAUSTED."),
    option("content-max-chars", type=click.IntRange(min=1), default=DEFAULT_CONTENT_MAX_CHARS,
           help="With OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true, truncate each "
                "captured prompt, argument or result to this many characters."),
)
# The thresholds that name a session stuck (the daemon's, and what `inspect` and `sessions` apply).
stuck_options = options(STUCK_AFTER, STUCK_AFTER_TOOL)


STRICT_MODES = option("no-strict-modes", is_flag=True, default=False,
                      help="Use a state or trace folder other users may write (ssh's StrictModes no): for a "
                           "volume only this pod reaches, e.g. a Kubernetes emptyDir. Files are still checked.")


HIDE_NAMES = option("hide-names", is_flag=True, default=False,
                    help="Leave the sessions' names (workspace.yaml: yours, or the CLI's from the first prompt) out "
                         "of what this shows, e.g. while sharing your screen. Names are never exported.")


def repository_option(func):
    return option("no-repository-label", is_flag=True, default=False,
                  help="Leave the repository label of the metrics empty (Prometheus then shows none).")(func)
