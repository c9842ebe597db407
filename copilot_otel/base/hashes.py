"""The two hashes of the project, each from where it costs least.

- BLAKE2b (span ids, log fingerprints, ledger names): CPython's builtin ``_blake2``, which is what
  ``hashlib.blake2b`` is; ``import hashlib`` first loads the OpenSSL bindings (``_hashlib``: about 12 M
  instructions, 1 % of a replay) only to hand it out.
- CRC-32 (a log's content identity, continued over every byte the tail reads): zlib-ng's, the standard CRC-32
  (the same values as ``zlib.crc32``) at an eighth of zlib 1.2's instructions a byte.
"""

from zlib_ng.zlib_ng import crc32

try:
    from _blake2 import blake2b
except ImportError:  # an interpreter without CPython's builtin module
    from hashlib import blake2b

__all__ = ["blake2b", "crc32"]
