"""`inspect`'s arrangement of a session snapshot: its spans as trees, one per interaction, with each one's
totals; and the snapshot as one JSON object (`inspect --json`). No terminal drawing here (tree.py draws),
so `inspect --json` never imports rich.
"""

from __future__ import annotations

from collections import defaultdict

from msgspec import Struct
from msgspec.structs import asdict

from ..base.display import count, iso_time, plural
from ..catalog.snapshot import Snapshot
from ..model import attrs as A
from ..model.records import STATUS_ERROR, STATUS_OK, SpanRecord
from ..model.summary import CREDITS_UNKNOWN, credits_text
from ..vocab import INCOMPLETE


class Totals(Struct):
    """What a set of spans adds up to (an interaction's, or the session's)."""

    turns: int = 0
    llm_calls: int = 0
    tool_calls: int = 0
    tool_failures: int = 0  # a failure the tool reported (or an abort): not one cut off by the session's end
    tool_cut_off: int = 0  # ended incomplete: its session's process was gone (its outcome is not known)
    input_tokens: int = 0
    output_tokens: int = 0
    premium_requests: float = 0.0
    nano_aiu: int = 0  # AI credits of the calls that reported an amount
    unpriced_calls: int = 0  # calls that reported none

    def add(self, span: SpanRecord) -> None:
        a = span.attributes
        operation = a.get(A.GEN_AI_OPERATION_NAME)
        if operation == A.OP_CHAT and A.COPILOT_COMPACTION_TRIGGER in a:
            pass  # a compaction's own call: no usage record names it, its tokens are the compaction's
        elif operation == A.OP_CHAT:
            self.llm_calls += 1
            self.input_tokens += int(a.get(A.GEN_AI_USAGE_INPUT_TOKENS, 0))
            self.output_tokens += int(a.get(A.GEN_AI_USAGE_OUTPUT_TOKENS, 0))
            cost = a.get(A.COPILOT_COST)
            if a.get(A.COPILOT_INITIATOR) == "user" and isinstance(cost, (int, float)) and cost > 0:
                self.premium_requests += cost
            amount = a.get(A.COPILOT_NANO_AIU)
            if isinstance(amount, int):
                self.nano_aiu += amount
            elif span.status != STATUS_ERROR:
                self.unpriced_calls += 1
        elif operation == A.OP_EXECUTE_TOOL:
            self.tool_calls += 1
            cut_off = a.get(A.ERROR_TYPE) == INCOMPLETE
            self.tool_failures += span.status == STATUS_ERROR and not cut_off
            self.tool_cut_off += cut_off
        elif span.name == A.TURN_SPAN:
            self.turns += 1

    @property
    def tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def to_json(self) -> dict:
        """The totals for scripts; AI credits null when no call reported an amount (unknown, not zero), a floor
        when some did not (``unpriced_calls``)."""
        out = {**asdict(self), "tokens": self.tokens}
        if self.unpriced_calls and not self.nano_aiu:
            out["nano_aiu"] = None
        return out

    def text(self) -> str:
        """'1 premium · 0.42 AI credits · 12.1k tokens · 3 turns · 4 LLM calls · 2 tools (1 failed)': the cost
        first, as a line too long for the terminal loses its end ('AI credits unknown' last)."""
        failed = ", ".join(x for x in (self.tool_failures and f"{self.tool_failures} failed",
                                       self.tool_cut_off and f"{self.tool_cut_off} cut off") if x)
        failed = f" ({failed})" if failed else ""
        parts = [f"{count(self.tokens)} tokens", plural(self.turns, "turn"), plural(self.llm_calls, "LLM call"),
                 plural(self.tool_calls, "tool") + failed]
        if self.nano_aiu or self.unpriced_calls:  # unknown (no call reported an amount): said last, it costs nothing
            credits = credits_text(self.nano_aiu, "partial" if self.unpriced_calls else None)
            if credits == CREDITS_UNKNOWN:
                parts.append("AI credits unknown")
            else:
                parts.insert(0, f"{credits} AI credits")
        if self.premium_requests:
            parts.insert(0, f"{self.premium_requests:g} premium")
        return " · ".join(parts)


class Layout:
    """A snapshot's spans arranged: roots (one per interaction or continuation) in time order, children
    under their parent in time order, and the totals under each root."""

    def __init__(self, spans: list[SpanRecord]) -> None:
        self.children: dict[int | None, list[SpanRecord]] = defaultdict(list)
        for span in spans:
            self.children[span.parent_span_id].append(span)
        for siblings in self.children.values():
            siblings.sort(key=lambda s: (s.start_ns, s.end_ns))
        self.roots = self.children.get(None, [])

    def below(self, span: SpanRecord) -> list[SpanRecord]:
        """Every span under ``span``, depth first."""
        out = []
        for child in self.children.get(span.span_id, ()):
            out.append(child)
            out.extend(self.below(child))
        return out

    def totals(self, root: SpanRecord) -> Totals:
        """What ``root`` and the spans under it add up to (a root may be work of its own: a `!cmd` tool)."""
        totals = Totals()
        for span in [root, *self.below(root)]:
            totals.add(span)
        return totals

def _span_json(span: SpanRecord, layout: Layout) -> dict:
    return {
        "name": span.name,
        "span_id": f"{span.span_id:016x}",
        "start": iso_time(span.start_ns),
        "end": iso_time(span.end_ns),
        "duration_seconds": round((span.end_ns - span.start_ns) / 1e9, 6),
        "status": {STATUS_OK: "ok", STATUS_ERROR: "error"}.get(span.status, "unset"),
        "running": bool(span.attributes.get(A.COPILOT_RUNNING)),
        "attributes": {k: v for k, v in span.attributes.items() if k != A.COPILOT_RUNNING},
        "children": [_span_json(child, layout) for child in layout.children.get(span.span_id, ())],
    }


def to_json(snapshot: Snapshot) -> dict:
    """The snapshot as one JSON object: the session's status, its totals and each interaction's tree."""
    layout = Layout(snapshot.spans)
    ended = {s.trace_id: s for s in snapshot.interactions}
    interactions = []
    number = 0
    for root in layout.roots:
        summary = ended.get(root.trace_id)
        # Work outside any interaction (a /compact, a `!cmd`, a session hook) is a root of its own: no number.
        interaction = root.attributes.get(A.GEN_AI_OPERATION_NAME) == A.OP_INVOKE_AGENT
        number += interaction
        interactions.append({
            "number": number if interaction else None,
            "interaction_id": root.attributes.get(A.COPILOT_INTERACTION_ID),
            "trace_id": f"{root.trace_id:032x}",
            "end": root.attributes.get(A.COPILOT_INTERACTION_END),
            "autopilot": bool((summary and summary.autopilot) or root.attributes.get(A.COPILOT_AUTOPILOT_CONTINUATION)),
            "task_summary": summary.summary if summary else None,
            "totals": layout.totals(root).to_json(),
            "tree": _span_json(root, layout),
        })
    return {"session": snapshot.status.to_json(), "running": snapshot.running, "rejected_lines": snapshot.rejected,
            "interactions": interactions}
