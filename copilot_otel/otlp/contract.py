"""The sink contract: where finished spans go (``SpanSink``), and what a delivery can say.

A sink raises :class:`ExportError` when delivery failed and may succeed later (the export
queue retries), and :class:`RejectedError` when the destination refused the spans for good:
too large a request (split it) or spans it cannot accept (dead-lettered). A delivery may come with
a :class:`Receipt`: spans the destination accepted and dropped all the same (OTLP partial success).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, TypeVar, runtime_checkable

from msgspec import Struct

from ..model.records import SpanRecord
from .json_encoder import OtlpJsonEncoder


class ExportError(RuntimeError):
    """Spans could not be delivered to their destination now; a later attempt may succeed.

    ``retryable``: the OTLP specification calls the failure retryable (an outage, throttling); False when the
    destination or its credentials look wrong (asked again only slowly, see retry.py). ``retry_after``: the
    seconds the backend asked to wait (HTTP Retry-After, gRPC RetryInfo), if it did. ``reason``: the failure in
    one word of a small set, for a metric label: a gRPC status (``unimplemented``), an HTTP one (``http_404``),
    ``timeout``, ``unreachable``, ``not_otlp`` (an answer that is none), or ``error``.
    """

    def __init__(self, message: str, *, retryable: bool = True, retry_after: float | None = None,
                 reason: str = "error") -> None:
        super().__init__(message)
        self.retryable = retryable
        self.retry_after = retry_after
        self.reason = reason


class RejectedError(ExportError):
    """The destination refused these spans for good: retrying the same request cannot succeed.

    ``too_large``: the request was over a size limit (ours or the backend's): its halves may pass.
    """

    def __init__(self, message: str, *, too_large: bool = False, reason: str = "refused") -> None:
        super().__init__(message, reason=reason)
        self.too_large = too_large


class Receipt(Struct, frozen=True):
    """What the destination said of a request it accepted: how many of its items it dropped all the same
    (OTLP partial success; it does not say which) and its message (sent alone, it is a warning)."""

    rejected: int = 0
    message: str = ""


R_contra = TypeVar("R_contra", contravariant=True)


class RecordSink(Protocol[R_contra]):
    """Where finished records go (spans, log records): as SpanSink says for spans."""

    description: str

    def export(self, records: Sequence[R_contra]) -> Receipt | None: ...

    def sync(self) -> None: ...

    def shutdown(self) -> None: ...


class SpanSink(Protocol):
    """Where finished spans go. ``export`` raises ExportError when delivery failed, and may return a Receipt.

    A sink that waits on a network may also have ``abort()``: end the request in flight now (the
    daemon stops), which then fails with an ExportError."""

    description: str

    def export(self, records: Sequence[SpanRecord]) -> Receipt | None: ...

    def sync(self) -> None: ...

    def shutdown(self) -> None: ...


@runtime_checkable
class EncodingSink(SpanSink, Protocol):
    """A sink that also takes requests encoded beforehand by its ``encoder`` (a file): replay's workers encode
    the spans for it, and the parent hands it whole lines. ``fresh``: nothing was written there before."""

    encoder: OtlpJsonEncoder
    fresh: bool

    def write_encoded(self, lines: bytes) -> None: ...
