"""Checked against ccusage: ccusage (npm, pinned in tests/cli/package.json) reads the same logs the real CLI
wrote (tests/fixtures/cli, every version) through COPILOT_HOME, and `ccusage copilot session --json --offline`
gives each session the tokens `copilot-otel sessions --json` gives it, wherever both report the session. What
each counts that the other does not is asserted here as docs/usage.md says it."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.e2e.test_daily_views import sessions_json

ROOT = Path(__file__).resolve().parents[2]
CCUSAGE = ROOT / "tests" / "cli" / "node_modules" / ".bin" / "ccusage"
CLI = ROOT / "tests" / "fixtures" / "cli"
PER_PROCESS_BEFORE = (1, 0, 70)  # shutdown totals count one CLI process, not the whole session, before this


def ccusage_sessions(home: Path, tmp_path: Path) -> dict[str, dict]:
    """`ccusage copilot session --json --offline` over ``home`` (a COPILOT_HOME), by session id."""
    if not CCUSAGE.exists():
        pytest.fail(f"{CCUSAGE} is missing: ./scripts/test.sh installs it (npm install --prefix tests/cli)")
    empty = tmp_path / "empty-home"
    empty.mkdir()
    result = subprocess.run([str(CCUSAGE), "copilot", "session", "--json", "--offline"], capture_output=True,
                            timeout=120, env={"PATH": "/usr/bin:/bin", "HOME": str(empty), "COPILOT_HOME": str(home),
                                              "NO_COLOR": "1"})
    assert result.returncode == 0, result.stderr.decode()
    return {s["sessionId"]: s for s in json.loads(result.stdout)["sessions"]}


def shutdowns(home: Path, session_id: str) -> list[dict]:
    log = home / "session-state" / session_id / "events.jsonl"
    return [e["data"] for e in map(json.loads, log.read_text().splitlines()) if e["type"] == "session.shutdown"]


def tokens_of(model_metrics: dict) -> tuple[int, int, int, int]:
    usage = [m["usage"] for m in model_metrics.values()]
    return tuple(sum(u.get(key, 0) for u in usage)
                 for key in ("inputTokens", "outputTokens", "cacheReadTokens", "cacheWriteTokens"))


def test_ccusage_and_copilot_otel_give_each_session_the_same_tokens(tmp_path):
    """Every stored session of every CLI version in one COPILOT_HOME. Where both report a session: input tokens
    (ccusage leaves the cache reads out of its input: its input plus its cache reads), output, cache read and
    cache write tokens are the same, and so are the LLM calls (ccusage's messageCount) and, where the CLI billed
    every call in AI credits, the dollars (1 credit = $0.01), except for a session
    resumed on a CLI before 1.0.70, whose shutdowns each total one process: ccusage takes the last one's,
    copilot-otel adds them up. ccusage leaves out every session without a session.shutdown (CLIs before 1.0.24
    write none; a running or crashed session has none yet) and those whose shutdown holds no model; copilot-otel
    lists them all."""
    home = tmp_path / "home"
    for log in sorted(CLI.glob("*/*/session-state/*/events.jsonl")):
        shutil.copytree(log.parent, home / "session-state" / log.parent.name)
    ours = sessions_json(home, tmp_path / "state", "--from-files")
    theirs = ccusage_sessions(home, tmp_path)
    assert len(theirs) > 50 and set(theirs) <= set(ours)

    differences, resumed_early, priced = [], 0, 0
    for sid, row in theirs.items():
        mine = ours[sid]
        said = (row["inputTokens"] + row["cacheReadTokens"], row["outputTokens"], row["cacheReadTokens"],
                row["cacheCreationTokens"], row["messageCount"])
        expected = (mine["input_tokens"], mine["output_tokens"], mine["cache_read_tokens"], mine["cache_write_tokens"],
                    mine["llm_calls"])
        ends = shutdowns(home, sid)
        version = tuple(map(int, mine["cli_version"].split(".")))
        if version < PER_PROCESS_BEFORE and len(ends) > 1:
            resumed_early += 1
            last = tokens_of(ends[-1]["modelMetrics"])
            all_ = tuple(map(sum, zip(*(tokens_of(d["modelMetrics"]) for d in ends))))
            assert said[:4] == last and expected[:4] == all_ and last != all_, sid
            continue
        if said != expected:
            differences.append(f"{mine['cli_version']} {sid[:8]}: ccusage {said}, copilot-otel {expected}")
        if mine["credits_status"] == "complete":  # the CLI billed every call: ccusage's dollars are its credits
            if abs(row["totalCost"] - mine["nano_aiu"] / 1e9 * 0.01) > 1e-9:
                differences.append(f"{sid[:8]}: ccusage ${row['totalCost']}, copilot-otel {mine['nano_aiu']} nano AIU")
            priced += 1
    assert not differences, "\n".join(differences)
    assert priced >= 3
    assert resumed_early == 2  # reused_ids of 1.0.24 and 1.0.50

    left_out = set(ours) - set(theirs)
    for sid in left_out:
        ends = shutdowns(home, sid)
        assert not ends or not ends[-1].get("modelMetrics"), sid
        assert ours[sid]["llm_calls"] == 0 or not ends, sid
    assert {ours[sid]["cli_version"] for sid in left_out if not shutdowns(home, sid)} == {"0.0.400", "1.0.2"}
