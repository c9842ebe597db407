"""Who may in, in-process: which Host headers name this machine, the --allowed-host values, the token file's
trust checks, and the exporter-toolkit web config's checks that need no certificate."""

from __future__ import annotations

import os

import pytest

from copilot_otel.config import Config, ConfigError, check_allowed_hosts
from copilot_otel.web.access import host_allowed, read_token_file, token_file, write_token_file
from copilot_otel.web.webconfig import load_web_config


@pytest.mark.parametrize("header", ["localhost", "localhost:9464", "LOCALHOST:9464", "view.localhost:9464",
                                    "localhost.", "127.0.0.1:9464", "127.0.0.1", "[::1]:9464", "[::1]", "::1",
                                    "10.0.0.7:9464", "[fe80::1%eth0]:9464", None, ""])
def test_this_machine_by_ip_or_localhost_is_allowed(header):
    """IP literals and localhost names reach no DNS a stranger controls; no Host at all is no browser."""
    assert host_allowed(header)


@pytest.mark.parametrize("header", ["evil.example", "evil.example:9464", "localhost.evil.example:9464",
                                    "127.0.0.1.evil.example", "copilot-otel:9464", "[evil.example]:9464",
                                    "0x7f.1:9464", "metrics.example.com.evil:9464"])
def test_a_dns_name_is_refused_unless_allowed(header):
    """A rebinding page's own name is refused; names given with --allowed-host (exact, or *.domain) pass."""
    assert not host_allowed(header)
    allowed = check_allowed_hosts(["copilot-otel", "*.example.com"])
    assert host_allowed("copilot-otel:9464", allowed) and host_allowed("Metrics.Example.COM.", allowed)
    assert not host_allowed("example.com", allowed) and not host_allowed("xexample.com", allowed)


def test_allowed_hosts_are_names_only():
    """Comma, space or repetition separate names; a scheme, a port or a path is one clear error."""
    assert check_allowed_hosts(["a,b", "c d", "A"]) == ("a", "b", "c", "d")
    assert Config(allowed_hosts=("Copilot-Otel",)).allowed_hosts == ("copilot-otel",)
    for bad in ("http://copilot-otel", "copilot-otel:9464", "a/b", "*", "*.", "-x"):
        with pytest.raises(ConfigError, match="--allowed-host"):
            check_allowed_hosts([bad])


def test_the_token_file_is_trusted_only_when_private_and_ours(tmp_path):
    """written 0600 and read back; a file others can read, a link, or a damaged one is refused by name."""
    path = token_file(tmp_path, 9464)
    write_token_file(path, "http://127.0.0.1:9464/", "tok")
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    assert read_token_file(path) == ("http://127.0.0.1:9464/", "tok")
    path.chmod(0o644)
    with pytest.raises(ConfigError, match="not a private file of yours"):
        read_token_file(path)
    path.chmod(0o600)
    link = tmp_path / "web-1.json"
    os.symlink(path, link)
    with pytest.raises(ConfigError, match="cannot read"):
        read_token_file(link)
    path.write_text("{")
    path.chmod(0o600)
    with pytest.raises(ConfigError, match="damaged"):
        read_token_file(path)
    with pytest.raises(ConfigError, match="is the daemon"):
        read_token_file(token_file(tmp_path, 2))


def test_a_web_config_of_users_and_headers(tmp_path):
    """basic_auth_users and headers alone (no TLS) are read as the toolkit reads them; an empty file is nothing."""
    path = tmp_path / "web.yml"
    hashed = "$2b$10$170hVqUKk0eIBsfvp89f6eLnHoXH1Cs4M2UXc3HqsYfrFXglQeE/e"
    path.write_text(f"basic_auth_users:\n  alice: {hashed}\nhttp_server_config:\n  http2: false\n  headers:\n"
                    "    X-Frame-Options: deny\n")
    config = load_web_config(path)
    assert config.tls is None and config.users == {"alice": hashed.encode()}
    assert config.headers == {"X-Frame-Options": "deny"}
    path.write_text("")
    assert load_web_config(path).users == {} and load_web_config(path).tls is None
    path.write_text("http_server_config:\n  headers:\n    X-Frame-Options: allow-everyone\n")
    with pytest.raises(ConfigError, match="not one of deny, sameorigin"):
        load_web_config(path)
    path.write_text("http_server_config:\n  headers:\n    Set-Cookie: x=1\n")
    with pytest.raises(ConfigError, match="unknown key 'Set-Cookie'"):
        load_web_config(path)
    with pytest.raises(ConfigError, match="cannot read it"):
        load_web_config(tmp_path / "missing.yml")


def test_every_http_error_reason_is_documented():
    """docs/metrics.md names each reason copilot_otel_http_errors_total counts."""
    from pathlib import Path

    from copilot_otel.web.guard import REASONS

    text = (Path(__file__).resolve().parents[2] / "docs" / "metrics.md").read_text()
    assert "copilot_otel_http_errors_total{reason}" in text
    assert [reason for reason in REASONS if f"`{reason}`" not in text] == []


def test_the_sdk_reads_allowed_hosts_from_the_environment():
    """attach() builds its Config from the environment: COPILOT_OTEL_ALLOWED_HOST, as the commands read it."""
    config = Config.from_env({"COPILOT_OTEL_ALLOWED_HOST": "metrics.example.com, copilot-otel"})
    assert config.allowed_hosts == ("metrics.example.com", "copilot-otel")
    with pytest.raises(ConfigError, match="--allowed-host 'http://x'"):
        Config.from_env({"COPILOT_OTEL_ALLOWED_HOST": "http://x"})
