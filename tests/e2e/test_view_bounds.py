"""What one web view client can cost the real daemon (issue 21): clients that never read, a slow
stream, a live view of one session while another changes, and a session too large for one answer.
The sessions are long logs made from a stored real CLI log (tests/support/biglog.py)."""

from __future__ import annotations

import json
import select
import time
from datetime import UTC
from pathlib import Path

import pytest

from copilot_otel.config import ModelOptions
from copilot_otel.delivery.sinks import MemorySink
from copilot_otel.replay.runner import replay_files
from copilot_otel.web.streams import WRITE_TIMEOUT
from copilot_otel.web.waterfall import PAGE_SPANS
from tests.support.biglog import another_copy, grow
from tests.support.daemon import DaemonProcess
from tests.support.files import append, new_session
from tests.support.net import wait_until, wait_until_steady
from tests.support.scrape import value
from tests.support.viewclient import EventStream, get_json, send_get

REAL = Path(__file__).resolve().parents[1] / "fixtures" / "cli" / "1.0.102" / "multi_turn"
BIG_SPANS = 2 * PAGE_SPANS + 500  # three answers' worth
CLIENTS = 200
PER_CLIENT = 256 * 1024  # what --help promises one client that does not read holds of the daemon's memory


def real_log() -> bytes:
    return next(REAL.rglob("events.jsonl")).read_bytes()


def memory(pid: int) -> float:
    """VmRSS of a process, in bytes."""
    with open(f"/proc/{pid}/status") as handle:
        return next(int(line.split()[1]) * 1024 for line in handle if line.startswith("VmRSS:"))


def replayed_ids(path: Path) -> set[str]:
    sink = MemorySink()
    replay_files([path], sink, options=ModelOptions())
    return {f"{s.span_id:016x}" for s in sink.records}


def answered(sock) -> bool:
    """The server has begun its answer on this connection (there is something to read)."""
    return bool(select.select([sock], [], [], 0)[0])


def dropped_by_server(sock) -> bool:
    """The server reset the connection (read nothing: what it sent is still unread)."""
    poller = select.poll()
    poller.register(sock, select.POLLRDHUP | select.POLLHUP | select.POLLERR)
    return any(mask & (select.POLLHUP | select.POLLERR | select.POLLRDHUP) for _fd, mask in poller.poll(0))


@pytest.fixture(scope="module")
def big(tmp_path_factory):
    """The real daemon, and a finished session of about BIG_SPANS spans: (daemon, its log, its span ids)."""
    root = tmp_path_factory.mktemp("bounds")
    path = new_session(root / "home", "big-session")
    per_copy = len(replayed_ids(next(REAL.rglob("events.jsonl"))))
    log = real_log()
    path.write_bytes(grow(log, len(log) * (BIG_SPANS // per_copy + 1)))
    expected = replayed_ids(path)
    with DaemonProcess(root / "home", root / "state", traces_file=root / "traces.jsonl", log_level="info",
                       args=("--idle-quiet", "0.3")) as daemon:
        wait_until(lambda: any(s["id"] == "big-session" for s in get_json(daemon.port, "/api/sessions")["sessions"]),
                   timeout=60, what="the big session on /api/sessions")
        yield daemon, path, expected


def test_a_large_sessions_first_answer_is_capped_and_its_pages_give_every_span(big):
    """/api/session/<id> answers at most PAGE_SPANS spans, with where to go on from; following next and
    token gives every span replay makes, once. Its stream sends them the same way, page after page."""
    daemon, _path, expected = big
    assert len(expected) > 2 * PAGE_SPANS
    first = get_json(daemon.port, "/api/session/big-session")["trace"]
    assert len(first["spans"]) == PAGE_SPANS and first["more"] is True and first["next"] == PAGE_SPANS
    seen = [s["id"] for s in first["spans"]]
    trace = first
    while trace["more"]:
        trace = get_json(daemon.port, f"/api/session/big-session?since={trace['next']}&token={trace['token']}")["trace"]
        assert len(trace["spans"]) <= PAGE_SPANS and trace["reset"] is False
        seen += [s["id"] for s in trace["spans"]]
    assert len(seen) == len(set(seen)) and set(seen) == expected
    with EventStream(daemon.port, "/api/session/big-session/stream") as stream:
        assert stream.status == 200
        streamed, more = [], True
        while more:
            _id, data = stream.message()
            assert len(data["trace"]["spans"]) <= PAGE_SPANS
            streamed += [s["id"] for s in data["trace"]["spans"]]
            more = data["trace"]["more"]
    assert sorted(streamed) == sorted(expected)


def test_clients_that_never_read_cost_a_bounded_memory_and_are_cut(big):
    """200 connections that ask for the large session (one in four for its stream) and never read grow the
    daemon by less than 256 KiB each; each stream is cut at the write deadline (counted), and the memory
    comes back once they are closed."""
    daemon, _path, _expected = big
    get_json(daemon.port, "/api/session/big-session")  # the trace is read once, as for any first viewer
    wait_until(lambda: memory(daemon.pid) > 0, what="the daemon")
    before = memory(daemon.pid)
    cut_before = value(daemon.scrape(), "copilot_otel_http_errors_total", reason="write_timeout")
    clients = [send_get(daemon.port, "/api/session/big-session/stream" if i % 4 == 3 else "/api/session/big-session",
                        rcvbuf=4096) for i in range(CLIENTS)]
    streams = clients[3::4]
    try:
        wait_until(lambda: all(answered(sock) for sock in clients), timeout=60, what="every client answered")
        started, peak = time.monotonic(), 0.0
        while time.monotonic() - started < 3:
            peak = max(peak, memory(daemon.pid))
            time.sleep(0.1)  # sampling memory for 3 s: the peak is measured
        assert peak - before < CLIENTS * PER_CLIENT, f"{(peak - before) / 2**20:.0f} MiB for {CLIENTS} clients"
        wait_until(lambda: all(dropped_by_server(sock) for sock in streams), timeout=WRITE_TIMEOUT + 20,
                   what="every stream that does not read cut")
        cut = value(daemon.scrape(), "copilot_otel_http_errors_total", reason="write_timeout") - cut_before
        assert cut >= len(streams)
    finally:
        for sock in clients:
            sock.close()
    wait_until(lambda: memory(daemon.pid) < before + 16 * 2**20, timeout=30, what="the memory to come back")


def small_session(home: Path, name: str) -> Path:
    """A live session: the real log's first interaction, its folder locked by this test."""
    path = new_session(home, name)
    path.write_bytes(real_log())
    return path


def test_a_live_view_is_sent_only_what_its_own_session_did(tmp_path):
    """A's stream sends nothing while only B changes (B's stream sends each change); when A changes, it sends
    only A's new spans, from where it stopped."""
    a = small_session(tmp_path / "home", "session-a")
    b = small_session(tmp_path / "home", "session-b")
    log = real_log()
    per_copy = len(replayed_ids(a))
    with DaemonProcess(tmp_path / "home", tmp_path / "state", traces_file=tmp_path / "traces.jsonl",
                       args=("--idle-quiet", "0.3")) as daemon:
        wait_until(lambda: get_json(daemon.port, "/api/sessions")["total"] == 2, what="both sessions")
        # The daemon first settles what it read (an interaction's end confirmed after the quiet period, a session
        # with no process ended): A's row moves then, for A's own reasons. Wait until it no longer does.
        def a_row() -> dict:
            row = get_json(daemon.port, "/api/session/session-a?limit=1")["session"]
            return {k: v for k, v in row.items() if not k.endswith(("_s", "_ms"))}  # durations tick

        wait_until_steady(a_row, timeout=30, interval=0.5, what="A's row to settle")
        with EventStream(daemon.port, "/api/session/session-a/stream") as on_a, \
                EventStream(daemon.port, "/api/session/session-b/stream") as on_b:
            _id, first_a = on_a.message()
            _id, first_b = on_b.message()
            assert len(first_a["trace"]["spans"]) == per_copy and first_a["trace"]["more"] is False
            since_b = first_b["trace"]["next"]
            for copy in range(3):
                append(b, another_copy(log, f"b{copy}", _now()))
                wait_until(lambda copy=copy: _spans_after(on_b, since_b) >= (copy + 1) * per_copy, timeout=20,
                           what=f"B's change {copy} on B's stream")
            received = on_a.received
            time.sleep(1.0)  # A's stream had every chance to push by now (MIN_PUSH is 0.25 s)
            assert not answered(on_a.sock) and on_a.received == received, "A's stream sent something for B"
            append(a, another_copy(log, "a0", _now()))
            _event_id, change = on_a.message(timeout=20)
            trace = change["trace"]
            assert trace["reset"] is False and trace["from"] == first_a["trace"]["next"]
            ids = {s["id"] for s in trace["spans"]} | {s["id"] for s in trace["open"]}
            assert ids and ids.isdisjoint({s["id"] for s in first_a["trace"]["spans"]})


_seen_b: dict[int, int] = {}


def _spans_after(stream: EventStream, since: int) -> int:
    """Finished spans a stream has sent past ``since`` (reading whatever came)."""
    key = id(stream)
    while answered(stream.sock):
        _id, data = stream.message(timeout=5)
        _seen_b[key] = data["trace"]["next"] - since
    return _seen_b.get(key, 0)


def _now():
    from datetime import datetime

    return datetime.now(UTC)


def test_the_sessions_stream_sends_a_page_only_when_it_changed(tmp_path):
    """The sessions page's stream sends its page when a session changes, and nothing while nothing does."""
    path = small_session(tmp_path / "home", "only")
    with DaemonProcess(tmp_path / "home", tmp_path / "state", traces_file=tmp_path / "traces.jsonl",
                       args=("--idle-quiet", "0.3")) as daemon:
        wait_until(lambda: get_json(daemon.port, "/api/sessions")["total"] == 1, what="the session")
        with EventStream(daemon.port, "/api/sessions/stream") as stream:
            _id, first = stream.message()
            turns = first["sessions"][0]["turns"]
            time.sleep(1.0)  # nothing is pushed within a second (MIN_PUSH 0.25 s)
            assert not answered(stream.sock)
            append(path, another_copy(real_log(), "more", _now()))
            _id, changed = stream.message(timeout=20)
            while changed["sessions"][0]["turns"] == turns:
                _id, changed = stream.message(timeout=20)
            assert changed["sessions"][0]["turns"] > turns
            assert json.dumps(changed["sessions"][0]["id"]) == '"only"'
