"""What the OTLP sinks of every signal share: one request per call within the request-size budget, what the
backend dropped of it said (rate-limited), and abort, sync and shutdown of the transport."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Generic, TypeVar

from ..base.logs import RateLimitedLog
from ..otlp.answers import Signal
from ..otlp.contract import Receipt, RejectedError
from ..otlp.limits import DEFAULT_MAX_REQUEST_BYTES
from ..otlp.settings import OtlpSettings
from ..otlp.transport import make_transport

R = TypeVar("R")  # what a request carries: SpanRecord, or model.logs.LogRecord


class OtlpRequestSink(Generic[R]):
    """Sends ``R``s over OTLP gRPC or HTTP/protobuf, one request of at most ``max_request_bytes`` per call; a
    subclass encodes them (:meth:`encode`) and names them in the plural (``noun``: spans, log records)."""

    noun = "records"

    def __init__(self, settings: OtlpSettings, signal: Signal, *,
                 max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES) -> None:
        if not settings.endpoint:
            raise ValueError(f"{type(self).__name__} needs an endpoint")
        self.max_request_bytes = max_request_bytes
        self._transport = make_transport(settings, signal)
        self.description = self._transport.description
        self._said = RateLimitedLog(logging.getLogger(type(self).__module__), burst=5, what="partial successes")

    def encode(self, records: Sequence[R]) -> bytes:
        """The serialized request that carries ``records``."""
        raise NotImplementedError

    def export(self, records: Sequence[R]) -> Receipt:
        """Send one request; what the backend dropped of it (a Receipt), or raise ExportError (retry later) or
        RejectedError (never accepted as it is)."""
        if not records:
            return Receipt()
        try:
            payload = self.encode(records)
        except Exception as exc:  # noqa: BLE001 - a value protobuf refuses: it can never go
            raise RejectedError(f"cannot encode {len(records)} {self.noun[:-1]}(s) for OTLP: {exc}") from None
        if len(payload) > self.max_request_bytes:
            raise RejectedError(f"a request of {len(payload)} bytes is over the {self.max_request_bytes}-byte "
                                "budget (--max-request-bytes)", too_large=True)
        receipt = self._transport.send(payload)
        if receipt.rejected:
            self._said.warning("%s accepted a request but dropped %d of its %d %s (it does not say which): %s",
                               self.description, receipt.rejected, len(records), self.noun,
                               receipt.message or "no reason given")
        elif receipt.message:
            self._said.warning("%s accepted a request with a warning: %s", self.description, receipt.message)
        return receipt

    def abort(self) -> None:
        """End the request in flight now (it fails with an ExportError)."""
        self._transport.abort()

    def sync(self) -> None:
        """Nothing is buffered here."""

    def shutdown(self) -> None:
        """Close the channel or session (a request in flight is abandoned)."""
        self._transport.close()
