"""A self-signed certificate for 127.0.0.1, made by the openssl command, for TLS servers in tests."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest


def self_signed(folder: Path) -> tuple[Path, Path]:
    """(certificate, key) PEM files for 127.0.0.1 in ``folder``; the test is skipped without openssl."""
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("openssl is missing: cannot make a certificate for a TLS server")
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run([openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert),
                    "-days", "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
                   check=True, capture_output=True, timeout=60)
    return cert, key
