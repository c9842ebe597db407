"""What the session model takes from the configuration (config.py builds it from flags and environment)."""

from __future__ import annotations

from msgspec import Struct

DEFAULT_CONTENT_MAX_CHARS = 4096


class ModelOptions(Struct, frozen=True):
    """What the session model needs from the configuration: content capture and its length, and whether it makes
    log records of the events (logs.py) for a logs exporter."""

    capture_content: bool = False
    content_max_chars: int = DEFAULT_CONTENT_MAX_CHARS
    logs: bool = False
