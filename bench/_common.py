"""Helpers shared by the benchmark scripts: ports, the daemon subprocess, /proc figures, statistics.

Not a test helper: every script here prints figures, nothing asserts.
"""

from __future__ import annotations

import os
import signal
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEFAULT_SOURCE = Path("/tmp/corpus/home_all")
CLK_TCK = os.sysconf("SC_CLK_TCK")


def copilot_otel_bin() -> list[str]:
    """The command that runs copilot-otel: the venv's entry point next to this Python, else -m."""
    exe = Path(sys.executable).with_name("copilot-otel")
    if exe.exists():
        return [str(exe)]
    return [sys.executable, "-c", "from copilot_otel.cli import main; main()"]


def free_port() -> int:
    """A loopback port nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def median(values) -> float:
    return statistics.median(values)


def percentile(values, q: float) -> float:
    """The q-th percentile (0..100), nearest-rank on sorted values."""
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    rank = max(0, min(len(ordered) - 1, int(round(q / 100.0 * len(ordered) + 0.5)) - 1))
    return ordered[rank]


# ---------------------------------------------------------------- /proc

def cpu_seconds(pid: int) -> float:
    """utime + stime of a process (all its threads), in seconds."""
    with open(f"/proc/{pid}/stat") as handle:
        text = handle.read()
    fields = text[text.rindex(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # fields 14 and 15 of stat(5)


def rss_mb(pid: int) -> float:
    """VmRSS of a process in MiB."""
    with open(f"/proc/{pid}/status") as handle:
        for line in handle:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    return float("nan")


# ---------------------------------------------------------------- the daemon

def http_get(url: str, timeout: float = 10.0) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return response.read()


def metric_value(text: str, name: str) -> float | None:
    """The value of an unlabelled sample ``name`` in Prometheus text, or None."""
    for line in text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{}"):
            return float(line.rsplit(" ", 1)[1])
    return None


def metric_samples(text: str, name: str) -> dict[str, float]:
    """Every sample of ``name`` (labels text -> value)."""
    out = {}
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            key, value = line.rsplit(" ", 1)
            out[key[len(name):]] = float(value)
    return out


class DaemonProcess:
    """`copilot-otel run` as a subprocess on a free loopback port; stopped by its pid on exit."""

    def __init__(self, copilot_home: Path, work: Path, *, extra_args: list[str] | None = None,
                 traces_file: Path | None = None, env: dict[str, str] | None = None) -> None:
        self.copilot_home = Path(copilot_home)
        self.work = Path(work)
        self.port = free_port()
        self.traces_file = traces_file or self.work / "traces.jsonl"
        self.state_dir = self.work / "state"
        self.log_path = self.work / "daemon.log"
        self.args = copilot_otel_bin() + [
            "run", "--copilot-home", str(self.copilot_home), "--state-dir", str(self.state_dir),
            "--metrics-address", f"127.0.0.1:{self.port}", "--traces-file", str(self.traces_file),
            "--log-level", "warning",
        ] + list(extra_args or [])
        self.env = dict(os.environ)
        self.env.pop("OTEL_EXPORTER_OTLP_ENDPOINT", None)
        self.env.update(env or {})
        self.proc: subprocess.Popen | None = None
        self.started_at = 0.0

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/metrics"

    def start(self, ready_timeout: float = 30.0) -> "DaemonProcess":
        self.work.mkdir(parents=True, exist_ok=True)
        self._log = open(self.log_path, "ab")
        self.started_at = time.monotonic()
        self.proc = subprocess.Popen(self.args, stdout=self._log, stderr=subprocess.STDOUT, env=self.env,
                                     stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + ready_timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"daemon exited with {self.proc.returncode}; see {self.log_path}:\n"
                                   + self.log_path.read_text(errors="replace")[-2000:])
            try:
                http_get(f"http://127.0.0.1:{self.port}/healthz", timeout=1.0)
                return self
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"daemon not serving after {ready_timeout} s; see {self.log_path}")
                time.sleep(0.02)

    def scrape(self, timeout: float = 30.0) -> str:
        return http_get(self.metrics_url, timeout=timeout).decode()

    def wait_for_metric(self, name: str, at_least: float, timeout: float, *, interval: float = 0.1) -> float:
        """Poll /metrics until ``name`` >= at_least; return the seconds since start()."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                value = metric_value(self.scrape(), name)
            except OSError:
                value = None
            if value is not None and value >= at_least:
                return time.monotonic() - self.started_at
            if time.monotonic() > deadline:
                raise RuntimeError(f"{name} = {value}, still below {at_least} after {timeout} s")
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"daemon exited with {self.proc.returncode}; see {self.log_path}")
            time.sleep(interval)

    def stop(self, timeout: float = 20.0) -> int | None:
        """SIGTERM by pid, wait, then SIGKILL by pid if it has not gone."""
        proc, self.proc = self.proc, None
        if proc is None:
            return None
        if proc.poll() is None:
            try:
                os.kill(proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait()
        self._log.close()
        return proc.returncode

    def __enter__(self) -> "DaemonProcess":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def add_daemon_options(parser, *, settle: float, daemon_arg_help: str = "") -> None:
    """The options both daemon benchmarks take: settle time, start-up timeout, extra daemon flags."""
    parser.add_argument("--settle", type=float, default=settle, help=f"wait before measuring, s (default {settle})")
    parser.add_argument("--startup-timeout", type=float, default=300.0)
    parser.add_argument("--daemon-arg", action="append", default=[],
                        help="extra argument for `copilot-otel run` (repeatable)" + daemon_arg_help)


def machine() -> str:
    """A one-line description of this machine."""
    model = "?"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{os.cpu_count()} cores ({model}), Python {sys.version.split()[0]}"


# ---------------------------------------------------------------- waiting for a file to grow

class FileGrowth:
    """Wakes up when a file is modified: inotify (IN_MODIFY) through ctypes, else a tight stat loop."""

    IN_MODIFY = 0x00000002

    def __init__(self, path: Path, *, use_inotify: bool = True) -> None:
        import ctypes
        import select

        self.path = Path(path)
        self._fd = -1
        self._poller = None
        if use_inotify:
            try:
                libc = ctypes.CDLL(None, use_errno=True)
                fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
                if fd >= 0 and libc.inotify_add_watch(fd, os.fsencode(self.path), self.IN_MODIFY) >= 0:
                    self._fd = fd
                    self._poller = select.poll()
                    self._poller.register(fd, select.POLLIN)
                elif fd >= 0:
                    os.close(fd)
            except (OSError, AttributeError):
                self._fd = -1
        self.mechanism = "inotify" if self._fd >= 0 else "stat polling (0.2 ms)"
        self._size = self.path.stat().st_size

    def wait(self, timeout: float) -> bool:
        """Block until the file was modified (True) or ``timeout`` seconds passed (False)."""
        if self._fd >= 0:
            if not self._poller.poll(timeout * 1000.0):
                return False
            try:
                while os.read(self._fd, 4096):
                    pass
            except BlockingIOError:
                pass
            return True
        deadline = time.perf_counter() + timeout
        while time.perf_counter() < deadline:
            size = os.stat(self.path).st_size
            if size != self._size:
                self._size = size
                return True
            time.sleep(0.0002)
        return False

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
