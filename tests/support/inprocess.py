"""The daemon in this process: the real ``Daemon`` following real files in a thread, into a MemorySink.

For behaviour that needs no process of its own (the reader, the watcher, the queue, the checkpoint):
the same class ``copilot-otel run`` runs, without the process start, the HTTP endpoint or an encoding
sink. ``tests/support/daemon.py`` runs the real process where the process itself is under test.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

from click.testing import CliRunner, Result
from prometheus_client import generate_latest

from copilot_otel.cli.main import main
from copilot_otel.config import Config
from copilot_otel.daemon.daemon import Daemon
from copilot_otel.delivery.sinks import MemorySink
from copilot_otel.model.attrs import COPILOT_RUNNING
from copilot_otel.otlp.limits import clean
from tests.support.commands import SCRUBBED_PREFIXES, TEST_DEFAULTS
from tests.support.net import wait_until
from tests.support.scrape import Samples, parse
from tests.support.spans import record_key

# The flags DaemonProcess tests pass as FAST; and backfill, as clean_env sets it: the logs these tests follow are
# recorded history, older than a fresh state folder (tests of the default pass backfill=False).
FAST = {"idle_quiet": 0.3, "rescan_interval": 1.0, "backfill": True}


class InProcessDaemon:
    """``Daemon(Config(home, state, **settings))`` running in a thread while the ``with`` block lasts.

    ``sink``: where spans go (pass one sink to several daemons to see what a restart sends again); with a
    ``traces_file`` setting and no sink, the daemon's own file sink writes them there; ``log_sink``: where log
    records go (None: the daemon makes none)."""

    def __init__(self, home: Path, state_dir: Path, *, sink: MemorySink | None = None, log_sink=None,
                 **settings) -> None:
        self.config = Config(copilot_home=Path(home), state_dir=Path(state_dir), **{**FAST, **settings})
        self.sink = sink if sink is not None or self.config.traces_file else MemorySink()
        self.log_sink = log_sink
        self.daemon: Daemon | None = None
        self._thread: threading.Thread | None = None

    def __enter__(self) -> InProcessDaemon:
        (self.config.copilot_home / "session-state").mkdir(parents=True, exist_ok=True)
        self.daemon = Daemon(self.config, sink=self.sink, log_sink=self.log_sink)
        ready = threading.Event()
        self._thread = threading.Thread(target=self.daemon.run, args=(ready,), name="daemon-in-process")
        self._thread.start()
        assert ready.wait(30), "the in-process daemon did not start"
        return self

    def __exit__(self, *exc_info) -> None:
        assert self.daemon is not None and self._thread is not None  # set by __enter__
        self.daemon.request_stop()
        self._thread.join(30)
        assert not self._thread.is_alive(), "the in-process daemon did not stop within 30 s"

    def scrape(self) -> Samples:
        """What /metrics would show now."""
        assert self.daemon is not None, "scrape() inside the with block"
        return parse(generate_latest(self.daemon.metrics.registry).decode())

    def keys(self) -> list:
        """The keys of every span exported so far, sorted, duplicates kept (as an encoding sink writes them); a
        stuck session's snapshot of an open span (github.copilot.running: the fixtures' events are days old, so
        an open tool is stuck at once) is left out once its final span has come, as spans.spans_now does."""
        assert self.sink is not None, "keys() reads the memory sink (none with a traces_file setting)"
        with self.sink._lock:
            records = list(self.sink.records)
        final = {record.span_id for record in records if not record.attributes.get(COPILOT_RUNNING)}
        return sorted(record_key(clean(record)) for record in records
                      if not (record.attributes.get(COPILOT_RUNNING) and record.span_id in final))

    def wait_for_keys(self, expected: list, timeout: float = 20.0) -> list:
        """Wait until the exported spans are ``expected`` (as a set); return them all, duplicates too."""
        wanted = set(expected)
        wait_until(lambda: set(self.keys()) >= wanted, timeout=timeout, what=f"{len(wanted)} spans",
                   seen=lambda: f"missing {sorted(wanted - set(self.keys()))}")
        got = self.keys()
        assert set(got) == wanted
        return got


def run_command(*args: str, env: dict[str, str] | None = None, stdin: bytes | None = None) -> Result:
    """``copilot-otel ARGS`` in this process (click's CliRunner), in the environment ``run_copilot_otel`` gives the
    process: none of this one's OTEL_* and COPILOT_* variables, TEST_DEFAULTS, then ``env``; ``stdin`` its input.
    What it logs goes to the logging of this process (pytest's), not to the result's stderr."""
    scrubbed: dict[str, str | None] = {key: None for key in os.environ if key.startswith(SCRUBBED_PREFIXES)}
    return CliRunner().invoke(main, list(args), env={**scrubbed, **TEST_DEFAULTS, **(env or {})}, input=stdin)
