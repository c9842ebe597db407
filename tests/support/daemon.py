"""The one harness that runs the real ``copilot-otel run`` as a subprocess (tests and bench/)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from tests.support.commands import COMMAND, REPO, clean_env
from tests.support.net import LOOPBACK, free_port, port_taken, retry_taken_port, wait_until
from tests.support.scrape import Samples, fetch, parse, value
from tests.support.viewclient import serving


class DaemonProcess:
    """``copilot-otel run`` on a home and a state dir, metrics on a free loopback port; stopped by its pid.

    ``args``: extra flags; ``env``: extra variables (OTEL_* and COPILOT_* of this process are
    not passed on); ``log_level`` and ``log_path``: where its log goes (by default next to the
    state dir). ``prefix``: a command to run it under (e.g. ``AS_NOBODY``). ``address``: the loopback
    address it listens on (a fleet's machines each have their own, 127.0.0.x).
    """

    def __init__(self, home: Path, state_dir: Path, *, traces_file: Path | None = None, env: dict | None = None,
                 args: tuple[str, ...] | list[str] = (), log_level: str = "debug", log_path: Path | None = None,
                 prefix: tuple[str, ...] = (), address: str = LOOPBACK) -> None:
        self.home, self.state_dir, self.traces_file = Path(home), Path(state_dir), traces_file
        self.address = address
        self.port = free_port()
        self.extra_env = env or {}
        self.args = tuple(args)
        self.log_level = log_level
        self.prefix = prefix
        self.proc: subprocess.Popen | None = None
        self.started_at = 0.0  # time.monotonic() at start()
        self.log_path = Path(log_path) if log_path else self.state_dir.parent / f"daemon-{self.port}.log"

    @property
    def metrics_url(self) -> str:
        return f"http://{self.address}:{self.port}/metrics"

    @property
    def health_url(self) -> str:
        return f"http://{self.address}:{self.port}/healthz"

    @property
    def token(self) -> str:
        """The web view's token, from the file the daemon keeps in its state dir (as `copilot-otel open` reads it)."""
        return view_token(self.state_dir, self.port)

    def page_url(self, path: str = "/") -> str:
        """A page of the web view opened the way `copilot-otel open` opens it: with its token in the fragment
        (the page keeps it in its origin's storage)."""
        return f"http://{self.address}:{self.port}{path}#token={self.token}"

    def api_get(self, path: str, timeout: float = 30.0, headers: dict | None = None) -> bytes:
        """GET ``path`` of the web view with the token (Authorization: Bearer), as a script would."""
        request = urllib.request.Request(f"http://{self.address}:{self.port}{path}",
                                         headers={"Authorization": f"Bearer {self.token}", **(headers or {})})
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.read()

    @property
    def pid(self) -> int:
        assert self.proc is not None, "daemon not started"
        return self.proc.pid

    def argv(self) -> list[str]:
        """The command line it runs."""
        argv = [*self.prefix, *COMMAND, "run", "--copilot-home", str(self.home), "--state-dir", str(self.state_dir),
                "--metrics-address", f"{self.address}:{self.port}", "--log-level", self.log_level, *self.args]
        if self.traces_file is not None:
            argv += ["--traces-file", str(self.traces_file)]
        return argv

    def start(self, timeout: float = 20.0) -> DaemonProcess:
        """Start it and wait until /healthz answers. On its first start, a port that another process took since
        it was picked is picked anew (a restart keeps its port: scrapers know it)."""
        first = self.proc is None
        offset = [0]

        def launch() -> None:
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
            offset[0] = self.log_path.stat().st_size if self.log_path.exists() else 0
            log = open(self.log_path, "ab")  # noqa: SIM115 - the daemon's log, open while it runs
            try:
                self.started_at = time.monotonic()
                self.proc = subprocess.Popen(self.argv(), env=clean_env(self.extra_env), stdin=subprocess.DEVNULL,
                                             stdout=log, stderr=log, cwd=REPO)
            finally:
                log.close()
            wait_until(self._ready, timeout=timeout, what="daemon /healthz",
                       seen=lambda: f"its log: {self.log_text()[-2000:]}")

        def taken() -> bool:
            exited = self.proc is not None and self.proc.poll() is not None
            return first and exited and port_taken(self.log_path.read_bytes()[offset[0]:].decode(errors="replace"))

        def repick() -> None:
            self.port = free_port()

        retry_taken_port(launch, taken, repick)
        serving(self.port, self.state_dir)
        return self

    def _exited(self) -> None:
        if self.proc is not None and self.proc.poll() is not None:
            raise AssertionError(f"daemon exited with {self.proc.returncode}: {self.log_text()[-3000:]}")

    def _ready(self) -> bool:
        self._exited()
        try:
            fetch(self.health_url, timeout=1)
            return True
        except urllib.error.HTTPError:
            return True  # it answers, unhealthy (a test may want exactly that)
        except OSError:
            return False

    def scrape_text(self, timeout: float = 5.0) -> str:
        """/metrics as text."""
        return fetch(self.metrics_url, timeout)

    def scrape(self, timeout: float = 5.0) -> Samples:
        """/metrics as samples."""
        return parse(self.scrape_text(timeout))

    def wait_for_metric(self, name: str, at_least: float, timeout: float, *, interval: float = 0.1,
                        **labels: str) -> float:
        """Wait until sample ``name`` is at least ``at_least``; return the seconds since start()."""

        last: list[object] = [None]

        def reached() -> bool:
            self._exited()
            try:
                got = value(self.scrape(timeout=30), name, **labels)
            except OSError as error:  # a scrape that timed out while the daemon is busy
                last[0] = error
                return False
            last[0] = got
            return got >= at_least

        wait_until(reached, timeout=timeout, interval=interval, what=f"{name} >= {at_least}", seen=lambda: last[0])
        return time.monotonic() - self.started_at

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 15.0) -> int:
        """Send ``sig`` to our daemon (by pid) and wait for it to exit; return its exit code."""
        proc = self.proc
        if proc is None:
            return 0
        if proc.poll() is None:
            os.kill(proc.pid, sig)
        try:
            return proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=5)
            raise AssertionError(f"daemon did not exit within {timeout} s of signal {sig}") from None

    def kill9(self) -> None:
        self.stop(signal.SIGKILL)

    def __enter__(self) -> DaemonProcess:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def one_session_daemon(root: Path, session_id: str, **start) -> DaemonProcess:
    """A daemon (to start with ``with``) over a home in ``root`` holding one finished session, traces to a file."""
    from tests.support.files import ended_session

    ended_session(root / "home", session_id, **start)
    return DaemonProcess(root / "home", root / "state", traces_file=root / "traces.jsonl")


def view_token(state_dir: Path, port: int) -> str:
    """The token a daemon or `view` on ``port`` keeps in ``state_dir``."""
    return json.loads((Path(state_dir) / f"web-{port}.json").read_text())["token"]


def complete_lines_spans(path: Path):
    """Spans of an OTLP JSON lines file that a daemon may still be writing (complete lines only)."""
    from tests.support.otlp_json import read_spans

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
    probe = subprocess.run([*AS_NOBODY, sys.executable, "-c", "import copilot_otel.cli.main"], capture_output=True,
                           cwd=REPO)
    if probe.returncode != 0:
        return f"cannot run the daemon as nobody: {probe.stderr.decode(errors='replace')[-300:]}"
    return None
