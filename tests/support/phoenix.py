"""A real Arize Phoenix server on loopback, for tests: the GenAI backend that renders conversations.

``arize-phoenix`` (pinned in the test extra) installs the ``phoenix`` command beside this Python. ``Phoenix``
runs ``phoenix serve`` on free loopback ports (``PHOENIX_PORT`` serves the UI, the REST API and OTLP/HTTP on
``/v1/traces``; ``PHOENIX_GRPC_PORT`` OTLP/gRPC), with its SQLite database in a folder of the caller's
(``PHOENIX_WORKING_DIR``) and its telemetry off, waits for ``/healthz``, and stops it by its pid::

    with Phoenix(tmp_path / "phoenix") as phoenix:
        ... export to phoenix.base (OTLP http/protobuf) ...
        spans = phoenix.spans("my-project")   # the REST API: each span with its attributes as Phoenix stored them

A span's project is its resource's ``openinference.project.name`` (``default`` without one). Phoenix 20 starts in
about 25 s of CPU (its database migrations, its imports): tests start one per module.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

from tests.support.net import LOOPBACK, answers_ok, free_ports, port_taken, retry_taken_port, wait_until

PHOENIX = Path(sys.executable).parent / "phoenix"
START_TIMEOUT = 600.0  # seconds: a 2-core machine that other test runs load can take minutes
PROJECT_RESOURCE = "openinference.project.name"


class Phoenix:
    """``phoenix serve`` on 127.0.0.1, its data in ``workdir``; stopped (by pid) at the end of its ``with``."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = Path(workdir)
        self.port, self.grpc_port = free_ports(2)
        self.base = f"http://{LOOPBACK}:{self.port}"
        self._process: subprocess.Popen | None = None
        self.started_in: float = 0.0

    def __enter__(self) -> Phoenix:
        if not PHOENIX.is_file():
            raise RuntimeError(f"no {PHOENIX}: install the test extra (pip install -e '.[test]'), "
                               "which pins arize-phoenix")
        self.workdir.mkdir(parents=True, exist_ok=True)
        log_path = self.workdir / "phoenix.log"
        started = time.monotonic()

        def launch() -> None:
            env = {key: value for key, value in os.environ.items() if not key.startswith(("PHOENIX_", "OTEL_"))}
            env.update(PHOENIX_WORKING_DIR=str(self.workdir), PHOENIX_HOST=LOOPBACK, PHOENIX_PORT=str(self.port),
                       PHOENIX_GRPC_PORT=str(self.grpc_port), PHOENIX_TELEMETRY_ENABLED="false")
            log = open(log_path, "wb")  # noqa: SIM115 - the server's log, handed to it and closed here
            self._process = subprocess.Popen([str(PHOENIX), "serve"], env=env, stdout=log, stderr=subprocess.STDOUT,
                                             stdin=subprocess.DEVNULL, cwd=self.workdir, start_new_session=True)
            log.close()
            try:
                wait_until(self._healthy, timeout=START_TIMEOUT, interval=0.5, what="Phoenix's /healthz")
            except BaseException:
                self.stop()
                raise

        def taken() -> bool:  # stop() has ended it; its log says why
            return port_taken(log_path.read_text(errors="replace"))

        def repick() -> None:
            self.port, self.grpc_port = free_ports(2)
            self.base = f"http://{LOOPBACK}:{self.port}"

        retry_taken_port(launch, taken, repick)
        self.started_in = time.monotonic() - started
        return self

    def _healthy(self) -> bool:
        if self._process is not None and self._process.poll() is not None:
            tail = (self.workdir / "phoenix.log").read_bytes()[-2000:].decode(errors="replace")
            raise RuntimeError(f"phoenix serve exited {self._process.returncode}: {tail}")
        return answers_ok(f"{self.base}/healthz", timeout=5)

    def __exit__(self, *exc) -> None:
        self.stop()

    def stop(self) -> None:
        """SIGTERM to the server (by its pid), SIGKILL if it has not exited within 20 s."""
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)

    def get(self, path: str) -> dict:
        with urllib.request.urlopen(f"{self.base}{path}", timeout=60) as answer:
            return json.load(answer)

    def wait_for_spans(self, project: str, count: int, timeout: float = 120.0) -> list[dict]:
        """The project's spans once there are ``count`` (Phoenix writes what it received a moment later)."""
        def stored() -> list[dict]:
            try:
                spans = self.spans(project)
            except urllib.error.HTTPError as error:
                if error.code == 404:  # the project is made with its first span
                    return []
                raise
            return spans if len(spans) >= count else []
        return wait_until(stored, timeout=timeout, interval=0.5, what=f"{count} spans in Phoenix's {project}")

    def project_id(self, name: str) -> str:
        """The project's id as the UI's URLs hold it."""
        return next(project["id"] for project in self.get("/v1/projects")["data"] if project["name"] == name)

    def spans(self, project: str) -> list[dict]:
        """Every span Phoenix stored in ``project`` (REST ``/v1/projects/<project>/spans``): name, context
        (trace and span ids), its id for the UI, and its attributes, the OpenInference ones Phoenix made on
        ingest included."""
        found, cursor = [], None
        while True:
            query = {"limit": "1000", **({"cursor": cursor} if cursor else {})}
            page = self.get(f"/v1/projects/{urllib.parse.quote(project)}/spans?{urllib.parse.urlencode(query)}")
            found += page["data"]
            cursor = page.get("next_cursor")
            if not cursor:
                return found

    def span_url(self, project: str, span: dict) -> str:
        """The UI page of ``span``'s trace with the span selected."""
        return (f"{self.base}/projects/{self.project_id(project)}/traces/{span['context']['trace_id']}"
                f"?selectedSpanNodeId={urllib.parse.quote(span['id'])}")
