"""BLAKE2b, as ``hashlib.blake2b`` is: CPython's builtin ``_blake2`` module.

``import hashlib`` first loads the OpenSSL bindings (``_hashlib``: about 12 M instructions, 1 % of a
replay), only to hand out ``_blake2.blake2b`` for this name. Span ids, log fingerprints and ledger
names need nothing else of it.
"""

try:
    from _blake2 import blake2b
except ImportError:  # an interpreter without CPython's builtin module
    from hashlib import blake2b

__all__ = ["blake2b"]
