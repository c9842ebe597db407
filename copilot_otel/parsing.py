"""A setting's text parsed, or the error that says what is wrong with it and how to fix it."""

from __future__ import annotations

from pathlib import Path


class ConfigError(ValueError):
    """A configuration problem, with a message that says how to fix it."""


def parse_float(variable: str, text: str) -> float:
    """A number, or a ConfigError naming ``variable``."""
    try:
        return float(text)
    except ValueError:
        raise ConfigError(f"{variable}={text!r} is not a number") from None


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
