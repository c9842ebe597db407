"""A setting's text parsed, or the error that says what is wrong with it and how to fix it."""

from __future__ import annotations

import re
from pathlib import Path


class ConfigError(ValueError):
    """A configuration problem, with a message that says how to fix it."""


def parse_int(variable: str, text: str) -> int:
    """A whole number, or a ConfigError naming ``variable``."""
    try:
        return int(text)
    except ValueError:
        raise ConfigError(f"{variable}={text!r} is not a whole number") from None


def parse_bool(variable: str, text: str) -> bool:
    """true/false (1/0, yes/no, on/off), or a ConfigError naming ``variable``."""
    lowered = text.lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise ConfigError(f"{variable}={text!r} is not true or false")


def parse_path(_variable: str, text: str) -> Path:
    """A path, with ~ expanded."""
    return Path(text).expanduser()


_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}
_DURATION = re.compile(r"(?:\d+(?:\.\d+)?[smhdw])+")
_PART = re.compile(r"(\d+(?:\.\d+)?)([smhdw])")
DURATION_HINT = "a duration (seconds, or such as 90s, 10m, 2h, 1d, 1h30m)"


def duration_seconds(text: str) -> float | None:
    """'1800', '90s', '10m', '2h', '1d', '1w', '1h30m' -> seconds; None if it is none of these. Every flag that takes
    a duration reads it so (and --since, as a time ago)."""
    cleaned = text.strip().lower()
    try:
        return float(cleaned)  # any number, even -5 or inf: the setting's own check says what it must be
    except ValueError:
        pass
    if not _DURATION.fullmatch(cleaned):
        return None
    return sum(float(number) * _UNITS[unit] for number, unit in _PART.findall(cleaned))


def parse_seconds(variable: str, text: str) -> float:
    """A duration (``duration_seconds``), or a ConfigError naming ``variable``."""
    seconds = duration_seconds(text)
    if seconds is None:
        raise ConfigError(f"{variable}={text!r} is not {DURATION_HINT}")
    return seconds
