"""`inspect`: one session as an interaction / turn / tool tree in the terminal."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from rich.console import Console
from rich.text import Text
from rich.tree import Tree

from . import attrs as A
from .config import DEFAULT_MAX_LINE_BYTES, ModelOptions
from .pipeline import Outputs, drive
from .records import STATUS_ERROR, SpanRecord
from .sessions import READ_TYPES, SessionModel
from .tail import read_all

_ENDINGS = {
    "idle": ("idle", "green"),
    "task_complete": ("task_complete", "green"),
    "error": ("error", "red"),
    "shutdown": ("shutdown", "yellow"),
    "incomplete": ("incomplete", "red"),
    "aborted": ("aborted by the user", "yellow"),
}


def _duration(span: SpanRecord) -> str:
    seconds = (span.end_ns - span.start_ns) / 1e9
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 120:
        return f"{seconds:.1f} s"
    return f"{seconds / 60:.1f} min"


def _label(span: SpanRecord) -> Text:
    a = span.attributes
    operation = a.get(A.GEN_AI_OPERATION_NAME)
    text = Text()
    if operation == A.OP_CHAT:
        text.append(f"chat {a.get(A.GEN_AI_REQUEST_MODEL)}", style="cyan")
        tokens = f" in={a.get(A.GEN_AI_USAGE_INPUT_TOKENS, 0)} out={a.get(A.GEN_AI_USAGE_OUTPUT_TOKENS, 0)}"
        cached = a.get(A.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS)
        text.append(tokens + (f" cache_read={cached}" if cached else ""), style="dim")
    elif operation == A.OP_EXECUTE_TOOL:
        ok = span.status != STATUS_ERROR
        text.append(f"tool {a.get(A.GEN_AI_TOOL_NAME)}", style="bold")
        if not a.get(A.COPILOT_RUNNING):
            text.append(" ok" if ok else f" failed ({a.get(A.ERROR_TYPE)})", style="green" if ok else "red")
    elif operation == A.OP_INVOKE_AGENT and span.parent_span_id is not None:
        text.append(f"sub-agent {a.get(A.GEN_AI_AGENT_NAME)}", style="magenta")
        if span.status == STATUS_ERROR:
            text.append(f" failed ({a.get(A.ERROR_TYPE)})", style="red")
    elif span.name == A.TURN_SPAN:
        text.append(f"turn {a.get(A.COPILOT_TURN_ID)}", style="bold")
        if a.get(A.COPILOT_AUTOPILOT_CONTINUATION):
            text.append(" (autopilot)", style="yellow")
        if span.status == STATUS_ERROR:
            text.append(f" {a.get(A.ERROR_TYPE)}", style="red")
    else:
        text.append(span.name)
    text.append(f"  {_duration(span)}", style="dim")
    if a.get(A.COPILOT_RUNNING):
        text.append(" so far, running", style="yellow")
    return text


def build_tree(session_id: str, spans: list[SpanRecord], model: SessionModel) -> Tree:
    """A rich Tree of the session's spans, interactions first, children in time order."""
    children: dict[int | None, list[SpanRecord]] = defaultdict(list)
    for span in spans:
        children[span.parent_span_id].append(span)
    for siblings in children.values():
        siblings.sort(key=lambda s: (s.start_ns, s.end_ns))
    header = Text(f"session {session_id}", style="bold")
    details = [x for x in (model.model, model.cwd, model.cli_version and f"CLI {model.cli_version}") if x]
    if details:
        header.append("  " + "  ".join(details), style="dim")
    tree = Tree(header)

    def add(node: Tree, span: SpanRecord) -> None:
        branch = node.add(_label(span))
        for child in children.get(span.span_id, ()):
            add(branch, child)

    summaries = {s.trace_id: s for s in model.interactions}
    for root in children.get(None, ()):
        summary = summaries.get(root.trace_id)
        label = Text(f"interaction {root.attributes.get(A.COPILOT_INTERACTION_ID)}", style="bold blue")
        label.append(f"  {_duration(root)}", style="dim")
        end = root.attributes.get(A.COPILOT_INTERACTION_END)
        word, style = _ENDINGS.get(str(end), ("not yet, running", "yellow"))
        label.append(f"  ended: {word}", style=style)
        if summary and summary.autopilot:
            label.append("  (autopilot nudge)", style="yellow")
        if end == "error":
            label.append(f" ({root.attributes.get(A.ERROR_TYPE)})", style="red")
        branch = tree.add(label)
        if summary and summary.summary:
            branch.add(Text(f"task_complete: {summary.summary}", style="green"))
        for child in children.get(root.span_id, ()):
            add(branch, child)
    return tree


def inspect_session(path: Path, session_id: str, *, console: Console, running: bool = False,
                    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES) -> int:
    """Print the tree of one session's log; return the number of rejected lines (each logged)."""
    model = SessionModel(session_id, ModelOptions(capture_content=True, content_max_chars=200))
    out = drive(model, read_all(path, max_line_bytes=max_line_bytes, keep=READ_TYPES), Outputs(), source=str(path))
    spans = out.spans
    still_running = running and model.ended is None
    if still_running:
        spans.extend(model.open_spans())
    else:
        spans.extend(model.finish().spans)
    tree = build_tree(session_id, spans, model)
    if still_running:
        tree.add(Text(f"still running: {model.state}", style="yellow"))
    elif model.ended:
        tree.add(Text(f"session ended: {model.ended}", style="dim"))
    rejected = sum(out.rejected.values())
    if rejected:
        tree.add(Text(f"{rejected} malformed line(s) skipped", style="red"))
    console.print(tree)
    return rejected
