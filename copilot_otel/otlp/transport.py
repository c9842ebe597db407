"""One OTLP request within one deadline, over HTTP/protobuf or gRPC; what came back is judged by otlp_answers.

The OTLP timeout (OTEL_EXPORTER_OTLP_(<SIGNAL>_)TIMEOUT) bounds the whole request: connecting,
sending and receiving. ``requests`` and urllib3 apply a timeout to each socket operation, so a
backend that sends its headers and then a byte every few seconds never timed out there; here aiohttp
runs on an event loop of its own thread and each request runs under one ``asyncio.timeout``. gRPC's
``timeout=`` is a deadline on the whole call already. ``abort()`` ends the requests in flight at once
(the daemon is stopping): they fail with an ExportError, so nothing they carried counts as delivered.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import gzip
import os
import ssl
import threading
from typing import Any
from urllib.parse import urlparse

from msgspec.structs import replace

from ..base.redact import redact_url
from ..base.regular_files import read_regular
from ..version import __version__
from .answers import MAX_ANSWER_BYTES, PROTOBUF, HttpAnswer, Signal, grpc_error, http_answer, quote, receipt_of
from .contract import ExportError, Receipt
from .retry import RETRY_INFO, retry_info_seconds
from .settings import ENV_OTLP_ENDPOINT, OtlpSettings

USER_AGENT = f"copilot-otel/{__version__}"
CLOSE_WAIT = 2.0  # seconds for the HTTP session and its loop to close


class _InFlight:
    """The futures of the requests in flight, so that abort() can end them."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._futures: set[Any] = set()

    def add(self, future: Any) -> None:
        with self._lock:
            self._futures.add(future)

    def discard(self, future: Any) -> None:
        with self._lock:
            self._futures.discard(future)

    def cancel(self) -> None:
        with self._lock:
            futures, self._futures = list(self._futures), set()
        for future in futures:
            future.cancel()


def _abandoned(where: str) -> ExportError:
    return ExportError(f"OTLP export to {where} abandoned: stopping before it was answered")


def connection_problem(exc: BaseException) -> str:
    """What went wrong in reaching an HTTP endpoint, in our words (aiohttp's "Cannot connect to host h:p
    ssl:default [...]" names TLS settings even for a plain http:// URL)."""
    import socket

    import aiohttp

    if isinstance(exc, aiohttp.ClientConnectorError):
        where, cause = f"{exc.host}:{exc.port}", exc.os_error
        if isinstance(exc, aiohttp.ClientConnectorCertificateError):
            return f"the TLS certificate of {where} is not trusted ({exc.certificate_error})"
        if isinstance(exc, aiohttp.ClientConnectorSSLError):
            return f"the TLS handshake with {where} failed ({cause})"
        if isinstance(exc, aiohttp.ClientConnectorDNSError) or isinstance(cause, socket.gaierror):
            return f"cannot find the host {exc.host} (its name does not resolve: {cause.strerror or cause})"
        if isinstance(cause, ConnectionRefusedError):
            return f"nothing listens on {where} (connection refused)"
        reason = cause.strerror if isinstance(cause, OSError) and cause.strerror else str(cause)
        return f"cannot connect to {where} ({reason})"
    if isinstance(exc, aiohttp.ServerDisconnectedError):
        return "the server closed the connection before it answered"
    return str(exc) or type(exc).__name__


class HttpTransport:
    """POST to an OTLP/HTTP endpoint with aiohttp (keep-alive, proxies from the environment)."""

    def __init__(self, settings: OtlpSettings, endpoint: str, signal: Signal) -> None:
        self.endpoint, self.signal, self.timeout = endpoint, signal, settings.timeout
        self.description = f"{redact_url(endpoint)} ({settings.protocol})"
        self._headers = {"Content-Type": PROTOBUF, "User-Agent": USER_AGENT, **dict(settings.headers)}
        self._gzip = settings.compression == "gzip"
        if self._gzip:
            self._headers["Content-Encoding"] = "gzip"
        self._ssl = _ssl_context(settings) if urlparse(endpoint).scheme == "https" else None
        self._inflight = _InFlight()
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None  # started by the first request, so that a replay
        self._thread: threading.Thread | None = None  # forks its workers before any thread runs
        self._session: Any = None
        self._closed = False

    def _started(self) -> asyncio.AbstractEventLoop:
        """The loop the requests run on, its thread and session started on first use."""
        with self._lock:
            if self._closed:
                raise ExportError(f"OTLP export to {self.description} failed: the exporter was shut down")
            if self._loop is None:
                loop = asyncio.new_event_loop()
                self._thread = threading.Thread(target=loop.run_forever, name=f"copilot-otel-otlp-{self.signal.name}",
                                                daemon=True)
                self._thread.start()
                self._session = asyncio.run_coroutine_threadsafe(self._open(), loop).result()
                self._loop = loop
            return self._loop

    async def _open(self) -> Any:
        import aiohttp

        return aiohttp.ClientSession(trust_env=True,
                                     connector=aiohttp.TCPConnector(ssl=self._ssl if self._ssl is not None else True))

    def send(self, payload: bytes, timeout: float | None = None) -> Receipt:
        """Send one request (within ``timeout`` seconds, at most the OTLP timeout); what the answer means."""
        import aiohttp

        seconds = self.timeout if timeout is None else max(0.001, min(timeout, self.timeout))
        body = gzip.compress(payload, compresslevel=6) if self._gzip else payload
        loop = self._started()
        future = asyncio.run_coroutine_threadsafe(self._post(body, seconds), loop)
        self._inflight.add(future)
        try:
            answer = future.result()
        except concurrent.futures.CancelledError:
            raise _abandoned(self.description) from None
        except TimeoutError:
            raise ExportError(f"OTLP export to {self.description} failed: no answer within the OTLP timeout of "
                              f"{seconds:g} s (OTEL_EXPORTER_OTLP_TIMEOUT)", reason="timeout") from None
        except (aiohttp.ClientError, OSError, ValueError) as exc:
            raise ExportError(f"OTLP export to {self.description} failed: {quote(connection_problem(exc))}",
                              reason="unreachable") from None
        finally:
            self._inflight.discard(future)
        return http_answer(answer, self.signal, self.description)

    async def _post(self, body: bytes, seconds: float) -> HttpAnswer:
        async with asyncio.timeout(seconds):
            async with self._session.post(self.endpoint, data=body, headers=self._headers,
                                          allow_redirects=False) as response:
                data = await response.content.read(MAX_ANSWER_BYTES + 1)
                while data and len(data) <= MAX_ANSWER_BYTES:
                    more = await response.content.read(MAX_ANSWER_BYTES + 1 - len(data))
                    if not more:
                        break
                    data += more
                return HttpAnswer(response.status, response.reason or "", response.headers.get("Content-Type", ""),
                                  data[:MAX_ANSWER_BYTES], response.headers.get("Location", ""),
                                  truncated=len(data) > MAX_ANSWER_BYTES,
                                  retry_after=response.headers.get("Retry-After", ""))

    def abort(self) -> None:
        """End the requests in flight now."""
        self._inflight.cancel()

    def close(self) -> None:
        """Abort what is in flight, close the session and stop the loop's thread."""
        self.abort()
        with self._lock:
            self._closed = True
            loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        if not loop.is_closed() and thread.is_alive():
            try:
                asyncio.run_coroutine_threadsafe(self._session.close(), loop).result(CLOSE_WAIT)
            except (concurrent.futures.TimeoutError, RuntimeError):
                pass  # the thread is a daemon: a session that will not close does not hold the exit
            loop.call_soon_threadsafe(loop.stop)
            thread.join(CLOSE_WAIT)
        if not thread.is_alive() and not loop.is_closed():
            loop.close()


def _ssl_context(settings: OtlpSettings) -> ssl.SSLContext:
    """The system's trust store, or OTEL_EXPORTER_OTLP_CERTIFICATE; a client certificate when one is set."""
    context = ssl.create_default_context(cafile=str(settings.certificate) if settings.certificate else None)
    if settings.client_certificate:
        context.load_cert_chain(str(settings.client_certificate),
                                str(settings.client_key) if settings.client_key else None)
    return context


MAX_PEM_BYTES = 1 << 20  # a certificate bundle, a key


def _read(path) -> bytes | None:
    if path is None:
        return None
    return read_regular(path, MAX_PEM_BYTES)


class GrpcTransport:
    """The signal's Export call on one channel; the request goes as the bytes already encoded."""

    def __init__(self, settings: OtlpSettings, endpoint: str, signal: Signal) -> None:
        import grpc

        self._grpc = grpc
        self.signal, self.timeout = signal, settings.timeout
        self.description = f"{redact_url(endpoint)} ({settings.protocol})"
        parsed = urlparse(endpoint)
        target = parsed.netloc or endpoint
        insecure = settings.insecure if settings.insecure is not None else parsed.scheme == "http"
        if parsed.scheme == "https":
            insecure = False
        options = [("grpc.primary_user_agent", USER_AGENT),
                   # reconnect soon after an outage (gRPC's own backoff grows to two minutes)
                   ("grpc.initial_reconnect_backoff_ms", 500), ("grpc.max_reconnect_backoff_ms", 5000)]
        compression = grpc.Compression.Gzip if settings.compression == "gzip" else grpc.Compression.NoCompression
        if insecure:
            self._channel = grpc.insecure_channel(target, options=options, compression=compression)
        else:
            credentials = grpc.ssl_channel_credentials(_read(settings.certificate), _read(settings.client_key),
                                                       _read(settings.client_certificate))
            self._channel = grpc.secure_channel(target, credentials, options=options, compression=compression)
        self._call: grpc.UnaryUnaryMultiCallable[bytes, Any] = self._channel.unary_unary(
            signal.method, request_serializer=None, response_deserializer=signal.response.FromString)
        self._metadata = tuple((key.lower(), value) for key, value in settings.headers)
        self._inflight = _InFlight()

    def send(self, payload: bytes, timeout: float | None = None) -> Receipt:
        """Send one request (gRPC's deadline: ``timeout`` seconds, at most the OTLP timeout); what the answer means."""
        grpc = self._grpc
        seconds = self.timeout if timeout is None else max(0.001, min(timeout, self.timeout))
        future = self._call.future(payload, metadata=self._metadata, timeout=seconds)
        self._inflight.add(future)
        try:
            response = future.result()
        except grpc.FutureCancelledError:
            raise _abandoned(self.description) from None
        except grpc.RpcError as exc:
            code = exc.code() if callable(getattr(exc, "code", None)) else None
            if code == grpc.StatusCode.CANCELLED and future.cancelled():
                raise _abandoned(self.description) from None
            details = exc.details() if callable(getattr(exc, "details", None)) else ""
            trailing = _trailing(exc)
            raise grpc_error(getattr(code, "name", str(code)), details or "",
                             retry_info=any(key == RETRY_INFO for key, _value in trailing),
                             retry_after=retry_info_seconds(trailing), where=self.description,
                             timeout=seconds) from None
        finally:
            self._inflight.discard(future)
        return receipt_of(response, self.signal)

    def abort(self) -> None:
        """End the calls in flight now."""
        self._inflight.cancel()

    def close(self) -> None:
        """Close the channel (which cancels any call still in flight)."""
        self._inflight.cancel()
        self._channel.close()


def _trailing(exc) -> tuple:
    """A failed call's trailing metadata, () when it has none."""
    try:
        return tuple(exc.trailing_metadata() or ())
    except Exception:  # noqa: BLE001 - no trailing metadata on this error, whatever kind of error it is
        return ()


def make_transport(settings: OtlpSettings, signal: Signal) -> HttpTransport | GrpcTransport:
    """The transport the settings name; over HTTP the generic endpoint is a base URL (the signal's path is
    added), the signal's own endpoint variable is used as given."""
    endpoint = settings.endpoint
    if not endpoint:
        raise ValueError("an OTLP transport needs an endpoint")
    own = bool(os.environ.get(signal.endpoint_variable))
    if not own:  # hints name the variable in use
        signal = replace(signal, endpoint_variable=ENV_OTLP_ENDPOINT)
    if settings.protocol == "grpc":
        return GrpcTransport(settings, endpoint, signal)
    if not own:
        endpoint = endpoint.rstrip("/") + "/" + signal.path
    return HttpTransport(settings, endpoint, signal)
