"""`--web-config-file`: TLS and basic auth for the HTTP endpoint, in the Prometheus exporters' format.

The file is the one every exporter built on Prometheus's exporter-toolkit reads (node_exporter's
``--web.config.file``): ``tls_server_config`` (cert_file, key_file, client_auth_type,
client_ca_file, client_allowed_sans, min_version, max_version), ``http_server_config.headers``
and ``basic_auth_users`` (bcrypt hashes). A fleet's Prometheus scrape configs for those
exporters work here unchanged. What the toolkit offers and Python's ``ssl`` cannot do the same
way (Go cipher suite and curve names, certificates that are requested but not verified, inline
PEM, rate limits) is refused with one line rather than silently weakened. Relative paths are
read from the file's own folder, as the toolkit does.
"""

from __future__ import annotations

import ssl
from pathlib import Path
from typing import Any

from msgspec import Struct, field

from ..base import boundedyaml
from ..base.parsing import ConfigError
from ..base.regular_files import check_regular, read_config, reason

TLS_VERSIONS = {"TLS10": ssl.TLSVersion.TLSv1, "TLS11": ssl.TLSVersion.TLSv1_1, "TLS12": ssl.TLSVersion.TLSv1_2,
                "TLS13": ssl.TLSVersion.TLSv1_3}
# client_auth_type -> what the server asks of a client's certificate (None: the toolkit's value Python cannot do).
CLIENT_AUTH = {"NoClientCert": ssl.CERT_NONE, "VerifyClientCertIfGiven": ssl.CERT_OPTIONAL,
               "RequireAndVerifyClientCert": ssl.CERT_REQUIRED, "RequestClientCert": None,
               "RequireAnyClientCert": None}
# The response headers the toolkit lets a file set (and the values it accepts, where it checks them).
HEADERS = {"Content-Security-Policy": None, "X-Frame-Options": ("deny", "sameorigin"),
           "X-Content-Type-Options": ("nosniff",), "X-XSS-Protection": None, "Strict-Transport-Security": None}
_TLS_KEYS = {"cert_file", "key_file", "client_auth_type", "client_ca_file", "client_allowed_sans", "min_version",
             "max_version", "prefer_server_cipher_suites", "cipher_suites", "curve_preferences", "cert", "key",
             "client_ca"}
_UNSUPPORTED = {"cipher_suites": "Go's cipher suite names have no OpenSSL equivalent here; leave it out (OpenSSL's "
                                 "defaults allow only AEAD suites for TLS 1.2 and up)",
                "curve_preferences": "Go's curve names have no equivalent here; leave it out",
                "cert": "inline PEM is not read; use cert_file", "key": "inline PEM is not read; use key_file",
                "client_ca": "inline PEM is not read; use client_ca_file"}


class WebConfig(Struct, frozen=True):
    """What the endpoint serves with: a TLS context (or None: plain HTTP), basic-auth users, extra headers."""

    tls: ssl.SSLContext | None = None
    users: dict[str, bytes] = field(default_factory=dict)  # user -> bcrypt hash
    headers: dict[str, str] = field(default_factory=dict)
    allowed_sans: tuple[str, ...] = ()  # a client certificate must name one of these
    source: str = ""


def load_web_config(path: Path) -> WebConfig:
    """The web config at ``path``, checked whole; a ConfigError (one line, naming the file) if anything is off."""
    path = Path(path).expanduser()
    where = f"--web-config-file {path}"
    document = boundedyaml.load_config(read_config(path, where), where)
    try:
        return _parse(document or {}, path)
    except _Bad as exc:
        raise ConfigError(f"--web-config-file {path}: {exc}") from None


class _Bad(ValueError):
    """What is wrong with the file (the caller names the file)."""


def _parse(document: Any, path: Path) -> WebConfig:
    top = _mapping(document, "the file", {"tls_server_config", "http_server_config", "basic_auth_users", "rate_limit"})
    if "rate_limit" in top:
        raise _Bad("rate_limit is not supported; put a proxy in front for rate limits")
    users = _users(top.get("basic_auth_users"))
    http = _mapping(top.get("http_server_config") or {}, "http_server_config", {"http2", "headers"})
    if "http2" in http and not isinstance(http["http2"], bool):
        raise _Bad("http_server_config.http2 must be true or false (HTTP/1.1 is served either way)")
    headers = _headers(http.get("headers"))
    tls_section = top.get("tls_server_config")
    tls, sans = (None, ()) if not tls_section else _tls(_mapping(tls_section, "tls_server_config", _TLS_KEYS), path)
    if sans and tls is None:
        raise _Bad("client_allowed_sans needs tls_server_config")
    return WebConfig(tls=tls, users=users, headers=headers, allowed_sans=sans, source=str(path))


def _mapping(value: Any, where: str, keys: set[str]) -> dict:
    if not isinstance(value, dict):
        raise _Bad(f"{where} must be a mapping")
    unknown = sorted(str(key) for key in value if key not in keys)
    if unknown:
        raise _Bad(f"unknown key {unknown[0]!r} in {where} (known: {', '.join(sorted(keys))})")
    return value


def _users(value: Any) -> dict[str, bytes]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise _Bad("basic_auth_users must map each user name to a bcrypt hash")
    users = {}
    for user, hashed in value.items():
        if not isinstance(user, str) or not user or ":" in user:
            raise _Bad(f"basic_auth_users: {user!r} is not a user name (no colon, not empty)")
        if not isinstance(hashed, str) or not hashed.startswith(("$2a$", "$2b$", "$2y$")) or len(hashed) != 60:
            raise _Bad(f"basic_auth_users: the password of {user!r} is not a bcrypt hash "
                       "(make one with: htpasswd -nBC 10 \"\" | tr -d ':\\n')")
        users[user] = hashed.encode()
    return users


def _headers(value: Any) -> dict[str, str]:
    if value is None:
        return {}
    headers = _mapping(value, "http_server_config.headers", set(HEADERS))
    out = {}
    for name, text in headers.items():
        if not isinstance(text, str):
            raise _Bad(f"http_server_config.headers.{name} must be a string")
        allowed = HEADERS[name]
        if allowed is not None and text and text.lower() not in allowed:
            raise _Bad(f"http_server_config.headers.{name}: {text!r} is not one of {', '.join(allowed)}")
        if text:
            out[name] = text
    return out


def _tls(section: dict, path: Path) -> tuple[ssl.SSLContext, tuple[str, ...]]:
    for name, why in _UNSUPPORTED.items():
        if section.get(name):
            raise _Bad(f"tls_server_config.{name}: {why}")
    if "prefer_server_cipher_suites" in section and not isinstance(section["prefer_server_cipher_suites"], bool):
        raise _Bad("tls_server_config.prefer_server_cipher_suites must be true or false")
    cert, key = section.get("cert_file"), section.get("key_file")
    if not cert or not key:
        missing = "cert_file" if not cert else "key_file"
        raise _Bad(f"tls_server_config needs both cert_file and key_file (missing {missing})")
    folder = path.parent
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = _version(section, "min_version", "TLS12")
    context.maximum_version = _version(section, "max_version", "TLS13")
    if context.minimum_version > context.maximum_version:
        raise _Bad("tls_server_config: min_version is above max_version")
    try:
        context.load_cert_chain(_file(folder, cert, "cert_file"), _file(folder, key, "key_file"))
    except ssl.SSLError as exc:
        raise _Bad("tls_server_config: cert_file and key_file do not make a certificate and its key "
                   f"({exc.reason})") from None
    mode_name = section.get("client_auth_type") or "NoClientCert"
    if mode_name not in CLIENT_AUTH:
        raise _Bad(f"tls_server_config.client_auth_type {mode_name!r} is not one of {', '.join(CLIENT_AUTH)}")
    mode = CLIENT_AUTH[mode_name]
    if mode is None:
        raise _Bad(f"tls_server_config.client_auth_type {mode_name}: the certificate would not be verified; "
                   "use RequireAndVerifyClientCert (or VerifyClientCertIfGiven) with client_ca_file")
    ca = section.get("client_ca_file")
    if ca and mode == ssl.CERT_NONE:
        raise _Bad("tls_server_config: client_ca_file is set but client_auth_type is NoClientCert; "
                   "use RequireAndVerifyClientCert")
    if mode != ssl.CERT_NONE:
        if not ca:
            raise _Bad(f"tls_server_config.client_auth_type {mode_name} needs client_ca_file")
        try:
            context.load_verify_locations(cafile=_file(folder, ca, "client_ca_file"))
        except ssl.SSLError as exc:
            raise _Bad(f"tls_server_config.client_ca_file holds no certificate ({exc.reason})") from None
        context.verify_mode = mode
    sans = section.get("client_allowed_sans") or []
    if not isinstance(sans, list) or not all(isinstance(s, str) and s for s in sans):
        raise _Bad("tls_server_config.client_allowed_sans must be a list of names")
    if sans and mode != ssl.CERT_REQUIRED:
        raise _Bad("tls_server_config.client_allowed_sans needs client_auth_type RequireAndVerifyClientCert")
    return context, tuple(sans)


def _version(section: dict, key: str, default: str) -> ssl.TLSVersion:
    name = section.get(key) or default
    if name not in TLS_VERSIONS:
        raise _Bad(f"tls_server_config.{key} {name!r} is not one of {', '.join(TLS_VERSIONS)}")
    return TLS_VERSIONS[name]


def _file(folder: Path, name: Any, key: str) -> str:
    if not isinstance(name, str):
        raise _Bad(f"tls_server_config.{key} must be a file name")
    path = (folder / name).expanduser()
    try:
        return str(check_regular(path))  # OpenSSL opens it again: a FIFO would block it for good
    except FileNotFoundError:
        raise _Bad(f"tls_server_config.{key} {str(path)!r}: no such file") from None
    except OSError as exc:
        raise _Bad(f"tls_server_config.{key} {str(path)!r}: cannot read it ({reason(exc)})") from None
