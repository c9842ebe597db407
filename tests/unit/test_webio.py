"""The live views' one poller (webio.Changes) over a real source of session logs on disk."""

from __future__ import annotations

import asyncio
from pathlib import Path

from copilot_otel.config import ModelOptions
from copilot_otel.source.liveness import StuckPolicy
from copilot_otel.web.overview import HistorySessions
from copilot_otel.web.streams import Changes
from tests.support import aio
from tests.support.events import SessionLog
from tests.support.files import append, new_session


def history(home: Path) -> tuple[HistorySessions, list[Path], SessionLog]:
    """Two sessions on disk, replayed by the `view` command's source (which looks again when asked)."""
    paths, logs = [], []
    for name in ("one", "two"):
        log = SessionLog(name)
        log.start()
        log.user()
        path = new_session(home, name)
        path.write_bytes(log.jsonl())
        paths.append(path)
        logs.append(log)
    files = lambda: sorted(home.glob("session-state/*/events.jsonl"))  # noqa: E731
    source = HistorySessions(files, ModelOptions(), policy=StuckPolicy(600.0), rescan_every=0.0)
    source.scan()
    return source, paths, logs[0]


def test_one_look_builds_the_board_once_for_every_view_and_wakes_them_all(tmp_path):
    """Views waiting on the poller wake when a log changed, with the board rebuilt once for all of them;
    the row of the session that did not change is the same object (what a view compares)."""
    source, paths, log = history(tmp_path)
    builds = []

    async def run_blocking(fn, *args):
        if fn == source.board:
            builds.append(fn)
        return await asyncio.to_thread(fn, *args)

    async def rescan():
        await asyncio.to_thread(source.scan)

    async def main():
        changes = Changes(source, rescan, run_blocking)
        await changes.join()
        await changes.join()
        first, version = changes.board, changes.version
        assert set(first.by_id) == {"one", "two"} and len(builds) == 1
        written = len(log.lines())
        log.turn_start()
        append(paths[0], log.jsonl(written))
        waiting = [changes.wait(version, 10.0) for _ in range(3)]
        versions = await asyncio.gather(*waiting)
        assert versions == [version + 1] * 3 and len(builds) == 2
        assert changes.board.by_id["two"] is first.by_id["two"]
        assert changes.board.by_id["one"] is not first.by_id["one"]
        assert await changes.wait(changes.version, 0.3) == changes.version  # nothing moved: a timeout
        assert len(builds) == 2
        changes.leave()
        task = changes._task
        changes.leave()
        assert changes._task is None
        await asyncio.sleep(0)
        assert task.cancelled() or task.done()

    aio.run(main())  # a fresh loop on its own thread: a browser test before this one leaves a loop running


def test_the_help_says_the_bounds_the_code_keeps():
    """`run --help` and `view --help` say what one client can cost with the figures the code uses."""
    from click.testing import CliRunner

    from copilot_otel.cli.main import main
    from copilot_otel.web import server
    from copilot_otel.web import streams as webio
    from copilot_otel.web.routes import MAX_STREAMS
    from copilot_otel.web.waterfall import MAX_BYTES, PAGE_BYTES, PAGE_SPANS

    figures = (f"{PAGE_SPANS:,} spans", f"{PAGE_BYTES >> 20} MiB of JSON", f"{MAX_BYTES >> 20} MiB of spans held",
               f"{MAX_STREAMS} live views",
               f"{2 * webio.SEND_BUFFER // 1024} KiB kernel send buffer", f"after {server.WRITE_TIMEOUT:.0f} s",
               f"or {webio.WRITE_TIMEOUT:.0f} s")
    for command in ("run", "view"):
        text = " ".join(CliRunner().invoke(main, [command, "--help"]).output.split())
        missing = [figure for figure in figures if figure not in text]
        assert not missing, (command, missing)
