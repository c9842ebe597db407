"""Secrets out of what is shown: a URL's password and query values, and ``token=``-like values in any text.

An OTLP endpoint may carry its credentials in the URL (``http://alice:pw@host``, ``?api_key=...``),
and a request line may carry the web view's token (``GET /?token=...``). Whatever shows an endpoint
or a line of text that may hold one (/healthz, the log, an error, `replay`'s messages) passes it
through here first. A URL keeps its scheme, host, port, path and query keys; its user name and
password become ``***``, and so does every query value (an OTLP endpoint's query has no other use).
In free text, URLs are treated the same way, and a value after a secret-looking key
(``token=``, ``api_key=``, ``password=`` and the like) is hidden wherever it stands.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit, urlunsplit

HIDDEN = "***"
# Keys whose value is a credential wherever they appear as key=value (a query, a header list, a request line).
SECRET_KEYS = ("token", "access_token", "id_token", "refresh_token", "api_key", "apikey", "api-key", "key",
               "secret", "client_secret", "password", "passwd", "pwd", "auth", "authorization", "sig",
               "signature", "credential", "credentials")
_SECRET_KEYS = frozenset(SECRET_KEYS)
# Any key=value (checked against SECRET_KEYS as it is found: faster than an alternation tried at every position).
_PAIR = re.compile(r"(?<![A-Za-z0-9_-])([A-Za-z_-]{2,32})=([^&\s\"'<>#;,]*)")
_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s\"'<>]+")
# A user and password before a host without a scheme (a gRPC target: ``alice:pw@127.0.0.1:4317``).
_USERINFO = re.compile(r"(?<![\w.%+-])[\w.%+~-]{1,256}:[^\s@/\"']{1,256}@(?=[\w\[])")
# An Authorization or Cookie header's value, as a bad request's echo may show it.
_HEADER = re.compile(r"(?i)\b(authorization:\s*(?:bearer|basic)?\s*|cookie:\s*|bearer\s+)[^\s\"']+")


def redact_url(url: str) -> str:
    """``url`` with its user name, password and query values hidden (text that is no URL: as redact())."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return _redact_text(url)  # no URL Python can take apart ('http://[::1'): what looks secret in it
    if not parts.scheme or not parts.netloc:
        return _redact_text(url)
    netloc = parts.netloc
    if "@" in netloc:
        netloc = HIDDEN + "@" + netloc.rsplit("@", 1)[1]
    query = "&".join(pair.partition("=")[0] + ("=" + HIDDEN if "=" in pair else "")
                     for pair in parts.query.split("&")) if parts.query else ""
    fragment = HIDDEN if parts.fragment else ""
    return urlunsplit((parts.scheme, netloc, parts.path, query, fragment))


def redact(text: str) -> str:
    """``text`` with every URL in it redacted as redact_url() does, and every secret-looking ``key=value``'s
    value hidden."""
    for secret in _known:
        if secret in text:
            text = text.replace(secret, HIDDEN)
    # Each pattern only where its sign is: most log lines hold none, and a line is formatted at every level.
    if "://" in text:
        text = _URL.sub(lambda match: redact_url(match.group()), text)
    return _redact_text(text)


def _redact_text(text: str) -> str:
    """A user and password before an ``@``, header values, secret-looking ``key=value``s: hidden."""
    if "@" in text:
        text = _USERINFO.sub(HIDDEN + "@", text)
    lowered = text.lower()
    if "bearer" in lowered or "cookie" in lowered or "authorization" in lowered:
        text = _HEADER.sub(r"\1" + HIDDEN, text)
    if "=" in text:
        text = _PAIR.sub(_hide_pair, text)
    return text


def _hide_pair(match: re.Match) -> str:
    key = match.group(1)
    return f"{key}={HIDDEN}" if key.lower() in _SECRET_KEYS else match.group()


def hide(secret: str) -> None:
    """Hide ``secret`` itself (the web view's token) wherever redact() finds it, whatever surrounds it."""
    if len(secret) >= 16:  # a short string would hide ordinary words
        _known.add(secret)


_known: set[str] = set()
