"""`copilot-otel sessions --json` and `usage --json` against the tool people run today on the same logs: ccusage.

ccusage (npm, pinned below: its npm command starts its native binary) is run as a user runs it, `ccusage copilot
session --json --offline` (and `ccusage copilot daily --json --offline` against `usage`), on the same
COPILOT_HOME as `copilot-otel sessions --json --from-files`. copilot-otel runs as the README's install command
leaves it: the package copied into a venv's site-packages (bench/_common.installed_bin). Runs are paired and
interleaved (who goes first alternates), and each figure is the median ratio of copilot-otel's time to
ccusage's, wall time (the target: <= 1.0) and CPU time (user + system of the command and every process it waited
for: the same ratio less the machine's other load).

Logs: the tests' stored fixtures (every session of every stored CLI version, tests/fixtures/cli, in one
COPILOT_HOME) and, for each of --sessions, that many real-shaped sessions (bench/corpus.py). Each without state
(a new state folder every run: every log read) and with the summaries cached (the state folder of a first run
reused). With --busy, a process spins on the CPU all along (the other core busy, on a 2-core machine); the load
average before and after the runs is printed either way.

With --stages, the CPU of each stage of a summary without state, over the largest corpus's logs in this process:
reading the files, checking them, finding the lines, decoding them, feeding the events to the mirror.

With --instructions, the instructions (callgrind) of each command's start: `--help`, `sessions --json` and
`usage --json` of cached summaries, `inspect` and `inspect --json` of one session.

    python bench/peer_bench.py                       # fixtures, 400 and 2,800 sessions, both modes, 5 pairs each
    python bench/peer_bench.py --busy                # the same with the other core busy
    python bench/peer_bench.py --checkout ../main --sessions 2800   # another checkout's package (a baseline)
    python bench/peer_bench.py --runs 9 --instructions
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import DEFAULT_SOURCE, REPO, bytecode_env, installed_bin, machine, median
from corpus import synthesize

CCUSAGE_VERSION = "20.0.24"
TARGET = 1.0  # copilot-otel's time / ccusage's
FIXTURES = REPO / "tests" / "fixtures" / "cli"


def ccusage_bin(prefix: Path | None) -> list[str]:
    """ccusage's npm command: tests/cli's when it is pinned there, else installed (pinned) into ``prefix``."""
    for folder in (REPO / "tests" / "cli", prefix):
        if folder is None:
            continue
        exe = folder / "node_modules" / ".bin" / "ccusage"
        package = folder / "node_modules" / "ccusage" / "package.json"
        if exe.exists() and f'"version": "{CCUSAGE_VERSION}"' in package.read_text():
            return [str(exe)]
    if prefix is None:
        raise SystemExit("no ccusage: give --ccusage-prefix DIR to install it there")
    subprocess.run(["npm", "install", "--prefix", str(prefix), "--no-audit", "--no-fund", "--no-package-lock",
                    "--loglevel=error", f"ccusage@{CCUSAGE_VERSION}"], check=True)
    return [str(prefix / "node_modules" / ".bin" / "ccusage")]


def fixtures_home(dest: Path) -> int:
    """Every stored CLI version's sessions in one COPILOT_HOME; how many."""
    state = dest / "session-state"
    state.mkdir(parents=True)
    count = 0
    for log in sorted(FIXTURES.glob("*/*/session-state/*/events.jsonl")):
        shutil.copytree(log.parent, state / log.parent.name)
        count += 1
    return count


def timed(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(wall s, CPU s of the command and its waited-for children)."""
    start = time.perf_counter()
    process = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    _pid, status, usage = os.wait4(process.pid, 0)
    wall = time.perf_counter() - start
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode != 0:
        raise SystemExit(f"{argv[0]} exited {process.returncode}")
    return wall, usage.ru_utime + usage.ru_stime


# Each command of ours against the ccusage command that answers the same question on the same logs.
COMMANDS = {"sessions": (["sessions", "--json", "--from-files"], ["copilot", "session", "--json", "--offline"]),
            "usage": (["usage", "--json"], ["copilot", "daily", "--json", "--offline"])}


def pairs(home: Path, work: Path, ours_bin: list[str], ccusage: list[str], command: str, *, runs: int,
          cached: bool) -> tuple[list, list]:
    """Each pair's (ours / theirs) wall and CPU ratios."""
    env = {**bytecode_env(work), "COPILOT_HOME": str(home)}
    state = work / "state"
    mine, peer = COMMANDS[command]
    ours = ours_bin + mine + ["--state-dir", str(state)]
    theirs = ccusage + peer

    def fresh_state() -> None:
        shutil.rmtree(state, ignore_errors=True)
        state.mkdir(mode=0o700)

    fresh_state()
    timed(ours, env)  # bytecode written, files in the page cache, the summaries cached
    timed(theirs, env)
    walls, cpus = [], []
    for run in range(runs):
        if not cached:
            fresh_state()
        order = (ours, theirs) if run % 2 == 0 else (theirs, ours)
        first, second = timed(order[0], env), timed(order[1], env)
        mine_t, peer_t = (first, second) if run % 2 == 0 else (second, first)
        walls.append(mine_t[0] / peer_t[0])
        cpus.append(mine_t[1] / peer_t[1])
    return walls, cpus


def start_instructions(fixtures: Path, work: Path, ours_bin: list[str]) -> None:
    from instructions_bench import callgrind

    env = {**bytecode_env(work), "COPILOT_HOME": str(fixtures)}
    state = work / "cg-state"
    state.mkdir(mode=0o700)
    one = sorted((fixtures / "session-state").iterdir())[0]
    commands = {"--help": ["--help"],
                "sessions --json (summaries cached)": ["sessions", "--json", "--from-files", "--state-dir", str(state)],
                "inspect SESSION": ["inspect", str(one)],
                "inspect --json SESSION": ["inspect", "--json", str(one)],
                "usage --json (summaries cached)": ["usage", "--json", "--state-dir", str(state)]}
    print(f"\n{'start of':<40}{'instructions':>14}")
    for name, args in commands.items():
        count = callgrind(ours_bin + args, work / "cg", env)
        print(f"{name:<40}{count / 1e6:>12.0f} M")


def _walk(data: bytes, decode: bool) -> int:
    """Each line of a log found and its type looked up (and, with ``decode``, decoded as quick_summary decodes it:
    the kept types in full, the others skimmed where they lie); how many lines."""
    from copilot_otel.catalog.quick import KNOWN
    from copilot_otel.decode.lines import decode_kept, skim_at
    from copilot_otel.model.sessions import READ_TYPES

    start, last, lines = 0, data.rfind(b"\n"), 0
    while start <= last:
        end = data.find(b"\n", start)
        kind = data[start + 9:data.find(b'"', start + 9, end)]
        lines += kind in KNOWN
        if decode and kind in READ_TYPES:
            decode_kept(data[start:end], offset=start, line=lines)
        elif decode:
            skim_at(data, start, end, READ_TYPES, offset=start, line=lines, utf8=True)
        start = end + 1
    return lines


def stages(home: Path, runs: int) -> None:
    """Where a summary without state goes, in this process (this checkout's package): the CPU of each stage
    over every log of ``home``, each stage adding to the one before (best of ``runs``)."""
    from copilot_otel.catalog.quick import quick_summary, read_log
    from copilot_otel.decode.lines import is_utf8

    logs = sorted((home / "session-state").glob("*/events.jsonl"))

    def read(_path: Path, data: bytes) -> object:
        return data

    def checked(_path: Path, data: bytes) -> object:
        return b"\r" in data or b"\x00" in data or is_utf8(data)

    steps = {"read each file in one block": read,
             "+ its NUL, CR and UTF-8 checks": checked,
             "+ each line found, its type looked up": lambda path, data: (checked(path, data), _walk(data, False)),
             "+ each line decoded (kept types) or skimmed": lambda path, data: (checked(path, data), _walk(data, True)),
             "+ the events fed to the mirror: quick_summary": lambda path, _data: quick_summary(path, "s", 1 << 26)}
    print(f"\nwhere a summary without state goes ({len(logs)} logs, CPU s, best of {runs}):")
    for name, step in steps.items():
        best = float("inf")
        for _ in range(runs):
            began = time.process_time()
            for path in logs:
                data = read_log(path)
                assert data is not None
                step(path, data)
            best = min(best, time.process_time() - began)
        print(f"  {name:<48}{best:>8.3f}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sessions", type=int, nargs="+", default=[400, 2800],
                        help="real-shaped sessions to synthesize, one corpus each (default 400 2800)")
    parser.add_argument("--source", type=Path, default=DEFAULT_SOURCE, help="real sessions to copy")
    parser.add_argument("--runs", type=int, default=5, help="pairs per figure (default 5)")
    parser.add_argument("--ccusage-prefix", type=Path, help="where to install ccusage when tests/cli has none")
    parser.add_argument("--commands", nargs="+", choices=sorted(COMMANDS), default=sorted(COMMANDS),
                        help="which of ours to measure (default: sessions and usage)")
    parser.add_argument("--instructions", action="store_true", help="also count each command's start (callgrind)")
    parser.add_argument("--busy", action="store_true", help="keep one process spinning on the CPU during the runs")
    parser.add_argument("--checkout", type=Path, help="measure another checkout's package (e.g. main's worktree)")
    parser.add_argument("--stages", action="store_true",
                        help="also print where the largest corpus's summaries without state spend their CPU")
    args = parser.parse_args(argv)
    print(machine())
    ccusage = ccusage_bin(args.ccusage_prefix)
    with tempfile.TemporaryDirectory(prefix="peer-bench-") as tmp:
        work = Path(tmp)
        fixtures = work / "fixtures"
        count = fixtures_home(fixtures)
        corpora = {f"stored fixtures ({count} sessions)": fixtures}
        for sessions in args.sessions:
            synthetic = work / f"synthetic-{sessions}"
            made = synthesize(synthetic, sessions, source=args.source)
            corpora[f"{sessions} real-shaped sessions ({made['bytes'] / 1e6:.1f} MB)"] = synthetic
        ours = installed_bin(work, args.checkout)
        print(f"ccusage {CCUSAGE_VERSION}; copilot-otel installed from {args.checkout or 'this checkout'}; "
              f"{args.runs} pairs per figure; "
              f"ratio = copilot-otel / ccusage (median), target <= {TARGET}; "
              f"{'the other core busy (a spinning process)' if args.busy else 'no load of our own'}")
        print(f"load average before: {os.getloadavg()[0]:.1f}")
        spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if args.busy else None
        try:
            print(f"{'command':<10}{'logs':<44}{'state':<18}{'wall':>8}{'cpu':>8}  target")
            for command in args.commands:
                for name, home in corpora.items():
                    for cached in (False, True):
                        walls, cpus = pairs(home, work, ours, ccusage, command, runs=args.runs, cached=cached)
                        wall = median(walls)
                        print(f"{command:<10}{name:<44}{'summaries cached' if cached else 'no state':<18}"
                              f"{wall:>8.2f}{median(cpus):>8.2f}  {'met' if wall <= TARGET else 'MISSED'}", flush=True)
        finally:
            if spinner is not None:
                spinner.kill()
                spinner.wait()
        print(f"load average after: {os.getloadavg()[0]:.1f}")
        if args.instructions:
            start_instructions(fixtures, work, ours)
        if args.stages:
            stages(list(corpora.values())[-1], args.runs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
