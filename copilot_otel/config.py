"""One explicit, validated configuration, built from flags and environment in one place."""

from __future__ import annotations

import math
import os
import re
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from msgspec import Struct, field
from msgspec.structs import force_setattr

from .base.parsing import (
    DURATION_HINT,
    ConfigError,  # every front end catches it from here
    duration_seconds,
)
from .base.parsing import parse_bool as _parse_bool
from .base.parsing import parse_int as _parse_int
from .base.parsing import parse_path as _parse_path
from .base.parsing import parse_seconds as _parse_seconds
from .delivery.rotation import Rotation
from .model.options import DEFAULT_CONTENT_MAX_CHARS, ModelOptions  # read from here too
from .otlp.limits import DEFAULT_MAX_LABEL_VALUES, DEFAULT_MAX_REQUEST_BYTES, MIN_MAX_REQUEST_BYTES
from .otlp.settings import OtlpSettings
from .source.liveness import StuckPolicy

# Our own variables: every flag --some-flag is COPILOT_OTEL_SOME_FLAG.
ENV_PREFIX = "COPILOT_OTEL_"
ENV_COPILOT_HOME = "COPILOT_HOME"
ENV_CAPTURE_CONTENT = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
# Each default is written here once; flags, the SDK front end and the docs read them from here.
DEFAULT_METRICS_HOST = "127.0.0.1"
DEFAULT_METRICS_PORT = 9464
DEFAULT_METRICS_ADDRESS = f"{DEFAULT_METRICS_HOST}:{DEFAULT_METRICS_PORT}"
DEFAULT_STUCK_AFTER = 600.0
DEFAULT_STUCK_AFTER_TOOL = 1800.0  # a build or a test run is often longer than a silent model
DEFAULT_VIEW_ADDRESS = f"{DEFAULT_METRICS_HOST}:{DEFAULT_METRICS_PORT + 1}"  # `view`: beside a running daemon
DEFAULT_MAX_LINE_BYTES = 16 * 1024 * 1024
DEFAULT_IDLE_QUIET = 2.0
DEFAULT_RESCAN_INTERVAL = 10.0
DEFAULT_MAX_BUFFERED_SPANS = 20_000
# The Collector file exporter's rotation default is 100 MB; it keeps 100 backups, a laptop fewer.
DEFAULT_TRACES_FILE_MAX_BYTES = 100 * 1024 * 1024
DEFAULT_TRACES_FILE_BACKUPS = 10
DEFAULT_GIVE_UP_AFTER = 600.0  # replay: seconds a backend may refuse one batch before the replay stops
MIN_MAX_LINE_BYTES = 1024
MIN_IDLE_QUIET = 0.05


def env_flag(name: str) -> str:
    """The environment variable that backs ``--name``."""
    return ENV_PREFIX + name.upper().replace("-", "_")


def default_copilot_home(environ: Mapping[str, str] | None = None) -> Path:
    """$COPILOT_HOME, else ~/.copilot."""
    value = (os.environ if environ is None else environ).get(ENV_COPILOT_HOME)
    return Path(value).expanduser() if value else Path.home() / ".copilot"


def default_state_dir(environ: Mapping[str, str] | None = None) -> Path:
    """$XDG_STATE_HOME/copilot-otel, else ~/.local/state/copilot-otel."""
    base = (os.environ if environ is None else environ).get("XDG_STATE_HOME")
    return (Path(base) if base else Path.home() / ".local" / "state") / "copilot-otel"


def capture_content_from_env(environ: Mapping[str, str] | None = None) -> bool:
    """The CLI's own opt-in switch for exporting prompt, argument and result text."""
    env = os.environ if environ is None else environ
    return env.get(ENV_CAPTURE_CONTENT, "").strip().lower() in ("1", "true", "yes", "on")


def parse_address(value: str) -> tuple[str, int]:
    """'HOST:PORT' (IPv6 in brackets) -> (host, port), or a ConfigError saying what is wrong."""
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ConfigError(f"--metrics-address {value!r}: expected HOST:PORT, e.g. {DEFAULT_METRICS_ADDRESS}")
    host = host.strip("[]") or "127.0.0.1"
    return host, int(port)


class Config(Struct, frozen=True):
    """Everything the commands and the SDK front end need, validated before anything starts."""

    copilot_home: Path = field(default_factory=default_copilot_home)
    state_dir: Path = field(default_factory=default_state_dir)
    traces_file: Path | None = None
    otlp: OtlpSettings = field(default_factory=lambda: OtlpSettings(None, "grpc"))
    metrics_address: tuple[str, int] = (DEFAULT_METRICS_HOST, DEFAULT_METRICS_PORT)
    stuck_after: float = DEFAULT_STUCK_AFTER
    model: ModelOptions = ModelOptions()
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES
    # Seconds of silence after a final answer that confirm the agent loop went idle.
    idle_quiet: float = DEFAULT_IDLE_QUIET
    # Daemon: periodic rescan that backs up the file watcher; 0 disables it.
    rescan_interval: float = DEFAULT_RESCAN_INTERVAL
    poll: bool = False
    from_start: bool = True
    # Also export logs whose last event is older than the state folder's first start (history; run only).
    backfill: bool = False
    max_buffered_spans: int = DEFAULT_MAX_BUFFERED_SPANS
    # A session waiting on a tool is stuck after stuck_after_tool seconds, or its tool's own (tool, seconds).
    stuck_after_tool: float = DEFAULT_STUCK_AFTER_TOOL
    stuck_after_tools: tuple[tuple[str, float], ...] = ()
    traces_file_max_bytes: int = DEFAULT_TRACES_FILE_MAX_BYTES  # 0: never rotate
    traces_file_backups: int = DEFAULT_TRACES_FILE_BACKUPS
    # The web view links each trace here: an http(s) URL with {trace_id} in it (Jaeger, Tempo).
    trace_url: str | None = None
    # Metrics: leave the repository label empty (Prometheus then shows none), e.g. where repository names are private.
    no_repository_label: bool = False
    # Leave the sessions' names out of the owner's views (`sessions`, `inspect`, the web view): for screen sharing.
    hide_names: bool = False
    # Do not refuse a state or trace folder other users may write (ssh's "StrictModes no"): for a volume only
    # the container's own pod reaches, e.g. a Kubernetes emptyDir (made 0777). Files are still checked.
    no_strict_modes: bool = False
    metrics_otlp: OtlpSettings | None = None  # OTEL_METRICS_EXPORTER=otlp: also push the metrics there
    logs_otlp: OtlpSettings | None = None  # OTEL_LOGS_EXPORTER=otlp: the session's events as log records there
    max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES
    max_label_values: int = DEFAULT_MAX_LABEL_VALUES
    # Host names the endpoint answers to besides localhost and IP addresses (a scraper's, an ingress's).
    allowed_hosts: tuple[str, ...] = ()
    # TLS and basic auth for the endpoint, in the Prometheus exporter-toolkit's format (webconfig.py).
    web_config_file: Path | None = None
    # Monthly AI-credit budgets (budgets.py), read from budgets_file when it is set.
    budgets_file: Path | None = None
    budgets: tuple = ()

    def __post_init__(self) -> None:
        if self.budgets_file is not None and not self.budgets:
            from .metrics.budgets import load_budgets

            force_setattr(self, "budgets", load_budgets(self.budgets_file))
        force_setattr(self, "allowed_hosts", check_allowed_hosts(self.allowed_hosts))
        _positive("--stuck-after", self.stuck_after)
        _positive("--stuck-after-tool", self.stuck_after_tool)
        for tool, seconds in self.stuck_after_tools:
            _positive(f"--stuck-after-tool {tool}=SECONDS", seconds)
        if self.traces_file_max_bytes < 0:
            raise ConfigError("--traces-file-max-bytes must be 0 (never rotate) or a number of bytes")
        if self.traces_file_backups < 0:
            raise ConfigError("--traces-file-backups must be 0 or more")
        _positive("--idle-quiet", self.idle_quiet, minimum=MIN_IDLE_QUIET)
        if not math.isfinite(self.rescan_interval) or self.rescan_interval < 0:
            raise ConfigError(f"--rescan-interval must be 0 (off) or a positive number of seconds, "
                              f"not {self.rescan_interval}")
        if self.max_line_bytes < MIN_MAX_LINE_BYTES:
            raise ConfigError(f"--max-line-bytes must be at least {MIN_MAX_LINE_BYTES}")
        if self.model.content_max_chars < 1:
            raise ConfigError("--content-max-chars must be at least 1")
        if self.max_buffered_spans < 1:
            raise ConfigError("--max-buffered-spans must be at least 1")
        if self.max_request_bytes < MIN_MAX_REQUEST_BYTES:
            raise ConfigError(f"--max-request-bytes must be at least {MIN_MAX_REQUEST_BYTES}")
        if self.max_label_values < 1:
            raise ConfigError("--max-label-values must be at least 1")
        if self.trace_url is not None:
            check_trace_url(self.trace_url)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, *, exports: bool = True,
                 **overrides: Any) -> Config:
        """The configuration from COPILOT_OTEL_* and the standard variables; ``overrides`` (flags) win.

        ``exports=False``: OTLP settings are not read (a command that exports nothing).
        Raises ConfigError naming the variable or flag to fix.
        """
        env = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        for name, parse in _ENV_FIELDS.items():
            text = env.get(env_flag(name.replace("_", "-")), "").strip()
            if text:
                values[name] = parse(env_flag(name.replace("_", "-")), text)
        hosts = env.get(env_flag("allowed-host"), "").strip()  # --allowed-host: a field named in the plural
        if hosts:
            values["allowed_hosts"] = (hosts,)
        values.setdefault("copilot_home", default_copilot_home(env))
        values.setdefault("state_dir", default_state_dir(env))
        max_chars = values.pop("content_max_chars", DEFAULT_CONTENT_MAX_CHARS)
        override = overrides.pop("content_max_chars", None)
        values["otlp"] = OtlpSettings.from_env(env) if exports else OtlpSettings(None, "grpc")
        values["metrics_otlp"] = OtlpSettings.metrics_from_env(env) if exports else None
        values["logs_otlp"] = OtlpSettings.logs_from_env(env) if exports else None
        values["model"] = ModelOptions(capture_content_from_env(env), max_chars if override is None else override,
                                       logs=values["logs_otlp"] is not None)
        values.update({key: value for key, value in overrides.items() if value is not None})
        for key in ("copilot_home", "state_dir", "traces_file", "web_config_file", "budgets_file"):
            if isinstance(values.get(key), (str, Path)):
                values[key] = Path(values[key]).expanduser()
        if isinstance(values.get("metrics_address"), str):
            values["metrics_address"] = parse_address(values["metrics_address"])
        tools = values.pop("stuck_after_tool", None)
        if isinstance(tools, str):
            tools = parse_tool_thresholds("--stuck-after-tool", tools)
        elif isinstance(tools, (int, float)):
            tools = (float(tools), ())
        if tools is not None:
            default, overrides = tools
            if default is not None:
                values["stuck_after_tool"] = default
            values["stuck_after_tools"] = overrides
        return cls(**values)

    @property
    def stuck_policy(self) -> StuckPolicy:
        """The thresholds as the live-state policy reads them."""
        return StuckPolicy(self.stuck_after, self.stuck_after_tool, dict(self.stuck_after_tools))

    @property
    def traces_rotation(self) -> Rotation:
        """When the trace file rotates."""
        return Rotation(self.traces_file_max_bytes, self.traces_file_backups)

    @property
    def default_traces_file(self) -> Path:
        """Where traces go when no destination is configured."""
        return self.state_dir / "traces.jsonl"

    @property
    def summary_cache(self) -> Path:
        """Where the session summaries `sessions` and /api/sessions read are cached."""
        return self.state_dir / "summaries.json"

    @property
    def daemon_socket(self) -> Path:
        """The daemon's Unix socket, where the commands ask it (to this uid only)."""
        from .base.peers import SOCKET_NAME

        return self.state_dir / SOCKET_NAME


_HOST_NAME = re.compile(r"(\*\.)?[a-z0-9_]([a-z0-9_-]*[a-z0-9_])?(\.[a-z0-9_]([a-z0-9_-]*[a-z0-9_])?)*")


def check_allowed_hosts(names: Iterable[str] | str) -> tuple[str, ...]:
    """--allowed-host values (repeated, comma or space separated) as lower-case names, or a ConfigError."""
    out = []
    for item in [names] if isinstance(names, str) else names:
        for name in filter(None, (part.strip().lower().rstrip(".") for part in re.split(r"[,\s]+", str(item)))):
            if not _HOST_NAME.fullmatch(name):
                raise ConfigError(f"--allowed-host {name!r}: expected a host name such as copilot-otel or "
                                  "metrics.example.com (or *.example.com), without a port or scheme")
            out.append(name)
    return tuple(dict.fromkeys(out))


def check_trace_url(url: str) -> None:
    """A trace link template must be an http(s) URL holding ``{trace_id}``, or a ConfigError says so."""
    parsed = urlparse(url)
    if parsed.scheme not in ("http", "https") or not parsed.netloc or "{trace_id}" not in url:
        raise ConfigError(f"--trace-url {url!r}: expected an http(s) URL with {{trace_id}} in it, "
                          "e.g. http://127.0.0.1:16686/trace/{trace_id}")


def _positive(flag: str, value: float, *, minimum: float = 0.0) -> None:
    if not math.isfinite(value) or value <= 0 or value < minimum:
        least = f" of at least {minimum}" if minimum else ""
        raise ConfigError(f"{flag} must be a positive number of seconds{least}, not {value}")


def parse_tool_thresholds(flag: str, text: str) -> tuple[float | None, tuple[tuple[str, float], ...]]:
    """'1800' or '1800,bash=3600,view=60' or 'bash=3600' -> (default or None, ((tool, seconds), ...))."""
    default = None
    overrides: dict[str, float] = {}
    for item in filter(None, (part.strip() for part in text.replace(" ", ",").split(","))):
        tool, sep, seconds = item.rpartition("=")
        if sep and not tool.strip():
            raise ConfigError(f"{flag} {item!r}: expected TOOL=SECONDS, e.g. bash=1800")
        value = duration_seconds(seconds)
        if value is None:
            raise ConfigError(f"{flag} {item!r}: expected SECONDS or TOOL=SECONDS, SECONDS being {DURATION_HINT}; "
                              "e.g. 30m,bash=1h")
        _positive(f"{flag} {item!r}:", value)
        if sep:
            overrides[tool.strip()] = value
        else:
            default = value
    return default, tuple(sorted(overrides.items()))


# The COPILOT_OTEL_* variables the SDK front end reads without click (the CLI's flags read the same ones).
_ENV_FIELDS: dict[str, Callable[[str, str], Any]] = {
    "copilot_home": _parse_path,
    "state_dir": _parse_path,
    "traces_file": _parse_path,
    "metrics_address": lambda _variable, text: parse_address(text),
    "stuck_after": _parse_seconds,
    "stuck_after_tool": lambda variable, text: parse_tool_thresholds(variable, text),
    "traces_file_max_bytes": _parse_int,
    "traces_file_backups": _parse_int,
    "max_line_bytes": _parse_int,
    "content_max_chars": _parse_int,
    "idle_quiet": _parse_seconds,
    "rescan_interval": _parse_seconds,
    "poll": _parse_bool,
    "backfill": _parse_bool,
    "max_buffered_spans": _parse_int,
    "max_request_bytes": _parse_int,
    "max_label_values": _parse_int,
    "trace_url": lambda _variable, text: text,
    "no_repository_label": _parse_bool,
    "hide_names": _parse_bool,
    "web_config_file": _parse_path,
    "budgets_file": _parse_path,
    "no_strict_modes": _parse_bool,
}
