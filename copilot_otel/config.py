"""One explicit, validated configuration, built from flags and environment in one place."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlparse

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

PROTOCOLS = ("grpc", "http/protobuf")
DEFAULT_METRICS_ADDRESS = "127.0.0.1:9464"
DEFAULT_STUCK_AFTER = 600.0
DEFAULT_MAX_LINE_BYTES = 16 * 1024 * 1024
DEFAULT_CONTENT_MAX_CHARS = 4096


class ConfigError(ValueError):
    """A configuration problem, with a message that says how to fix it."""


def env_flag(name: str) -> str:
    """The environment variable that backs ``--name``."""
    return ENV_PREFIX + name.upper().replace("-", "_")


def default_copilot_home() -> Path:
    """$COPILOT_HOME, else ~/.copilot."""
    value = os.environ.get(ENV_COPILOT_HOME)
    return Path(value).expanduser() if value else Path.home() / ".copilot"


def default_state_dir() -> Path:
    """$XDG_STATE_HOME/copilot-otel, else ~/.local/state/copilot-otel."""
    base = os.environ.get("XDG_STATE_HOME")
    return (Path(base) if base else Path.home() / ".local" / "state") / "copilot-otel"


def capture_content_from_env() -> bool:
    """The CLI's own opt-in switch for exporting prompt, argument and result text."""
    return os.environ.get(ENV_CAPTURE_CONTENT, "").strip().lower() in ("1", "true", "yes", "on")


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


@dataclass(frozen=True)
class OtlpSettings:
    """Where traces go over OTLP; None endpoint means 'not configured'."""

    endpoint: str | None
    protocol: str

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None) -> "OtlpSettings":
        """Read the standard OTEL_EXPORTER_OTLP_* variables, validated."""
        env = os.environ if environ is None else environ
        if env.get(ENV_TRACES_EXPORTER, "").strip().lower() == "none":
            return cls(None, "grpc")
        endpoint = env.get(ENV_OTLP_TRACES_ENDPOINT) or env.get(ENV_OTLP_ENDPOINT) or None
        protocol = (env.get(ENV_OTLP_TRACES_PROTOCOL) or env.get(ENV_OTLP_PROTOCOL) or "grpc").strip()
        if protocol not in PROTOCOLS:
            raise ConfigError(f"{ENV_OTLP_PROTOCOL}={protocol!r} is not supported: use one of {', '.join(PROTOCOLS)}")
        if endpoint:
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
        for name in (ENV_OTLP_HEADERS, ENV_OTLP_TRACES_HEADERS):
            _check_headers(name, env.get(name, ""))
        return cls(endpoint, protocol)


@dataclass(frozen=True)
class Config:
    """Everything the commands need, validated before anything starts."""

    copilot_home: Path = field(default_factory=default_copilot_home)
    state_dir: Path = field(default_factory=default_state_dir)
    traces_file: Path | None = None
    otlp: OtlpSettings = field(default_factory=lambda: OtlpSettings(None, "grpc"))
    metrics_address: tuple[str, int] = ("127.0.0.1", 9464)
    stuck_after: float = DEFAULT_STUCK_AFTER
    capture_content: bool = False
    content_max_chars: int = DEFAULT_CONTENT_MAX_CHARS
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES
    # Seconds of silence after a final answer that confirm the agent loop went idle.
    idle_quiet: float = 2.0
    # Daemon: periodic rescan that backs up the file watcher; 0 disables it.
    rescan_interval: float = 10.0
    poll: bool = False
    from_start: bool = True
    max_buffered_spans: int = 20_000

    def __post_init__(self) -> None:
        if self.stuck_after <= 0:
            raise ConfigError(f"--stuck-after must be a positive number of seconds, not {self.stuck_after}")
        if self.max_line_bytes < 1024:
            raise ConfigError("--max-line-bytes must be at least 1024")

    @property
    def default_traces_file(self) -> Path:
        """Where traces go when no destination is configured."""
        return self.state_dir / "traces.jsonl"
