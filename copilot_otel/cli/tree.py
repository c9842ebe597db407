"""`inspect`: a session snapshot as an interaction / turn / tool tree for the terminal (layout.py arranges it,
and makes the JSON of `inspect --json`).

Every line fits the terminal (long ones end in an ellipsis, never wrap), and text from the log is
escaped (safe_text.py). Interactions carry their start time, duration, how they ended and their
totals; the header names the session's state as the daemon would, with the session's totals.
Tool arguments appear only when content capture is on (the model holds none otherwise).
"""

from __future__ import annotations

import orjson
from rich.console import Group
from rich.text import Text
from rich.tree import Tree

from ..base.display import clock_time, duration, plural, where
from ..base.safe_text import safe
from ..catalog.snapshot import Snapshot
from ..model import attrs as A
from ..model.records import STATUS_ERROR, SpanRecord
from ..model.summary import PARTIAL_NOTE
from ..vocab import ABANDONED, INCOMPLETE, STUCK, WAITING_TOOL, WAITING_USER, WORKING
from .layout import Layout, Totals, to_json  # noqa: F401 (to_json: inspect's JSON, here as before)

_ENDINGS = {
    "idle": ("idle", "green"),
    "task_complete": ("task_complete", "green"),
    "error": ("error", "red"),
    "shutdown": ("shutdown", "yellow"),
    "incomplete": ("incomplete", "red"),
    "aborted": ("aborted by the user", "yellow"),
}
_STATE_STYLES = {WORKING: "cyan", WAITING_TOOL: "cyan", WAITING_USER: "magenta", STUCK: "bold red",
                 ABANDONED: "bold red"}


class SafeLine(Text):
    """One line of the tree: text appended to it is escaped for the terminal (and, as rich Text, never markup)."""

    def append(self, text, style=None) -> SafeLine:
        super().append(safe(text) if isinstance(text, str) else text, style)
        return self


def _line(*parts: tuple[str, str] | str) -> Text:
    text = SafeLine(no_wrap=True, overflow="ellipsis")
    for part in parts:
        text.append(*part) if isinstance(part, tuple) else text.append(part)
    return text


def _took(span: SpanRecord) -> str:
    seconds = (span.end_ns - span.start_ns) / 1e9
    if span.attributes.get(A.COPILOT_RUNNING):
        return f"running {duration(seconds)}"
    if span.attributes.get(A.ERROR_TYPE) == INCOMPLETE:
        # Cut off by a crash: the log holds no end, only the last event written (a lower bound).
        return f">= {duration(seconds)}, end unknown"
    return duration(seconds)


def _label(span: SpanRecord, root_start_ns: int) -> Text:
    a = span.attributes
    operation = a.get(A.GEN_AI_OPERATION_NAME)
    ok = span.status != STATUS_ERROR
    text = _line()
    if operation == A.OP_CHAT:
        text.append(f"chat {a.get(A.GEN_AI_REQUEST_MODEL)}", style="cyan")
        text.append(f"  {_took(span)}", style="dim")
        if not ok:
            text.append(f" failed ({a.get(A.ERROR_TYPE)})", style="red")
        cached = a.get(A.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS)
        text.append(f"  in={a.get(A.GEN_AI_USAGE_INPUT_TOKENS, 0)} out={a.get(A.GEN_AI_USAGE_OUTPUT_TOKENS, 0)}"
                    + (f" cache_read={cached}" if cached else ""), style="dim")
        return text
    elif operation == A.OP_COMPACTION:
        text.append(f"compaction {a.get(A.GEN_AI_REQUEST_MODEL)}", style="cyan")
        text.append(f"  {_took(span)}", style="dim")
        if not ok:
            text.append(f" failed ({a.get(A.ERROR_TYPE)})", style="red")
        tokens = f"{A.COPILOT_COMPACTION_TOKENS}."
        text.append(f"  in={a.get(tokens + 'input', 0)} out={a.get(tokens + 'output', 0)}"
                    f" ({a.get(A.COPILOT_COMPACTION_TRIGGER)})", style="dim")
        return text
    elif operation == A.OP_EXECUTE_TOOL:
        text.append(f"tool {a.get(A.GEN_AI_TOOL_NAME)}", style="bold")
        if not a.get(A.COPILOT_RUNNING):
            code = a.get(A.PROCESS_EXIT_CODE)
            exited = f", exit code {code}" if code else ""
            text.append(" ok" if ok else f" failed ({a.get(A.ERROR_TYPE)}{exited})", style="green" if ok else "red")
    elif operation == A.OP_INVOKE_AGENT:
        text.append(f"sub-agent {a.get(A.GEN_AI_AGENT_NAME)}", style="magenta")
        if not ok:
            text.append(f" failed ({a.get(A.ERROR_TYPE)})", style="red")
    elif span.name == A.TURN_SPAN:
        text.append(f"turn {a.get(A.COPILOT_TURN_ID)}", style="bold")
        text.append(f" +{duration((span.start_ns - root_start_ns) / 1e9)}", style="dim")
        if a.get(A.COPILOT_AUTOPILOT_CONTINUATION):
            text.append(" (autopilot)", style="yellow")
        if not ok:
            text.append(f" {a.get(A.ERROR_TYPE)}", style="red")
    else:
        text.append(span.name)
    text.append(f"  {_took(span)}", style="yellow" if a.get(A.COPILOT_RUNNING) else "dim")
    arguments = a.get(A.GEN_AI_TOOL_CALL_ARGUMENTS)  # present only with content capture on
    if arguments:
        text.append(f"  {_shown_arguments(str(arguments))}", style="dim italic")
    return text


def _shown_arguments(arguments: str) -> str:
    """A shell tool's command as '$ command'; other arguments as their JSON."""
    try:
        parsed = orjson.loads(arguments)
    except orjson.JSONDecodeError:
        return arguments
    if isinstance(parsed, dict) and isinstance(parsed.get("command"), str):
        return "$ " + parsed["command"]
    return arguments


def header(snapshot: Snapshot) -> Group:
    """The session's id, state, where it runs, its times and totals: lines that fit 80 columns."""
    status = snapshot.status
    summary = status.summary
    now = snapshot.now_ns / 1e9
    lines = [_line(("session ", "bold"), (summary.session_id, "bold"))]
    if summary.name:
        lines.append(_line(("  " + summary.name, "italic")))
    state = _line("  ", (status.state, _STATE_STYLES.get(status.state, "green")))
    if status.state in (STUCK, ABANDONED):
        state.append(f" for {duration(status.stalled_seconds)}", style=_STATE_STYLES[status.state])
    if status.waiting_on and status.state in (WAITING_TOOL, STUCK, ABANDONED):
        since = f" since {clock_time(summary.waiting_since_ns, now)}" if summary.waiting_since_ns else ""
        # Abandoned: its process died in the tool, whose end (and so how long it ran) is not known.
        state.append(f": cut off in tool {status.waiting_on}{since}, end unknown" if status.state == ABANDONED
                     else f": waiting on tool {status.waiting_on}{since}")
    elif summary.asking and status.state == WAITING_USER:
        since = f" since {clock_time(summary.asking_since_ns, now)}" if summary.asking_since_ns else ""
        state.append(f": asks the user for {summary.asking}{since}")
    if summary.ended:
        state.append(f" ({summary.ended})" if status.state == "ended" else f" (session ended: {summary.ended})",
                     style="dim")
    lines.append(state)
    facts = [x for x in (summary.model, where(summary), summary.cli_version and f"CLI {summary.cli_version}") if x]
    if facts:
        lines.append(_line(("  " + " · ".join(facts), "dim")))
    lines.append(_line((f"  started {clock_time(summary.started_ns, now)} · last event "
                        f"{clock_time(summary.last_event_ns, now)}", "dim")))
    totals = Totals()  # from the spans, as each interaction's: what ran, the work still running included
    for span in snapshot.spans:
        totals.add(span)
    if summary.nano_aiu or summary.credits_status:  # the session's, with what the CLI's totals added (the stream's)
        unpriced = int(summary.credits_status in ("partial", "unavailable"))
        totals.nano_aiu, totals.unpriced_calls = summary.nano_aiu, unpriced
    lines.append(_line((f"  {plural(summary.interactions, 'interaction')} · {totals.text()}", "dim")))
    if totals.unpriced_calls and totals.nano_aiu:
        lines.append(_line((f"  ({PARTIAL_NOTE})", "dim")))
    return Group(*lines)


def build_tree(snapshot: Snapshot) -> Tree:
    """The rich Tree of the session's interactions, header on top."""
    layout = Layout(snapshot.spans)
    tree = Tree(header(snapshot), guide_style="dim")
    ended = {s.trace_id: s for s in snapshot.interactions}
    now = snapshot.now_ns / 1e9
    number = 0
    for root in layout.roots:
        a = root.attributes
        if a.get(A.GEN_AI_OPERATION_NAME) != A.OP_INVOKE_AGENT:  # work outside any interaction (/compact, !cmd)
            label = _label(root, root.start_ns)
            label.append(f"  {clock_time(root.start_ns, now)}", style="dim")
            _add_children(tree.add(label), layout, root, root.start_ns)
            continue
        number += 1
        summary = ended.get(root.trace_id)
        label = _line((f"interaction {number}", "bold blue"), (f"  {clock_time(root.start_ns, now)}", "dim"),
                      (f"  {_took(root)}", "dim"))
        end = a.get(A.COPILOT_INTERACTION_END)
        word, style = _ENDINGS.get(str(end), ("not yet, running", "yellow"))
        label.append(f"  ended: {word}", style=style)
        if end == "error":
            label.append(f" ({a.get(A.ERROR_TYPE)})", style="red")
        if (summary and summary.autopilot) or a.get(A.COPILOT_AUTOPILOT_CONTINUATION):
            label.append("  (autopilot nudge)", style="yellow")
        if a.get(A.COPILOT_TRIGGER):
            label.append(f"  (after {a.get(A.COPILOT_TRIGGER)})", style="dim")
        branch = tree.add(label)
        branch.add(_line(("totals: " + layout.totals(root).text(), "dim")))
        if summary and summary.summary:
            branch.add(_line((f"task_complete: {summary.summary}", "green")))
        _add_children(branch, layout, root, root.start_ns)
    if snapshot.rejected:
        tree.add(_line((f"{snapshot.rejected} malformed line(s) skipped", "red")))
    return tree


def _add_children(node: Tree, layout: Layout, span: SpanRecord, root_start_ns: int) -> None:
    for child in layout.children.get(span.span_id, ()):
        _add_children(node.add(_label(child, root_start_ns)), layout, child, root_start_ns)
