"""copilot-otel: GitHub Copilot CLI session events as OpenTelemetry traces and Prometheus metrics.

The library's surface is ``attach`` and ``attach_async`` (copilot_otel.sdk): they are imported on first use, so
``import copilot_otel`` loads neither the SDK layer nor the daemon or the web server; type checkers see their
real signatures.

Public modules are this one, ``copilot_otel.sdk`` and ``copilot_otel.version``: each has an ``__all__``, and
only the names in it are public. Every other module is internal and may change without notice
(docs/contributing.md).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .version import __version__

if TYPE_CHECKING:
    from .sdk import Attachment, attach, attach_async

__all__ = ["Attachment", "__version__", "attach", "attach_async"]


def __getattr__(name: str) -> Any:
    """attach, attach_async and Attachment, from copilot_otel.sdk on first use."""
    if name in ("attach", "attach_async", "Attachment"):
        from . import sdk

        return getattr(sdk, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
