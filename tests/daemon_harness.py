"""Run the real `copilot-otel run` in a subprocess and read what it serves and writes."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Callable

from prometheus_client.parser import text_string_to_metric_families


def free_port() -> int:
    """A free loopback port (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_until(predicate: Callable[[], object], timeout: float = 20.0, interval: float = 0.05, what: str = ""):
    """Poll until ``predicate()`` is truthy; return its value or fail with ``what``."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what or predicate}")
        time.sleep(interval)


def scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """One /metrics scrape as {(sample name, sorted labels): value}."""
    with urllib.request.urlopen(url, timeout=5) as response:
        text = response.read().decode()
    samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def value(samples: dict, name: str, **labels: str) -> float:
    """A sample's value (0 when absent)."""
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


class DaemonProcess:
    """`python -m copilot_otel.cli run` on a temp home and state dir, metrics on a free port."""

    def __init__(self, home: Path, state_dir: Path, *, traces_file: Path | None = None, env: dict | None = None,
                 args: tuple[str, ...] = ()) -> None:
        self.home, self.state_dir, self.traces_file = Path(home), Path(state_dir), traces_file
        self.port = free_port()
        self.extra_env = env or {}
        self.args = args
        self.proc: subprocess.Popen | None = None
        self.log_path = self.state_dir.parent / f"daemon-{self.port}.log"

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/metrics"

    @property
    def health_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/healthz"

    def start(self) -> "DaemonProcess":
        env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "COPILOT_"))}
        env.update(self.extra_env)
        argv = [sys.executable, "-m", "copilot_otel.cli", "run", "--copilot-home", str(self.home),
                "--state-dir", str(self.state_dir), "--metrics-address", f"127.0.0.1:{self.port}",
                "--log-level", "debug", *self.args]
        if self.traces_file is not None:
            argv += ["--traces-file", str(self.traces_file)]
        self.state_dir.parent.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "ab")
        try:
            self.proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=log)
        finally:
            log.close()
        wait_until(self._ready, timeout=20, what=f"daemon /healthz (log: {self.log_text()[-2000:]})")
        return self

    def _ready(self) -> bool:
        if self.proc is not None and self.proc.poll() is not None:
            raise AssertionError(f"daemon exited with {self.proc.returncode}: {self.log_text()[-3000:]}")
        try:
            with urllib.request.urlopen(self.health_url, timeout=1) as response:
                return response.status == 200
        except OSError:
            return False

    def scrape(self) -> dict:
        return scrape(self.metrics_url)

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 15.0) -> int:
        """Send ``sig`` to our daemon (by pid) and wait for it to exit; return its exit code."""
        if self.proc is None:
            return 0
        if self.proc.poll() is None:
            os.kill(self.proc.pid, sig)
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=5)
            raise AssertionError(f"daemon did not exit within {timeout} s of signal {sig}")

    def kill9(self) -> None:
        self.stop(signal.SIGKILL)

    def __enter__(self) -> "DaemonProcess":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def complete_lines_spans(path: Path):
    """Spans of an OTLP JSON lines file that a daemon may still be writing (complete lines only)."""
    from tests.otlp_json import read_spans

    if not path.exists():
        return []
    data = path.read_bytes()
    cut = data.rfind(b"\n")
    if cut < 0:
        return []
    scratch = path.with_name(path.name + ".complete")
    scratch.write_bytes(data[: cut + 1])
    return read_spans(scratch)


# ------------------------------------------------------------------------ running as another user

SETPRIV = shutil.which("setpriv")
AS_NOBODY = (SETPRIV or "setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups")


def cannot_run_as_nobody() -> str | None:
    """Why this run (as root) cannot start copilot-otel as the user nobody, or None when it can.

    Root reads any file, so tests of permission errors run the daemon as nobody; that needs
    setpriv and a checkout that nobody may read (a clone inside a private folder is not)."""
    if SETPRIV is None:
        return "setpriv is missing: cannot run the daemon as another user"
    probe = subprocess.run([*AS_NOBODY, sys.executable, "-c", "import copilot_otel.cli"], capture_output=True,
                           cwd=Path(__file__).parent.parent)
    if probe.returncode != 0:
        return f"cannot run the daemon as nobody: {probe.stderr.decode(errors='replace')[-300:]}"
    return None
