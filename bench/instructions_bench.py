"""Issue 25's figures: instructions per replay (callgrind), start-up, /metrics under a flood, inspect, idle.

- instructions: valgrind's callgrind counts the instructions of `copilot-otel replay HOME --workers 1`
  and of a python3 that `json.loads` every line of the same logs (all processes summed:
  --trace-children=yes). Counts do not depend on how busy the machine is. Corpus: --sessions
  real-shaped sessions (bench/corpus.py; 280 are about 16 MB). Target: replay <= 1.0x json.loads.
  The instructions of `inspect` of one session are printed too. With --digest the replay's traces file's SHA-256
  is printed too (output byte-identical across changes: compare it before and after).
- startup: `copilot-otel run` on --idle-folders small finished sessions, until /metrics says it follows
  them all (bench/daemon_bench.py's idle part), then idle CPU and RSS over --duration s. Target <= 5 s.
- startup-instructions: the daemon's instructions (callgrind) from its start until it follows
  --startup-folders idle folders and has exported their spans, and its stop: start-up changes compared
  however busy the machine is.
- flood: /metrics p99 while one session's log brings --tools distinct tool names
  (bench/attack_bench.py's tools part). Target < 50 ms. --rounds N repeats it; --against DIR runs, in each
  round, the daemon of another source tree first (main's, say), so that both meet the same load.
- inspect: wall time of `copilot-otel inspect` of one session of the corpus (median of 7). Target < 100 ms.

    python bench/instructions_bench.py                          # everything
    python bench/instructions_bench.py --only instructions --digest
    python bench/instructions_bench.py --only startup --idle-folders 10000 --duration 30
    git archive main | tar -x -C /tmp/main-tree
    python bench/instructions_bench.py --only flood --rounds 5 --against /tmp/main-tree
"""

from __future__ import annotations

import argparse
import glob
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import DEFAULT_SOURCE, bytecode_env, copilot_otel_bin, machine, median
from corpus import synthesize

BASELINE = """
import json, sys
loads = json.loads
for name in sys.argv[1:]:
    with open(name, encoding="utf-8") as handle:
        for line in handle:
            if line.strip():
                loads(line)
"""


def callgrind(argv: list[str], out: Path, env: dict[str, str] | None = None, *, output: Path | None = None) -> int:
    """Instructions executed by ``argv`` and every process it starts (callgrind, summed)."""
    out.mkdir(parents=True, exist_ok=True)
    subprocess.run(argv, check=True, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)  # once unmeasured: bytecode written, files in the page cache
    if output is not None:
        output.unlink(missing_ok=True)  # what that run wrote
    subprocess.run(["valgrind", "--tool=callgrind", "--trace-children=yes", "--dump-line=no",
                    f"--callgrind-out-file={out}/cg.%p", *argv], check=True, env=env, stdin=subprocess.DEVNULL,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    total = 0
    for name in glob.glob(f"{out}/cg.*"):
        with open(name, errors="replace") as handle:
            for line in handle:
                if line.startswith(("summary:", "totals:")):
                    total += int(line.split()[1])
                    break
    shutil.rmtree(out)
    return total


def events_files(home: Path) -> list[str]:
    return sorted(glob.glob(str(home / "session-state" / "*" / "events.jsonl")))


def instructions(args, home: Path, work: Path) -> None:
    files = events_files(home)
    size = sum(os.path.getsize(f) for f in files)
    lines = sum(Path(f).read_bytes().count(b"\n") for f in files)
    print(f"corpus: {len(files)} sessions, {lines} lines, {size / 1e6:.1f} MB")
    env = bytecode_env(work)
    base = callgrind(["python3", "-c", BASELINE, *files], work / "cg-base", env)
    traces = work / "traces.jsonl"
    replay = callgrind(copilot_otel_bin() + ["replay", str(home), "--workers", "1", "--traces-file", str(traces)],
                       work / "cg-replay", env, output=traces)
    print(f"{'':<44}{'instructions':>14}{'vs json.loads':>15}")
    print(f"{'json.loads of every line (python3)':<44}{base / 1e9:>12.2f} G{1.0:>15.2f}")
    # `python3` here is pyenv's shim, a bash script that finds the interpreter (about 135 M of the count): the
    # interpreter itself is counted as well, so that the ratio is clear either way.
    bare = callgrind([sys._base_executable, "-c", BASELINE, *files], work / "cg-bare", env)
    print(f"{'  the same, the interpreter without a shim':<44}{bare / 1e9:>12.2f} G{bare / base:>15.2f}")
    print(f"{'replay --workers 1 (all processes)':<44}{replay / 1e9:>12.2f} G{replay / base:>15.2f}"
          f"   target <= 1.0: {'met' if replay <= base else 'MISSED'}; "
          f"{replay / bare:.2f}x the interpreter's")
    one = Path(files[0]).parent
    inspect_count = callgrind(copilot_otel_bin() + ["inspect", str(one)], work / "cg-inspect", env)
    print(f"{'inspect of one session':<44}{inspect_count / 1e9:>12.2f} G")
    if args.digest:
        data = traces.read_bytes()
        print(f"traces file: {len(data)} bytes, sha256 {hashlib.sha256(data).hexdigest()}")
    traces.unlink(missing_ok=True)


def startup(args, work: Path) -> None:
    from daemon_bench import bench_idle
    options = SimpleNamespace(idle_folders=args.idle_folders, source=args.source, daemon_arg=[], settle=5.0,
                              startup_timeout=600.0, duration=args.duration)
    found = bench_idle(options, work)
    print(f"daemon start-up on {found['folders']} idle folders until all are followed: {found['startup']:.1f} s "
          f"(target <= 5: {'met' if found['startup'] <= 5 else 'MISSED'}); all exported at {found['drained']:.1f} s")
    print(f"  idle: CPU {found['cpu_pct']:.2f} % of one core over {found['seconds']:.0f} s, RSS {found['rss']:.1f} MB "
          f"(after start-up {found['rss_after_start']:.1f} MB, peak {found['hwm']:.1f} MB)")


def startup_instructions(args, work: Path) -> None:
    """Instructions of the daemon from its start until it follows --startup-folders idle folders (callgrind)."""
    from corpus import make_idle

    from tests.support.daemon import DaemonProcess
    from tests.support.scrape import value
    home = work / "startup-home"
    make_idle(home, args.startup_folders, source=args.source)
    out = work / "cg-startup"
    out.mkdir()
    env = {"PYTHONDONTWRITEBYTECODE": "", "PYTHONPYCACHEPREFIX": str(work / "pycache")}
    warm = DaemonProcess(home, work / "warm-state", traces_file=work / "warm.jsonl", env=env, log_level="warning")
    warm.start(timeout=300)  # unmeasured: writes the bytecode
    warm.stop()
    daemon = DaemonProcess(home, work / "startup-state", traces_file=work / "startup.jsonl", env=env,
                           log_level="warning", prefix=("valgrind", "--tool=callgrind", "--dump-line=no",
                                                         f"--callgrind-out-file={out}/cg.%p"))
    try:
        daemon.start(timeout=600)
        daemon.wait_for_metric("copilot_otel_files_watched", args.startup_folders, timeout=3600, interval=2.0)
        while value(daemon.scrape(timeout=60), "copilot_otel_export_queue_spans") > 0:
            time.sleep(1.0)
    finally:
        daemon.stop(timeout=600)
    total = 0
    for name in glob.glob(f"{out}/cg.*"):
        with open(name, errors="replace") as handle:
            total += next(int(line.split()[1]) for line in handle if line.startswith(("summary:", "totals:")))
    print(f"daemon start-up on {args.startup_folders} idle folders, until all are followed and exported, then "
          f"stopped: {total / 1e9:.2f} G instructions")


def flood(args, work: Path) -> None:
    """--rounds floods; with --against, each round floods that checkout's daemon first, then this one's (the
    machine's load drifts: compare within a round)."""
    from attack_bench import tool_flood
    sides = [("against", args.against), ("this", None)] if args.against else [("this", None)]
    figures: dict[str, list[dict[str, float]]] = {name: [] for name, _checkout in sides}
    for round_ in range(args.rounds):
        for name, checkout in sides:
            print(f"round {round_ + 1}, {name}{f' ({checkout})' if checkout else ''}; "
                  f"load average {os.getloadavg()[0]:.2f}")
            folder = work / f"flood-{round_}-{name}"
            figures[name].append(tool_flood(folder, args.tools, checkout=checkout))
            shutil.rmtree(folder, ignore_errors=True)
    if args.rounds > 1 or args.against:
        for name, rounds in figures.items():
            print(f"{name}: " + "; ".join(f"read {f['read_s']:.1f} s, p50 {f['p50_ms']:.0f}, p99 {f['p99_ms']:.0f} ms"
                                          for f in rounds))
        if args.against:
            ratios = [this["p99_ms"] / other["p99_ms"] for this, other in zip(figures["this"], figures["against"])]
            reads = [this["read_s"] / other["read_s"] for this, other in zip(figures["this"], figures["against"])]
            print(f"this / against, by round: p99 {' '.join(f'{r:.2f}' for r in ratios)}; "
                  f"read time {' '.join(f'{r:.2f}' for r in reads)}")


def inspect(args, home: Path) -> None:
    """Wall time of `inspect`, as an installed package runs (bytecode cached: pip compiles it at install), and as
    this checkout runs here (PYTHONDONTWRITEBYTECODE=1 compiles every module of ours at every start)."""
    from replay_bench import timed_command
    one = str(Path(events_files(home)[0]).parent)
    with tempfile.TemporaryDirectory(prefix="inspect-bench-") as tmp:
        env = bytecode_env(Path(tmp))
        timed_command(["inspect", one], env)  # bytecode written
        for label, environment, target in (("bytecode cached", env, True), ("compiled at each start", None, False)):
            walls = [timed_command(["inspect", one], environment) for _ in range(7)]
            wall = median(walls)
            said = f"; target < 100: {'met' if wall < 0.1 else 'MISSED'}" if target else ""
            print(f"inspect of one session, {label}: {wall * 1000:.0f} ms wall, median of 7 "
                  f"(min {min(walls) * 1000:.0f}{said})")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", choices=["instructions", "startup", "startup-instructions", "flood", "inspect"],
                        action="append")
    parser.add_argument("--home", type=Path, help="an existing synthesized COPILOT_HOME (else one is made)")
    parser.add_argument("--sessions", type=int, default=280, help="sessions to synthesize (default 280)")
    parser.add_argument("--source", type=Path, default=DEFAULT_SOURCE, help="real sessions to copy")
    parser.add_argument("--digest", action="store_true", help="print the SHA-256 of the replay's traces file")
    parser.add_argument("--idle-folders", type=int, default=10_000)
    parser.add_argument("--duration", type=float, default=30.0, help="idle CPU window, s (default 30)")
    parser.add_argument("--tools", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=1, help="flood: how many rounds (default 1)")
    parser.add_argument("--against", type=Path, help="flood: a source tree of another commit (`git archive REV | tar "
                        "-x -C DIR`) whose daemon floods before this one's in every round")
    parser.add_argument("--startup-folders", type=int, default=1000,
                        help="idle folders of startup-instructions (default 1000: callgrind runs 50x slower)")
    args = parser.parse_args(argv)
    parts = args.only or ["instructions", "startup", "startup-instructions", "flood", "inspect"]
    print(f"machine: {machine()}; load average {os.getloadavg()[0]:.2f}")
    work = Path(tempfile.mkdtemp(prefix="copilot-otel-insn-bench-"))
    try:
        home = args.home
        if home is None and ({"instructions", "inspect"} & set(parts)):
            home = work / "home"
            synthesize(home, args.sessions, source=args.source)
        for part in parts:
            if part == "instructions":
                instructions(args, home, work)
            elif part == "startup":
                startup(args, work)
            elif part == "startup-instructions":
                startup_instructions(args, work)
            elif part == "flood":
                flood(args, work)
            else:
                inspect(args, home)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
