"""Helpers shared by the benchmark scripts: the daemon as they run it, /proc figures, statistics.

Not a test helper: every script here prints figures, nothing asserts. The daemon harness and
the scrape helpers are the tests' own (tests/support), so the repository root goes on sys.path.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from tests.support.daemon import DaemonProcess  # noqa: E402

DEFAULT_SOURCE = Path("/tmp/corpus/home_all")
CLK_TCK = os.sysconf("SC_CLK_TCK")


def copilot_otel_bin() -> list[str]:
    """The command that runs copilot-otel: the venv's entry point next to this Python, else -m."""
    exe = Path(sys.executable).with_name("copilot-otel")
    if exe.exists():
        return [str(exe)]
    return [sys.executable, "-c", "from copilot_otel.cli.main import main; main()"]


def installed_bin(work: Path, checkout: Path | None = None) -> list[str]:
    """copilot-otel as the README's install command leaves it: the package in a venv's site-packages (not the
    checkout's editable install, whose import hook costs every start about 15 ms), its dependencies those of this
    Python's venv (a .pth line), and an entry-point script as pip writes one. ``checkout``: whose package (default:
    this one's)."""
    import shutil
    import site
    import subprocess
    import sysconfig

    venv = work / "installed"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    purelib = Path(sysconfig.get_path("purelib", vars={"base": str(venv), "platbase": str(venv)}))
    shutil.copytree((checkout or REPO) / "copilot_otel", purelib / "copilot_otel",
                    ignore=shutil.ignore_patterns("__pycache__"))
    (purelib / "dependencies.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    exe = venv / "bin" / "copilot-otel"
    exe.write_text(f"#!{venv / 'bin' / 'python'}\nimport sys\nfrom copilot_otel.cli.main import main\n"
                   "if __name__ == '__main__':\n    sys.exit(main())\n")
    exe.chmod(0o755)
    return [str(exe)]


def bytecode_env(work: Path) -> dict[str, str]:
    """The environment of a measured command: bytecode cached (as an installed package has it), outside the
    checkout; this machine's PYTHONDONTWRITEBYTECODE=1 would compile every module on every start."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = str(work / "pycache")
    return env


def median(values) -> float:
    return statistics.median(values)


def percentile(values, q: float) -> float:
    """The q-th percentile (0..100), nearest-rank on sorted values."""
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    rank = max(0, min(len(ordered) - 1, round(q / 100.0 * len(ordered) + 0.5) - 1))
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

def bench_daemon(home: Path, work: Path, *, args: list[str] | tuple[str, ...] = (),
                 traces_file: Path | None = None, checkout: Path | None = None,
                 prefix: tuple[str, ...] = ()) -> DaemonProcess:
    """``copilot-otel run`` as the benchmarks run it: warnings only, its state, traces and log under ``work``.
    ``checkout``: run the copilot_otel of that source tree (another commit's), with this venv; ``prefix``: a
    command to run it under."""
    if checkout is not None:  # `python -m` imports from its cwd first
        prefix = (*prefix, "env", "-C", str(checkout))
    return DaemonProcess(home, work / "state", traces_file=traces_file or work / "traces.jsonl", args=args,
                         log_level="warning", log_path=work / "daemon.log", prefix=prefix)


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
        with open("/proc/cpuinfo") as cpuinfo:
            for line in cpuinfo:
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
