"""One explicit, validated configuration, built from flags and environment in one place."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping
from urllib.parse import urlparse

from .liveness import StuckPolicy
from .rotation import Rotation

# Our own variables: every flag --some-flag is COPILOT_OTEL_SOME_FLAG.
ENV_PREFIX = "COPILOT_OTEL_"
ENV_COPILOT_HOME = "COPILOT_HOME"
ENV_CAPTURE_CONTENT = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
ENV_OTLP_ENDPOINT = "OTEL_EXPORTER_OTLP_ENDPOINT"
ENV_OTLP_TRACES_ENDPOINT = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
ENV_OTLP_PROTOCOL = "OTEL_EXPORTER_OTLP_PROTOCOL"
ENV_OTLP_TRACES_PROTOCOL = "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"
ENV_TRACES_EXPORTER = "OTEL_TRACES_EXPORTER"
ENV_OTLP_HEADERS = "OTEL_EXPORTER_OTLP_HEADERS"
ENV_OTLP_TRACES_HEADERS = "OTEL_EXPORTER_OTLP_TRACES_HEADERS"
ENV_METRICS_EXPORTER = "OTEL_METRICS_EXPORTER"
ENV_OTLP_METRICS_ENDPOINT = "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT"
ENV_OTLP_METRICS_PROTOCOL = "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL"
ENV_OTLP_METRICS_HEADERS = "OTEL_EXPORTER_OTLP_METRICS_HEADERS"
METRICS_EXPORTERS = ("prometheus", "otlp", "none")  # OTEL_METRICS_EXPORTER: a comma-separated list of these

PROTOCOLS = ("grpc", "http/protobuf")
# Each default is written here once; flags, the SDK front end and the docs read them from here.
DEFAULT_METRICS_HOST = "127.0.0.1"
DEFAULT_METRICS_PORT = 9464
DEFAULT_METRICS_ADDRESS = f"{DEFAULT_METRICS_HOST}:{DEFAULT_METRICS_PORT}"
DEFAULT_STUCK_AFTER = 600.0
DEFAULT_STUCK_AFTER_TOOL = 1800.0  # a build or a test run is often longer than a silent model
DEFAULT_VIEW_ADDRESS = f"{DEFAULT_METRICS_HOST}:{DEFAULT_METRICS_PORT + 1}"  # `view`: beside a running daemon
DEFAULT_MAX_LINE_BYTES = 16 * 1024 * 1024
DEFAULT_CONTENT_MAX_CHARS = 4096
DEFAULT_IDLE_QUIET = 2.0
DEFAULT_RESCAN_INTERVAL = 10.0
DEFAULT_MAX_BUFFERED_SPANS = 20_000
# The Collector file exporter's rotation default is 100 MB; it keeps 100 backups, a laptop fewer.
DEFAULT_TRACES_FILE_MAX_BYTES = 100 * 1024 * 1024
DEFAULT_TRACES_FILE_BACKUPS = 10
DEFAULT_GIVE_UP_AFTER = 600.0  # replay: seconds a backend may refuse one batch before the replay stops
MIN_MAX_LINE_BYTES = 1024
MIN_IDLE_QUIET = 0.05


@dataclass(frozen=True, slots=True)
class ModelOptions:
    """What the session model needs from the configuration: content capture and its length."""

    capture_content: bool = False
    content_max_chars: int = DEFAULT_CONTENT_MAX_CHARS


class ConfigError(ValueError):
    """A configuration problem, with a message that says how to fix it."""


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


def _check_headers(variable: str, value: str) -> None:
    """Headers must be 'key=value,...'; say which one is not, never showing a value (it may be a token)."""
    for item in filter(None, (part.strip() for part in value.split(","))):
        key, sep, _secret = item.partition("=")
        if not sep or not key.strip() or ":" in key or " " in key.strip():
            name = key.split(":", 1)[0].split(" ", 1)[0].strip() or "?"
            raise ConfigError(f"{variable}: the header starting with {name!r} is not key=value "
                              "(write e.g. authorization=Bearer%20TOKEN; values are not shown)")


def _check_endpoint(endpoint: str) -> None:
    """An OTLP endpoint must be an http(s) URL with a valid port."""
    parsed = urlparse(endpoint)
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise ConfigError(
            f"OTLP endpoint {endpoint!r} is not a URL: expected e.g. http://127.0.0.1:4317 (grpc) "
            "or http://127.0.0.1:4318 (http/protobuf)"
        )
    try:
        parsed.port
    except ValueError:
        raise ConfigError(f"OTLP endpoint {endpoint!r} has an invalid port") from None


def _protocol(env: Mapping[str, str], specific: str) -> str:
    """The signal's OTLP protocol (its own variable, else OTEL_EXPORTER_OTLP_PROTOCOL, else grpc), validated."""
    variable = specific if env.get(specific) else ENV_OTLP_PROTOCOL
    protocol = (env.get(variable) or "grpc").strip()
    if protocol not in PROTOCOLS:
        raise ConfigError(f"{variable}={protocol!r} is not supported: use one of {', '.join(PROTOCOLS)}")
    return protocol


@dataclass(frozen=True)
class OtlpSettings:
    """Where traces go over OTLP; None endpoint means 'not configured'."""

    endpoint: str | None
    protocol: str

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> "OtlpSettings":
        """Read the standard OTEL_EXPORTER_OTLP_* variables, validated."""
        env = os.environ if environ is None else environ
        if env.get(ENV_TRACES_EXPORTER, "").strip().lower() == "none":
            return cls(None, "grpc")
        return cls._of_signal(env, ENV_OTLP_TRACES_ENDPOINT, ENV_OTLP_TRACES_PROTOCOL, ENV_OTLP_TRACES_HEADERS)

    @classmethod
    def metrics_from_env(cls, environ: Mapping[str, str] | None = None) -> "OtlpSettings | None":
        """Where metrics are pushed when OTEL_METRICS_EXPORTER names otlp (None: they are not), from the
        standard OTEL_EXPORTER_OTLP_(METRICS_)* variables. Prometheus pull (/metrics) is always served."""
        env = os.environ if environ is None else environ
        exporters = {name.strip().lower() for name in env.get(ENV_METRICS_EXPORTER, "").split(",") if name.strip()}
        unknown = sorted(exporters - set(METRICS_EXPORTERS))
        if unknown:
            raise ConfigError(f"{ENV_METRICS_EXPORTER}={env[ENV_METRICS_EXPORTER]!r}: {', '.join(unknown)} is not "
                              f"supported: use {', '.join(METRICS_EXPORTERS)} (a comma-separated list)")
        if "otlp" not in exporters:
            return None
        return cls._of_signal(env, ENV_OTLP_METRICS_ENDPOINT, ENV_OTLP_METRICS_PROTOCOL, ENV_OTLP_METRICS_HEADERS)

    @classmethod
    def _of_signal(cls, env: Mapping[str, str], endpoint_variable: str, protocol_variable: str,
                   headers_variable: str) -> "OtlpSettings":
        """One signal's settings: its own variables, else the generic OTEL_EXPORTER_OTLP_* ones, validated."""
        endpoint = env.get(endpoint_variable) or env.get(ENV_OTLP_ENDPOINT) or None
        protocol = _protocol(env, protocol_variable)
        if endpoint:
            _check_endpoint(endpoint)
        for name in (ENV_OTLP_HEADERS, headers_variable):
            _check_headers(name, env.get(name, ""))
        return cls(endpoint, protocol)


@dataclass(frozen=True)
class Config:
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
    metrics_otlp: OtlpSettings | None = None  # OTEL_METRICS_EXPORTER=otlp: also push the metrics there

    def __post_init__(self) -> None:
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
        if self.trace_url is not None:
            check_trace_url(self.trace_url)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, *, exports: bool = True,
                 **overrides: Any) -> "Config":
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
        values.setdefault("copilot_home", default_copilot_home(env))
        values.setdefault("state_dir", default_state_dir(env))
        max_chars = values.pop("content_max_chars", DEFAULT_CONTENT_MAX_CHARS)
        override = overrides.pop("content_max_chars", None)
        values["model"] = ModelOptions(capture_content_from_env(env), max_chars if override is None else override)
        values["otlp"] = OtlpSettings.from_env(env) if exports else OtlpSettings(None, "grpc")
        values["metrics_otlp"] = OtlpSettings.metrics_from_env(env) if exports else None
        values.update({key: value for key, value in overrides.items() if value is not None})
        for key in ("copilot_home", "state_dir", "traces_file"):
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
        try:
            value = float(seconds)
        except ValueError:
            raise ConfigError(f"{flag} {item!r}: expected SECONDS or TOOL=SECONDS, e.g. 1800,bash=3600") from None
        _positive(f"{flag} {item!r}:", value)
        if sep:
            overrides[tool.strip()] = value
        else:
            default = value
    return default, tuple(sorted(overrides.items()))


def _parse_float(variable: str, text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise ConfigError(f"{variable}={text!r} is not a number") from None


def _parse_int(variable: str, text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise ConfigError(f"{variable}={text!r} is not a whole number") from None


def _parse_bool(variable: str, text: str) -> bool:
    lowered = text.lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise ConfigError(f"{variable}={text!r} is not true or false")


def _parse_path(_variable: str, text: str) -> Path:
    return Path(text).expanduser()


# The COPILOT_OTEL_* variables the SDK front end reads without click (the CLI's flags read the same ones).
_ENV_FIELDS: dict[str, Callable[[str, str], Any]] = {
    "copilot_home": _parse_path,
    "state_dir": _parse_path,
    "traces_file": _parse_path,
    "metrics_address": lambda _variable, text: parse_address(text),
    "stuck_after": _parse_float,
    "stuck_after_tool": lambda variable, text: parse_tool_thresholds(variable, text),
    "traces_file_max_bytes": _parse_int,
    "traces_file_backups": _parse_int,
    "max_line_bytes": _parse_int,
    "content_max_chars": _parse_int,
    "idle_quiet": _parse_float,
    "rescan_interval": _parse_float,
    "poll": _parse_bool,
    "max_buffered_spans": _parse_int,
    "trace_url": lambda _variable, text: text,
    "no_repository_label": _parse_bool,
}
