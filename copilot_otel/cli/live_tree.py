"""`inspect --follow`: the session's tree redrawn while it runs (rich ``Live``), its newest lines kept in view."""

from __future__ import annotations

import time

from rich.console import Console, ConsoleOptions, Group, RenderResult
from rich.live import Live
from rich.segment import Segment
from rich.text import Text

from ..catalog.snapshot import SessionReader, Snapshot
from ..source.liveness import StuckPolicy
from .tree import build_tree

REDRAW_SECONDS = 1.0


class Fitted:
    """A tree cut to the terminal's height: its header, then its newest lines (the running work)."""

    def __init__(self, snapshot: Snapshot, *, footer: str = "") -> None:
        self.tree = build_tree(snapshot)
        self.footer = footer

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        height = options.height or console.size.height
        lines = console.render_lines(self.tree, options.update(height=None), pad=False)
        label = self.tree.label
        assert isinstance(label, Group)  # build_tree's header
        header = len(label.renderables)  # the header Group's lines, one Text each
        room = max(1, height - header - 1 - (1 if self.footer else 0))
        body = lines[header:]
        if len(body) > room:
            hidden = len(body) - room + 1
            body = [[Segment(f"  ... {hidden} earlier line(s)", console.get_style("dim"))]] + body[-room + 1:]
        for line in lines[:header] + body:
            yield from line
            yield Segment.line()
        if self.footer:
            yield Text(self.footer, style="dim", no_wrap=True, overflow="ellipsis")


def follow_session(reader: SessionReader, *, policy: StuckPolicy, console: Console,
                   redraw: float = REDRAW_SECONDS, until=None) -> Snapshot:
    """Redraw until the session is no longer running (or Ctrl-C, or ``until()``); return the last snapshot."""
    snapshot = reader.snapshot(policy=policy)
    with Live(Fitted(snapshot, footer="following; Ctrl-C to stop"), console=console, auto_refresh=False,
              transient=False, redirect_stderr=False) as live:
        try:
            while snapshot.running and not (until and until()):
                time.sleep(redraw)
                reader.update()
                snapshot = reader.snapshot(policy=policy)
                live.update(Fitted(snapshot, footer="following; Ctrl-C to stop" if snapshot.running else ""),
                            refresh=True)
        except KeyboardInterrupt:
            pass
        live.update(Fitted(snapshot), refresh=True)
    if not console.is_terminal:  # rich ends a live display with a newline only on a terminal
        console.line()
    return snapshot
