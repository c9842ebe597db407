"""An LLM call cut off by the user (issue 23 item 11), by the real CLI offline against the scripted provider: the
first call is held 30 s, Ctrl-C (SIGINT) comes while it waits. The log has a turn, no usage record, then the
abort; the CLI's own OTel has a chat span for the call. So does the replay: one that ended aborted."""

from __future__ import annotations

import signal
import time

from tests.support.commands import run_replay
from tests.support.copilot_cli import prompt_for
from tests.support.net import wait_until
from tests.support.otlp_json import iso_ns, read_spans


def test_a_call_cut_off_by_the_user_is_a_chat_span_that_ended_aborted(cli, provider, tmp_path):
    proc = cli.start(prompt_for("sit_slow", 30), home=tmp_path / "home", port=provider.port, cwd=tmp_path / "work",
                     otel_file=tmp_path / "otel.jsonl")
    try:
        wait_until(lambda: proc.events_path.exists() and b"assistant.turn_start" in proc.events_path.read_bytes(),
                   timeout=90, what="the turn to start")
        time.sleep(1.0)  # the scenario, not a wait on a condition: Ctrl-C a second into a call held for 30 s
        proc.kill(signal.SIGINT, tools=False)
        run = proc.wait(timeout=60)
    finally:
        proc.kill()
    events = run.events()
    types = [e["type"] for e in events]
    assert "abort" in types and "session.usage_record" not in types and "assistant.message" not in types, types
    theirs = [s for s in run.otel() if s.get("type") == "span" and s["name"].startswith("chat")]
    assert len(theirs) == 1  # the CLI's own OTel shows the call

    traces = tmp_path / "t.jsonl"
    result = run_replay(str(run.events_path), "--state-dir", str(tmp_path / "s"), "--traces-file", str(traces))
    assert result.returncode == 0, result.stderr
    spans = read_spans(traces)
    (chat,) = [s for s in spans if s.attributes.get("gen_ai.operation.name") == "chat"]
    assert chat.status_code == "ERROR" and chat.attributes["error.type"] == "aborted"
    (turn,) = [s for s in spans if s.name == "turn"]
    assert chat.parent_span_id == turn.span_id
    abort = next(e for e in events if e["type"] == "abort")
    turn_start = next(e for e in events if e["type"] == "assistant.turn_start")
    assert chat.start_time_unix_nano == iso_ns(turn_start["timestamp"])
    assert chat.end_time_unix_nano == min(turn.end_time_unix_nano, iso_ns(abort["timestamp"]))
    (root,) = [s for s in spans if s.parent_span_id is None]
    assert root.attributes["github.copilot.interaction.end"] == "aborted"
