"""What the records (msgspec structs) share beyond msgspec."""

from __future__ import annotations

from msgspec import Struct


def repr_without(record: Struct, hidden: str) -> str:
    """``record``'s repr, every field in order but ``hidden``: a payload or a secret that must not reach a log
    through a repr (a dataclass said this with ``field(repr=False)``)."""
    shown = ", ".join(f"{name}={getattr(record, name)!r}" for name in record.__struct_fields__ if name != hidden)
    return f"{type(record).__qualname__}({shown})"
