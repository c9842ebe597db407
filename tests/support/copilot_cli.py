"""Run the real GitHub Copilot CLI (pinned in tests/cli/package.json) offline.

The CLI talks only to a scripted provider on loopback (tests/support/provider.py) and writes
real session state under a private ``COPILOT_HOME``:

    cli = CopilotCLI()
    run = cli.run(prompt_for("plain"), home=tmp / "home", port=provider.port, cwd=tmp / "work",
                  otel_file=tmp / "otel.jsonl", output_json=True)
    run.events()          # parsed events.jsonl

``start()`` returns a ``CliProcess`` at once (``.popen``, ``.pid``, and the session id it
assigned, so ``.events_path`` is known before the file exists) for tests that watch a live
session or kill it mid-turn; its ``wait()`` turns it into a ``CliRun``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.support.provider import MODEL, MULTI_VIEW_NAME, MULTI_VIEW_TEXT, marker  # conftest puts the repo on sys.path

REPO = Path(__file__).resolve().parents[2]
CLI_DIR = REPO / "tests" / "cli"
CLI_VERSION = "1.0.102"
DEFAULT_BIN = CLI_DIR / "node_modules" / "@github" / "copilot-linux-x64" / "copilot"
INSTALL_HINT = (
    "Install it with:  npm install --prefix tests/cli --no-audit --no-fund\n"
    "(or point COPILOT_CLI_BIN at a copilot binary of version " + CLI_VERSION + ")"
)

# Inherited variables that would change what the CLI does or where it reports to.
_SCRUB_PREFIXES = ("COPILOT_", "OTEL_", "GH_", "GITHUB_")
_SCRUB_EXACT = {"HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY", "all_proxy"}


class CopilotCLIMissing(RuntimeError):
    """The pinned CLI binary is not installed (the message says how to install it)."""


def prompt_for(scenario: str, arg: object | None = None, text: str = "Please do the scripted task.") -> str:
    """A prompt that selects ``scenario`` on the scripted provider."""
    return f"{marker(scenario, arg)} {text}"


def resolve_binary() -> Path:
    env = os.environ.get("COPILOT_CLI_BIN")
    path = Path(env) if env else DEFAULT_BIN
    if not path.is_file() or not os.access(path, os.X_OK):
        where = f"COPILOT_CLI_BIN={env}" if env else str(path)
        raise CopilotCLIMissing(f"Copilot CLI binary not found or not executable: {where}\n{INSTALL_HINT}")
    return path


def read_jsonl(path: Path) -> list[dict]:
    out = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if line:
                out.append(json.loads(line))
    return out


@dataclass
class CliRun:
    """A finished CLI run (one ``copilot -p`` invocation)."""

    home: Path
    session_id: str
    session_dir: Path
    events_path: Path
    otel_path: Path | None
    stdout_path: Path | None
    stderr_path: Path | None
    returncode: int
    cwd: Path
    duration_s: float = 0.0
    prompt: str = field(default="", repr=False)
    scenario: str = ""

    def events(self) -> list[dict]:
        return read_jsonl(self.events_path)

    def stdout_events(self) -> list[dict]:
        """The ``--output-format json`` stream (ephemeral events included)."""
        assert self.stdout_path is not None, "run was not started with output_json=True"
        return [e for e in read_jsonl(self.stdout_path) if isinstance(e, dict)]

    def otel(self) -> list[dict]:
        assert self.otel_path is not None, "run was not started with otel_file"
        return read_jsonl(self.otel_path) if self.otel_path.exists() else []

    def of_type(self, *types: str) -> list[dict]:
        return [e for e in self.events() if e["type"] in types]


@dataclass
class CliProcess:
    """A running CLI (from ``CopilotCLI.start``)."""

    popen: subprocess.Popen
    home: Path
    session_id: str
    cwd: Path
    otel_path: Path | None
    stdout_path: Path | None
    stderr_path: Path | None
    prompt: str
    started: float

    @property
    def pid(self) -> int:
        return self.popen.pid

    @property
    def session_dir(self) -> Path:
        return self.home / "session-state" / self.session_id

    @property
    def events_path(self) -> Path:
        return self.session_dir / "events.jsonl"

    def kill(self, sig: int = signal.SIGKILL, *, tools: bool = True) -> None:
        """Send ``sig`` to this CLI process, by pid (a crash when SIGKILL).

        The CLI runs each bash tool in a new session of its own, so a killed CLI would
        orphan it; with ``tools`` the processes it started (found before the kill) get
        SIGKILL too, so nothing outlives the test. Never kills by name.
        """
        if self.popen.poll() is not None:
            return
        children = descendants(self.popen.pid) if tools else []
        os.kill(self.popen.pid, sig)
        for pid in children:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def wait(self, timeout: float = 120, expect_failure: bool = False) -> CliRun:
        try:
            rc = self.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            self.popen.wait(timeout=10)
            raise AssertionError(
                f"copilot did not finish within {timeout}s (session {self.session_id}); "
                f"stderr: {_tail(self.stderr_path)}"
            ) from None
        finally:
            for stream in (self.popen.stdout, self.popen.stderr):
                if stream is not None:
                    stream.close()
        run = CliRun(
            home=self.home,
            session_id=self.session_id,
            session_dir=self.session_dir,
            events_path=self.events_path,
            otel_path=self.otel_path,
            stdout_path=self.stdout_path,
            stderr_path=self.stderr_path,
            returncode=rc,
            cwd=self.cwd,
            duration_s=time.monotonic() - self.started,
            prompt=self.prompt,
        )
        if not expect_failure:
            assert rc == 0, f"copilot exited {rc} (session {self.session_id}); stderr: {_tail(self.stderr_path)}"
        assert run.events_path.exists(), f"no events.jsonl at {run.events_path}; stderr: {_tail(self.stderr_path)}"
        return run


def descendants(pid: int) -> list[int]:
    """Pids of all live descendants of ``pid`` (from /proc), deepest last."""
    parent_of: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        # "pid (comm) state ppid ...": comm may hold spaces and parentheses
        fields = stat[stat.rindex(b")") + 2 :].split()
        parent_of[int(entry)] = int(fields[1])
    out, frontier = [], [pid]
    while frontier:
        cur = frontier.pop(0)
        kids = [p for p, pp in parent_of.items() if pp == cur]
        out.extend(kids)
        frontier.extend(kids)
    return out


def _tail(path: Path | None, n: int = 2000) -> str:
    if path is None or not path.exists():
        return "<not captured>"
    data = path.read_bytes()[-n:]
    return data.decode("utf-8", "replace")


class CopilotCLI:
    """Launches the pinned Copilot CLI against the scripted provider."""

    def __init__(self, binary: Path | None = None) -> None:
        self.binary = binary or resolve_binary()

    def version(self) -> str:
        out = subprocess.run([str(self.binary), "--version"], capture_output=True, text=True, timeout=60)
        return out.stdout.strip()

    def env(self, *, home: Path, port: int, otel_file: Path | None,
            extra_env: Mapping[str, str | None] | None) -> dict:
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(_SCRUB_PREFIXES) and k not in _SCRUB_EXACT
        }
        env.update(
            COPILOT_HOME=str(home),
            COPILOT_OFFLINE="true",
            COPILOT_PROVIDER_BASE_URL=f"http://127.0.0.1:{port}/v1",
            COPILOT_MODEL=MODEL,
            COPILOT_AUTO_UPDATE="false",
            NO_COLOR="1",
            NO_PROXY="127.0.0.1,localhost",
            no_proxy="127.0.0.1,localhost",
        )
        if otel_file is not None:
            env["COPILOT_OTEL_FILE_EXPORTER_PATH"] = str(otel_file)
        for key, value in (extra_env or {}).items():  # None removes a variable (e.g. COPILOT_OFFLINE)
            if value is None:
                env.pop(key, None)
            else:
                env[key] = value
        return env

    def sdk_env(self, *, home: Path, port: int) -> dict:
        """The environment for a github-copilot-sdk client that runs this CLI."""
        env = self.env(home=home, port=port, otel_file=None, extra_env=None)
        env.update(COPILOT_CLI_PATH=str(self.binary), COPILOT_SKIP_CLI_DOWNLOAD="1")
        return env

    def argv(
        self,
        prompt: str,
        *,
        session_id: str | None,
        autopilot: bool,
        resume: str | None,
        output_json: bool,
        extra_args: Sequence[str] = (),
    ) -> list[str]:
        argv = [str(self.binary), "-p", prompt, "--allow-all-tools", "--no-auto-update"]
        if output_json:
            argv += ["--output-format", "json"]
        if autopilot:
            argv.append("--autopilot")
        if resume is not None:
            argv += ["--resume", resume]
        elif session_id is not None:
            argv += ["--session-id", session_id]
        argv += list(extra_args)
        return argv

    def start(
        self,
        prompt: str,
        *,
        home: Path,
        port: int,
        cwd: Path,
        autopilot: bool = False,
        resume: str | None = None,
        session_id: str | None = None,
        output_json: bool = False,
        otel_file: Path | None = None,
        stdout_file: Path | None = None,
        stderr_file: Path | None = None,
        extra_env: Mapping[str, str | None] | None = None,
        extra_args: Sequence[str] = (),
    ) -> CliProcess:
        """Launch the CLI without waiting. The session id is known up front: ``resume``,
        else ``session_id``, else a fresh uuid4 passed as ``--session-id``.

        stdout goes to ``stdout_file`` (default: ``<home>/../<sid>.stdout.jsonl`` when
        output_json, else ``.stdout.txt``); stderr to ``stderr_file`` likewise.
        """
        home, cwd = Path(home), Path(cwd)
        home.mkdir(parents=True, exist_ok=True)
        cwd.mkdir(parents=True, exist_ok=True)
        sid = resume or session_id or str(uuid.uuid4())
        stamp = f"{sid}.{int(time.time() * 1000)}"
        if stdout_file is None:
            stdout_file = home.parent / f"{stamp}.stdout.{'jsonl' if output_json else 'txt'}"
        if stderr_file is None:
            stderr_file = home.parent / f"{stamp}.stderr.txt"
        out = open(stdout_file, "wb")  # noqa: SIM115 - the CLI's output files, closed once it ends
        err = open(stderr_file, "wb")  # noqa: SIM115
        try:
            popen = subprocess.Popen(
                self.argv(prompt, session_id=sid, autopilot=autopilot, resume=resume, output_json=output_json,
                          extra_args=extra_args),
                cwd=cwd,
                env=self.env(home=home, port=port, otel_file=otel_file, extra_env=extra_env),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                start_new_session=True,  # its own process group: a kill never reaches us
            )
        finally:
            out.close()
            err.close()
        return CliProcess(
            popen=popen,
            home=home,
            session_id=sid,
            cwd=cwd,
            otel_path=Path(otel_file) if otel_file is not None else None,
            stdout_path=Path(stdout_file),
            stderr_path=Path(stderr_file),
            prompt=prompt,
            started=time.monotonic(),
        )

    def run(self, prompt: str, *, timeout: float = 120, expect_failure: bool = False, **kwargs) -> CliRun:
        """``start`` + ``wait``: asserts exit code 0 unless ``expect_failure``."""
        return self.start(prompt, **kwargs).wait(timeout=timeout, expect_failure=expect_failure)


# ---------------------------------------------------------------------------------------
# The corpus: every scenario of tests/support/provider.py run once, each in its own COPILOT_HOME.


@dataclass(frozen=True)
class CorpusSpec:
    scenario: str
    autopilot: bool = False
    expect_failure: bool = False  # the CLI exits non-zero (session.error)
    arg_is_cwd: bool = False  # pass the run's cwd as the marker argument
    arg: str | None = None
    resume_scenario: str | None = None  # run again with --resume and this scenario


CORPUS_SPECS: tuple[CorpusSpec, ...] = (
    # longest first: provider_error waits ~15 s of retry backoff inside the CLI
    CorpusSpec("provider_error", expect_failure=True),
    CorpusSpec("resume", resume_scenario="resume"),  # `plain`, then --resume with `resume`
    CorpusSpec("subagent"),
    CorpusSpec("sleep_tool", arg="2"),
    CorpusSpec("autopilot", autopilot=True),
    CorpusSpec("subagent_failed"),
    CorpusSpec("multi_tools", arg_is_cwd=True),
    CorpusSpec("failing_tool", arg_is_cwd=True),
    CorpusSpec("multi_turn"),
    CorpusSpec("plain"),
    CorpusSpec("tool_then_error", expect_failure=True),
    CorpusSpec("provider_bad_request", expect_failure=True),
)
CORPUS_SCENARIOS = tuple(s.scenario for s in CORPUS_SPECS)
SLEEP_TOOL_SECONDS = 2  # the corpus's sleep_tool argument


def _prepare_cwd(cwd: Path) -> None:
    cwd.mkdir(parents=True, exist_ok=True)
    (cwd / MULTI_VIEW_NAME).write_text(MULTI_VIEW_TEXT)


def run_spec(cli: CopilotCLI, spec: CorpusSpec, root: Path, port: int, timeout: float = 180) -> CliRun:
    """Run one corpus scenario under ``root/<scenario>/`` (home/, work/, otel.jsonl,
    stdout.jsonl, stderr.txt; a resumed scenario also leaves first.stdout.jsonl)."""
    base = root / spec.scenario
    home, cwd = base / "home", base / "work"
    _prepare_cwd(cwd)
    arg = str(cwd) if spec.arg_is_cwd else spec.arg
    common: dict[str, Any] = dict(home=home, port=port, cwd=cwd, output_json=True, otel_file=base / "otel.jsonl",
                  autopilot=spec.autopilot)
    if spec.resume_scenario:
        first = cli.run(
            prompt_for("plain"), stdout_file=base / "first.stdout.jsonl", stderr_file=base / "first.stderr.txt",
                        timeout=timeout, **common
        )
        run = cli.run(
            prompt_for(spec.resume_scenario, text="Please continue with the scripted task."),
            resume=first.session_id,
            stdout_file=base / "stdout.jsonl",
            stderr_file=base / "stderr.txt",
            timeout=timeout,
            expect_failure=spec.expect_failure,
            **common,
        )
    else:
        run = cli.run(
            prompt_for(spec.scenario, arg),
            stdout_file=base / "stdout.jsonl",
            stderr_file=base / "stderr.txt",
            timeout=timeout,
            expect_failure=spec.expect_failure,
            **common,
        )
    if spec.expect_failure:
        assert run.returncode != 0, f"{spec.scenario}: expected the CLI to fail, it exited 0"
    run.scenario = spec.scenario
    return run


class Corpus(dict):
    """scenario name -> CliRun, plus the corpus root and the combined home."""

    def __init__(self, runs: Mapping[str, CliRun], root: Path, home_all: Path) -> None:
        super().__init__(runs)
        self.root = root
        self.home_all = home_all


def generate_corpus(
    cli: CopilotCLI,
    port: int,
    root: Path,
    specs: Sequence[CorpusSpec] = CORPUS_SPECS,
    workers: int = 3,
) -> Corpus:
    """Run every spec (``workers`` CLIs at a time) and return scenario -> CliRun.

    Also builds ``root/home_all``: one COPILOT_HOME holding every session folder.
    """
    import shutil
    from concurrent.futures import ThreadPoolExecutor

    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    cli.version()  # first start unpacks the CLI's package cache: do it once, not concurrently
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="corpus") as pool:
        futures = {s.scenario: pool.submit(run_spec, cli, s, root, port) for s in specs}
        runs = {name: f.result() for name, f in futures.items()}
    all_state = root / "home_all" / "session-state"
    all_state.mkdir(parents=True, exist_ok=True)
    for run in runs.values():
        shutil.copytree(run.session_dir, all_state / run.session_id, symlinks=True)
    return Corpus(runs, root, root / "home_all")
