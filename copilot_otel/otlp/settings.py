"""Where a signal goes over OTLP, and how: the standard OTEL_EXPORTER_OTLP_* variables, validated.

Each exporter setting is read from the signal's own variable (OTEL_EXPORTER_OTLP_TRACES_TIMEOUT),
else the generic one (OTEL_EXPORTER_OTLP_TIMEOUT), as every OpenTelemetry SDK reads them; a bad
value is a ConfigError naming the variable, never a traceback later.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import urlparse

from msgspec import Struct

from ..base.parsing import ConfigError, parse_bool
from ..base.redact import redact, redact_url
from ..base.regular_files import check_regular, reason
from ..base.structs import repr_without

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
ENV_LOGS_EXPORTER = "OTEL_LOGS_EXPORTER"
ENV_OTLP_LOGS_ENDPOINT = "OTEL_EXPORTER_OTLP_LOGS_ENDPOINT"
ENV_OTLP_LOGS_PROTOCOL = "OTEL_EXPORTER_OTLP_LOGS_PROTOCOL"
ENV_OTLP_LOGS_HEADERS = "OTEL_EXPORTER_OTLP_LOGS_HEADERS"
LOGS_EXPORTERS = ("otlp", "none")  # OTEL_LOGS_EXPORTER (unset: none, unlike the SDK's default of otlp)
METRICS_EXPORTERS = ("prometheus", "otlp", "none")  # OTEL_METRICS_EXPORTER: a comma-separated list of these
TRACES_EXPORTERS = ("otlp", "none")  # OTEL_TRACES_EXPORTER
# Exporter settings read as OTEL_EXPORTER_OTLP_<SIGNAL>_<X>, else OTEL_EXPORTER_OTLP_<X>.
OTLP_TIMEOUT = "TIMEOUT"
OTLP_COMPRESSION = "COMPRESSION"
OTLP_CERTIFICATE = "CERTIFICATE"
OTLP_CLIENT_KEY = "CLIENT_KEY"
OTLP_CLIENT_CERTIFICATE = "CLIENT_CERTIFICATE"
OTLP_INSECURE = "INSECURE"

PROTOCOLS = ("grpc", "http/protobuf")
DEFAULT_OTLP_TIMEOUT = 10.0


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
    shown = redact_url(endpoint)
    example = "expected e.g. http://127.0.0.1:4317 (grpc) or http://127.0.0.1:4318 (http/protobuf)"
    try:
        parsed = urlparse(endpoint)
    except ValueError as exc:  # 'http://[::1' and the like
        raise ConfigError(f"OTLP endpoint {shown!r} is not a valid URL ({redact(str(exc))}): {example}") from None
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise ConfigError(f"OTLP endpoint {shown!r} is not a URL: {example}")
    try:
        _ = parsed.port  # read to check it: a port that is no number, or out of range, raises
    except ValueError:
        raise ConfigError(f"OTLP endpoint {shown!r} has an invalid port") from None


def _protocol(env: Mapping[str, str], specific: str) -> str:
    """The signal's OTLP protocol (its own variable, else OTEL_EXPORTER_OTLP_PROTOCOL, else grpc), validated."""
    variable = specific if env.get(specific) else ENV_OTLP_PROTOCOL
    protocol = (env.get(variable) or "grpc").strip()
    if protocol not in PROTOCOLS:
        raise ConfigError(f"{variable}={protocol!r} is not supported: use one of {', '.join(PROTOCOLS)}")
    return protocol


def _otlp_variable(env: Mapping[str, str], signal: str, setting: str) -> tuple[str, str]:
    """(name, value) of OTEL_EXPORTER_OTLP_<signal>_<setting> if set, else of OTEL_EXPORTER_OTLP_<setting>."""
    specific = f"OTEL_EXPORTER_OTLP_{signal}_{setting}"
    if env.get(specific, "").strip():
        return specific, env[specific].strip()
    general = f"OTEL_EXPORTER_OTLP_{setting}"
    return general, env.get(general, "").strip()


def _readable_file(variable: str, value: str) -> Path | None:
    if not value:
        return None
    path = Path(value).expanduser()
    try:
        check_regular(path)  # OpenSSL or grpc reads it later: a FIFO would block them for good
    except OSError as exc:
        raise ConfigError(f"{variable}={value!r}: cannot read it ({reason(exc)}); "
                          "give the path of a PEM file, or unset it") from None
    return path


class OtlpSettings(Struct, frozen=True):
    """Where a signal goes over OTLP and how (None endpoint means 'not configured'), from OTEL_EXPORTER_OTLP_*."""

    endpoint: str | None
    protocol: str
    headers: tuple[tuple[str, str], ...] = ()  # values may be tokens: __repr__ leaves them out
    timeout: float = DEFAULT_OTLP_TIMEOUT  # seconds for one request, as the Python SDK reads it
    compression: str = "none"  # none or gzip
    certificate: Path | None = None  # CA bundle that verifies the backend
    client_key: Path | None = None
    client_certificate: Path | None = None
    insecure: bool | None = None  # gRPC without TLS; None: decided by the endpoint's scheme

    def __repr__(self) -> str:  # every field but the headers, whose values may be tokens
        return repr_without(self, "headers")

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> OtlpSettings:
        """Read the standard OTEL_EXPORTER_OTLP_* variables, validated."""
        env = os.environ if environ is None else environ
        exporters = [e.strip().lower() for e in env.get(ENV_TRACES_EXPORTER, "").split(",") if e.strip()]
        unsupported = [e for e in exporters if e not in TRACES_EXPORTERS]
        if unsupported:
            raise ConfigError(f"{ENV_TRACES_EXPORTER}={env[ENV_TRACES_EXPORTER]!r}: {', '.join(unsupported)} is not "
                              "supported; use otlp (with OTEL_EXPORTER_OTLP_ENDPOINT), none, or --traces-file")
        if exporters and set(exporters) == {"none"}:
            return cls(None, "grpc")
        return cls._of_signal(env, ENV_OTLP_TRACES_ENDPOINT, ENV_OTLP_TRACES_PROTOCOL, ENV_OTLP_TRACES_HEADERS)

    @classmethod
    def metrics_from_env(cls, environ: Mapping[str, str] | None = None) -> OtlpSettings | None:
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
    def logs_from_env(cls, environ: Mapping[str, str] | None = None) -> OtlpSettings | None:
        """Where the session's events go as log records when OTEL_LOGS_EXPORTER names otlp (None: they do not),
        from the standard OTEL_EXPORTER_OTLP_(LOGS_)* variables; otlp with no endpoint is a ConfigError."""
        env = os.environ if environ is None else environ
        exporters = {name.strip().lower() for name in env.get(ENV_LOGS_EXPORTER, "").split(",") if name.strip()}
        unknown = sorted(exporters - set(LOGS_EXPORTERS))
        if unknown:
            raise ConfigError(f"{ENV_LOGS_EXPORTER}={env[ENV_LOGS_EXPORTER]!r}: {', '.join(unknown)} is not "
                              f"supported: use otlp (with OTEL_EXPORTER_OTLP_LOGS_ENDPOINT or "
                              f"OTEL_EXPORTER_OTLP_ENDPOINT) or none")
        if "otlp" not in exporters:
            return None
        settings = cls._of_signal(env, ENV_OTLP_LOGS_ENDPOINT, ENV_OTLP_LOGS_PROTOCOL, ENV_OTLP_LOGS_HEADERS)
        if not settings.endpoint:
            raise ConfigError(f"{ENV_LOGS_EXPORTER}=otlp needs an endpoint: set {ENV_OTLP_LOGS_ENDPOINT} or "
                              f"{ENV_OTLP_ENDPOINT} (e.g. http://127.0.0.1:4317)")
        return settings

    @classmethod
    def _of_signal(cls, env: Mapping[str, str], endpoint_variable: str, protocol_variable: str,
                   headers_variable: str) -> OtlpSettings:
        """One signal's settings: its own variables, else the generic OTEL_EXPORTER_OTLP_* ones, validated."""
        endpoint = env.get(endpoint_variable) or env.get(ENV_OTLP_ENDPOINT) or None
        protocol = _protocol(env, protocol_variable)
        if endpoint:
            _check_endpoint(endpoint)
        for name in (ENV_OTLP_HEADERS, headers_variable):
            _check_headers(name, env.get(name, ""))
        if not endpoint:
            return cls(None, protocol)
        signal = endpoint_variable.split("_")[3]  # OTEL_EXPORTER_OTLP_<SIGNAL>_ENDPOINT
        headers, timeout = _headers(env, signal), _timeout(env, signal)
        compression = _compression(env, signal, protocol)
        certificate, client_key, client_certificate = (_readable_file(*_otlp_variable(env, signal, setting))
                                                       for setting in (OTLP_CERTIFICATE, OTLP_CLIENT_KEY,
                                                                       OTLP_CLIENT_CERTIFICATE))
        return cls(endpoint, protocol, headers, timeout, compression, certificate, client_key, client_certificate,
                   _insecure(env, signal))


def _headers(env: Mapping[str, str], signal: str) -> tuple[tuple[str, str], ...]:
    from opentelemetry.util.re import parse_env_headers

    _name, value = _otlp_variable(env, signal, "HEADERS")
    return tuple(parse_env_headers(value, liberal=True).items()) if value else ()


def _timeout(env: Mapping[str, str], signal: str) -> float:
    name, value = _otlp_variable(env, signal, OTLP_TIMEOUT)
    if not value:
        return DEFAULT_OTLP_TIMEOUT
    try:
        seconds = float(value)
    except ValueError:
        seconds = math.nan
    if not math.isfinite(seconds) or seconds <= 0:
        raise ConfigError(f"{name}={value!r} is not a positive number of seconds (e.g. 10)")
    return seconds


def _compression(env: Mapping[str, str], signal: str, protocol: str) -> str:
    name, value = _otlp_variable(env, signal, OTLP_COMPRESSION)
    value = value.lower() or "none"
    if value not in ("none", "gzip"):
        raise ConfigError(f"{name}={value!r} is not supported over {protocol}: use gzip or none")
    return value


def _insecure(env: Mapping[str, str], signal: str) -> bool | None:
    name, value = _otlp_variable(env, signal, OTLP_INSECURE)
    return parse_bool(name, value) if value else None
