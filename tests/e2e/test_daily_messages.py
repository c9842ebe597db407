"""Daily use, fourth pass (issue 44), with the real processes: /healthz on a machine where the CLI never ran,
/api/session/ by a unique start of an id, and `replay` to an endpoint nobody answers saying early that it
retries, and where."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import threading
import time
import urllib.request
from pathlib import Path

from tests.support import viewclient as view_api
from tests.support.commands import COMMAND, REPO, clean_env
from tests.support.daemon import DaemonProcess
from tests.support.net import wait_until

CLI = Path(__file__).resolve().parent.parent / "fixtures" / "cli" / "1.0.102"


def health(daemon: DaemonProcess) -> tuple[int, str]:
    status, _headers, body = view_api.get(daemon.port, "/healthz")
    return status, body.decode()


def first_message(port: int, path: str) -> str:
    """The data of the first Server-Sent Event of a stream of the view that carries data."""
    request = urllib.request.Request(view_api.url(port, path), headers=view_api.headers(port))
    with urllib.request.urlopen(request, timeout=30) as response:
        assert response.status == 200
        while True:
            line = response.readline()
            assert line, "the stream ended"
            if line.startswith(b"data:"):
                return line.decode()


def test_healthz_waits_for_a_copilot_home_not_there_yet_and_follows_it_once_it_comes(tmp_path):
    """No COPILOT_HOME (a daemon installed on a machine where nobody ran the CLI yet): /healthz is 200 and says
    what it waits for, past the minute that used to make it 503; once the CLI writes a session, plain ok and the
    session is listed."""
    home = tmp_path / ".copilot"
    with DaemonProcess(home, tmp_path / "state", args=("--rescan-interval", "0.5")) as daemon:
        waiting = (200, f"ok (waiting for {home}: no Copilot CLI has run here yet "
                        "(or COPILOT_HOME names another folder))\n")
        wait_until(lambda: health(daemon) == waiting, timeout=10, what="/healthz waiting")  # once it looked
        time.sleep(1.5)  # three rescans later: still waiting, still 200 (a condition that must not change)
        assert health(daemon) == waiting
        (log,) = (CLI / "plain").glob("session-state/*/events.jsonl")
        shutil.copytree(log.parent, home / "session-state" / log.parent.name)
        wait_until(lambda: health(daemon) == (200, "ok\n"), timeout=30, what="/healthz ok")
        wait_until(lambda: [r["id"] for r in view_api.get_json(daemon.port, "/api/sessions")["sessions"]]
                   == [log.parent.name], timeout=30, what="the session listed")


def test_the_api_takes_a_unique_start_of_a_session_id_as_the_page_does(tmp_path):
    """/api/session/<first 4 characters> answers the session's own JSON (its row says the whole id) and so does
    its stream's first message; a start that two sessions share is 404 naming both; no session at all is 404."""
    home = tmp_path / "home"
    ids = []
    for scenario in ("plain", "multi_turn"):
        (log,) = (CLI / scenario).glob("session-state/*/events.jsonl")
        shutil.copytree(log.parent, home / "session-state" / log.parent.name)
        ids.append(log.parent.name)
    twin = ids[0][:2] + "ffffff-0000-4000-8000-000000000000"  # starts as the first does: a copy of its log
    shutil.copytree(home / "session-state" / ids[0], home / "session-state" / twin)
    (home / "session-state" / twin / "events.jsonl").write_text(
        (home / "session-state" / twin / "events.jsonl").read_text().replace(ids[0], twin))
    with DaemonProcess(home, tmp_path / "state", args=("--rescan-interval", "0.5")) as daemon:
        wait_until(lambda: len(view_api.get_json(daemon.port, "/api/sessions")["sessions"]) == 3, timeout=30,
                   what="three sessions")
        for sid in ids:
            prefix = sid[:4] if sid[:4] != twin[:4] else sid[:3]
            answer = view_api.get_json(daemon.port, f"/api/session/{prefix}")
            assert answer["session"]["id"] == sid and answer["trace"]["spans"]
            assert f'"id":"{sid}"' in first_message(daemon.port, f"/api/session/{prefix}/stream")
        status, _headers, body = view_api.get(daemon.port, f"/api/session/{ids[0][:2]}")
        assert status == 404 and sorted(json.loads(body)["matches"]) == sorted([ids[0], twin])
        assert json.loads(body)["error"] == f"several sessions start with {ids[0][:2]}"
        status, _headers, body = view_api.get(daemon.port, "/api/session/0000dead")
        assert status == 404 and json.loads(body) == {"error": "no session 0000dead (nor one starting with it)",
                                                      "matches": []}


def test_replay_to_an_endpoint_nobody_answers_says_early_that_it_retries_and_where(tmp_path):
    """OTLP/HTTP to a port where nothing listens, with the default give-up time (600 s): within a few seconds
    stderr names the endpoint, what is wrong in our words (no `ssl:default` on a plain http:// URL), that it
    retries and for how long; the replay is then stopped."""
    home = tmp_path / "home"
    (log,) = (CLI / "plain").glob("session-state/*/events.jsonl")
    shutil.copytree(log.parent, home / "session-state" / log.parent.name)
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    endpoint = f"http://127.0.0.1:{port}"
    env = clean_env({"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"})
    proc = subprocess.Popen([*COMMAND, "replay", "--copilot-home", str(home), "--state-dir", str(tmp_path / "state")],
                            env=env, cwd=REPO, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    said: list[str] = []
    reader = threading.Thread(target=lambda: said.extend(line.decode() for line in proc.stderr), daemon=True)
    started = time.monotonic()
    reader.start()
    try:
        line = wait_until(lambda: next((x for x in said if "retrying" in x), None), timeout=15,
                          what="a line saying it retries")
        took = time.monotonic() - started
    finally:
        os.kill(proc.pid, 15)
        proc.wait(30)
        reader.join(10)
    assert took < 10, took
    assert f"OTLP export to {endpoint}/v1/traces (http/protobuf) failed: nothing listens on 127.0.0.1:{port} " \
           "(connection refused); retrying in" in line, line
    assert "giving up after 600 s" in line and "ssl" not in line.lower(), line
