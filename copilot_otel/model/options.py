"""What the session model takes from the configuration (config.py builds it from flags and environment)."""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_CONTENT_MAX_CHARS = 4096


@dataclass(frozen=True, slots=True)
class ModelOptions:
    """What the session model needs from the configuration: content capture and its length."""

    capture_content: bool = False
    content_max_chars: int = DEFAULT_CONTENT_MAX_CHARS
