"""Issue 21, items 5 and 6: what `copilot-otel replay` and the daemon do against a backend that lies or trickles.

Prints, for the code of a checkout (this one by default; ``--checkout /work/main`` for another):

* trickle: a backend that sends its headers, then one byte every ``--trickle`` seconds (5): how long
  ``replay --give-up-after 20`` runs (default OTLP timeout, 10 s; cut off at ``--cap`` seconds), what
  the daemon's /healthz says after 25 s, and how long SIGTERM takes to end the daemon;
* lies: for each 2xx that is no OTLP answer (tests/support/liars.py), replay's exit code, the spans it
  says it exported, and whether it kept its ledger.

Every process runs here, on loopback; nothing is asserted (the tests do that).

    .venv/bin/python bench/lying_backend_bench.py [--checkout PATH] [--trickle 5] [--cap 200]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import REPO  # puts the repository on sys.path

from tests.support.liars import LIES, Answer, LyingBackend
from tests.support.net import free_port

LOG = next((REPO / "tests" / "fixtures" / "cli" / "1.0.102" / "multi_turn" / "session-state").iterdir())


def command(*args: str) -> list[str]:
    """copilot-otel ARGS, from the checkout that is the working directory."""
    return [sys.executable, "-m", "copilot_otel.cli.main", *args]


def env_for(checkout: Path, base: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "COPILOT_"))}
    env.update({"PYTHONPATH": str(checkout), "OTEL_EXPORTER_OTLP_ENDPOINT": base,
                "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"})
    return env


def replay(checkout: Path, base: str, state: Path, cap: float, *args: str) -> tuple[int | None, float, str]:
    """(exit code or None if cut off, seconds, stderr) of a replay of one real session."""
    started = time.monotonic()
    process = subprocess.Popen(command("replay", str(LOG), "--state-dir", str(state), *args),
                               env=env_for(checkout, base), cwd=checkout, stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
    try:
        _out, err = process.communicate(timeout=cap)
        code = process.returncode
    except subprocess.TimeoutExpired:
        os.kill(process.pid, signal.SIGKILL)
        _out, err = process.communicate()
        code = None
    return code, time.monotonic() - started, err.decode(errors="replace")


def daemon_under_trickle(checkout: Path, base: str, work: Path) -> tuple[str, float]:
    """(/healthz after 25 s, seconds from SIGTERM to exit) of the daemon exporting to ``base``."""
    home = work / "home"
    (home / "session-state").mkdir(parents=True)
    shutil.copytree(LOG, home / "session-state" / LOG.name)
    port = free_port()
    process = subprocess.Popen(command("run", "--copilot-home", str(home), "--state-dir", str(work / "state"),
                                       "--metrics-address", f"127.0.0.1:{port}", "--idle-quiet", "0.3"),
                               env=env_for(checkout, base), cwd=checkout, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
    try:
        time.sleep(25)
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as response:
                said = response.read().decode()
        except OSError as exc:
            said = f"(no answer: {exc})"
        started = time.monotonic()
        os.kill(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=120)
        except subprocess.TimeoutExpired:
            os.kill(process.pid, signal.SIGKILL)
            process.wait()
        return said, time.monotonic() - started
    finally:
        if process.poll() is None:
            os.kill(process.pid, signal.SIGKILL)
            process.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkout", type=Path, default=REPO, help="the copilot-otel checkout to run")
    parser.add_argument("--trickle", type=float, default=5.0, help="seconds between the trickled bytes")
    parser.add_argument("--cap", type=float, default=200.0, help="cut a replay off after this long")
    options = parser.parse_args()
    checkout = options.checkout.resolve()
    print(f"checkout {checkout}")
    trickle = Answer(200, "application/x-protobuf", b"\0" * 200, trickle=options.trickle)
    with tempfile.TemporaryDirectory() as scratch, LyingBackend(trickle) as backend:
        work = Path(scratch)
        code, seconds, err = replay(checkout, backend.base, work / "r", options.cap, "--give-up-after", "20")
        shown = "cut off" if code is None else f"exit {code}"
        print(f"trickle ({options.trickle:g} s a byte): replay --give-up-after 20: {shown} after {seconds:.1f} s")
        said, stop = daemon_under_trickle(checkout, backend.base, work / "d")
        print(f"trickle: daemon /healthz after 25 s: {said}")
        print(f"trickle: daemon SIGTERM to exit: {stop:.1f} s")
    for name, answer in sorted(LIES.items()):
        with tempfile.TemporaryDirectory() as scratch, LyingBackend(answer) as backend:
            state = Path(scratch) / "state"
            code, seconds, err = replay(checkout, backend.base, state, options.cap, "--give-up-after", "2")
            exported = re.search(r"exported (\d+) spans", err)
            kept = bool(list((state / "replay").glob("*.sqlite"))) if (state / "replay").exists() else False
            print(f"lie {name}: replay exit {code} in {seconds:.1f} s, says exported "
                  f"{exported.group(1) if exported else '?'} spans, ledger kept: {kept}")


if __name__ == "__main__":
    main()
