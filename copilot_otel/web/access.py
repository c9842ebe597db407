"""Who may in: the Host check on every route, basic auth from a web config, and the view's token.

The session logs are their user's alone (0600 in a 0700 folder), and the web view serves what
they hold: so its JSON and streams (``/api/``) answer only whoever sends the token the server made
at start (kept 0600 in the state folder, as Jupyter keeps its own) as ``Authorization: Bearer`` or,
from the pages (whose Authorization may be a web config's login), as ``X-Copilot-Otel-Token``.
Without it every one of them answers the same 401, so nothing, not even whether a session
exists, can be learnt. No cookie carries it: a browser sends a host's cookies to every port of
that host, so another user's server on another port would receive it. The pages themselves
(``/``, ``/session/<id>``) are shells with no data, the same for any id, like the static assets;
their scripts take the token from the URL's fragment that `copilot-otel open` lands on (the
browser never sends a fragment), keep it in the origin's own storage and send it in that header,
which no page of another origin may send here (it needs a CORS preflight this server never grants).
``/metrics``, ``/healthz`` and the static assets hold no session and stay open to scrapers, as
every Prometheus exporter's do, unless a web config asks for basic auth (then every route asks).

Every route checks Host, on every bind: a web page that rebinds its own DNS name to this
machine sends that name, while a browser reaching the machine by an IP address or as
localhost sends those. Requests on the daemon's Unix socket pass: the kernel proved their uid.
"""

from __future__ import annotations

import base64
import hmac
import html
import ipaddress
import os
import secrets
import socket
import stat
from collections.abc import Awaitable, Callable
from pathlib import Path

import orjson
from aiohttp import web

from ..base.parsing import ConfigError
from ..base.private_files import write_private
from ..base.regular_files import open_regular
from .logins import Busy, Logins, source_of
from .webconfig import WebConfig

OPEN_PATHS = ("/metrics", "/healthz", "/")
OPEN_PREFIXES = ("/static/", "/session/")  # the pages, their scripts and styles: no data in them
NEEDS_TOKEN = ("401 Unauthorized: this view opens with its token. Run `copilot-otel open` as the user who runs "
               "it, or open the URL it printed on its terminal.\n")
HOST_REFUSED = ("403 Forbidden: this server answers only to localhost, an IP address, or a name given with "
                "--allowed-host.\n")
NEEDS_LOGIN = "401 Unauthorized: log in (basic auth of the --web-config-file).\n"
CERT_REFUSED = "403 Forbidden: this client certificate is not among client_allowed_sans.\n"
BUSY = "503 Service Unavailable: too many logins being checked for this client; retry.\n"
# Checked against for an unknown user, so that a wrong name costs the time a wrong password does.
_NOBODY_HASH = b"$2b$10$k7w.Qh4JpTd.iVGommLnVey6KibgNNriHB7xe6cQG2miHOlu8N63O"
NO_STORE = {"Cache-Control": "no-store"}
# The pages' scripts send the token in this header (Authorization may carry a web config's basic-auth login).
TOKEN_HEADER = "X-Copilot-Otel-Token"


def new_token() -> str:
    """A fresh random token (256 bits)."""
    return secrets.token_urlsafe(32)


def host_allowed(header: str | None, allowed: tuple[str, ...] = ()) -> bool:
    """The Host header names this machine by an IP address or as localhost, or is one of ``allowed``."""
    if not header:
        return True  # no browser leaves Host out: nothing for a rebinding page to exploit
    if header.startswith("["):
        name = header[1:].split("]", 1)[0]
    else:
        name = header.rsplit(":", 1)[0] if header.count(":") == 1 else header
    name = name.lower().rstrip(".")
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        ipaddress.ip_address(name)
        return True
    except ValueError:
        pass
    return any(name == pattern or (pattern.startswith("*.") and name.endswith(pattern[1:])) for pattern in allowed)


class Gate:
    """The server's access middleware (``middleware``); ``token`` None: no view behind it, only the Host check.

    ``run_blocking`` runs a bcrypt check off the loop; ``count`` counts each refusal by reason.
    """

    def __init__(self, *, token: str | None, allowed_hosts: tuple[str, ...] = (),
                 web_config: WebConfig | None = None, run_blocking: Callable[..., Awaitable],
                 count: Callable[[str], None]) -> None:
        self._token = token.encode() if token is not None else None
        self._allowed = allowed_hosts
        config = web_config or WebConfig()
        self._users = config.users
        self._sans = set(config.allowed_sans)
        self._count = count
        self._logins = Logins(self._verify, run_blocking)

    @web.middleware
    async def middleware(self, request: web.Request, handler) -> web.StreamResponse:
        """Refuse what this caller may not see; let the rest through to ``handler``."""
        if _on_unix_socket(request):
            return await handler(request)
        if not host_allowed(request.headers.get("Host"), self._allowed):
            raise self._refuse("host_refused", web.HTTPForbidden, HOST_REFUSED)
        if self._sans and not _certificate_named(request, self._sans):
            raise self._refuse("unauthorized", web.HTTPForbidden, CERT_REFUSED)
        if self._users and not await self._logged_in(request):
            raise self._refuse("unauthorized", web.HTTPUnauthorized, NEEDS_LOGIN,
                               {"WWW-Authenticate": 'Basic realm="copilot-otel", charset="UTF-8"'})
        path = request.path
        if self._token is None or path in OPEN_PATHS or path.startswith(OPEN_PREFIXES):
            return await handler(request)
        if self._is_token(request.headers.get(TOKEN_HEADER) or _bearer(request)):
            return await handler(request)
        raise self._refuse("unauthorized", web.HTTPUnauthorized, NEEDS_TOKEN,
                           {"WWW-Authenticate": 'Bearer realm="copilot-otel"'})

    def _is_token(self, offered: str | None) -> bool:
        return (offered is not None and self._token is not None
                and hmac.compare_digest(offered.encode(errors="surrogateescape"), self._token))

    def _refuse(self, reason: str, kind: type[web.HTTPException], text: str,
                headers: dict | None = None) -> web.HTTPException:
        self._count(reason)
        return kind(text=text, headers={**NO_STORE, **(headers or {})})

    def _verify(self, user: str, password: str) -> bool:
        import bcrypt

        good = bcrypt.checkpw(password.encode(errors="surrogateescape"), self._users.get(user, _NOBODY_HASH))
        return good and user in self._users

    async def _logged_in(self, request: web.Request) -> bool:
        """Basic auth against the web config's bcrypt hashes, checked fairly between clients (logins.py)."""
        header = request.headers.get("Authorization", "")
        if header[:6].lower() != "basic ":
            return False
        try:
            user, sep, password = base64.b64decode(header[6:].strip(), validate=True).decode().partition(":")
        except ValueError:
            return False
        if not sep:
            return False
        try:
            return await self._logins.check(source_of(request.transport), user, password)
        except Busy:
            raise self._refuse("auth_busy", web.HTTPServiceUnavailable, BUSY, {"Retry-After": "1"}) from None


def _bearer(request: web.Request) -> str | None:
    header = request.headers.get("Authorization", "")
    return header[7:].strip() if header[:7].lower() == "bearer " else None


def _on_unix_socket(request: web.Request) -> bool:
    transport = request.transport
    sock = transport.get_extra_info("socket") if transport is not None else None
    return sock is not None and sock.family == socket.AF_UNIX


def _certificate_named(request: web.Request, allowed: set[str]) -> bool:
    transport = request.transport
    cert = transport.get_extra_info("peercert") if transport is not None else None
    if not cert:
        return False
    return any(value in allowed for _kind, value in cert.get("subjectAltName", ()))


# ------------------------------------------------------------------------ the token file


def token_file(state_dir: Path, port: int) -> Path:
    """Where the server on ``port`` keeps its token and URL."""
    return Path(state_dir) / f"web-{port}.json"


def write_token_file(path: Path, url: str, token: str) -> None:
    """Keep the token and the page's URL 0600 at ``path``, for `copilot-otel open` and scripts."""
    write_private(path, orjson.dumps({"url": url, "token": token, "pid": os.getpid()}, option=orjson.OPT_INDENT_2))


def read_token_file(path: Path) -> tuple[str, str]:
    """(url, token) from a token file that is this user's and no one else's, or a ConfigError saying why not."""
    try:
        fd = open_regular(path, follow=False)
    except FileNotFoundError:
        raise ConfigError(f"no {path}: is the daemon (or `view`) running on that port, with this --state-dir?") \
            from None
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror or exc}") from None
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
            raise ConfigError(f"{path} is not a private file of yours: not trusting it")
        try:
            document = orjson.loads(handle.read(64 * 1024))
            return str(document["url"]), str(document["token"])
        except (orjson.JSONDecodeError, KeyError, TypeError):
            raise ConfigError(f"{path} is damaged: restart the daemon to write it again") from None


def with_token(url: str, token: str) -> str:
    """The page's URL with the token in its fragment (which a browser keeps to itself and never sends)."""
    return f"{url}#token={token}"


def opener_file(state_dir: Path, port: int) -> Path:
    """Where `copilot-otel open` keeps the page that sends a browser to the server on ``port`` with its token."""
    return Path(state_dir) / f"open-{port}.html"


def write_opener(path: Path, url: str, token: str) -> None:
    """A 0600 page at ``path`` that sends the browser on to ``url`` with the token (as Jupyter's redirect file
    does): a browser is given this file's path, so the token is on no command line another user can read."""
    target = html.escape(with_token(url, token), quote=True)
    page = (f'<!doctype html><html lang="en"><head><meta charset="utf-8"><meta name="referrer" content="no-referrer">'
            f'<meta http-equiv="refresh" content="0;url={target}"><title>copilot-otel</title></head>'
            f'<body><p><a href="{target}">Open the copilot-otel view</a></p></body></html>\n')
    write_private(path, page.encode())
