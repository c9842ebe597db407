"""What is shown of an endpoint or a line of text: no password, no query value, no token."""

from __future__ import annotations

import logging

import pytest

from copilot_otel.base.redact import HIDDEN, hide, redact, redact_url
from copilot_otel.base.safe_text import SafeFormatter


@pytest.mark.parametrize("url, shown", [
    ("http://alice:pw@127.0.0.1:4318/v1/traces", f"http://{HIDDEN}@127.0.0.1:4318/v1/traces"),
    ("https://collector:4317?api_key=K1&tenant=t", f"https://collector:4317?api_key={HIDDEN}&tenant={HIDDEN}"),
    ("http://bob@[::1]:4318/x?flag", f"http://{HIDDEN}@[::1]:4318/x?flag"),
    ("http://127.0.0.1:4318/v1/traces", "http://127.0.0.1:4318/v1/traces"),
    ("not a url token=abc", f"not a url token={HIDDEN}"),
])
def test_a_url_keeps_where_it_goes_and_loses_its_credentials(url, shown):
    assert redact_url(url) == shown


@pytest.mark.parametrize("text, secret", [
    ("OTLP export to http://alice:s3cret@127.0.0.1:9/v1/traces (http/protobuf) failed", "s3cret"),
    ("Cannot connect to host ipv4:alice:s3cret@127.0.0.1:9 ssl:default", "s3cret"),
    ("POST http://127.0.0.1:9/v1/metrics?api_key=s3cret: 500", "s3cret"),
    ("Invalid char in url query: b'GET /?token=s3cret\\x00 HTTP/1.1'", "s3cret"),
    ("Invalid header value char: b'Authorization: Bearer s3cret\\x01'", "s3cret"),
    ("b'Cookie: copilot-otel=s3cret'", "s3cret"),
    ("headers password=s3cret,apikey=s3cret", "s3cret"),
])
def test_free_text_loses_every_credential_in_it(text, secret):
    assert secret not in redact(text)


def test_a_known_secret_is_hidden_wherever_it_stands_and_a_log_line_never_shows_it():
    token = "Zk3hQ0w8_tP1v6sXn2YbR4cL9mD7eA5uJ"
    hide(token)
    record = logging.LogRecord("aiohttp.server", logging.DEBUG, __file__, 1, "bad request %r", (f"/x/{token}",),
                               None)
    line = SafeFormatter("%(levelname)s %(name)s: %(message)s").format(record)
    assert token not in line and HIDDEN in line


def test_ordinary_text_is_left_alone():
    for text in ("following /home/a/.copilot; metrics on http://127.0.0.1:9464/metrics", "at 20:21:03 ok",
                 "mail alice@example.com", "3 spans exported"):
        assert redact(text) == text


@pytest.mark.parametrize("endpoint", ["http://alice:s3cret@127.0.0.1:99999/v1/traces?api_key=s3cret",
                                      "ftp://alice:s3cret@127.0.0.1:4317?api_key=s3cret",
                                      "http://alice:s3cret@[::1/x?api_key=s3cret"])
def test_a_malformed_endpoint_is_refused_without_its_credentials(endpoint):
    from copilot_otel.base.parsing import ConfigError
    from copilot_otel.otlp.settings import OtlpSettings

    with pytest.raises(ConfigError) as refused:
        OtlpSettings.from_env({"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint})
    said = str(refused.value)
    assert "s3cret" not in said and ("127.0.0.1" in said or "[::1" in said), said
