"""Files that would hang or flood a reader: a FIFO, a device, a file that never ends, a YAML bomb in place of
each file copilot-otel reads. The daemon and every command still answer, and name the file once; a config file
that cannot be read stops start-up with one line and exit 2."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest

from tests.support.commands import run_copilot_otel
from tests.support.daemon import DaemonProcess
from tests.support.files import new_session
from tests.support.net import LOOPBACK, free_port, wait_until
from tests.support.spans import expected_keys, wait_for_keys
from tests.support.tls import self_signed

FAST = ("--idle-quiet", "0.3", "--rescan-interval", "1")
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "cli" / "1.0.102"
ANSWER_WITHIN = 30  # seconds: the brief's bound; each command below returns far sooner or fails


def real_log(scenario: str) -> bytes:
    """A stored real CLI 1.0.102 log."""
    return next((FIXTURES / scenario / "session-state").glob("*/events.jsonl")).read_bytes()


def _bomb(path: Path) -> Path:
    """The billion laughs as YAML: 9 aliases a level, 9 levels (387,420,489 strings once walked), ~340 bytes."""
    lines = ['a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    lines += [f"a{n}: &a{n} [{','.join([f'*a{n - 1}'] * 9)}]" for n in range(1, 9)]
    path.write_text("\n".join(lines) + "\n")
    return path


def _one_line(result, *names: str) -> str:
    """The one line a refused start-up printed, once checked to name each of ``names``."""
    lines = result.stderr.decode().strip().splitlines()
    assert result.returncode == 2, lines
    assert len(lines) == 1 and all(name in lines[0] for name in names), lines
    return lines[0]


# ------------------------------------------------------------------------ a session's workspace.yaml


def test_a_fifo_as_a_sessions_workspace_yaml_hangs_nothing(tmp_path):
    """A FIFO (no writer) where a session keeps its workspace.yaml, before the daemon starts: every session,
    that one too, is exported; /api/sessions, `sessions` (from the daemon's socket and from the files) and
    `inspect` of that session answer; the daemon names the file once; SIGTERM stops it; after a restart a new
    session is exported as well."""
    home, state, traces = tmp_path / "home", tmp_path / "state", tmp_path / "traces.jsonl"
    logs = []
    for name, scenario in (("first", "plain"), ("fifo", "multi_turn"), ("after", "failing_tool")):
        logs.append(new_session(home, name))
        logs[-1].write_bytes(real_log(scenario))
    workspace = logs[1].parent / "workspace.yaml"
    os.mkfifo(workspace)
    for name in ("first", "after"):
        (home / "session-state" / name / "workspace.yaml").write_text(f"name: {name} session\nuser_named: true\n")
    with DaemonProcess(home, state, traces_file=traces, args=FAST) as daemon:
        wait_for_keys(traces, expected_keys(logs))
        listed = json.loads(daemon.api_get("/api/sessions", timeout=ANSWER_WITHIN))
        assert sorted(s["id"] for s in listed["sessions"]) == ["after", "fifo", "first"]
        names = {s["id"]: s.get("name") for s in listed["sessions"]}
        assert names["first"] == "first session" and names["fifo"] is None
        for args in ((), ("--from-files",)):
            result = run_copilot_otel("sessions", "--copilot-home", str(home), "--state-dir", str(state),
                                      "--metrics-address", f"{LOOPBACK}:{daemon.port}", "--json", *args,
                                      timeout=ANSWER_WITHIN)
            assert result.returncode == 0, result.stderr.decode()
            assert sorted(s["id"] for s in json.loads(result.stdout)) == ["after", "fifo", "first"]
        result = run_copilot_otel("inspect", str(logs[1].parent), timeout=ANSWER_WITHIN)
        assert result.returncode == 0, result.stderr.decode()
        assert result.stderr.decode().count(str(workspace)) == 1
        wait_until(lambda: str(workspace) in daemon.log_text(), timeout=10, what="the FIFO named")
        assert daemon.stop(signal.SIGTERM, timeout=15) == 0
    assert daemon.log_text().count(str(workspace)) == 1
    assert "is not a regular file" in daemon.log_text()
    later = new_session(home, "later")
    later.write_bytes(real_log("plain"))
    with DaemonProcess(home, state, traces_file=traces, args=FAST):
        wait_for_keys(traces, sorted(set(expected_keys(logs)) | set(expected_keys([later]))))


def test_a_workspace_yaml_bomb_or_huge_file_gives_no_name_and_is_named_once(tmp_path):
    """A billion-laughs workspace.yaml and one of 300 MB (sparse): `sessions --from-files` answers with every
    session, those two without a name, and names each file once on stderr."""
    home = tmp_path / "home"
    for name in ("bomb", "huge", "plain"):
        new_session(home, name).write_bytes(real_log("plain"))
    bomb = _bomb(home / "session-state" / "bomb" / "workspace.yaml")
    bomb.write_text(bomb.read_text() + "name: *a8\nuser_named: true\n")
    huge = home / "session-state" / "huge" / "workspace.yaml"
    with open(huge, "wb") as handle:
        handle.write(b"name: huge\nuser_named: true\n")
        handle.truncate(300 << 20)
    (home / "session-state" / "plain" / "workspace.yaml").write_text("name: plain one\nuser_named: true\n")
    result = run_copilot_otel("sessions", "--copilot-home", str(home), "--state-dir", str(tmp_path / "state"),
                              "--from-files", "--json", timeout=ANSWER_WITHIN)
    assert result.returncode == 0, result.stderr.decode()
    names = {s["id"]: s.get("name") for s in json.loads(result.stdout)}
    assert names == {"bomb": None, "huge": None, "plain": "plain one"}
    stderr = result.stderr.decode()
    assert stderr.count(str(bomb)) == 1 and "alias" in stderr
    assert stderr.count(str(huge)) == 1 and "larger than" in stderr


# ------------------------------------------------------------------------ config files: one line, exit 2


def _zero(tmp_path: Path) -> Path:
    return Path("/dev/zero")


def _fifo(tmp_path: Path) -> Path:
    path = tmp_path / "fifo.yml"
    os.mkfifo(path)
    return path


def _huge(tmp_path: Path) -> Path:
    path = tmp_path / "huge.yml"
    with open(path, "wb") as handle:
        handle.write(b"budgets: []\n")
        handle.truncate(300 << 20)  # sparse: 300 MB to read, nothing on disk
    return path


def _deep(tmp_path: Path) -> Path:
    path = tmp_path / "deep.yml"
    path.write_text("budgets: " + "[" * 5000 + "]" * 5000 + "\n")
    return path


FILES = {"a YAML bomb": (lambda tmp: _bomb(tmp / "bomb.yml"), "alias"), "/dev/zero": (_zero, "not a regular file"),
         "a FIFO": (_fifo, "not a regular file"), "a 300 MB file": (_huge, "larger than 1 MiB"),
         "5,000 levels deep": (_deep, "nest")}


def _run(tmp_path: Path, *args: str, env: dict | None = None):
    return run_copilot_otel("run", "--copilot-home", str(tmp_path / "home"), "--state-dir", str(tmp_path / "state"),
                            "--metrics-address", f"{LOOPBACK}:{free_port()}", *args, env=env, timeout=ANSWER_WITHIN)


@pytest.mark.parametrize("case", FILES)
def test_a_budgets_file_that_never_ends_stops_start_up_with_one_line(case, tmp_path):
    """--budgets-file that is a YAML bomb, /dev/zero, a FIFO, 300 MB or nested 5,000 deep: exit 2 and one line
    naming the file and what is wrong, within seconds (no MemoryError, no hang)."""
    make, message = FILES[case]
    path = make(tmp_path)
    _one_line(_run(tmp_path, "--budgets-file", str(path)), f"--budgets-file {path}", message)


@pytest.mark.parametrize("case", ["a YAML bomb", "a FIFO"])
def test_a_web_config_file_that_never_ends_stops_start_up_with_one_line(case, tmp_path):
    """The same for --web-config-file (read by the same code: a bomb and a FIFO stand for the rest)."""
    make, message = FILES[case]
    path = make(tmp_path)
    _one_line(_run(tmp_path, "--web-config-file", str(path)), f"--web-config-file {path}", message)


@pytest.mark.parametrize("key", ["key_file", "client_ca_file"])
def test_a_fifo_as_a_tls_file_of_the_web_config_stops_start_up_with_one_line(key, tmp_path):
    """A FIFO as the key or the client CA the web config names (OpenSSL would block on it; every one of its
    files is checked by the same code)."""
    cert, private_key = self_signed(tmp_path)
    files = {"cert_file": cert, "key_file": private_key, "client_ca_file": cert}
    files[key] = _fifo(tmp_path)
    config = tmp_path / "web.yml"
    config.write_text("tls_server_config:\n" + "".join(f"  {k}: {v}\n" for k, v in files.items())
                      + "  client_auth_type: RequireAndVerifyClientCert\n")
    _one_line(_run(tmp_path, "--web-config-file", str(config)), key, str(files[key]), "not a regular file")


@pytest.mark.parametrize("variable", ["OTEL_EXPORTER_OTLP_CERTIFICATE", "OTEL_EXPORTER_OTLP_CLIENT_KEY"])
def test_a_fifo_as_an_otlp_certificate_stops_start_up_with_one_line(variable, tmp_path):
    """A FIFO as a PEM file of the OTLP exporter (each is checked by the same code): `run` and `replay` stop
    with one line naming it."""
    fifo = _fifo(tmp_path)
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": f"https://{LOOPBACK}:{free_port()}", variable: str(fifo)}
    _one_line(_run(tmp_path, env=env), variable, "not a regular file")
    session = new_session(tmp_path / "home", "one")
    session.write_bytes(real_log("plain"))
    result = run_copilot_otel("replay", str(session), "--state-dir", str(tmp_path / "state"), env=env,
                              timeout=ANSWER_WITHIN)
    _one_line(result, variable, "not a regular file")


def test_a_fifo_as_the_web_views_token_file_is_refused_at_once(tmp_path):
    """`copilot-otel open` reads the token file the daemon keeps: a FIFO there is refused in one line."""
    state, port = tmp_path / "state", free_port()
    state.mkdir(mode=0o700)
    os.mkfifo(state / f"web-{port}.json", 0o600)
    result = run_copilot_otel("open", "--print-url", "--state-dir", str(state), "--metrics-address",
                              f"{LOOPBACK}:{port}", timeout=ANSWER_WITHIN)
    lines = result.stderr.decode().strip().splitlines()
    assert result.returncode != 0 and len(lines) == 1, lines
    assert f"web-{port}.json" in lines[0] and "not a regular file" in lines[0], lines
