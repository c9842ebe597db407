import fcntl
import os
import pickle
import shutil
import sys
import tempfile
import threading
from collections.abc import Callable, Iterable
from pathlib import Path

import pytest

# ---------------------------------------------------------------------------------------
# Real Copilot CLI fixtures: a scripted provider on loopback and a corpus of real event logs.
# (tests/support/provider.py, tests/support/copilot_cli.py; proved by tests/e2e/test_fixture_scenarios.py)

_REPO = str(Path(__file__).resolve().parent.parent)
if _REPO not in sys.path:  # `tests.*` imports work however pytest was started
    sys.path.insert(0, _REPO)

from tests.support import home as run_home  # noqa: E402

run_home.isolate()  # before any test runs a command: HOME and the XDG folders are the run's own (support/home.py)

from tests.support.copilot_cli import CopilotCLI, CopilotCLIMissing, Corpus, generate_corpus  # noqa: E402
from tests.support.net import free_port, wait_until  # noqa: E402
from tests.support.provider import ScriptedProvider  # noqa: E402

# ---------------------------------------------------------------------------------------
# Three layers, by folder: `pytest -m unit` (or tests/unit) and so on; registered in pyproject.toml.
#   unit       in-process, no subprocess: one module at a time, real files and sockets
#   component  in-process over the stored real-CLI fixtures: fixture and version suites, fuzz, properties
#   e2e        real processes: the Copilot CLI, the daemon, the browser, Prometheus, the OTLP receiver

TESTS = Path(__file__).resolve().parent
LAYERS = ("unit", "component", "e2e")


def pytest_collection_modifyitems(config, items):
    """Mark each test with the layer its folder names; a test outside the three folders is an error."""
    stray = set()
    for item in items:
        try:
            layer = item.path.resolve().relative_to(TESTS).parts[0]
        except ValueError:
            continue  # not under tests/ (a path given explicitly elsewhere)
        if layer in LAYERS:
            item.add_marker(getattr(pytest.mark, layer))
        else:
            stray.add(str(item.path.relative_to(TESTS)))
    if stray:
        raise pytest.UsageError(f"tests outside tests/unit, tests/component, tests/e2e: {', '.join(sorted(stray))}")


# The threads of session-scoped fixtures: they serve many tests, so they are no test's leak.
_SESSION_THREADS: list[Callable[[], Iterable[threading.Thread]]] = []


@pytest.fixture(scope="session")
def provider():
    """One scripted OpenAI-compatible provider on 127.0.0.1 for the whole test run."""
    with ScriptedProvider() as p:
        _SESSION_THREADS.append(p.threads)
        try:
            yield p
        finally:
            _SESSION_THREADS.remove(p.threads)


@pytest.fixture(scope="session")
def cli() -> CopilotCLI:
    """The pinned Copilot CLI (tests/cli, or COPILOT_CLI_BIN); fails clearly if missing."""
    try:
        return CopilotCLI()
    except CopilotCLIMissing as e:
        pytest.fail(str(e), pytrace=False)


@pytest.fixture(scope="session")
def cli_corpus(cli, provider, tmp_path_factory) -> Corpus:
    """Every corpus scenario run once by the real CLI: scenario name -> CliRun, with
    ``.root`` and ``.home_all`` (one COPILOT_HOME holding all the sessions).

    Tests only read it, so pytest-xdist's workers share one: the first to need it runs the CLI into
    the run's common temp folder, the others wait on a lock and read what it stored."""
    if "PYTEST_XDIST_WORKER" not in os.environ:
        return generate_corpus(cli, provider.port, tmp_path_factory.mktemp("cli_corpus"))
    shared = tmp_path_factory.getbasetemp().parent / "cli_corpus"  # the workers' basetemps are its siblings
    stored = shared / "corpus.pickle"
    with open(f"{shared}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if stored.exists():
            return pickle.loads(stored.read_bytes())
        corpus = generate_corpus(cli, provider.port, shared)
        stored.write_bytes(pickle.dumps(corpus))
        return corpus


@pytest.fixture(scope="session")
def browser():
    """Headless Debian Chromium driven by Playwright (tests/support/browser.py), one for the run."""
    from tests.support.browser import CHROMIUM, Browser

    if not CHROMIUM.exists():
        pytest.fail(f"{CHROMIUM} is missing: scripts/test.sh installs Debian's chromium", pytrace=False)
    before = set(threading.enumerate())
    chromium = Browser()
    mine = set(threading.enumerate()) - before  # Playwright's child watcher, for as long as the browser runs
    _SESSION_THREADS.append(lambda: mine)
    try:
        yield chromium
    finally:
        chromium.close()


@pytest.fixture(autouse=True)
def _close_browser_tabs(request):
    """After a test that used the browser, close the tabs it left open (see Browser.close_pages)."""
    yield
    if "browser" in request.fixturenames:
        request.getfixturevalue("browser").close_pages()


# ---------------------------------------------------------------------------------------
# General fixtures.


@pytest.fixture
def unused_port() -> int:
    """A loopback port that nothing listens on (bound then released)."""
    return free_port()


@pytest.fixture
def world_dir():
    """A directory everyone may traverse (pytest's tmp_path is private to root), for tests that run
    the daemon as another user; every folder in it is made traversable again before it is removed."""
    path = Path(tempfile.mkdtemp(prefix="copilot-otel-world-"))
    path.chmod(0o755)
    yield path
    for sub in path.rglob("*"):
        if sub.is_dir() and not sub.is_symlink():
            sub.chmod(0o755)
    shutil.rmtree(path)


@pytest.fixture(autouse=True)
def no_leaked_threads():
    """Fail any test that leaves a thread of its own running, daemon threads included.

    Threads that ran before the test (module- and session-scoped fixtures are set up first)
    and the threads of session-scoped fixtures are not the test's."""
    before = set(threading.enumerate())
    yield

    def leaked() -> list[threading.Thread]:
        shared = {thread for threads in _SESSION_THREADS for thread in threads()}
        return [t for t in threading.enumerate() if t not in before and t not in shared and t.is_alive()]

    wait_until(lambda: not leaked(), timeout=5, what="the test's threads to end", seen=leaked)


@pytest.fixture
def blocked(tmp_path) -> Path:
    """A regular file: any directory 'inside' it can be neither created nor written, even by root."""
    path = tmp_path / "a-file"
    path.write_text("not a directory\n")
    return path
