"""copilot-otel: GitHub Copilot CLI session events as OpenTelemetry traces and Prometheus metrics."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .version import __version__

if TYPE_CHECKING:  # the SDK layer is imported on first use: `import copilot_otel` stays cheap
    from .sdk import Attachment

__all__ = ["__version__", "attach", "attach_async"]


def attach(session: Any, **options: Any) -> Attachment:
    """Observe a live github-copilot-sdk session (see copilot_otel.sdk.attach)."""
    from .sdk import attach as _attach

    return _attach(session, **options)


async def attach_async(session: Any, **options: Any) -> Attachment:
    """attach(), then catch up on the session's earlier events (see copilot_otel.sdk.attach_async)."""
    from .sdk import attach_async as _attach_async

    return await _attach_async(session, **options)
