"""service.py: a daemon with no OTLP exporter imports aiohttp (its server) without the CA bundle that aiohttp's
client contexts load at import; the environment is left as it was, and TLS contexts made afterwards load it."""

from __future__ import annotations

import json
import os
import ssl
import subprocess
import sys

PROBE = """
import json, os, ssl, sys
from copilot_otel.daemon.service import _import_aiohttp_without_ca_bundle
before = os.environ.get("SSL_CERT_FILE")
_import_aiohttp_without_ca_bundle()
from aiohttp import connector
print(json.dumps({"client": connector._SSL_CONTEXT_VERIFIED.cert_store_stats()["x509_ca"],
                  "after": ssl.create_default_context().cert_store_stats()["x509_ca"],
                  "env": os.environ.get("SSL_CERT_FILE") == before}))
"""


def probe(env: dict[str, str] | None = None) -> dict:
    """Run the import in a fresh interpreter (aiohttp is imported once per process)."""
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, check=True, env=env, timeout=120)
    return json.loads(done.stdout)


def test_the_servers_aiohttp_loads_no_ca_bundle_and_leaves_the_environment_alone():
    """aiohttp's client context holds no certificate; the variable is restored; a TLS context made afterwards
    (an OTLP exporter's, or anything else's) loads the system's CA bundle as before."""
    found = probe()
    assert found["client"] == 0 and found["env"]
    assert found["after"] > 0


def test_a_ca_bundle_the_user_named_stays_named(tmp_path):
    """SSL_CERT_FILE set by the user is what it was once aiohttp is imported."""
    bundle = tmp_path / "ca.pem"
    with open(ssl.get_default_verify_paths().cafile) as system:
        bundle.write_text(system.read())
    found = probe({**os.environ, "SSL_CERT_FILE": str(bundle)})
    assert found["client"] == 0 and found["env"] and found["after"] > 0
