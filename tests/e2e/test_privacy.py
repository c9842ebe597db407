"""Privacy: content never leaves unless the user opts in; secrets and the metrics port stay put.

A unique secret is planted by the real Copilot CLI (tests/support/provider.py's ``echo_secret``) in
every content field of a session: the prompt (and so the session title in workspace.yaml),
the assistant's messages, tool arguments and results, a sub-agent's prompt and answer, the
task_complete summary. A second session adds the secret to failed-tool and session-error
messages and to malformed lines. With content capture off, nothing the daemon or replay
writes, serves (metrics, and the web view's pages as a browser shows them) or logs (at debug
level) may hold it, but for the session's name in the web view (the owner's, behind the owner's token; the CLI
made it from the first prompt). `inspect` prints in the user's own
terminal and is allowed to show content (it shows the task_complete summary); it is not
checked here.
"""

from __future__ import annotations

import html
import json
import os
import signal
import subprocess
import sys
import urllib.request
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest

from copilot_otel.config import ModelOptions
from copilot_otel.delivery.sinks import MemorySink
from copilot_otel.replay.runner import replay_files
from copilot_otel.source.workspace import read_name
from tests.support.commands import run_replay
from tests.support.copilot_cli import CliRun, prompt_for
from tests.support.daemon import DaemonProcess, complete_lines_spans
from tests.support.events import event_line
from tests.support.net import wait_until
from tests.support.otlp_json import read_spans
from tests.support.provider import echo_secret_answer
from tests.support.scrape import value
from tests.support.spans import expected_keys, record_key, wait_for_keys

FAST = ("--idle-quiet", "0.3", "--rescan-interval", "0.5")
CAPTURE = {"OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "true"}
CONTENT_KEYS = ("gen_ai.input.messages", "gen_ai.output.messages", "gen_ai.system_instructions",
                "gen_ai.tool.call.arguments", "gen_ai.tool.call.result", "github.copilot.task.summary")
MESSAGE_KEYS = CONTENT_KEYS[:3]  # JSON messages: each text in them is cut, the JSON stays whole


@dataclass
class Planted:
    """A real session holding the secret everywhere, and what a capture-off daemon made of it."""

    secret: str
    run: CliRun
    home: Path
    hostile: Path  # a second session: failed tools, session errors and malformed lines with the secret
    state_dir: Path
    traces: Path
    daemon_log: str
    scrapes: list[bytes]


def _hostile_session(home: Path, real: Path, secret: str) -> Path:
    """The real log, with the secret also in error messages and in lines the decoder rejects."""
    lines = real.read_bytes().splitlines()
    shutdown = lines.pop()  # keep session.shutdown last
    ts = json.loads(lines[-1])["timestamp"]

    def ev(kind, ident, data, **top):
        return event_line(kind, ts, f"hostile-{ident}", data, **top)

    interaction = {"interactionId": "hostile-interaction"}
    planted = [
        ev("user.message", 1, {"content": f"second prompt {secret}", **interaction}),
        ev("assistant.turn_start", 2, {"turnId": "0", **interaction}),
        ev("assistant.message", 3, {"content": f"on it {secret}", "toolRequests": [{"name": "bash"}], "turnId": "0",
                                    **interaction}),
        ev("tool.execution_start", 4, {"toolCallId": "hostile-call", "toolName": "bash",
                                       "arguments": {"command": f"cat {secret}"}, "turnId": "0", **interaction}),
        ev("tool.execution_complete", 5, {"toolCallId": "hostile-call", "success": False,
                                          "error": {"message": f"cat: {secret}: No such file", "code": "failure"},
                                          "turnId": "0", **interaction}),
        ev("session.error", 6, {"errorType": "model_call", "statusCode": 500, "message": f"upstream said {secret}"}),
        ev("assistant.turn_end", 7, {"turnId": "0", **interaction}),
        # Lines the decoder rejects, each carrying the secret (a line stamped ahead is kept now: no such line).
        f'{{"type":"user.message","data":{{"content":"{secret} and then the line was cut'.encode(),
        ev("user.message", 8, {"content": secret}).replace(ts.encode(), b"2026-01-01T00:00:00"),  # no time zone
        ev("user.message", 10, {"content": secret}).replace(secret.encode(), secret.encode() + b"\xff\xfe"),
        ev("user.message", 11, {"content": secret}).replace(secret.encode(), secret.encode() + b"\x00"),
        ev("user.message", 12, secret),  # data is not an object
        json.dumps([secret, "not an object"]).encode(),
        json.dumps({"data": {"content": secret}, "timestamp": ts}).encode(),  # no type
        next(line for line in lines if b'"type":"user.message"' in line),  # a duplicate id (the real prompt)
    ]
    folder = home / "session-state" / "hostile-secret"
    folder.mkdir(parents=True)
    path = folder / "events.jsonl"
    path.write_bytes(b"\n".join(lines + planted + [shutdown]) + b"\n")
    return path


def _first_event(url: str, headers: dict) -> bytes:
    """The first message of a Server-Sent Events stream."""
    with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=10) as response:
        lines = []
        while not lines or lines[-1].strip() or not any(line.startswith(b"data:") for line in lines):
            lines.append(response.readline())
        return b"".join(lines)


def _view_raw(daemon: DaemonProcess, sessions: list[str], browser) -> list[bytes]:
    """Everything the web view serves about the sessions: pages, JSON, the first message of each
    stream, and each page as the browser shows it with every span's details opened."""
    base = f"http://127.0.0.1:{daemon.port}"
    paths = ["/", "/api/sessions", "/api/sessions/stream"]
    for session_id in sessions:
        paths += [f"/session/{session_id}", f"/api/session/{session_id}", f"/api/session/{session_id}/stream"]
    auth = {"Authorization": f"Bearer {daemon.token}"}
    out = [_first_event(base + path, auth) if path.endswith("/stream")
           else urllib.request.urlopen(urllib.request.Request(base + path, headers=auth)).read() for path in paths]
    page = browser.page()
    page.goto(daemon.page_url())
    page.wait_for_selector("tr.session")
    out.append(page.content().encode())
    for session_id in sessions:
        page.goto(f"{base}/session/{session_id}")
        page.wait_for_selector(".span")
        for details in page.locator("details.interaction:not([open]) > summary").all():
            details.click()
        for row in page.locator(".span").all():
            row.click()
            out.append(page.locator("#details").inner_text().encode())
        out.append(page.content().encode())
    assert page.errors == []
    page.close()
    return out


def _scrape_raw(daemon: DaemonProcess) -> list[bytes]:
    """/metrics in both exposition formats, and /healthz."""
    out = []
    for url, accept in ((daemon.metrics_url, "text/plain"), (daemon.metrics_url, "application/openmetrics-text"),
                        (daemon.health_url, "*/*")):
        request = urllib.request.Request(url, headers={"Accept": accept})
        with urllib.request.urlopen(request, timeout=5) as response:
            out.append(response.read())
    return out


@pytest.fixture(scope="module")
def planted(cli, provider, tmp_path_factory, browser) -> Planted:
    """The capture-off daemon follows the real CLI while it echoes the secret, then the hostile
    session; everything it wrote, served (metrics, and the web view in a browser) and logged is kept."""
    root = tmp_path_factory.mktemp("privacy")
    home, state = root / "home", root / "state"
    (home / "session-state").mkdir(parents=True)
    secret = "pl4nted" + uuid.uuid4().hex
    with DaemonProcess(home, state, args=FAST) as daemon:  # default destination: state/traces.jsonl
        run = cli.run(prompt_for("echo_secret", secret, text=f"Please repeat {secret} back."), home=home,
                      port=provider.port, cwd=root / "work", autopilot=True)
        hostile = _hostile_session(home, run.events_path, secret)
        traces = state / "traces.jsonl"
        wait_for_keys(traces, expected_keys([run.events_path, hostile]), timeout=30)
        wait_until(lambda: value(daemon.scrape(), "copilot_otel_lines_rejected_total", reason="duplicate_id"),
                   what="the hostile session read to its end")
        scrapes = _scrape_raw(daemon) + _view_raw(daemon, [run.session_id, hostile.parent.name], browser)
    return Planted(secret, run, home, hostile, state, traces, daemon.log_text(), scrapes)


def test_the_secret_reaches_every_content_field(planted):
    """The planted session is a fair test: the secret is in every kind of content the CLI wrote."""
    events, secret = planted.run.events(), planted.secret

    def holds(kind, part, **match):
        return [e for e in events if e["type"] == kind and all(e.get(k) == v for k, v in match.items())
                and secret in json.dumps(e["data"].get(part))]

    assert holds("user.message", "content", agentId=None)
    assert [e for e in holds("user.message", "content") if e.get("agentId")], "the sub-agent's prompt"
    assert holds("assistant.message", "content")
    assert holds("tool.execution_start", "arguments")
    assert holds("tool.execution_complete", "result")
    assert holds("session.task_complete", "summary")
    assert secret in (planted.run.session_dir / "workspace.yaml").read_text()


def _leaks(blob: bytes, secret: str) -> list[str]:
    """Which forms of the secret occur in ``blob`` (whole, or either half)."""
    forms = {"secret": secret, "first half": secret[: len(secret) // 2], "second half": secret[len(secret) // 2:]}
    return [name for name, form in forms.items() if form.encode() in blob]


def test_capture_off_daemon_exports_serves_and_logs_no_content(planted):
    """Capture off: no trace, span attribute, event, metric label, log line (at debug level) or
    web view page, JSON or stream of the daemon holds any part of the secret, but for the session's name the web
    view shows its owner (workspace.yaml's, the first prompt's text); nor does anything it stored."""
    assert len(complete_lines_spans(planted.traces)) > 20  # something was exported
    name = read_name(planted.run.session_dir)
    assert planted.secret in name
    assert any(name.encode() in body for body in planted.scrapes)  # shown: the owner's
    forms = (name, json.dumps(name)[1:-1], html.escape(name, quote=False))  # as text, in JSON, in the page
    found = {}
    for path in sorted(planted.state_dir.rglob("*")):
        if path.is_file():
            found[str(path)] = _leaks(path.read_bytes(), planted.secret)
    found["daemon log"] = _leaks(planted.daemon_log.encode(), planted.secret)
    for i, body in enumerate(planted.scrapes):
        for form in forms:
            body = body.replace(form.encode(), b"<name>")
        found[f"scrape {i}"] = _leaks(body, planted.secret)
    assert " DEBUG " in planted.daemon_log or " INFO " in planted.daemon_log
    assert {where: what for where, what in found.items() if what} == {}


def test_capture_off_replay_exports_and_logs_no_content(planted, tmp_path):
    """Capture off: replay's traces, stdout and stderr (at debug level, with every skipped line
    reported) hold no part of the secret."""
    traces = tmp_path / "traces.jsonl"
    result = run_replay(str(planted.home), "--traces-file", str(traces), "--log-level", "debug")
    assert result.returncode == 0, result.stderr.decode()
    assert "skipped line" in result.stderr.decode()
    found = {name: _leaks(blob, planted.secret) for name, blob in
             (("traces", traces.read_bytes()), ("stdout", result.stdout), ("stderr", result.stderr))}
    assert {where: what for where, what in found.items() if what} == {}


# ------------------------------------------------------------------------ capture on


def _content(spans) -> dict[tuple[str, str], str]:
    """(span id, attribute, 'status' or 'exception') -> captured text: the content attributes, a failed
    tool's status message (its error text), the message of a session.error's exception event. Other
    status descriptions (an error type, "never ended: ...") hold no content."""
    out = {}
    for span in spans:
        out.update(_content_of(span.span_id, span.attributes, span.status_message,
                               [(event.name, event.attributes) for event in span.events]))
    return out


def _content_of(span_id: str, attributes: dict, status: str, events: list[tuple[str, dict]]) -> dict:
    """The captured text of one span, however it was read (a trace file, the web view's JSON); each text of a
    messages attribute apart (``attribute#n``)."""
    out = {}
    for attr in CONTENT_KEYS:
        if attr in MESSAGE_KEYS and attr in attributes:
            out.update({(span_id, f"{attr}#{n}"): text for n, text in enumerate(_texts(json.loads(attributes[attr])))})
        elif attr in attributes:
            out[(span_id, attr)] = attributes[attr]
    if status and attributes.get("gen_ai.operation.name") == "execute_tool" \
            and attributes.get("error.type") not in ("incomplete", "aborted"):
        out[(span_id, "status")] = status
    for name, event_attributes in events:
        if name == "exception" and "exception.message" in event_attributes:
            out[(span_id, "exception")] = event_attributes["exception.message"]
    return out


def _texts(messages: list) -> list[str]:
    """Every captured text of JSON messages (or system instruction parts): text parts, tool responses, and
    tool call arguments (as the compact JSON they are cut from when too long)."""
    out = []
    for item in messages:
        for part in item.get("parts", [item]):
            for key in ("content", "response", "arguments"):
                if key in part:
                    value = part[key]
                    out.append(value if isinstance(value, str) else json.dumps(value, separators=(",", ":"),
                                                                               ensure_ascii=False))
    return out


def _kind(where: str) -> str:
    """The attribute a _content key names (a messages attribute's texts are numbered)."""
    return where.split("#")[0]


def _replay_capture(planted, target: Path, *args: str, env: dict | None = None):
    result = run_replay(str(planted.home), "--traces-file", str(target), *args, env={**CAPTURE, **(env or {})})
    assert result.returncode == 0, result.stderr.decode()
    return read_spans(target)


def test_capture_on_exports_content_cut_to_the_limit(planted, tmp_path):
    """Capture on: the content is exported, each text cut to --content-max-chars (default 4096,
    also COPILOT_OTEL_CONTENT_MAX_CHARS), always the start of the full text."""
    secret = planted.secret
    full = _content(_replay_capture(planted, tmp_path / "full.jsonl", "--content-max-chars", str(10**6)))
    default = _content(_replay_capture(planted, tmp_path / "default.jsonl"))
    answer = echo_secret_answer(secret)
    assert len(answer) > 4096
    answers = {v for (_s, attr), v in full.items() if _kind(attr) == "gen_ai.output.messages"
               and v.startswith("The secret is")}
    assert answers == {answer}  # exported whole when the limit allows
    assert sorted(default) == sorted(full)
    for where, text in full.items():
        assert default[where] == text[:4096]
    assert {v for v in default.values() if v.startswith("The secret is")} == {answer[:4096]}
    prompt = next(e for e in planted.run.events() if e["type"] == "user.message")["data"]["content"]
    assert any(prompt in v for v in default.values())  # the prompt as the model got it (the CLI's transformedContent)
    for attr in CONTENT_KEYS:  # every kind of content field is exported with the secret in it
        if attr != "gen_ai.system_instructions":  # the CLI's own system prompt: no secret in it
            assert any(secret in v for (_s, a), v in default.items() if _kind(a) == attr), attr
    assert any(_kind(a) == "gen_ai.system_instructions" for (_s, a) in default)
    assert any(secret in v for (_s, a), v in default.items() if a == "status")
    assert any(secret in v for (_s, a), v in default.items() if a == "exception")  # the session.error's
    for limit_args, env in ((("--content-max-chars", "24"), None), ((), {"COPILOT_OTEL_CONTENT_MAX_CHARS": "24"})):
        short = _content(_replay_capture(planted, tmp_path / f"short-{bool(env)}.jsonl", *limit_args, env=env))
        assert sorted(short) == sorted(full)
        for where, text in full.items():
            assert short[where] == text[:24], where
        assert all(len(v) <= 24 for v in short.values())


def test_capture_on_daemon_cuts_content_and_keeps_it_out_of_metrics(planted, tmp_path):
    """Capture on in the daemon: spans carry content cut to --content-max-chars; metrics never do; the
    web view shows each span's content exactly as exported."""
    expected = MemorySink()
    files = [planted.run.events_path, planted.hostile]
    replay_files(files, expected, options=ModelOptions(capture_content=True, content_max_chars=64))
    traces = tmp_path / "traces.jsonl"
    with DaemonProcess(planted.home, tmp_path / "state", traces_file=traces, env=CAPTURE,
                       args=FAST + ("--content-max-chars", "64")) as daemon:
        wait_for_keys(traces, sorted(record_key(r) for r in expected.records), timeout=30)
        scrapes = _scrape_raw(daemon)
        shown = {}
        for path in files:
            body = daemon.api_get(f"/api/session/{path.parent.name}")
            for span in json.loads(body)["trace"]["spans"]:
                shown.update(_content_of(span["id"], span["attrs"], span["message"],
                                         [(event["name"], event["attrs"]) for event in span["events"]]))
    content = _content(complete_lines_spans(traces))
    assert any(planted.secret in v for v in content.values())
    assert max(len(v) for v in content.values()) == 64
    assert all(not _leaks(body, planted.secret) for body in scrapes)
    assert shown == content  # the web view shows the content exactly as the traces carry it


# ------------------------------------------------------------------------ OTLP headers


HEADER_FORMS = {
    "well-formed": "authorization=Bearer%20{token},x-tenant=team-a",
    "liberal": "authorization=Bearer {token}",
    "malformed": "authorization: Bearer {token}",  # a colon instead of '=': a common slip
}


def _otlp_env(port: int, protocol: str, form: str, token: str) -> dict:
    return {"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{port}", "OTEL_EXPORTER_OTLP_PROTOCOL": protocol,
            "OTEL_EXPORTER_OTLP_HEADERS": HEADER_FORMS[form].format(token=token), "OTEL_EXPORTER_OTLP_TIMEOUT": "1"}


COMBINATIONS = [(protocol, form) for protocol in ("grpc", "http/protobuf") for form in sorted(HEADER_FORMS)]


def test_otlp_headers_never_in_replay_errors(planted, unused_port):
    """replay against an endpoint that refuses connections fails (exit 1) without printing the
    token from OTEL_EXPORTER_OTLP_HEADERS (at debug level), whatever form the headers take,
    over gRPC and HTTP. (The combinations run at once: each waits out the exporter's retries.)"""
    from concurrent.futures import ThreadPoolExecutor

    def attempt(combination):
        protocol, form = combination
        token = "tok" + uuid.uuid4().hex
        result = run_replay(str(planted.run.session_dir), "--log-level", "debug", "--give-up-after", "1",
                            "--state-dir", str(planted.run.home.parent / f"state-{uuid.uuid4().hex}"),
                            env=_otlp_env(unused_port, protocol, form, token))
        output = result.stdout + result.stderr
        problems = []
        if form == "malformed":  # a configuration error: stop at once, naming the header, not its value
            if result.returncode != 2 or b"OTEL_EXPORTER_OTLP_HEADERS" not in output:
                problems.append(f"exit {result.returncode}, no clear configuration error")
        elif result.returncode != 1 or b"export failed" not in output:
            problems.append(f"exit {result.returncode}, no 'export failed'")
        problems += [f"{leak} of the token in: " + next(line for line in output.decode(errors="replace").splitlines()
                                                       if token[:10] in line or token[-10:] in line)
                     for leak in _leaks(output, token)[:1]]
        return problems

    with ThreadPoolExecutor(max_workers=len(COMBINATIONS)) as pool:
        results = dict(zip(COMBINATIONS, pool.map(attempt, COMBINATIONS)))
    assert {combination: problems for combination, problems in results.items() if problems} == {}


def test_otlp_headers_never_in_daemon_log(planted, tmp_path, unused_port):
    """The daemon, failing to export to an endpoint that refuses connections, reports the failure
    without the token, over gRPC and HTTP. (Malformed headers stop start-up: see the next test.)"""
    runs = {}
    for protocol, form in (("grpc", "liberal"), ("http/protobuf", "liberal")):
        token = "tok" + uuid.uuid4().hex
        daemon = DaemonProcess(planted.home, tmp_path / f"state-{protocol.replace('/', '-')}",
                               env=_otlp_env(unused_port, protocol, form, token), args=FAST)
        runs[(protocol, form)] = (daemon, token)
    try:
        for daemon, _token in runs.values():
            daemon.start()
        for daemon, _token in runs.values():
            wait_until(lambda daemon=daemon: "copilot_otel.delivery.queue" in daemon.log_text(), timeout=30,
                       what="our export warning")
    finally:
        for daemon, _token in runs.values():
            daemon.kill9()  # the logs are complete up to here; a graceful stop waits out the retries
    problems = {}
    for combination, (daemon, token) in runs.items():
        log = daemon.log_text()
        assert f"127.0.0.1:{unused_port}" in log  # the failure is reported...
        leaked = [line for line in log.splitlines() if token[:10] in line or token[-10:] in line]
        if leaked:
            problems[combination] = leaked[0]  # ...without the token
    assert problems == {}


def test_malformed_otlp_headers_stop_the_daemon_without_the_token(planted, tmp_path, unused_port):
    """A header written 'key: value' is a configuration error: one line naming the variable and
    the header, exit 2, and the value (a token) nowhere."""
    token = "tok" + uuid.uuid4().hex
    result = subprocess.run([sys.executable, "-m", "copilot_otel.cli.main", "run", "--copilot-home", str(planted.home),
                             "--state-dir", str(tmp_path / "state"), "--metrics-address", f"127.0.0.1:{unused_port}"],
                            env={**{k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "COPILOT_"))},
                                 **_otlp_env(unused_port, "http/protobuf", "malformed", token)},
                            capture_output=True, timeout=60)
    output = (result.stdout + result.stderr).decode()
    assert result.returncode == 2
    assert "OTEL_EXPORTER_OTLP_HEADERS" in output and "'authorization'" in output
    assert token[:10] not in output and token[-10:] not in output


# ------------------------------------------------------------------------ where /metrics listens


def _listeners(pid: int) -> set[tuple[str, int]]:
    """(address, port) of the TCP sockets listening in the network namespace of ``pid``."""
    out = set()
    for name, width in (("tcp", 8), ("tcp6", 32)):
        try:
            rows = Path(f"/proc/{pid}/net/{name}").read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            address, port = fields[1].split(":")
            if fields[3] == "0A":  # LISTEN
                host = ".".join(str(b) for b in reversed(bytes.fromhex(address))) if width == 8 else address
                out.add((host, int(port, 16)))
    return out


def _daemon_in_private_network(tmp_path: Path, *args: str) -> tuple[str, set]:
    """Run the daemon in a network namespace of its own (nothing it binds is reachable from
    outside), with the given flags; return its log and what it listened on."""
    unshare = "/usr/bin/unshare"
    probe = subprocess.run([unshare, "--net", "true"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip(f"cannot create a private network namespace: {probe.stderr.decode(errors='replace').strip()}")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "COPILOT_"))}
    log_path = tmp_path / "daemon.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen([unshare, "--net", sys.executable, "-m", "copilot_otel.cli.main", "run",
                                 "--copilot-home",
                                 str(tmp_path / "home"), "--state-dir", str(tmp_path / "state"), *args], env=env,
                                stdin=subprocess.DEVNULL, stdout=log, stderr=log)
    try:
        wait_until(lambda: "metrics on http" in log_path.read_text() or proc.poll() is not None, timeout=20,
                   what="the daemon to start")
        listening = _listeners(proc.pid)
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGTERM)
        proc.wait(timeout=15)
    return log_path.read_text(), listening


def test_metrics_listen_on_loopback_by_default(tmp_path):
    """With no --metrics-address, /metrics listens on 127.0.0.1:9464 only, and nothing is said
    about a wider bind."""
    log, listening = _daemon_in_private_network(tmp_path)
    assert listening == {("127.0.0.1", 9464)}, log
    assert "beyond this machine" not in log


def test_wider_bind_is_explicit_and_logged(tmp_path):
    """--metrics-address 0.0.0.0:PORT listens on every interface, and says so in a warning."""
    log, listening = _daemon_in_private_network(tmp_path, "--metrics-address", "0.0.0.0:9464")
    assert listening == {("0.0.0.0", 9464)}, log
    warning = [line for line in log.splitlines() if " WARNING " in line and "0.0.0.0:9464" in line]
    assert warning, log
