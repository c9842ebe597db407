"""The real OpenTelemetry Collector (``otelcol-copilot``, built from its Go modules by scripts/backends.sh) as an
OTLP receiver on loopback that writes what it receives to files: what a logs or trace backend behind it gets.

The binary is found in ``$COPILOT_OTEL_BACKENDS_BIN`` (the folder that holds it), else in the folder
``scripts/backends.sh`` prints (building it on a machine's first run). A test that needs it fails when it
cannot be had: a missing backend is a broken test machine, not a reason to pass.
"""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path
from typing import Any

import orjson

from tests.support.net import LOOPBACK, free_ports, port_taken, retry_taken_port, wait_until
from tests.support.stack import backend

BINARY = "otelcol-copilot"


def collector_binary() -> Path:
    """The otelcol-copilot binary; fails the test (never skips it) when there is none (tests/support/stack.py)."""
    return backend(BINARY)


class Collector:
    """``otelcol-copilot`` with an OTLP receiver (gRPC and HTTP on free loopback ports, or the ones given) whose
    logs and traces pipelines write OTLP JSON lines (the contrib file exporter) to ``logs_file`` and
    ``traces_file``. Started by ``start()`` or ``with``; stopped by its pid."""

    def __init__(self, folder: Path, *, grpc_port: int | None = None, http_port: int | None = None) -> None:
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.chosen = (grpc_port, http_port)
        self.pick_ports()
        self.logs_file = self.folder / "logs.jsonl"
        self.traces_file = self.folder / "traces.jsonl"
        self.config_file = self.folder / "otelcol.yaml"
        self.output = self.folder / "otelcol.out"
        self.proc: subprocess.Popen | None = None

    def pick_ports(self) -> None:
        """Free loopback ports for the receiver, where none were given."""
        ports = free_ports(2)
        self.grpc_port = self.chosen[0] or ports[0]
        self.http_port = self.chosen[1] or ports[1]

    @property
    def grpc_endpoint(self) -> str:
        return f"http://{LOOPBACK}:{self.grpc_port}"

    @property
    def http_endpoint(self) -> str:
        return f"http://{LOOPBACK}:{self.http_port}"

    def config(self) -> str:
        # The file exporter flushes every 100 ms; the Collector's own telemetry binds no port.
        return f"""
receivers:
  otlp:
    protocols:
      grpc:
        endpoint: {LOOPBACK}:{self.grpc_port}
      http:
        endpoint: {LOOPBACK}:{self.http_port}
exporters:
  file/logs:
    path: {self.logs_file}
    flush_interval: 100ms
  file/traces:
    path: {self.traces_file}
    flush_interval: 100ms
service:
  telemetry:
    metrics:
      level: none
  pipelines:
    logs:
      receivers: [otlp]
      exporters: [file/logs]
    traces:
      receivers: [otlp]
      exporters: [file/traces]
"""

    def start(self) -> Collector:
        """Start it and wait until its receiver's ports answer (on new ones, the first time, if another process
        took one it picked)."""
        first, offset = self.proc is None, 0

        def launch() -> None:
            nonlocal offset
            self.config_file.write_text(self.config())
            offset = self.output.stat().st_size if self.output.exists() else 0
            with open(self.output, "ab") as out:
                self.proc = subprocess.Popen([str(collector_binary()), "--config", str(self.config_file)],
                                             stdin=subprocess.DEVNULL, stdout=out, stderr=out)
            wait_until(self._ready, timeout=30, what=f"the Collector's receiver ({self.output})")

        def taken() -> bool:
            exited = self.proc is not None and self.proc.poll() is not None
            chose = self.chosen == (None, None)
            return first and chose and exited and port_taken(self.output.read_bytes()[offset:].decode(errors="replace"))

        retry_taken_port(launch, taken, self.pick_ports)
        return self

    def _ready(self) -> bool:
        import socket

        if self.proc is not None and self.proc.poll() is not None:
            raise AssertionError(f"the Collector exited with {self.proc.returncode}: "
                                 f"{self.output.read_text(errors='replace')[-3000:]}")
        try:
            for port in (self.grpc_port, self.http_port):
                socket.create_connection((LOOPBACK, port), timeout=1).close()
            return True
        except OSError:
            return False

    def stop(self) -> None:
        """Stop it (SIGTERM, by pid) and wait for it to exit: what it received is in its files."""
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return
        os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=5)

    def __enter__(self) -> Collector:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def log_records(self) -> list[LogLine]:
        """Every log record written so far (whole lines only), with its resource."""
        return log_records(self.logs_file)


def _value(any_value: dict[str, Any]) -> Any:
    if "stringValue" in any_value:
        return any_value["stringValue"]
    if "intValue" in any_value:
        return int(any_value["intValue"])
    if "doubleValue" in any_value:
        return float(any_value["doubleValue"])
    if "boolValue" in any_value:
        return any_value["boolValue"]
    if "arrayValue" in any_value:
        return [_value(v) for v in any_value["arrayValue"].get("values", [])]
    return None


def attributes(pairs: list[dict[str, Any]] | None) -> dict[str, Any]:
    """OTLP JSON key-values as a dict."""
    return {pair["key"]: _value(pair.get("value", {})) for pair in pairs or []}


class LogLine:
    """One log record as the Collector's file exporter wrote it."""

    def __init__(self, record: dict[str, Any], resource: dict[str, Any], scope: str) -> None:
        self.time_ns = int(record.get("timeUnixNano", 0))
        self.severity = int(record.get("severityNumber", 0)) if not isinstance(record.get("severityNumber"), str) \
            else record["severityNumber"]
        self.severity_text = record.get("severityText", "")
        self.event_name = record.get("eventName", "")
        self.trace_id = record.get("traceId", "")
        self.span_id = record.get("spanId", "")
        self.body = _value(record["body"]) if record.get("body") else None
        self.attributes = attributes(record.get("attributes"))
        self.resource = resource
        self.scope = scope

    @property
    def event_id(self) -> str:
        return self.attributes.get("github.copilot.event.id", "")


def log_records(path: Path) -> list[LogLine]:
    """The log records of an OTLP JSON lines file (a line not yet whole is left for later)."""
    if not path.exists():
        return []
    records: list[LogLine] = []
    for line in path.read_bytes().splitlines(keepends=True):
        if not line.endswith(b"\n"):
            break
        request = orjson.loads(line)
        for resource_logs in request.get("resourceLogs", []):
            resource = attributes(resource_logs.get("resource", {}).get("attributes"))
            for scope_logs in resource_logs.get("scopeLogs", []):
                scope = scope_logs.get("scope", {}).get("name", "")
                records.extend(LogLine(r, resource, scope) for r in scope_logs.get("logRecords", []))
    return records

