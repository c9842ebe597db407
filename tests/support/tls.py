"""Real certificates for TLS tests, made with the openssl command: a CA, a server and client certificates."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path


def _openssl(*args: str, cwd: Path) -> None:
    binary = shutil.which("openssl")
    if binary is None:
        raise AssertionError("the openssl command is missing (Debian's openssl package)")
    done = subprocess.run([binary, *args], cwd=cwd, capture_output=True, timeout=60)
    if done.returncode != 0:
        raise AssertionError(f"openssl {' '.join(args)}: {done.stderr.decode(errors='replace')}")


def make_ca(folder: Path, name: str = "ca") -> tuple[Path, Path]:
    """A self-signed CA in ``folder``: (its certificate, its key)."""
    folder.mkdir(parents=True, exist_ok=True)
    _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-days", "2",
             "-subj", f"/CN=copilot-otel test {name}", "-keyout", f"{name}.key", "-out", f"{name}.crt", cwd=folder)
    return folder / f"{name}.crt", folder / f"{name}.key"


def make_cert(folder: Path, name: str, ca: tuple[Path, Path], sans: str, usage: str) -> tuple[Path, Path]:
    """A certificate signed by ``ca`` for ``sans`` (e.g. 'IP:127.0.0.1,DNS:localhost'); usage serverAuth or
    clientAuth: (certificate, key)."""
    _openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-subj", f"/CN={name}",
             "-keyout", f"{name}.key", "-out", f"{name}.csr", cwd=folder)
    (folder / f"{name}.ext").write_text(f"subjectAltName={sans}\nextendedKeyUsage={usage}\n")
    _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", str(ca[0]), "-CAkey", str(ca[1]), "-CAcreateserial",
             "-days", "2", "-extfile", f"{name}.ext", "-out", f"{name}.crt", cwd=folder)
    return folder / f"{name}.crt", folder / f"{name}.key"


def self_signed(folder: Path) -> tuple[Path, Path]:
    """(certificate, key) PEM files of a self-signed certificate for 127.0.0.1 in ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-days", "1",
             "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", "key.pem",
             "-out", "cert.pem", cwd=folder)
    return folder / "cert.pem", folder / "key.pem"
