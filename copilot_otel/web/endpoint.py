"""The HTTP endpoint as `run` and `view` open it: a fresh token, the access settings, the URL they give.

The token is made at each start and kept 0600 in the state folder (``web-<port>.json``, with
the page's URL), where `copilot-otel open` and scripts read it. The URL with the token is said
only on a terminal, never in the log: a service's log (journald, a container's) is read by more
people than the user, and a token in it would outlive the moment; `copilot-otel open` is the way in.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable, Iterable
from pathlib import Path

from prometheus_client import CollectorRegistry

from ..base.private_files import private_dir
from ..base.redact import hide
from ..config import Config
from .access import new_token, opener_file, token_file, with_token, write_token_file
from .server import MetricsServer
from .webconfig import WebConfig, load_web_config

log = logging.getLogger(__name__)


class Endpoint:
    """A MetricsServer with the view's token, ``config``'s Host names and web config; ``start``/``stop``."""

    def __init__(self, config: Config, registry: CollectorRegistry, routes: Iterable = (), *,
                 health: Callable[[], tuple[bool, str]] | None = None, unix_socket: Path | None = None,
                 web_config: WebConfig | None = None, address_flag: str = "--metrics-address") -> None:
        web_config = web_config or web_config_of(config)
        self.token = new_token()
        hide(self.token)  # out of every log line, whatever carries it (base/redact.py)
        self.server = MetricsServer(config.metrics_address, registry, health, routes=routes, token=self.token,
                                    allowed_hosts=config.allowed_hosts, web_config=web_config,
                                    unix_socket=unix_socket, address_flag=address_flag)
        host, port = self.server.address
        scheme = "https" if web_config is not None and web_config.tls is not None else "http"
        self.base = f"{scheme}://{_reachable(host)}:{port}"
        self.token_path = token_file(config.state_dir, port)
        self._state_dir = config.state_dir

    @property
    def url(self) -> str:
        """The sessions page, without its token."""
        return self.base + "/"

    def shown_url(self) -> str:
        """The page's URL as the start-up log line says it: without the token (a log outlives the moment)."""
        return f"{self.url} (`copilot-otel open` opens it with its token)"

    def say_url(self) -> None:
        """On a terminal, the page's URL with its token (as Jupyter prints its own): written there, never logged."""
        if sys.stderr.isatty():
            print(f"copilot-otel: the view with its token: {with_token(self.url, self.token)}", file=sys.stderr,
                  flush=True)

    def start(self) -> None:
        """Write the token file, then serve (the port is bound already): whoever sees /healthz answer finds it."""
        try:
            private_dir(self._state_dir)
            write_token_file(self.token_path, self.url, self.token)
        except OSError as exc:
            log.warning("cannot keep the view's token in %s (%s): `copilot-otel open` will not find it",
                        self.token_path, exc.strerror or exc)
        try:
            self.server.start()
        except BaseException:
            self.token_path.unlink(missing_ok=True)
            raise

    def stop(self) -> None:
        """Stop serving and remove the token file (its token dies with this server)."""
        self.server.stop()
        self.token_path.unlink(missing_ok=True)
        opener_file(self._state_dir, self.server.address[1]).unlink(missing_ok=True)


def web_config_of(config: Config) -> WebConfig | None:
    """The --web-config-file read and checked (a ConfigError says what is wrong), or None without one."""
    return load_web_config(config.web_config_file) if config.web_config_file is not None else None


def _reachable(host: str) -> str:
    """The address a local browser uses to reach a server bound to ``host``."""
    if host in ("0.0.0.0", ""):
        return "127.0.0.1"
    if host == "::":
        return "[::1]"
    return f"[{host}]" if ":" in host else host
