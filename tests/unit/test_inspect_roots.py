"""inspect's arrangement (cli/layout.py) of work that runs outside any interaction, on real CLI 1.0.102 logs: a
/compact and a `!cmd` are roots of their own, counted as the session's row counts them."""

from __future__ import annotations

from pathlib import Path

from copilot_otel.cli.layout import Layout, Totals
from copilot_otel.logreader import LogReader
from copilot_otel.model import attrs as A
from copilot_otel.model.options import ModelOptions

SITUATIONS = Path(__file__).resolve().parent.parent / "fixtures" / "situations"


def replayed(situation: str, session_prefix: str = ""):
    path = next((SITUATIONS / situation).glob(f"session-state/{session_prefix}*/events.jsonl"))
    reader = LogReader(path, ModelOptions())
    out = reader.read_to_end()
    reader.finish(out)
    return out.spans, reader.live_model.summary()


def session_totals(layout: Layout) -> Totals:
    totals = Totals()
    for root in layout.roots:
        for span in [root, *layout.below(root)]:
            totals.add(span)
    return totals


def test_a_manual_compactions_own_call_is_no_llm_call():
    """The /compact root holds a chat span for its provider call (no usage record names it): inspect counts the
    usage records' calls and tokens only, as the row does."""
    spans, summary = replayed("compaction", "1856134e")  # the /compact run (the other compacts by threshold)
    layout = Layout(spans)
    compaction = [r for r in layout.roots if r.attributes.get(A.GEN_AI_OPERATION_NAME) == A.OP_COMPACTION]
    assert len(compaction) == 1 and [c.name for c in layout.below(compaction[0])] == ["chat test-model"]
    assert layout.totals(compaction[0]).llm_calls == 0
    totals = session_totals(layout)
    assert (totals.llm_calls, totals.input_tokens, totals.output_tokens) == \
        (summary.llm_calls, summary.input_tokens, summary.output_tokens)


def test_a_command_run_after_the_loop_ended_counts_as_a_tool():
    """A `!cmd` after the answer is a tool span with no parent: its root's totals count it."""
    spans, summary = replayed("user_command")
    layout = Layout(spans)
    command = [r for r in layout.roots if r.attributes.get(A.GEN_AI_OPERATION_NAME) == A.OP_EXECUTE_TOOL]
    assert len(command) == 1 and layout.totals(command[0]).tool_calls == 1
    assert session_totals(layout).tool_calls == summary.tool_calls == 2
