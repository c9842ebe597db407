"""One-shot commands import only what they use: `sessions --json` of cached summaries loads neither the
session model nor rich nor http.client, and `inspect --json` loads no rich; their output is the same."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "cli"
# Runs the CLI as its entry point does, then writes which of these modules it imported.
WATCHED = ("rich", "http.client", "copilot_otel.model.sessions")
RUN = f"""
import atexit, json, os, sys
def said():
    with open(os.environ["MODULES_SEEN"], "w") as out:
        json.dump([m for m in {WATCHED!r} if m in sys.modules], out)
atexit.register(said)
from copilot_otel.cli.main import main
sys.argv[0] = "copilot-otel"
main()
"""


def _home(tmp_path: Path) -> Path:
    """A COPILOT_HOME holding the stored sessions of three CLI versions."""
    state = tmp_path / "home" / "session-state"
    state.mkdir(parents=True)
    for version in ("1.0.2", "1.0.70", "1.0.102"):
        for log in sorted((FIXTURES / version).glob("*/session-state/*/events.jsonl")):
            shutil.copytree(log.parent, state / log.parent.name)
    return state.parent


def _run(tmp_path: Path, home: Path, *args: str) -> tuple[str, list[str]]:
    seen = tmp_path / "modules.json"
    env = {**os.environ, "COPILOT_HOME": str(home), "MODULES_SEEN": str(seen)}
    done = subprocess.run([sys.executable, "-c", RUN, *args], env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout, json.loads(seen.read_text())


def test_sessions_of_cached_summaries_load_no_model_rich_or_http(tmp_path):
    home = _home(tmp_path)
    state = tmp_path / "state"
    args = ("sessions", "--json", "--from-files", "--state-dir", str(state))
    first, read_logs = _run(tmp_path, home, *args)
    assert "copilot_otel.model.sessions" in read_logs  # no cache yet: every log was read through the model
    assert "rich" not in read_logs
    again, cached = _run(tmp_path, home, *args)
    assert cached == []
    assert json.loads(again) == json.loads(first)
    assert len(json.loads(first)) == len(list((home / "session-state").iterdir())) > 10


def test_inspect_json_loads_no_rich_and_the_tree_still_draws(tmp_path):
    home = _home(tmp_path)
    session = sorted((home / "session-state").iterdir())[0]
    out, modules = _run(tmp_path, home, "inspect", "--json", str(session))
    assert "rich" not in modules
    document = json.loads(out)
    assert document["session"]["id"] == session.name and document["interactions"]
    tree, modules = _run(tmp_path, home, "inspect", str(session))
    assert "rich" in modules and session.name[:8] in tree
