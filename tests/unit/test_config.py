"""config.py: Config.from_env with a dict for the environment: defaults, overrides (flags), and
every validation error, each a clear message naming what to fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from copilot_otel.config import (
    DEFAULT_CONTENT_MAX_CHARS,
    DEFAULT_IDLE_QUIET,
    DEFAULT_MAX_BUFFERED_SPANS,
    DEFAULT_MAX_LINE_BYTES,
    DEFAULT_METRICS_HOST,
    DEFAULT_METRICS_PORT,
    DEFAULT_RESCAN_INTERVAL,
    DEFAULT_STUCK_AFTER,
    Config,
    ConfigError,
    ModelOptions,
    OtlpSettings,
    env_flag,
    parse_address,
)


@pytest.fixture
def home(monkeypatch, tmp_path) -> Path:
    """A HOME of our own, and none of the variables that would move the default places."""
    monkeypatch.setenv("HOME", str(tmp_path))
    for name in ("COPILOT_HOME", "XDG_STATE_HOME"):
        monkeypatch.delenv(name, raising=False)
    return tmp_path


def test_defaults(home):
    """An empty environment gives the documented defaults, each written once in config.py."""
    config = Config.from_env({})
    assert config.copilot_home == home / ".copilot"
    assert config.state_dir == home / ".local" / "state" / "copilot-otel"
    assert config.default_traces_file == config.state_dir / "traces.jsonl"
    assert (config.traces_file, config.otlp) == (None, OtlpSettings(None, "grpc"))
    assert config.metrics_address == (DEFAULT_METRICS_HOST, DEFAULT_METRICS_PORT) == ("127.0.0.1", 9464)
    assert (config.stuck_after, config.idle_quiet, config.rescan_interval) == (
        DEFAULT_STUCK_AFTER, DEFAULT_IDLE_QUIET, DEFAULT_RESCAN_INTERVAL)
    assert (config.max_line_bytes, config.max_buffered_spans) == (DEFAULT_MAX_LINE_BYTES, DEFAULT_MAX_BUFFERED_SPANS)
    assert config.model == ModelOptions(capture_content=False, content_max_chars=DEFAULT_CONTENT_MAX_CHARS)
    assert (config.poll, config.from_start, config.no_repository_label) == (False, True, False)


@pytest.mark.parametrize("variable", ["COPILOT_HOME", "XDG_STATE_HOME"])
def test_the_environment_given_is_the_only_one_read(home, monkeypatch, variable):
    """Variables of this process do not reach a configuration built from another environment."""
    monkeypatch.setenv(variable, "/from/the/process")
    config = Config.from_env({})
    assert (config.copilot_home, config.state_dir) == (home / ".copilot",
                                                        home / ".local" / "state" / "copilot-otel")


def test_every_setting_from_its_variable(home):
    """Each --flag is COPILOT_OTEL_FLAG; COPILOT_HOME and the CLI's capture switch are read too."""
    env = {
        "COPILOT_HOME": "~/elsewhere",
        "COPILOT_OTEL_STATE_DIR": "/var/lib/copilot-otel",
        "COPILOT_OTEL_TRACES_FILE": "~/traces.jsonl",
        "COPILOT_OTEL_METRICS_ADDRESS": "[::1]:9999",
        "COPILOT_OTEL_STUCK_AFTER": "30",
        "COPILOT_OTEL_MAX_LINE_BYTES": "2048",
        "COPILOT_OTEL_CONTENT_MAX_CHARS": "64",
        "COPILOT_OTEL_IDLE_QUIET": "0.5",
        "COPILOT_OTEL_RESCAN_INTERVAL": "0",
        "COPILOT_OTEL_POLL": "yes",
        "COPILOT_OTEL_MAX_BUFFERED_SPANS": "10",
        "COPILOT_OTEL_NO_REPOSITORY_LABEL": "true",
        "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "true",
    }
    config = Config.from_env(env)
    assert config.copilot_home == home / "elsewhere"
    assert (config.state_dir, config.traces_file) == (Path("/var/lib/copilot-otel"), home / "traces.jsonl")
    assert config.metrics_address == ("::1", 9999)
    assert (config.stuck_after, config.max_line_bytes, config.idle_quiet, config.rescan_interval) == (
        30.0, 2048, 0.5, 0.0)
    assert (config.poll, config.max_buffered_spans, config.no_repository_label) == (True, 10, True)
    assert config.model == ModelOptions(capture_content=True, content_max_chars=64)


def test_copilot_otel_copilot_home_wins_over_copilot_home(home):
    """--copilot-home's own variable is more specific than the CLI's COPILOT_HOME."""
    config = Config.from_env({"COPILOT_HOME": "/a", "COPILOT_OTEL_COPILOT_HOME": "/b"})
    assert config.copilot_home == Path("/b")


def test_flags_win_over_the_environment(home):
    """Overrides (the command line's flags) replace what the environment says; a flag not given (None) does not."""
    env = {"COPILOT_OTEL_STUCK_AFTER": "30", "COPILOT_OTEL_CONTENT_MAX_CHARS": "64",
           "COPILOT_OTEL_METRICS_ADDRESS": "127.0.0.1:1"}
    config = Config.from_env(env, stuck_after=5.0, metrics_address="0.0.0.0:9000", content_max_chars=None,
                             state_dir="~/state", traces_file=None)
    assert (config.stuck_after, config.metrics_address) == (5.0, ("0.0.0.0", 9000))
    assert config.model.content_max_chars == 64
    assert config.state_dir == home / "state" and config.traces_file is None
    assert Config.from_env(env, content_max_chars=7).model.content_max_chars == 7


def test_otlp_settings_from_the_standard_variables(home):
    """OTEL_EXPORTER_OTLP_* as every OTel user expects: the traces-specific ones win; 'none' turns export off."""
    both = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces",
            "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf"}
    assert Config.from_env(both).otlp == OtlpSettings("http://127.0.0.1:4318/v1/traces", "http/protobuf")
    assert Config.from_env({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4317"}).otlp == OtlpSettings(
        "http://collector:4317", "grpc")
    assert Config.from_env({**both, "OTEL_TRACES_EXPORTER": "none"}).otlp.endpoint is None


def test_a_command_that_exports_nothing_ignores_the_otlp_settings(home):
    """exports=False (inspect): a bad OTLP variable is no reason to refuse to start."""
    config = Config.from_env({"OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"}, exports=False)
    assert config.otlp.endpoint is None


def test_env_flag_names():
    """--some-flag is COPILOT_OTEL_SOME_FLAG."""
    assert env_flag("max-line-bytes") == "COPILOT_OTEL_MAX_LINE_BYTES"


@pytest.mark.parametrize("text,address", [("127.0.0.1:9464", ("127.0.0.1", 9464)), ("[::1]:0", ("::1", 0)),
                                          (":9000", ("127.0.0.1", 9000)), ("localhost:65535", ("localhost", 65535))])
def test_parse_address(text, address):
    """HOST:PORT, IPv6 in brackets, an empty host meaning loopback."""
    assert parse_address(text) == address


# ------------------------------------------------------------ every error, with what it says

OTLP = {"OTEL_EXPORTER_OTLP_ENDPOINT": "https://collector:4317"}
ERRORS = {
    "stuck_after_zero": ({"COPILOT_OTEL_STUCK_AFTER": "0"},
                         "--stuck-after must be a positive number of seconds, not 0.0"),
    "stuck_after_negative": ({"COPILOT_OTEL_STUCK_AFTER": "-5"},
                             "--stuck-after must be a positive number of seconds, not -5.0"),
    "stuck_after_nan": ({"COPILOT_OTEL_STUCK_AFTER": "nan"}, "--stuck-after must be a positive number of seconds"),
    "idle_quiet_too_short": ({"COPILOT_OTEL_IDLE_QUIET": "0.01"},
                             "--idle-quiet must be a positive number of seconds of at least 0.05, not 0.01"),
    "rescan_negative": ({"COPILOT_OTEL_RESCAN_INTERVAL": "-1"},
                        "--rescan-interval must be 0 (off) or a positive number of seconds, not -1.0"),
    "rescan_infinite": ({"COPILOT_OTEL_RESCAN_INTERVAL": "inf"},
                        "--rescan-interval must be 0 (off) or a positive number of seconds, not inf"),
    "max_line_bytes_small": ({"COPILOT_OTEL_MAX_LINE_BYTES": "100"}, "--max-line-bytes must be at least 1024"),
    "content_max_chars_zero": ({"COPILOT_OTEL_CONTENT_MAX_CHARS": "0"}, "--content-max-chars must be at least 1"),
    "max_buffered_spans_zero": ({"COPILOT_OTEL_MAX_BUFFERED_SPANS": "0"}, "--max-buffered-spans must be at least 1"),
    "not_a_number": ({"COPILOT_OTEL_STUCK_AFTER": "soon"}, "COPILOT_OTEL_STUCK_AFTER='soon' is not a duration"),
    "not_whole": ({"COPILOT_OTEL_MAX_LINE_BYTES": "1.5"}, "COPILOT_OTEL_MAX_LINE_BYTES='1.5' is not a whole number"),
    "not_a_bool": ({"COPILOT_OTEL_POLL": "maybe"}, "COPILOT_OTEL_POLL='maybe' is not true or false"),
    "address_without_port": ({"COPILOT_OTEL_METRICS_ADDRESS": "nonsense"},
                             "--metrics-address 'nonsense': expected HOST:PORT, e.g. 127.0.0.1:9464"),
    "address_port_too_big": ({"COPILOT_OTEL_METRICS_ADDRESS": "127.0.0.1:99999"},
                             "--metrics-address '127.0.0.1:99999': expected HOST:PORT"),
    "unknown_protocol": ({"OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"},
                         "OTEL_EXPORTER_OTLP_PROTOCOL='http/json' is not supported: use one of grpc, http/protobuf"),
    "endpoint_not_a_url": ({"OTEL_EXPORTER_OTLP_ENDPOINT": "not a url"},
                           "OTLP endpoint 'not a url' is not a URL: expected e.g. http://127.0.0.1:4317 (grpc) "
                           "or http://127.0.0.1:4318 (http/protobuf)"),
    "endpoint_without_scheme": ({"OTEL_EXPORTER_OTLP_ENDPOINT": "localhost:4317"},
                                "OTLP endpoint 'localhost:4317' is not a URL"),
    "traces_endpoint_not_a_url": ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "::nonsense::"},
                                  "OTLP endpoint '::nonsense::' is not a URL"),
    "endpoint_bad_port": ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:99999"},
                          "OTLP endpoint 'http://127.0.0.1:99999' has an invalid port"),
    "headers_without_value": ({"OTEL_EXPORTER_OTLP_HEADERS": "authorization"},
                              "OTEL_EXPORTER_OTLP_HEADERS: the header starting with 'authorization' is not key=value"),
    "traces_headers_colon": ({"OTEL_EXPORTER_OTLP_TRACES_HEADERS": "x-team=a,Authorization: Bearer s3cr3t"},
                             "OTEL_EXPORTER_OTLP_TRACES_HEADERS: the header starting with 'Authorization' is not "
                             "key=value"),
    "endpoint_unclosed_ipv6": ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://[::1"},
                               "OTLP endpoint 'http://[::1' is not a valid URL (Invalid IPv6 URL)"),
    "timeout_not_a_number": ({**OTLP, "OTEL_EXPORTER_OTLP_TIMEOUT": "abc"},
                             "OTEL_EXPORTER_OTLP_TIMEOUT='abc' is not a positive number of seconds"),
    "traces_timeout_nan": ({**OTLP, "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT": "nan"},
                           "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT='nan' is not a positive number of seconds"),
    "compression_bogus": ({**OTLP, "OTEL_EXPORTER_OTLP_COMPRESSION": "bogus"},
                          "OTEL_EXPORTER_OTLP_COMPRESSION='bogus' is not supported over grpc: use gzip or none"),
    "certificate_missing": ({**OTLP, "OTEL_EXPORTER_OTLP_CERTIFICATE": "/nonexistent/ca.pem"},
                            "OTEL_EXPORTER_OTLP_CERTIFICATE='/nonexistent/ca.pem': cannot read it"),
    "traces_exporter_zipkin": ({"OTEL_TRACES_EXPORTER": "zipkin"},
                               "OTEL_TRACES_EXPORTER='zipkin': zipkin is not supported; use otlp"),
    "insecure_not_a_bool": ({**OTLP, "OTEL_EXPORTER_OTLP_INSECURE": "perhaps"},
                            "OTEL_EXPORTER_OTLP_INSECURE='perhaps' is not true or false"),
    "rescan_nan": ({"COPILOT_OTEL_RESCAN_INTERVAL": "nan"}, "--rescan-interval must be 0 (off) or a positive number"),
    "rescan_minus_five": ({"COPILOT_OTEL_RESCAN_INTERVAL": "-5"}, "--rescan-interval must be 0 (off) or a positive"),
    "idle_quiet_inf": ({"COPILOT_OTEL_IDLE_QUIET": "inf"}, "--idle-quiet must be a positive number of seconds"),
    "request_bytes_too_small": ({"COPILOT_OTEL_MAX_REQUEST_BYTES": "100"}, "--max-request-bytes must be at least"),
}


@pytest.mark.parametrize("environ,message", ERRORS.values(), ids=ERRORS.keys())
def test_each_bad_setting_is_one_clear_error(home, environ, message):
    """A bad setting raises ConfigError (a ValueError) whose message names it, the bad value and the fix."""
    with pytest.raises(ConfigError) as raised:
        Config.from_env(environ)
    assert str(raised.value).startswith(message)
    assert isinstance(raised.value, ValueError)


def test_a_header_error_never_shows_a_value():
    """Header values may be tokens: the error names the header, never its value."""
    with pytest.raises(ConfigError) as raised:
        Config.from_env({"OTEL_EXPORTER_OTLP_HEADERS": "authorization=Bearer%20g00d-t0ken,x-key: s3cr3t-t0ken"})
    message = str(raised.value)
    assert "'x-key'" in message and "values are not shown" in message
    assert "t0ken" not in message


def test_a_bad_traces_protocol_names_its_own_variable(home):
    """The error names the variable that holds the bad value."""
    with pytest.raises(ConfigError) as raised:
        Config.from_env({"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "udp"})
    assert str(raised.value).startswith("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL='udp'")


def test_overrides_and_direct_construction_are_validated_too(home):
    """A flag's value, or a Config built by hand (the SDK), goes through the same checks as a variable's."""
    with pytest.raises(ConfigError, match="--stuck-after must be a positive number of seconds, not -1"):
        Config.from_env({}, stuck_after=-1.0)
    with pytest.raises(ConfigError, match="--max-buffered-spans must be at least 1"):
        Config.from_env({}, max_buffered_spans=0)
    with pytest.raises(ConfigError, match=r"--idle-quiet must be a positive number of seconds of at least 0\.05"):
        Config(idle_quiet=0.01)


def test_the_exporter_settings_are_read_signal_specific_first(home, tmp_path):
    """Timeout, compression, certificate and headers: OTEL_EXPORTER_OTLP_TRACES_* wins over OTEL_EXPORTER_OTLP_*."""
    ca = tmp_path / "ca.pem"
    ca.write_text("not checked here")
    otlp = Config.from_env({**OTLP, "OTEL_EXPORTER_OTLP_TIMEOUT": "3", "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT": "2.5",
                            "OTEL_EXPORTER_OTLP_COMPRESSION": "GZIP", "OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE": str(ca),
                            "OTEL_EXPORTER_OTLP_HEADERS": "a=1", "OTEL_EXPORTER_OTLP_TRACES_HEADERS": "b=2"}).otlp
    assert (otlp.timeout, otlp.compression, otlp.certificate, otlp.headers) == (2.5, "gzip", ca, (("b", "2"),))
    assert "headers" not in repr(otlp)  # header values (tokens) are never in a repr
