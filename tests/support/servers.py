"""A server binary (Prometheus, Alertmanager) on a free loopback port, with its log in its own folder."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path

from tests.support.net import answers_ok, free_port, port_taken, retry_taken_port, wait_until


class ServerProcess:
    """One server process: started with ``_launch(argv)``, ready once its ``/-/ready`` answers 200, stopped by
    its pid (SIGTERM, then SIGKILL)."""

    name = "server"

    def __init__(self, workdir: Path) -> None:
        self.workdir = Path(workdir)
        self.proc: subprocess.Popen | None = None
        self.pick_ports()

    def pick_ports(self) -> None:
        """Pick free loopback ports for what it listens on (a subclass with more ports picks those too)."""
        self.port = free_port()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.workdir / f"{self.name}.log"

    def start(self) -> ServerProcess:
        raise NotImplementedError

    def _launch(self, argv: Callable[[], list[str]], env: Callable[[], dict[str, str]] | None = None) -> None:
        """Start ``argv()`` (``env()``: its whole environment; default this one's), its output appended to the log.
        Both are called again with new ports when, on its first start, another process took one of them."""
        first = self.proc is None
        offset = 0

        def launch() -> None:
            nonlocal offset
            self.workdir.mkdir(parents=True, exist_ok=True)
            offset = self.log_path.stat().st_size if self.log_path.exists() else 0
            log = open(self.log_path, "ab")  # noqa: SIM115 - the process's log, handed to it and closed here
            try:
                self.proc = subprocess.Popen(argv(), stdout=log, stderr=log, stdin=subprocess.DEVNULL,
                                             env=env() if env else None)
            finally:
                log.close()
            wait_until(self._ready, timeout=30, what=f"{self.name} /-/ready")

        def taken() -> bool:
            exited = self.proc is not None and self.proc.poll() is not None
            return first and exited and port_taken(self.log_path.read_bytes()[offset:].decode(errors="replace"))

        retry_taken_port(launch, taken, self.pick_ports)

    def _ready(self) -> bool:
        assert self.proc is not None  # called after the launch
        if self.proc.poll() is not None:
            raise AssertionError(f"{self.name} exited: {self.log_path.read_text()[-2000:]}")
        return answers_ok(f"{self.url}/-/ready")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=5)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
