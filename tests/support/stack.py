"""The real backends deploy/ ships, on loopback, built from their Go modules by scripts/backends.sh: the
OpenTelemetry Collector gateway running deploy/otelcol/gateway.yaml itself, Jaeger v2 (Badger storage, so that a
restart keeps what it stored) with its query API, and Prometheus 3 with its OTLP receiver. Each binds free
127.0.0.1 ports and is stopped by its pid.

``backend(name)`` finds a built binary: scripts/test.sh builds them before the tests and exports
``COPILOT_OTEL_BACKENDS_BIN``; a plain ``pytest`` runs the script itself. A build that fails fails the test with
the script's message (module and version), never a skip.
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import signal
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
import yaml
from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

from tests.support.net import LOOPBACK, answers_ok, free_ports
from tests.support.otlp_json import _fix_ids
from tests.support.otlp_receiver import ReceivedSpan, spans_from_request
from tests.support.prometheus_harness import Prometheus
from tests.support.scrape import Samples, parse
from tests.support.servers import ServerProcess

REPO = Path(__file__).resolve().parents[2]
GATEWAY_CONFIG = REPO / "deploy" / "otelcol" / "gateway.yaml"
PROMETHEUS_CONFIG = REPO / "deploy" / "prometheus" / "prometheus.yml"
RULES_FOLDER = REPO / "deploy" / "prometheus" / "rules"
BIN_ENV = "COPILOT_OTEL_BACKENDS_BIN"


def backend(name: str) -> Path:
    """The built binary ``name`` (otelcol-copilot, jaeger, prometheus, promtool)."""
    folder = os.environ.get(BIN_ENV)
    if not folder:
        # The machine's cache, not the test run's own home (tests/support/home.py): a build is minutes.
        cache = Path(pwd.getpwuid(os.getuid()).pw_dir) / ".cache" / "copilot-otel" / "backends"
        built = subprocess.run([str(REPO / "scripts" / "backends.sh")], capture_output=True, text=True,
                               env={**os.environ, "COPILOT_OTEL_BACKENDS": os.environ.get("COPILOT_OTEL_BACKENDS",
                                                                                           str(cache))})
        if built.returncode != 0:
            pytest.fail(f"the backends could not be built (scripts/backends.sh):\n{built.stderr}", pytrace=False)
        folder = built.stdout.strip().splitlines()[-1]
        os.environ[BIN_ENV] = folder
    path = Path(folder) / name
    if not os.access(path, os.X_OK):
        pytest.fail(f"{path} is missing: scripts/backends.sh builds it", pytrace=False)
    return path


def _get_json(url: str, timeout: float = 10.0) -> dict | None:
    """GET a JSON document; None on 404."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return json.load(response)
    except urllib.error.HTTPError as error:
        if error.code == 404:
            return None
        raise


class Gateway(ServerProcess):
    """otelcol-copilot running deploy/otelcol/gateway.yaml as shipped; only the variables the file reads point it
    at this test's Jaeger, Prometheus, queue folder and loopback ports. ``kill()`` is a SIGKILL; ``start()``
    again brings it back on the same ports and queue."""

    name = "otelcol"

    def __init__(self, workdir: Path, *, traces_to: str, metrics_to: str, queue_dir: Path | None = None,
                 config: Path = GATEWAY_CONFIG, env: dict[str, str] | None = None) -> None:
        super().__init__(workdir)  # self.port: the health_check extension
        self.queue_dir = Path(queue_dir) if queue_dir else self.workdir / "queue"
        self.config = config
        self.variables = {"JAEGER_OTLP_ENDPOINT": traces_to, "PROMETHEUS_OTLP_ENDPOINT": metrics_to,
                          "GATEWAY_QUEUE_DIR": str(self.queue_dir), **self._listening(), **(env or {})}

    def pick_ports(self) -> None:
        super().pick_ports()
        self.grpc_port, self.http_port, self.telemetry_port = free_ports(3)
        if hasattr(self, "variables"):  # picked anew after a port was taken
            self.variables.update(self._listening())

    def _listening(self) -> dict[str, str]:
        return {
            "GATEWAY_OTLP_GRPC_ENDPOINT": f"{LOOPBACK}:{self.grpc_port}",
            "GATEWAY_OTLP_HTTP_ENDPOINT": f"{LOOPBACK}:{self.http_port}",
            "GATEWAY_HEALTH_ENDPOINT": f"{LOOPBACK}:{self.port}",
            "GATEWAY_TELEMETRY_HOST": LOOPBACK, "GATEWAY_TELEMETRY_PORT": str(self.telemetry_port),
        }

    @property
    def grpc_endpoint(self) -> str:
        return f"http://{LOOPBACK}:{self.grpc_port}"

    @property
    def http_endpoint(self) -> str:
        return f"http://{LOOPBACK}:{self.http_port}"

    def argv(self) -> list[str]:
        return [str(backend("otelcol-copilot")), f"--config={self.config}"]

    def start(self) -> Gateway:
        self._launch(self.argv, env=lambda: {**os.environ, **self.variables})
        return self

    def start_unready(self) -> None:
        """Start it without waiting: a test kills it while it starts (opening and compacting its queue)."""
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(self.argv(), env={**os.environ, **self.variables}, stdout=log,
                                         stderr=log, stdin=subprocess.DEVNULL)

    def _ready(self) -> bool:
        assert self.proc is not None  # called after the launch
        if self.proc.poll() is not None:
            raise AssertionError(f"the gateway exited: {self.log_path.read_text()[-3000:]}")
        return answers_ok(f"{self.url}/")  # health_check: 200 once every pipeline runs

    def kill(self) -> None:
        """SIGKILL: no flush, no shutdown; what it held only in memory is gone."""
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)

    def telemetry(self, timeout: float = 10.0) -> Samples:
        """The gateway's own metrics (otelcol_receiver_accepted_spans, otelcol_exporter_sent_spans...)."""
        with urllib.request.urlopen(f"http://{LOOPBACK}:{self.telemetry_port}/metrics", timeout=timeout) as response:
            return parse(response.read().decode())


class Jaeger(ServerProcess):
    """Jaeger v2 (one binary: OTLP receiver, storage, query API) on loopback ports. ``storage="badger"`` (on disk)
    keeps what was stored across a restart, as a deployment's Jaeger keeps it, and stores a span written twice
    once; ``"memory"`` keeps every span it is sent, duplicates too, for as long as it runs. ``url`` is the query
    service (the API and, in a release image, the UI)."""

    name = "jaeger"

    def __init__(self, workdir: Path, storage: str = "badger") -> None:
        super().__init__(workdir)  # self.port: jaeger_query's HTTP endpoint
        self.storage = storage

    def pick_ports(self) -> None:
        super().pick_ports()
        self.otlp_grpc_port, self.otlp_http_port, self.query_grpc_port, self.health_port = free_ports(4)

    @property
    def otlp_endpoint(self) -> str:
        """host:port of its OTLP gRPC receiver (what the gateway's JAEGER_OTLP_ENDPOINT takes)."""
        return f"{LOOPBACK}:{self.otlp_grpc_port}"

    def settings(self) -> dict:
        return {
            "service": {"extensions": ["jaeger_storage", "jaeger_query", "healthcheckv2"],
                        "pipelines": {"traces": {"receivers": ["otlp"], "processors": [],
                                                 "exporters": ["jaeger_storage_exporter"]}},
                        "telemetry": {"metrics": {"level": "none"}, "logs": {"level": "info"}}},
            "extensions": {
                "healthcheckv2": {"use_v2": True, "http": {"endpoint": f"{LOOPBACK}:{self.health_port}"}},
                "jaeger_query": {"storage": {"traces": "store"},
                                 "http": {"endpoint": f"{LOOPBACK}:{self.port}"},
                                 "grpc": {"endpoint": f"{LOOPBACK}:{self.query_grpc_port}"}},
                "jaeger_storage": {"backends": {"store": self._storage()}},
            },
            "receivers": {"otlp": {"protocols": {"grpc": {"endpoint": self.otlp_endpoint},
                                                 "http": {"endpoint": f"{LOOPBACK}:{self.otlp_http_port}"}}}},
            # No batch processor and no queue: a span is in storage before the receiver answers.
            "exporters": {"jaeger_storage_exporter": {"trace_storage": "store"}},
        }

    def _storage(self) -> dict:
        if self.storage == "memory":
            return {"memory": {"max_traces": 1_000_000}}
        data = str(self.workdir / "badger")
        return {"badger": {"directories": {"keys": data, "values": data}, "ephemeral": False, "ttl": {"spans": "2h"}}}

    def start(self) -> Jaeger:
        self._launch(self._argv)
        return self

    def _argv(self) -> list[str]:
        config = self.workdir / "jaeger.yaml"
        self.workdir.mkdir(parents=True, exist_ok=True)
        config.write_text(json.dumps(self.settings()))
        return [str(backend("jaeger")), f"--config={config}"]

    def _ready(self) -> bool:
        assert self.proc is not None  # called after the launch
        if self.proc.poll() is not None:
            raise AssertionError(f"jaeger exited: {self.log_path.read_text()[-3000:]}")
        return answers_ok(f"{self.url}/api/services")

    def trace(self, trace_id: str) -> list[ReceivedSpan]:
        """Every span Jaeger holds of one trace, through the v3 query API (OTLP JSON); [] if it has none."""
        body = _get_json(f"{self.url}/api/v3/traces/{trace_id}")
        if body is None:
            return []
        request = json_format.Parse(json.dumps(_fix_ids(body["result"])),
                                    trace_service_pb2.ExportTraceServiceRequest(), ignore_unknown_fields=True)
        return spans_from_request(request)

    def ui_trace(self, trace_id: str) -> dict | None:
        """The trace as the web UI loads it for /trace/<id> (/api/traces/<id>: Jaeger's own JSON model)."""
        return _get_json(f"{self.url}/api/traces/{trace_id}")

    def services(self) -> list[str]:
        return (_get_json(f"{self.url}/api/services") or {}).get("data") or []

    def operations(self, service: str) -> list[str]:
        return (_get_json(f"{self.url}/api/services/{urllib.parse.quote(service)}/operations") or {}).get(
            "data") or []

    def search(self, service: str, *, operation: str | None = None, tags: dict[str, str] | None = None,
               lookback_s: float = 30 * 24 * 3600, limit: int = 1000) -> set[str]:
        """The trace ids the UI's search finds (/api/traces: service, operation, tags), over ``lookback_s``."""
        now_us = int(time.time() * 1e6)
        query = {"service": service, "limit": str(limit), "start": str(now_us - int(lookback_s * 1e6)),
                 "end": str(now_us + 3600 * 10**6)}
        if operation:
            query["operation"] = operation
        if tags:
            query["tags"] = json.dumps(tags)
        body = _get_json(f"{self.url}/api/traces?" + urllib.parse.urlencode(query)) or {}
        return {trace["traceID"] for trace in body.get("data") or []}


def prometheus3(workdir: Path, targets: list[str], *, trace_url: str, rule_files: list[Path] | None = None,
                **options) -> Prometheus:
    """Prometheus 3 (built from its module) with its OTLP receiver and exemplar storage on, running
    deploy/prometheus/prometheus.yml with deploy/'s rules. What differs from the file, and only that: the
    targets (this test's daemons), the rules' folder (this checkout's), every interval (1 s instead of 15 s, so
    a test takes seconds), the trace link template (this test's Jaeger) and, where given, ``rule_files`` (a
    test's copy of the rules that says what it changed)."""
    settings = yaml.safe_load(PROMETHEUS_CONFIG.read_text())
    settings["global"]["scrape_interval"] = settings["global"]["evaluation_interval"] = "1s"
    settings["global"]["external_labels"]["copilot_trace_url"] = trace_url
    settings["rule_files"] = [str(RULES_FOLDER / Path(pattern).name) for pattern in settings["rule_files"]]
    if rule_files is not None:
        settings["rule_files"] = [str(path) for path in rule_files]
    (job,) = settings["scrape_configs"]
    job["static_configs"] = [{"targets": targets}]
    return Prometheus(workdir, targets, binary=backend("prometheus"), settings=settings,
                      flags=("--web.enable-otlp-receiver", "--enable-feature=exemplar-storage"), **options)


class TcpRelay:
    """A TCP relay on a free loopback port to ``target`` (host:port): what a network between two servers does.
    ``cut()`` closes its port and every connection through it (the far side is down, as its peer sees it);
    ``mend()`` listens again on the same port. Stops by itself at the end of its ``with`` block."""

    def __init__(self, target: str) -> None:
        host, port = target.rsplit(":", 1)
        self.target = (host, int(port))
        (self.port,) = free_ports(1)
        self._lock = threading.Lock()
        self._listener: socket.socket | None = None
        self._connections: list[socket.socket] = []
        self._threads: list[threading.Thread] = []

    @property
    def address(self) -> str:
        return f"{LOOPBACK}:{self.port}"

    def mend(self) -> None:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((LOOPBACK, self.port))
        listener.listen(64)
        self._listener = listener
        self._spawn(self._accept, listener)

    def cut(self) -> None:
        with self._lock:
            listener, self._listener = self._listener, None
            connections, self._connections = self._connections, []
        for sock in ([listener] if listener else []) + connections:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()
        for thread in self._threads:
            thread.join(timeout=5)
        self._threads = [t for t in self._threads if t.is_alive()]

    def _spawn(self, target, *args) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True)
        self._threads.append(thread)
        thread.start()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                near, _ = listener.accept()
            except OSError:
                return
            try:
                far = socket.create_connection(self.target, timeout=5)
            except OSError:
                near.close()
                continue
            with self._lock:
                if self._listener is not listener:
                    near.close()
                    far.close()
                    return
                self._connections += [near, far]
            self._spawn(self._pipe, near, far)
            self._spawn(self._pipe, far, near)

    @staticmethod
    def _pipe(source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (source, sink):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)

    def __enter__(self) -> TcpRelay:
        self.mend()
        return self

    def __exit__(self, *exc) -> None:
        self.cut()
