"""Issue 45: what each trick of the package buys, against the plain standard-library way, in one table.

Each trick is taken out of a copy of the package (TRICKS: a few lines of one module rewritten; the copy fails
loudly if those lines have moved), and the work the trick sits in is measured with it and without it, in the
same run, alternating round by round (this machine's load drifts: compare within a round):

  replay instructions  valgrind's callgrind, `copilot-otel replay HOME --workers 1` over --sessions real-shaped
                       sessions (bench/corpus.py), all processes: decoding, the tail's CRC over every byte, span
                       ids. Counts do not depend on the machine's load.
  replay in workers    `replay --workers 2` of the same sessions: wall time, median of --rounds, and callgrind's
                       count of all processes.
  backlog              callgrind's count of the daemon (`copilot-otel run`) from its start until it has read and
                       exported a log of --backlog-tools tool calls that was there before it started, and its stop.
  flood                /metrics p99 while one session's log brings --tools distinct tool names
                       (bench/attack_bench.py's tool flood), and the time the daemon took to read it.
  render               callgrind instructions per /metrics render of the daemon's registry in a flood
                       (bench/render_bench.py): CachedExposition against prometheus_client's encoder.

The ratio is without / with: above 1, the trick saves that much.

    python bench/tricks_bench.py
    python bench/tricks_bench.py --sessions 280 --rounds 3 --tools 100000 --only replay workers backlog flood render
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import DEFAULT_SOURCE, REPO, bytecode_env, machine, median
from corpus import synthesize
from instructions_bench import callgrind, events_files

COMMAND = ("-m", "copilot_otel.cli.main")


@dataclass(frozen=True)
class Trick:
    name: str
    what: str
    module: str  # the file of copilot_otel/ the copy without it rewrites
    old: str  # text of that file replaced ('' : ``new`` is appended)
    new: str
    measures: tuple[str, ...]  # the parts that measure it


PLAIN_POOL = '''

class WorkerPool:  # tricks_bench: concurrent.futures as it comes (default context, no initializer, its own map)
    def __init__(self, workers: int) -> None:
        from concurrent.futures import ProcessPoolExecutor
        self.workers, self.start_method = workers, "default"
        self._executor = ProcessPoolExecutor(workers)

    def __enter__(self):
        return self

    def __exit__(self, *exc_info) -> None:
        self._executor.shutdown(wait=True, cancel_futures=True)

    def map(self, func, items):
        return self._executor.map(func, items)
'''

TRICKS = [
    Trick("_blake2", "BLAKE2b from CPython's _blake2, not hashlib (no OpenSSL bindings loaded)", "base/hashes.py",
          "try:\n    from _blake2 import blake2b\nexcept ImportError:  # an interpreter without CPython's builtin "
          "module\n    from hashlib import blake2b\n", "from hashlib import blake2b\n", ("replay",)),
    Trick("zlib-ng crc32", "the tail's CRC-32 of every byte from zlib-ng, not zlib", "base/hashes.py",
          "from zlib_ng.zlib_ng import crc32\n", "from zlib import crc32\n", ("replay",)),
    Trick("one_run_collector", "replay (and its workers): gc.freeze() + gen-0 threshold 20,000", "base/workers.py",
          "    gc.freeze()\n    gc.set_threshold(GC_THRESHOLD, 10, 10)\n", "    pass\n", ("replay",)),
    Trick("WorkerPool", "base/workers.py's pool, not a plain ProcessPoolExecutor.map", "base/workers.py",
          "", PLAIN_POOL, ("workers",)),
    Trick("ReaderPause", "base/pause.py: the reader waits while a /metrics render runs", "base/pause.py",
          "", "\n\nclass _NoPause(ReaderPause):  # tricks_bench\n    @contextmanager\n"
              "    def rendering(self) -> Iterator[None]:\n        yield\n\n\nPAUSE = _NoPause()\n", ("flood",)),
    Trick("DeferredCollection", "daemon/collector.py: gc off while the daemon's reader reads a backlog",
          "daemon/collector.py", "", "\n\nDeferredCollection.reading = lambda self, busy: None  # type: ignore  "
          "# tricks_bench\n", ("flood", "backlog")),
]


@dataclass
class Row:
    trick: str
    what: str
    figure: str
    with_: list[float] = field(default_factory=list)
    without: list[float] = field(default_factory=list)
    unit: str = ""

    def line(self) -> str:
        ratios = [b / a for a, b in zip(self.with_, self.without) if a]
        spread = f" ({min(ratios):.2f}-{max(ratios):.2f})" if len(ratios) > 1 else ""
        return (f"| {self.trick} | {self.what} | {self.figure} | {_fmt(median(self.with_), self.unit)} | "
                f"{_fmt(median(self.without), self.unit)} | {median(ratios):.3f}{spread} |")


def _fmt(value: float, unit: str) -> str:
    if unit == "G":
        return f"{value / 1e9:.3f} G"
    if unit == "M":
        return f"{value / 1e6:.2f} M"
    return f"{value:.2f} {unit}"


def tree(work: Path, trick: Trick | None) -> Path:
    """A copy of this checkout's copilot_otel, without ``trick`` (None: as it is)."""
    root = work / "trees" / (trick.name if trick else "with")
    if root.exists():
        return root
    shutil.copytree(REPO / "copilot_otel", root / "copilot_otel", ignore=shutil.ignore_patterns("__pycache__"))
    if trick is not None:
        path = root / "copilot_otel" / trick.module
        text = path.read_text()
        if trick.old:
            if text.count(trick.old) != 1:
                raise SystemExit(f"{trick.name}: {trick.module} no longer holds the lines this benchmark takes out")
            text = text.replace(trick.old, trick.new)
        else:
            text += trick.new
        path.write_text(text)
    return root


def replay_argv(root: Path, home: Path, out: Path, workers: int) -> list[str]:
    return ["env", "-C", str(root), sys.executable, *COMMAND, "replay", str(home), "--workers", str(workers),
            "--traces-file", str(out / "traces.jsonl"), "--state-dir", str(out / "state")]


def replay_instructions(root: Path, home: Path, work: Path, env: dict, workers: int = 1) -> int:
    out = work / "replay-out"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir()
    count = callgrind(replay_argv(root, home, out, workers), work / "cg", env, output=out / "traces.jsonl")
    shutil.rmtree(out)
    return count


def replay_timed(root: Path, home: Path, work: Path, env: dict, workers: int) -> float:
    """Wall seconds of one replay. (Not its CPU: the workers' is not the command's; callgrind counts them.)"""
    out = work / "replay-out"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir()
    started = time.perf_counter()
    subprocess.run(replay_argv(root, home, out, workers), check=True, env=env, stdin=subprocess.DEVNULL,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - started
    shutil.rmtree(out)
    return wall


def part_replay(args, work: Path, home: Path, env: dict, rows: list[Row]) -> None:
    tricks = [t for t in TRICKS if "replay" in t.measures]
    mine = {t.name: Row(t.name, t.what, "replay --workers 1, instructions", unit="G") for t in tricks}
    for round_ in range(args.cg_rounds):
        with_ = replay_instructions(tree(work, None), home, work, env)
        for trick in tricks:
            without = replay_instructions(tree(work, trick), home, work, env)
            mine[trick.name].with_.append(with_)
            mine[trick.name].without.append(without)
            print(f"  replay round {round_ + 1}, {trick.name}: {with_ / 1e9:.3f} G with, {without / 1e9:.3f} G without",
                  flush=True)
    rows.extend(mine.values())


def part_workers(args, work: Path, home: Path, env: dict, rows: list[Row]) -> None:
    trick = next(t for t in TRICKS if "workers" in t.measures)
    wall = Row(trick.name, trick.what, "replay --workers 2, wall", unit="s")
    count = Row(trick.name, trick.what, "replay --workers 2, instructions (all processes)", unit="G")
    ours, plain = tree(work, None), tree(work, trick)
    replay_timed(ours, home, work, env, 2)  # unmeasured: bytecode written, files in the page cache
    replay_timed(plain, home, work, env, 2)
    for round_ in range(args.rounds):
        a = replay_timed(ours, home, work, env, 2)
        b = replay_timed(plain, home, work, env, 2)
        wall.with_.append(a)
        wall.without.append(b)
        print(f"  workers round {round_ + 1}: wall {a:.2f} / {b:.2f} s; "
              f"load average {os.getloadavg()[0]:.2f}", flush=True)
    for _ in range(args.cg_rounds):
        count.with_.append(replay_instructions(ours, home, work, env, 2))
        count.without.append(replay_instructions(plain, home, work, env, 2))
        print(f"  workers instructions: {count.with_[-1] / 1e9:.3f} / {count.without[-1] / 1e9:.3f} G", flush=True)
    rows.extend([wall, count])


def part_flood(args, work: Path, rows: list[Row]) -> None:
    from attack_bench import tool_flood
    tricks = [t for t in TRICKS if "flood" in t.measures]
    p99 = {t.name: Row(t.name, t.what, f"/metrics p99 while {args.tools:,} tool names arrive", unit="ms")
           for t in tricks}
    read = {t.name: Row(t.name, t.what, "time to read that flood", unit="s") for t in tricks}
    for round_ in range(args.rounds):
        for trick in tricks:
            figures = []
            for side in (None, trick):
                folder = work / "flood"
                print(f"flood round {round_ + 1}, {trick.name} {'without' if side else 'with'}; "
                      f"load average {os.getloadavg()[0]:.2f}", flush=True)
                figures.append(tool_flood(folder, args.tools, checkout=tree(work, side)))
                shutil.rmtree(folder, ignore_errors=True)
            p99[trick.name].with_.append(figures[0]["p99_ms"])
            p99[trick.name].without.append(figures[1]["p99_ms"])
            read[trick.name].with_.append(figures[0]["read_s"])
            read[trick.name].without.append(figures[1]["read_s"])
    for trick in tricks:
        rows.extend([p99[trick.name], read[trick.name]])


def part_backlog(args, work: Path, rows: list[Row]) -> None:
    from _common import bench_daemon
    from attack_bench import DAEMON_ARGS

    from tests.support.events import SessionLog
    from tests.support.files import append, new_session
    from tests.support.net import wait_until
    tricks = [t for t in TRICKS if "backlog" in t.measures]
    mine = {t.name: Row(t.name, t.what, f"daemon reading a {args.backlog_tools:,}-call backlog, instructions",
                        unit="G") for t in tricks}
    log = SessionLog("backlog")
    log.start()
    log.user()
    log.turn_start()
    calls = range(args.backlog_tools)
    for n in calls:
        log.tool_start(f"mcp-tool-{n % 50:06d}", f"call-{n}")
        log.tool_complete(f"call-{n}")
    log.turn_end()
    data = log.jsonl()

    def count(side: Trick | None) -> int:
        folder = work / "backlog"
        shutil.rmtree(folder, ignore_errors=True)
        append(new_session(folder / "home", "backlog"), data)
        out = folder / "cg"
        out.mkdir()
        traces = folder / "traces.jsonl"
        daemon = bench_daemon(folder / "home", folder, args=DAEMON_ARGS, checkout=tree(work, side), traces_file=traces,
                              prefix=("valgrind", "--tool=callgrind", "--trace-children=yes", "--dump-line=no",
                                      f"--callgrind-out-file={out}/cg.%p"))
        try:
            daemon.start(timeout=600)
            # the traces file is watched, not /metrics: a scrape would add the daemon's instructions to the count
            wait_until(lambda: traces.exists() and traces.read_bytes().count(b"execute_tool mcp-tool-") >= len(calls),
                       timeout=7200, interval=2.0, what="every call's span in the traces file")
        finally:
            daemon.stop(timeout=600)
        total = 0
        for name in out.glob("cg.*"):
            with open(name, errors="replace") as handle:
                total += next(int(line.split()[1]) for line in handle if line.startswith(("summary:", "totals:")))
        shutil.rmtree(folder)
        return total

    print(f"backlog: {len(data) / 1e6:.1f} MB", flush=True)
    for round_ in range(args.cg_rounds):
        for trick in tricks:
            with_, without = count(None), count(trick)
            mine[trick.name].with_.append(with_)
            mine[trick.name].without.append(without)
            print(f"  backlog round {round_ + 1}, {trick.name}: {with_ / 1e9:.3f} G with, {without / 1e9:.3f} G "
                  "without", flush=True)
    rows.extend(mine.values())


def part_render(args, work: Path, env: dict, rows: list[Row]) -> None:
    script = str(Path(__file__).resolve().parent / "render_bench.py")
    row = Row("CachedExposition", "web/exposition.py: a sample's line kept from the last render",
              "instructions per OpenMetrics render, 101 tool names", unit="M")

    def count(kind: str, renders: int) -> int:
        return callgrind([sys.executable, script, "--renders", str(renders), "--child", kind, "openmetrics"],
                         work / "cg", env)

    for _ in range(args.cg_rounds):
        base = {kind: count(kind, 0) for kind in ("cached", "library")}
        row.with_.append((count("cached", 20) - base["cached"]) / 20)
        row.without.append((count("library", 20) - base["library"]) / 20)
        print(f"  render: {row.with_[-1] / 1e6:.2f} / {row.without[-1] / 1e6:.2f} M", flush=True)
    rows.append(row)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sessions", type=int, default=280, help="sessions of the replay corpus (default 280)")
    parser.add_argument("--source", type=Path, default=DEFAULT_SOURCE, help="the real logs the corpus is made of")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of the timed parts (default 3)")
    parser.add_argument("--cg-rounds", type=int, default=2, help="rounds of the callgrind counts (default 2)")
    parser.add_argument("--tools", type=int, default=100_000, help="tool names of the flood (default 100,000)")
    parser.add_argument("--backlog-tools", type=int, default=20_000, help="tool calls of the backlog (default 20,000)")
    parser.add_argument("--only", nargs="+", choices=["replay", "workers", "backlog", "flood", "render"])
    args = parser.parse_args(argv)
    parts = args.only or ["replay", "workers", "backlog", "flood", "render"]
    print(f"machine: {machine()}; load average {os.getloadavg()[0]:.2f}", flush=True)
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="copilot-otel-tricks-") as scratch:
        work = Path(scratch)
        env = bytecode_env(work)
        home = work / "home"
        if {"replay", "workers"} & set(parts):
            made = synthesize(home, args.sessions, source=args.source)
            print(f"corpus: {len(events_files(home))} sessions, {made['lines']} lines, {made['bytes'] / 1e6:.1f} MB",
                  flush=True)
        if "replay" in parts:
            part_replay(args, work, home, env, rows)
        if "workers" in parts:
            part_workers(args, work, home, env, rows)
        if "backlog" in parts:
            part_backlog(args, work, rows)
        if "flood" in parts:
            part_flood(args, work, rows)
        if "render" in parts:
            part_render(args, work, env, rows)
    print()
    print("| trick | what it does | figure | with it | without it | without / with (rounds) |")
    print("|---|---|---|---|---|---|")
    for row in rows:
        print(row.line())
    return 0


if __name__ == "__main__":
    sys.exit(main())
