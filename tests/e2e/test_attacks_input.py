"""Attacks on the way in (issue 17): label floods, a session that starves the others, permission
changes, swapped files, a log cut back and regrown, content nested a thousand deep.

Each test runs the real daemon (a subprocess) on real files; traces go to an OTLP JSON lines file.
"""

from __future__ import annotations

import json
import os
import signal
from collections import defaultdict
from pathlib import Path

import pytest

from copilot_otel.config import DEFAULT_MAX_LABEL_VALUES
from tests.support.daemon import AS_NOBODY, DaemonProcess, cannot_run_as_nobody, complete_lines_spans
from tests.support.events import SessionLog
from tests.support.files import append, new_session
from tests.support.net import wait_until
from tests.support.scrape import by_label, fetch, value
from tests.support.spans import expected_keys, key, spans_now, wait_for_keys

FAST = ("--idle-quiet", "0.3", "--rescan-interval", "1")
CAP = DEFAULT_MAX_LABEL_VALUES
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "cli" / "1.0.102"


def real_log(scenario: str) -> bytes:
    """A stored real CLI 1.0.102 log."""
    return next((FIXTURES / scenario / "session-state").glob("*/events.jsonl")).read_bytes()


def rchar(pid: int) -> int:
    """Bytes a process has read through read() and the like, from /proc/<pid>/io."""
    with open(f"/proc/{pid}/io") as handle:
        return next(int(line.split()[1]) for line in handle if line.startswith("rchar:"))


# ------------------------------------------------------------------------ defect 3: label cardinality


def test_a_flood_of_tool_names_mints_no_more_than_the_cap(tmp_path):
    """2,000 distinct tool names, one holding a secret past its 128th character: /metrics keeps at most
    --max-label-values tool values plus 'other' and counts the overflow; the secret reaches no label and
    no span name."""
    home, traces = tmp_path / "home", tmp_path / "traces.jsonl"
    path = new_session(home, "tool-flood")
    secret = "ghp_" + "Zq9" * 20
    log = SessionLog("tool-flood")
    log.start()
    log.user()
    names = [f"mcp-tool-{n:05d}" for n in range(2000)] + ["x" * 130 + secret]
    for n, name in enumerate(names):
        log.tool_turn((name, f"call-{n}"))
    log.answer()
    log.shutdown()
    path.write_bytes(log.jsonl())
    with DaemonProcess(home, tmp_path / "state", traces_file=traces, args=FAST) as daemon:
        daemon.wait_for_metric("copilot_tool_calls_total", 1, timeout=60, tool="other", outcome="success")
        span_ids = {k[1] for k in expected_keys([path])}  # ids: the long name is cut on the way out
        wait_until(lambda: span_ids <= {s.span_id for s in complete_lines_spans(traces)}, timeout=90,
                   what="every span")
        body = fetch(daemon.metrics_url)
        samples = daemon.scrape()
    tools = by_label(samples, "copilot_tool_calls_total", "tool")
    assert len(tools) == CAP + 1 and tools["other"] == len(names) - CAP
    assert value(samples, "copilot_otel_label_overflow_total", label="tool") == 2 * (len(names) - CAP)
    assert secret not in body and len(body) < 1 << 20
    spans = complete_lines_spans(traces)
    assert not [s for s in spans if secret in s.name or secret in str(s.attributes.get("gen_ai.tool.name", ""))]


# ------------------------------------------------------------------------ defect 6: one session starving the others


def test_a_flooding_session_does_not_hold_the_others_back(tmp_path):
    """One session's log receives 16 MB of junk lines at once; a normal session written just after is
    exported while the junk is still being read (reads take turns, a few MiB per file each)."""
    home, traces = tmp_path / "home", tmp_path / "traces.jsonl"
    flood = new_session(home, "a-flood")
    normal = new_session(home, "b-normal")
    junk = b"not json, just noise to read through\n"
    lines = (16 << 20) // len(junk)
    with DaemonProcess(home, tmp_path / "state", traces_file=traces, args=FAST) as daemon:
        append(flood, junk * lines)
        append(normal, real_log("plain"))
        wait_for_keys(traces, expected_keys([normal]), timeout=60)
        rejected_then = value(daemon.scrape(), "copilot_otel_lines_rejected_total", reason="not_json")
        daemon.wait_for_metric("copilot_otel_lines_rejected_total", lines, timeout=120, reason="not_json")
    assert rejected_then < lines, "the normal session waited for the whole flood"


def test_a_growing_sparse_line_is_not_read_again_and_again(tmp_path):
    """A line that grows by gigabyte holes (a sparse file) is skipped without reading its holes, and
    once it ends the next events are read; a normal session is followed all along."""
    home, traces = tmp_path / "home", tmp_path / "traces.jsonl"
    sparse = new_session(home, "sparse")
    normal = new_session(home, "normal")
    with DaemonProcess(home, tmp_path / "state", traces_file=traces, args=FAST) as daemon:
        before = rchar(daemon.pid)
        with open(sparse, "wb") as handle:
            handle.write(b'{"type":"session.info","data":{"pad":"')
        for gigabytes in (1, 2, 3, 4):
            os.truncate(sparse, gigabytes << 30)  # the line grows by a hole of a gigabyte
            wait_until(lambda: daemon.scrape(), timeout=10, what="a scrape")
        append(sparse, b'"}}\n' + real_log("plain"))
        expected = expected_keys([sparse.parent / "events.jsonl"])  # the too-long line is skipped by replay too
        append(normal, real_log("multi_turn"))
        wait_for_keys(traces, sorted(set(expected) | set(expected_keys([normal]))), timeout=60)
        samples = daemon.scrape()
        read = rchar(daemon.pid) - before
    assert value(samples, "copilot_otel_lines_rejected_total", reason="too_long") == 1
    assert read < 256 << 20, f"the daemon read {read >> 20} MiB for a 4 GiB line of holes"


# ------------------------------------------------------------------------ defect 9: permission errors


def _as_nobody(world: Path) -> tuple[Path, Path, tuple]:
    """A home and a state dir the user nobody may use, and the prefix that runs the daemon as nobody."""
    if os.geteuid() != 0:
        pytest.skip("needs root: as the same user, a root-owned folder is no obstacle to test")
    reason = cannot_run_as_nobody()
    if reason:
        pytest.skip(reason)
    home, state = world / "home", world / "state"
    (home / "session-state").mkdir(parents=True)
    state.mkdir()
    os.chown(state, 65534, 65534)
    for path in (home, home / "session-state"):
        path.chmod(0o755)
    return home, state, AS_NOBODY


def _session(home: Path, name: str, scenario: str) -> Path:
    folder = home / "session-state" / name
    folder.mkdir(mode=0o755)
    path = folder / "events.jsonl"
    path.write_bytes(real_log(scenario))
    path.chmod(0o644)
    return path


def test_a_root_owned_folder_appearing_does_not_crash_the_daemon(world_dir):
    """Running as nobody, a 0700 root-owned folder appears in session-state: it is reported once, the
    daemon goes on following the other sessions, and stops cleanly on SIGTERM."""
    home, state, prefix = _as_nobody(world_dir)
    traces = state / "traces.jsonl"
    with DaemonProcess(home, state, traces_file=traces, args=FAST, prefix=prefix) as daemon:
        private = home / "session-state" / "root-only"
        private.mkdir(mode=0o700)
        (private / "events.jsonl").write_bytes(real_log("plain"))
        after = _session(home, "after", "multi_turn")
        wait_for_keys(traces, expected_keys([after]))
        wait_until(lambda: "root-only" in daemon.log_text(), timeout=10, what="the private folder reported")
        assert fetch(daemon.health_url).startswith("ok")
    log = daemon.log_text()
    assert daemon.proc.returncode == 0 and "Traceback" not in log
    assert len([line for line in log.splitlines() if "root-only" in line and "WARNING" in line]) == 1


def test_copilot_home_losing_its_search_bit_is_survived(world_dir):
    """COPILOT_HOME unreadable at start, then readable, then unreadable again while followed: each time
    said once, the daemon stays up (its /healthz naming the folder it cannot read), and what is written
    while it is readable is exported."""
    home, state, prefix = _as_nobody(world_dir)
    traces = state / "traces.jsonl"
    home.chmod(0o700)
    with DaemonProcess(home, state, traces_file=traces, args=FAST, prefix=prefix) as daemon:
        wait_until(lambda: "Permission denied" in daemon.log_text(), timeout=10, what="the home reported")
        home.chmod(0o755)
        first = _session(home, "first", "plain")
        wait_for_keys(traces, expected_keys([first]))
        home.chmod(0o600)
        append(first, b"\n")
        wait_until(lambda: daemon.log_text().count("Permission denied") >= 2, timeout=10, what="the loss reported")
        # Up, and /healthz says why nothing can be read (issue 14: unhealthy while the folder is unreadable).
        unhealthy = (503, f"cannot read {home / 'session-state'}: Permission denied\n")
        wait_until(lambda: _health(daemon) == unhealthy, timeout=10, what="/healthz naming the folder")
        home.chmod(0o755)
        second = _session(home, "second", "multi_turn")
        wait_for_keys(traces, expected_keys([first, second]))
    assert daemon.proc.returncode == 0 and "Traceback" not in daemon.log_text()


# ------------------------------------------------------------------------ defect 10: swapped files


def test_a_log_swapped_for_a_fifo_hangs_nothing(tmp_path):
    """A followed events.jsonl replaced by a FIFO (no writer): it is refused, other sessions go on, and
    SIGTERM still stops the daemon (DaemonProcess.stop fails if it does not exit in time)."""
    home, traces = tmp_path / "home", tmp_path / "traces.jsonl"
    swapped = new_session(home, "swapped")
    swapped.write_bytes(real_log("plain"))
    with DaemonProcess(home, tmp_path / "state", traces_file=traces, args=FAST) as daemon:
        wait_for_keys(traces, expected_keys([swapped]))
        before = set(spans_now(traces))
        swapped.unlink()
        os.mkfifo(swapped)
        other = new_session(home, "other")
        other.write_bytes(real_log("multi_turn"))
        wait_for_keys(traces, sorted(before | set(expected_keys([other]))))
        wait_until(lambda: "not a regular file" in daemon.log_text(), timeout=30, what="the FIFO refused")
        code = daemon.stop(signal.SIGTERM, timeout=15)
    assert code == 0


def test_a_fifo_where_a_new_sessions_log_belongs_is_named_and_hangs_nothing(tmp_path):
    """A session folder whose events.jsonl is a FIFO from the first look (or a swap the daemon saw as a deletion,
    then a new path): named once in the log as the swap above is, other sessions go on, SIGTERM stops the daemon."""
    home, traces = tmp_path / "home", tmp_path / "traces.jsonl"
    fifo = new_session(home, "fifo")
    os.mkfifo(fifo)
    other = new_session(home, "other")
    other.write_bytes(real_log("plain"))
    with DaemonProcess(home, tmp_path / "state", traces_file=traces, args=FAST) as daemon:
        wait_for_keys(traces, expected_keys([other]))
        wait_until(lambda: f"cannot read {fifo}: is not a regular file" in daemon.log_text(), timeout=30,
                   what="the FIFO named")
        later = new_session(home, "later")
        later.write_bytes(real_log("multi_turn"))
        wait_for_keys(traces, sorted(set(expected_keys([other])) | set(expected_keys([later]))))
        code = daemon.stop(signal.SIGTERM, timeout=15)
    assert code == 0
    assert daemon.log_text().count(f"cannot read {fifo}") == 1  # once, though every rescan looks again


def test_a_session_folder_swapped_for_a_link_out_of_the_tree_is_refused(tmp_path):
    """A followed session folder later replaced by a symlink to a folder outside COPILOT_HOME: the
    outside log is never exported under the victim's session id; the swap is reported."""
    home, traces = tmp_path / "home", tmp_path / "traces.jsonl"
    victim = new_session(home, "victim")
    victim.write_bytes(real_log("plain"))
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "events.jsonl").write_bytes(real_log("plain") + real_log("multi_turn"))
    with DaemonProcess(home, tmp_path / "state", traces_file=traces, args=FAST) as daemon:
        wait_for_keys(traces, expected_keys([victim]))
        exported = set(spans_now(traces))
        victim.parent.rename(tmp_path / "victim-moved")
        victim.parent.symlink_to(outside, target_is_directory=True)
        append(outside / "events.jsonl", b"\n")
        wait_until(lambda: "leads outside" in daemon.log_text(), timeout=15, what="the swap refused")
        later = new_session(home, "later")
        later.write_bytes(real_log("failing_tool"))
        wait_for_keys(traces, sorted(exported | set(expected_keys([later]))))
    assert "Traceback" not in daemon.log_text()


# ------------------------------------------------------------------------ defect 11: truncated and regrown


def test_a_live_log_cut_back_and_regrown_never_exports_one_span_id_two_ways(tmp_path):
    """A log followed while a tool runs is cut back to its first lines and then written on: the spans
    the old generation left open end as incomplete, the new generation's have ids of their own, and
    no span id is ever exported with two different final contents (a stuck session's snapshot of an
    open span, marked github.copilot.running, is only ever replaced by that span's final form)."""
    home, traces = tmp_path / "home", tmp_path / "traces.jsonl"
    path = new_session(home, "cut-back")
    lines = real_log("multi_turn").splitlines(keepends=True)
    running = next(i for i, line in enumerate(lines) if b'"tool.execution_start"' in line) + 1
    prefix = next(i for i, line in enumerate(lines) if b'"user.message"' in line) + 1
    with DaemonProcess(home, tmp_path / "state", traces_file=traces, args=FAST) as daemon:
        append(path, b"".join(lines[:running]))
        daemon.wait_for_metric("copilot_otel_events_read_total", 1, timeout=20, type="tool.execution_start")
        os.truncate(path, len(b"".join(lines[:prefix])))
        wait_until(lambda: [s for s in complete_lines_spans(traces) if s.status_code == "ERROR"], timeout=20,
                   what="the old generation's open spans ended")
        append(path, b"".join(lines[prefix:]))
        wait_until(lambda: set(expected_keys([path], generation=1)) <= set(spans_now(traces)), timeout=30,
                   what="the new generation")
    contents, snapshots = defaultdict(set), set()
    for span in complete_lines_spans(traces):
        if span.attributes.get("github.copilot.running"):
            snapshots.add(span.span_id)
        else:
            contents[span.span_id].add(key(span))
    assert {span_id: found for span_id, found in contents.items() if len(found) > 1} == {}
    assert snapshots <= set(contents)


# ------------------------------------------------------------------------ defect 13: content nested 1,000 deep


@pytest.mark.parametrize("depth", [1000, 1100])
def test_tool_arguments_nested_a_thousand_deep_keep_their_span(tmp_path, depth):
    """With content capture on, a tool call whose arguments nest 1,000 or 1,100 levels deep (past orjson's 1,024
    and msgspec's recursion limit), both in the assistant.message that asks for it and in its
    tool.execution_start: no line is skipped as not_json nor lost to a RecursionError; the turn's chat span and
    the tool span are exported, the arguments cut where the nesting gets too deep. Past 1,024 levels each of
    the two lines is counted in copilot_otel_values_clamped_total{reason="too_deep"} and named with its line."""
    home, traces = tmp_path / "home", tmp_path / "traces.jsonl"
    path = new_session(home, "deep")
    log = SessionLog("deep")
    log.start()
    log.user()
    log.turn_start()
    log.usage(finish_reason="tool_calls")
    asked = log.message(tools=["edit"])
    asked["data"]["toolRequests"][0]["arguments"] = "DEEP"
    log.tool_start("edit", "call-1", arguments="DEEP")
    log.tool_complete("call-1")
    log.turn_end()
    log.answer()
    log.shutdown()
    lines = [json.dumps(entry, separators=(",", ":")).encode() for entry in log.entries]
    deep = b'{"a":' * depth + b"1" + b"}" * depth
    path.write_bytes(b"".join(line.replace(b'"DEEP"', deep) + b"\n" for line in lines))
    env = {"OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "true"}
    with DaemonProcess(home, tmp_path / "state", traces_file=traces, env=env, args=FAST) as daemon:
        daemon.wait_for_metric("copilot_tool_calls_total", 1, timeout=30, tool="edit", outcome="success")
        wait_until(lambda: len([s for s in complete_lines_spans(traces) if s.name.startswith("chat ")]) == 2,
                   timeout=20, what="both chat spans")
        samples = daemon.scrape()
    (tool,) = [s for s in complete_lines_spans(traces) if s.name == "execute_tool edit"]
    arguments = tool.attributes["gen_ai.tool.call.arguments"]
    assert arguments.startswith('{"a":{"a":') and '"..."' in arguments
    assert value(samples, "copilot_otel_lines_rejected_total", reason="internal_error") == 0
    assert value(samples, "copilot_otel_lines_rejected_total", reason="not_json") == 0
    cut = 2 if depth > 1024 else 0
    assert value(samples, "copilot_otel_values_clamped_total", reason="too_deep") == cut
    text = daemon.log_text()
    assert [text.count(f"{path}:{number}: ") for number in (5, 6)] == [cut // 2] * 2  # the message, the tool start
    assert text.count("nested deeper than 256 levels") == cut


def _health(daemon) -> tuple[int, str]:
    """(status, body) of /healthz, a 503 included."""
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(daemon.health_url, timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()
