"""kill -9 at any moment loses nothing and re-sends nothing differently (docs/reliability.md).

The real daemon is killed with SIGKILL while session logs are written, and restarted, several times.
Logs are real CLI logs (the corpus, stored logs of providers that reuse response ids, and ~20 MB logs
grown from real ones). What must be in the trace file at the end is the replay of the final logs.
"""

from __future__ import annotations

import json
import random
import threading
import time
from itertools import pairwise
from pathlib import Path

from tests.support.biglog import grow
from tests.support.daemon import DaemonProcess
from tests.support.files import append, new_session
from tests.support.spans import expected_keys, wait_for_keys

FAST = ("--idle-quiet", "0.3", "--rescan-interval", "1")


def lines_of(run) -> list[bytes]:
    return run.events_path.read_bytes().splitlines(keepends=True)


def _kill9_loop(tmp_path, paths, pieces: list[list[bytes]], *, kills: int, seed: int, timeout: float = 60) -> None:
    """Append ``pieces[i]`` to ``paths[i]`` in a random interleaving while the daemon is killed with
    SIGKILL ``kills`` times and restarted; then every span of the final logs must be in the trace file,
    each exactly as a replay makes it (a re-sent span that differs would be a key of its own), and
    every line of the file whole."""
    home, traces, state = paths[0].parent.parent.parent, tmp_path / "traces.jsonl", tmp_path / "state"
    rng = random.Random(seed)
    done = threading.Event()

    def writer():
        cursors = [0] * len(paths)
        while any(c < len(pieces[i]) for i, c in enumerate(cursors)):
            i = rng.randrange(len(paths))
            if cursors[i] < len(pieces[i]):
                append(paths[i], pieces[i][cursors[i]])
                cursors[i] += 1
                time.sleep(0.001)  # the scenario: a log written in small pieces
        done.set()

    thread = threading.Thread(target=writer)
    daemon = DaemonProcess(home, state, traces_file=traces, args=FAST).start()
    thread.start()
    try:
        for _ in range(kills):
            time.sleep(rng.uniform(0.3, 0.8))  # the scenario: a kill at a random moment
            daemon.kill9()
            daemon = DaemonProcess(home, state, traces_file=traces, args=FAST).start()
        thread.join(timeout=180)
        assert done.is_set()
        wait_for_keys(traces, expected_keys(paths), timeout=timeout)
    finally:
        thread.join(timeout=180)
        daemon.stop()
    assert all(json.loads(line) for line in traces.read_bytes().splitlines())


def test_kill9_in_a_busy_stream(cli_corpus, tmp_path):
    """kill -9 twice while many sessions are written: after restarts nothing is lost and every
    re-sent span is identical to the first copy."""
    sources = [lines_of(run) for run in cli_corpus.values()]
    paths = [new_session(tmp_path / "home", f"busy-{i:02d}") for i in range(24)]
    _kill9_loop(tmp_path, paths, [sources[i % len(sources)] for i in range(len(paths))], kills=2, seed=7)


def test_kill9_with_a_provider_that_reuses_response_ids(tmp_path):
    """The same kill -9 loop on real logs of a provider that gives every LLM call the same response id
    (and of one that draws them from a pool of two): nothing lost, nothing re-sent differently."""
    stored = Path(__file__).resolve().parents[1] / "fixtures" / "cli" / "1.0.102"
    sources = [next((stored / scenario / "session-state").glob("*/events.jsonl")).read_bytes()
               .splitlines(keepends=True) for scenario in ("reused_ids", "id_pool")]
    paths = [new_session(tmp_path / "home", f"reused-{i:02d}") for i in range(12)]
    _kill9_loop(tmp_path, paths, [sources[i % 2] for i in range(len(paths))], kills=3, seed=11)


def test_kill9_while_20_mb_logs_are_written(tmp_path):
    """kill -9 three times while three ~20 MB logs (real events, grown; response ids reused) arrive in
    pieces cut anywhere, even mid-line: nothing lost, nothing re-sent differently, no torn line."""
    stored = Path(__file__).resolve().parents[1] / "fixtures" / "cli" / "1.0.102"
    rng = random.Random(5)
    pieces = []
    for scenario in ("reused_ids", "subagent", "multi_turn"):
        data = grow(next((stored / scenario / "session-state").glob("*/events.jsonl")).read_bytes(), 20 << 20)
        cuts = [0]
        while cuts[-1] < len(data):
            cuts.append(min(len(data), cuts[-1] + rng.randrange(64 << 10, 512 << 10)))
        pieces.append([data[a:b] for a, b in pairwise(cuts)])
    paths = [new_session(tmp_path / "home", f"big-{i}") for i in range(3)]
    _kill9_loop(tmp_path, paths, pieces, kills=3, seed=13, timeout=240)
