"""`copilot-otel run`: the daemon with its HTTP endpoint (metrics, health, the web view) and, when
asked, the OTLP metrics push; stopped by SIGTERM/SIGINT; its exit code."""

from __future__ import annotations

import logging
import os
import signal
import sqlite3
import sys
from typing import TYPE_CHECKING

from ..config import Config, ConfigError
from ..state.checkpoint import CheckpointError
from .daemon import Daemon

if TYPE_CHECKING:  # the OTel SDK is imported only when the push is on
    from ..metrics.otlp_push import MetricsPusher

log = logging.getLogger("copilot_otel.daemon")  # its lines read as the daemon's, as before

# At SIGTERM the final metrics push gets this long at most (after at most 5 s flushing the trace queue),
# so that a backend that never answers cannot hold the stop up to systemd's TimeoutStopSec (30 s).
FINAL_PUSH_TIMEOUT = 5.0
SWITCH_INTERVAL = 0.0005  # s
CA_FILE_VARIABLE = "SSL_CERT_FILE"  # OpenSSL's: the CA bundle a default TLS context loads


def run_daemon(config: Config) -> int:
    """`copilot-otel run`: start, serve until SIGTERM/SIGINT, flush, exit 0."""
    if config.otlp.endpoint is None and config.metrics_otlp is None:  # no HTTP request leaves this daemon
        _import_aiohttp_without_ca_bundle()
    from ..catalog.cache import Catalog
    from ..web.endpoint import Endpoint, web_config_of
    from ..web.overview import DaemonSessions
    from ..web.routes import WebView
    try:
        web_config = web_config_of(config)  # a bad file is said before anything starts
        daemon = Daemon(config, own_gc=True)
        catalog = Catalog(daemon.root, cache_file=config.summary_cache, max_line_bytes=config.max_line_bytes)
        # The page says why it shows no session: a problem /healthz answers 503 for, or that it waits for the
        # Copilot CLI's first run (200 there).
        view = WebView(DaemonSessions(config, lambda: daemon.published, catalog=catalog,
                                      problem=lambda: daemon.discoverer.problem() or daemon.discoverer.waiting()),
                       trace_url=config.trace_url, budgets=config.budgets, resource=daemon.resource)
        # The socket is made while the daemon holds the state folder's lock: one daemon, one socket.
        endpoint = Endpoint(config, daemon.metrics.registry, view.routes(), health=daemon.health,
                            unix_socket=config.daemon_socket, web_config=web_config)
    except ConfigError as exc:
        log.error("%s", exc)
        return 2
    except (OSError, sqlite3.Error, CheckpointError) as exc:
        log.error("cannot start: %s", exc)
        return 2
    # A thread that wakes (a request, a render, the exporter) waits this long at most for the GIL while the
    # reader is busy (Python's default 5 ms made a /metrics request that takes the GIL dozens of times wait
    # 100-200 ms behind a flood; issue 25). Threads that do not compete pay nothing.
    sys.setswitchinterval(SWITCH_INTERVAL)
    signal.signal(signal.SIGTERM, daemon.request_stop)
    signal.signal(signal.SIGINT, daemon.request_stop)
    endpoint.start()
    log.info("following %s; metrics on %s/metrics, sessions on %s; traces to %s", daemon.root, endpoint.base,
             endpoint.shown_url(), daemon.sink.description)
    endpoint.say_url()
    pusher = _start_push(config, daemon)
    try:
        daemon.run()
    finally:
        endpoint.stop()
        if pusher is not None:
            pusher.stop(timeout=FINAL_PUSH_TIMEOUT)
    log.info("stopped")
    return 0


def _start_push(config: Config, daemon: Daemon) -> MetricsPusher | None:
    """The OTLP metrics push, started (OTEL_METRICS_EXPORTER=otlp: the OTel SDK is imported only then), or None."""
    if config.metrics_otlp is None:
        return None
    from ..metrics.otlp_push import start_pushing

    pusher = start_pushing(config.metrics_otlp, daemon.metrics.registry, daemon.metrics.genai,
                           resource=daemon.resource, on_result=daemon.metrics.metrics_pushed,
                           starts=daemon.metrics.resumed_starts)
    daemon.metrics_push = pusher
    return pusher


def _import_aiohttp_without_ca_bundle() -> None:
    """Import aiohttp (the server's) for a daemon whose client makes no request: no OTLP exporter.

    Importing aiohttp makes the TLS contexts of its client, each loading the system's CA bundle: 0.47 G
    instructions, about 150 ms of each start (issue 25), for contexts only the client's requests use. OpenSSL's
    default bundle (SSL_CERT_FILE, read as a context is made) is an empty one meanwhile; the server's own TLS
    (--web.config.file) names its files and never reads the default."""
    if "aiohttp" in sys.modules:
        return
    before = os.environ.get(CA_FILE_VARIABLE)
    os.environ[CA_FILE_VARIABLE] = os.devnull
    try:
        import aiohttp  # noqa: F401
    finally:
        if before is None:
            del os.environ[CA_FILE_VARIABLE]
        else:
            os.environ[CA_FILE_VARIABLE] = before
