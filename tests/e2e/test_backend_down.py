"""A trace backend that is down: the daemon backs off as its warnings say and stops promptly."""

from __future__ import annotations

import re
import shutil
import time
from datetime import datetime
from itertools import pairwise
from pathlib import Path

from tests.support.daemon import DaemonProcess
from tests.support.net import free_port, wait_until

FIXTURES = Path(__file__).parent.parent / "fixtures" / "cli" / "1.0.102"
WARNING = re.compile(r"^(\S+ \S+) WARNING copilot_otel\.delivery\.queue: .*UNAVAILABLE.*; retrying in ([\d.]+) s$",
                     re.M)


def real_home(home: Path) -> Path:
    """Every session the real CLI 1.0.102 wrote in the fixtures, in one home."""
    for scenario in sorted(FIXTURES.iterdir()):
        for folder in (scenario / "session-state").iterdir() if (scenario / "session-state").is_dir() else ():
            shutil.copytree(folder, home / "session-state" / folder.name, dirs_exist_ok=True)
    return home


def warnings(text: str) -> list[tuple[float, float]]:
    """(when, the delay it announced) of each export warning in a daemon's log."""
    return [(datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S,%f").timestamp(), float(delay))
            for stamp, delay in WARNING.findall(text)]


def test_a_down_backend_is_retried_after_the_delay_each_warning_announces_and_sigterm_is_prompt(tmp_path):
    """The fixtures' sessions read at start with gRPC to a port nobody listens on: each warning's delay is a full
    jitter draw below the doubling ceiling, and is followed by the next attempt only after the delay it states
    (before, ~30 warnings within 50 ms: every span the reader queued woke the retry), and SIGTERM does not wait out
    the 5 s flush for a backend known to be down."""
    home = real_home(tmp_path / "home")
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{free_port()}", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}
    daemon = DaemonProcess(home, tmp_path / "state", env=env, log_level="info").start()
    try:
        wait_until(lambda: len(warnings(daemon.log_text())) >= 3, timeout=60, what="three export warnings")
    finally:
        started = time.monotonic()
        code = daemon.stop()
        stopped_in = time.monotonic() - started
    seen = warnings(daemon.log_text())
    # full jitter: the k-th wait is drawn below a ceiling that doubles from 0.5 s (otlp/retry.py)
    assert all(0 <= delay <= 0.5 * 2 ** k + 0.05 for k, (_when, delay) in enumerate(seen[:3])), seen
    for (when, delay), (after, _next) in pairwise(seen):
        # the message rounds the wait to 0.1 s ("retrying in 0.2 s" for 0.15 s) and log stamps to the millisecond
        assert after - when >= delay - 0.06, (when, delay, after)
    assert code == 0
    assert stopped_in < 5.0, f"SIGTERM took {stopped_in:.1f} s with the backend down"
    assert "will be re-read on the next start" in daemon.log_text()
