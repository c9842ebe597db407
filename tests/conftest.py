import sys
from pathlib import Path

import pytest

# ---------------------------------------------------------------------------------------
# Real Copilot CLI fixtures: a scripted provider on loopback and a corpus of real event logs.
# (tests/provider.py, tests/copilot_cli.py; proved by tests/test_fixture_scenarios.py)

_REPO = str(Path(__file__).resolve().parent.parent)
if _REPO not in sys.path:  # `tests.*` imports work however pytest was started
    sys.path.insert(0, _REPO)

from tests.copilot_cli import Corpus, CopilotCLI, CopilotCLIMissing, generate_corpus  # noqa: E402
from tests.provider import ScriptedProvider  # noqa: E402
from tests.support.net import free_port  # noqa: E402


@pytest.fixture(scope="session")
def provider():
    """One scripted OpenAI-compatible provider on 127.0.0.1 for the whole test run."""
    with ScriptedProvider() as p:
        yield p


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
    ``.root`` and ``.home_all`` (one COPILOT_HOME holding all the sessions)."""
    return generate_corpus(cli, provider.port, tmp_path_factory.mktemp("cli_corpus"))


# ---------------------------------------------------------------------------------------
# General fixtures.

import threading  # noqa: E402


@pytest.fixture
def unused_port() -> int:
    """A loopback port that nothing listens on (bound then released)."""
    return free_port()


@pytest.fixture(autouse=True)
def no_leaked_threads():
    """Fail any test that leaves a thread of its own running."""
    before = set(threading.enumerate())
    yield
    deadline = __import__("time").monotonic() + 5
    while True:
        leaked = [t for t in threading.enumerate() if t not in before and t.is_alive() and not t.daemon]
        if not leaked or __import__("time").monotonic() > deadline:
            break
        __import__("time").sleep(0.05)
    assert not leaked, f"test leaked threads: {leaked}"
