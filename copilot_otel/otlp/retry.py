"""The one retry policy of every OTLP export: the daemon's queue, replay, and the metrics push.

Pure: an attempt's failure in, how long to wait out. Following the OTLP specification's "Retry":

- a failure the specification calls retryable (no connection, a timeout, HTTP 429/502/503/504, gRPC
  UNAVAILABLE, RESOURCE_EXHAUSTED with RetryInfo, ...) waits an exponential backoff with *full jitter*
  (a uniform draw between 0 and the backoff), so that many daemons that lost the same gateway come
  back spread out, not in step;
- a server's own delay, HTTP ``Retry-After`` (seconds or an HTTP date) or gRPC ``RetryInfo``, is
  honoured as given, up to ``max_hint`` seconds: a backend that says 999999 s does not stall an export
  for days, and the waits stay interruptible (stop, ``--give-up-after``);
- a failure the specification calls not retryable that is no refusal of the data (401, 403, 404, 500,
  UNIMPLEMENTED: the destination or its credentials are wrong) is not dropped: the spans stay behind the
  checkpoint, and the export asks again at the longest backoff only, so that fixing the setting loses
  nothing and a wrong endpoint is not hammered. Data the backend refuses for good (HTTP 400/413/422, gRPC
  INVALID_ARGUMENT) never reaches the policy: it is dead-lettered or split (contract.RejectedError).
"""

from __future__ import annotations

import email.utils
import random
import time
from collections.abc import Callable

from msgspec import Struct

from .contract import ExportError

INITIAL = 0.5  # the first backoff's ceiling, seconds
MAXIMUM = 30.0  # the backoff's ceiling never grows past this
MAX_HINT = 300.0  # a server's Retry-After / RetryInfo is honoured up to this
RETRY_INFO = "google.rpc.retryinfo-bin"  # gRPC's trailing metadata key of a google.rpc.RetryInfo


class RetryPolicy(Struct, frozen=True):
    """Exponential backoff with full jitter from ``initial`` to ``maximum`` seconds; a server's delay honoured up
    to ``max_hint``."""

    initial: float = INITIAL
    maximum: float = MAXIMUM
    max_hint: float = MAX_HINT

    def delay(self, failures: int, error: BaseException | None, draw: Callable[[], float] = random.random) -> float:
        """Seconds to wait after the ``failures``-th failure in a row (1 for the first) of this kind of ``error``.

        ``draw``: a uniform number in [0, 1) (the jitter; tests hand in their own)."""
        hint = getattr(error, "retry_after", None)
        if hint is not None:
            return min(max(0.0, hint), self.max_hint)
        ceiling = self.maximum
        if getattr(error, "retryable", True):
            ceiling = min(self.maximum, self.initial * 2.0 ** min(max(0, failures - 1), 62))
            return ceiling * draw()
        return ceiling * (0.5 + 0.5 * draw())  # not retryable: ask again slowly, still spread out


class Backoff:
    """One run of failures under a policy: ``next(error)`` is the wait after each, ``reset()`` after a success."""

    def __init__(self, policy: RetryPolicy = RetryPolicy(), *, draw: Callable[[], float] = random.random) -> None:
        self.policy = policy
        self.failures = 0
        self._draw = draw

    def next(self, error: BaseException | None) -> float:
        """The wait before the next attempt, ``error`` having just failed this one."""
        self.failures += 1
        return self.policy.delay(self.failures, error, self._draw)

    def reset(self) -> None:
        """A delivery: the next failure starts from the first backoff again."""
        self.failures = 0


def retry_after_seconds(value: str, *, now: Callable[[], float] = time.time) -> float | None:
    """HTTP ``Retry-After`` (RFC 9110 10.2.3): delay-seconds or an HTTP date, as seconds from now; None if it is
    neither (a header that lies in its form is ignored, the backoff applies)."""
    text = value.strip()
    if text.isdigit():
        return float(min(int(text), 10**9))
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if when is None or when.tzinfo is None:
        return None
    return max(0.0, when.timestamp() - now())


def retry_info_seconds(trailing_metadata) -> float | None:
    """gRPC's ``google.rpc.RetryInfo`` (trailing metadata ``google.rpc.retryinfo-bin``) as seconds; None when
    there is none or it does not decode."""
    for key, value in trailing_metadata or ():
        if key != RETRY_INFO:
            continue
        try:
            from google.protobuf.message import DecodeError
            from google.rpc.error_details_pb2 import RetryInfo

            delay = RetryInfo.FromString(value).retry_delay
        except (DecodeError, TypeError, ValueError):
            return None
        return max(0.0, delay.seconds + delay.nanos / 1e9)
    return None


def retry_wait_reason(error: ExportError, seconds: float) -> str:
    """What a log line says of a wait: the server's word for it when it gave one."""
    said = " (as the backend asked)" if getattr(error, "retry_after", None) is not None else ""
    return f"retrying in {seconds:.1f} s{said}"
