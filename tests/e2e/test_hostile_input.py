"""Hostile input: every kind of bad line is counted, logged with its file and line, and skipped,
while the good lines around it are exported; hostile paths neither stop nor mislead the daemon.

Each case plants bad lines into a real CLI log (tests/support/copilot_cli.py's corpus), in a session
folder of its own. What must be exported is the replay of the clean log under the same folder
name: a bad line may change nothing else. Both `replay` and the `run` daemon (real
subprocesses) read the same files.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.support.commands import run_replay
from tests.support.daemon import AS_NOBODY, DaemonProcess, cannot_run_as_nobody, complete_lines_spans
from tests.support.events import event_line as event
from tests.support.files import append, new_session
from tests.support.net import wait_until
from tests.support.otlp_json import read_spans
from tests.support.scrape import by_label, value
from tests.support.spans import expected_keys, key, spans_now, wait_for_keys

FAST = ("--idle-quiet", "0.3", "--rescan-interval", "0.3")
MAX_LINE = 65536  # above the CLI's own longest lines (system.message is ~22 kB)
SKIPPED = re.compile(r"^(?P<path>/\S+):(?P<line>\d+): skipped line \((?P<reason>\w+)\)")


def counters(samples: dict, name: str, label: str) -> Counter:
    """{label value: value} of one labelled counter, zeros left out."""
    return Counter({found: v for found, v in by_label(samples, name, label).items() if v})


def skipped_lines(log: str) -> list[tuple[str, int, str]]:
    """(path, line, reason) of every 'skipped line' message in a log."""
    out = []
    for line in log.splitlines():
        text = line.split(": ", 1)[1] if " WARNING " in line else line
        match = SKIPPED.match(text)
        if match:
            out.append((match["path"], int(match["line"]), match["reason"]))
    return out


def spans_of_session(spans, session_id: str) -> list:
    return sorted(key(s) for s in spans if s.attributes.get("gen_ai.conversation.id") == session_id)


# ------------------------------------------------------------------------ the cases


@dataclass(frozen=True)
class Planted:
    """Bad lines to insert after line ``after`` (1-based) of a clean log."""

    after: int
    lines: tuple[bytes, ...]
    rejected: tuple[str, ...] = ()  # the reason of each line that is a decode/duplicate rejection
    out_of_order: tuple[str, ...] = ()  # event types counted in copilot_otel_events_out_of_order_total
    unknown: tuple[str, ...] = ()  # event types that are valid input, just not understood


@dataclass
class Log:
    """A clean real log, and what the cases need to know about it."""

    lines: list[bytes]
    events: list[dict] = field(default_factory=list)

    def __post_init__(self):
        self.events = [json.loads(line) for line in self.lines]

    def index(self, predicate) -> int:
        """1-based number of the first line whose event satisfies ``predicate``."""
        return next(i for i, e in enumerate(self.events, 1) if predicate(e))

    def ts(self, number: int) -> str:
        return self.events[number - 1]["timestamp"]


def _malformed(log: Log) -> dict[str, Planted]:
    """Lines the decoder rejects (group A: 20 lines, the daemon's log burst)."""
    k = log.index(lambda e: e["type"] == "session.usage_record" and not e.get("agentId"))  # inside main turn 0
    ts = log.ts(k)
    message = log.lines[log.index(lambda e: e["type"] == "assistant.message") - 1]  # a real line to corrupt
    return {
        "not_json": Planted(k, (b"this is not json", b'{"type": "assistant.message", "timestamp": "2026-'),
                            ("not_json", "not_json")),
        "not_an_object": Planted(k, (b'["an", "array"]', b'"a string"', b"42", b"null"), ("not_object",) * 4),
        "bad_type": Planted(k, (json.dumps({"timestamp": ts, "id": "bt-1", "data": {}}).encode(),
                                event(7, ts, "bt-2"), event("", ts, "bt-3"), event(None, ts, "bt-4")),
                            ("bad_type",) * 4),
        "bad_timestamp": Planted(k, (json.dumps({"type": "session.info", "id": "ts-1", "data": {}}).encode(),
                                     event("session.info", 1764700000, "ts-2"),
                                     event("session.info", "yesterday", "ts-3")), ("bad_timestamp",) * 3),
        "timestamp_without_zone": Planted(k, (event("assistant.turn_end", ts.rstrip("Z"), "tz-1",
                                                    {"turnId": "0"}),), ("bad_timestamp",)),
        "bad_data": Planted(k, (event("session.info", ts, "bd-1", [1, 2]), event("session.info", ts, "bd-2", "x")),
                            ("bad_data",) * 2),
        "missing_data": Planted(k, (json.dumps({"type": "session.info", "id": "md-1", "timestamp": ts}).encode(),
                                    json.dumps({"type": "session.info", "id": "md-2", "timestamp": ts,
                                                "data": None}).encode()), ("bad_data",) * 2),
        "nul_bytes": Planted(k, (message.replace(b'"content":"', b'"content":"\x00', 1), b"\x00" * 64),
                             ("nul_byte",) * 2),
        "invalid_utf8": Planted(k, (event("session.info", ts, "u8-1", {"text": "PLACEHOLDER"})
                                    .replace(b"PLACEHOLDER", b"caf\xe9 \xff\xfe"),), ("invalid_utf8",)),
        "line_of_megabytes": Planted(k, (event("session.info", ts, "big-1", {"pad": "x" * (3 << 20)}),),
                                     ("too_long",)),
    }


def _misplaced(log: Log) -> dict[str, Planted]:
    """Well-formed lines the session model must not believe (group B)."""
    user = log.index(lambda e: e["type"] == "user.message" and not e.get("agentId"))
    main_interaction = log.events[user - 1]["data"]["interactionId"]
    usage = log.index(lambda e: e["type"] == "session.usage_record" and not e.get("agentId"))
    task_start = log.index(lambda e: e["type"] == "tool.execution_start" and e["data"]["toolName"] == "task")
    task_call = log.events[task_start - 1]["data"]["toolCallId"]
    sub_agent = next(e["agentId"] for e in log.events if e.get("agentId"))
    last_turn = max(i for i, e in enumerate(log.events, 1) if e["type"] == "assistant.turn_start"
                    and not e.get("agentId"))
    last_message = next(i for i in range(last_turn + 1, len(log.events) + 1)
                        if log.events[i - 1]["type"] == "assistant.message" and not log.events[i - 1].get("agentId"))
    child_complete = log.index(lambda e: e["type"] == "tool.execution_complete" and e.get("agentId"))
    # An event stamped ahead of the clock is no bad line: it is kept (tests/e2e/test_attacks_logs.py).
    return {
        # Copies of real lines (same event id): believed, they would reopen a turn or end a tool twice.
        "duplicate_id": Planted(last_message, (log.lines[last_turn - 1], log.lines[child_complete - 1]),
                                ("duplicate_id",) * 2),
        "end_before_start": Planted(user, (
            event("assistant.turn_end", log.ts(user), "early-turn-end", {"turnId": "0",
                                                                         "interactionId": main_interaction}),
            event("subagent.completed", log.ts(user), "early-subagent-end",
                  {"toolCallId": task_call, "agentName": "general-purpose"}, agentId=sub_agent),
        ), out_of_order=("assistant.turn_end", "subagent.completed")),
        "tool_never_started": Planted(usage, (event("tool.execution_complete", log.ts(usage), "orphan-complete",
                                                    {"toolCallId": "call-never-started", "success": True,
                                                     "interactionId": main_interaction, "turnId": "0"}),),
                                      out_of_order=("tool.execution_complete",)),
        # While only the main agent's last turn is open, a turn end that names the (finished) sub-agent.
        "turn_end_of_another_agent": Planted(last_turn, (event("assistant.turn_end", log.ts(last_turn),
                                                               "other-agent-end",
                                                               {"turnId": "1", "interactionId": main_interaction},
                                                               agentId=sub_agent),),
                                             out_of_order=("assistant.turn_end",)),
        "unknown_type": Planted(usage, (event("x.planted.unknown_type", log.ts(usage), "unknown-1",
                                              {"whatever": [1, {"nested": True}]}),), unknown=("x.planted.unknown_type",
                                                                                               )),
    }


GROUP_A = ("not_json", "not_an_object", "bad_type", "bad_timestamp", "timestamp_without_zone", "bad_data", "nul_bytes",
           "invalid_utf8", "line_of_megabytes")
GROUP_B = ("duplicate_id", "end_before_start", "tool_never_started", "turn_end_of_another_agent",
           "unknown_type", "missing_data")


def planted_file(log: Log, planted: Planted) -> tuple[bytes, list[int]]:
    """The log with the bad lines inserted, and their 1-based line numbers."""
    lines = list(log.lines)
    lines[planted.after:planted.after] = list(planted.lines)
    numbers = list(range(planted.after + 1, planted.after + 1 + len(planted.lines)))
    return b"".join(line + b"\n" for line in lines), numbers


@dataclass
class CaseRun:
    """Everything one group of cases produced, for the per-case assertions."""

    paths: dict  # case -> events.jsonl it was planted in
    numbers: dict  # case -> line numbers of its bad lines
    expected: dict  # case -> span keys of the clean log under the same session id
    daemon_spans: list
    daemon_log: str
    samples: dict


@pytest.fixture(scope="module")
def clean_log(cli_corpus) -> Log:
    """The real `subagent` log: main turns, a task call, a sub-agent's interleaved turns."""
    return Log(cli_corpus["subagent"].events_path.read_bytes().splitlines())


@pytest.fixture(scope="module")
def cases(clean_log) -> dict[str, Planted]:
    return {**_malformed(clean_log), **_misplaced(clean_log)}


@pytest.fixture(scope="module")
def planted_runs(clean_log, cases, tmp_path_factory) -> dict[str, CaseRun]:
    """Group A and group B, each in a COPILOT_HOME of its own, read by a daemon and by replay."""
    root = tmp_path_factory.mktemp("hostile")
    reference = root / "reference" / "session-state"
    homes, daemons, groups = {}, {}, {"A": GROUP_A, "B": GROUP_B}
    paths, numbers, expected = {}, {}, {}
    for group, names in groups.items():
        home = root / f"home-{group}"
        for name in names:
            folder = home / "session-state" / f"case-{name}"
            folder.mkdir(parents=True)
            data, lines = planted_file(clean_log, cases[name])
            (folder / "events.jsonl").write_bytes(data)
            paths[name], numbers[name] = folder / "events.jsonl", lines
            clean = reference / f"case-{name}"
            clean.mkdir(parents=True)
            (clean / "events.jsonl").write_bytes(b"".join(line + b"\n" for line in clean_log.lines))
            expected[name] = expected_keys([clean / "events.jsonl"])
        homes[group] = home
    out = {}
    try:
        for group in groups:
            daemons[group] = DaemonProcess(homes[group], root / f"state-{group}",
                                           traces_file=root / f"traces-{group}.jsonl",
                                           args=FAST + ("--max-line-bytes", str(MAX_LINE))).start()
        for group, names in groups.items():
            daemon = daemons[group]
            wait_for_keys(daemon.traces_file, sorted(k for n in names for k in expected[n]), timeout=30)
            out[group] = CaseRun(paths, numbers, expected, complete_lines_spans(daemon.traces_file), "",
                                 daemon.scrape())
    finally:
        for group, daemon in daemons.items():
            daemon.stop()
            if group in out:
                out[group].daemon_log = daemon.log_text()
    # replay: one run over both homes.
    traces = root / "replay.jsonl"
    result = run_replay(str(homes["A"]), str(homes["B"]), "--traces-file", str(traces), "--max-line-bytes",
                        str(MAX_LINE))
    out["replay"] = (result, read_spans(traces))
    return out


def _group(name: str) -> str:
    return "A" if name in GROUP_A else "B"


def _reporting_problems(log: str, path: str, planted: Planted, numbers: list[int]) -> list[str]:
    """What is missing from, or wrong in, what a log says about one case's file."""
    problems = []
    logged = [(n, r) for p, n, r in skipped_lines(log) if p == path]
    for number, reason in zip(numbers, planted.rejected):
        if (number, reason) not in logged:
            problems.append(f"line {number} not reported as 'skipped line ({reason})'")
    for number in numbers[len(planted.rejected):] if planted.out_of_order else ():
        if f"{path}:{number}:" not in log:
            problems.append(f"out-of-order line {number} not reported with its file and line")
    if planted.unknown and logged:
        problems.append(f"an unknown event type is ordinary input, yet reported: {logged}")
    problems += [f"good line {n} reported ({r})" for n, r in logged if n not in numbers]
    return problems


@pytest.mark.parametrize("name", GROUP_A + GROUP_B)
def test_replay_skips_and_names_each_bad_line(planted_runs, cases, name):
    """replay: the good lines around the bad ones export exactly what the clean log exports, and
    every bad line is named on stderr by file and line (with its reason when it is rejected)."""
    result, spans = planted_runs["replay"]
    run = planted_runs[_group(name)]
    assert result.returncode == 0, result.stderr.decode()
    assert spans_of_session(spans, f"case-{name}") == run.expected[name]
    stderr = result.stderr.decode(errors="replace")
    assert _reporting_problems(stderr, str(run.paths[name].resolve()), cases[name], run.numbers[name]) == []


@pytest.mark.parametrize("name", GROUP_A + GROUP_B)
def test_daemon_skips_and_logs_each_bad_line(planted_runs, cases, name):
    """run: the same spans as the clean log, and each bad line logged with its file and line."""
    run = planted_runs[_group(name)]
    assert spans_of_session(run.daemon_spans, f"case-{name}") == run.expected[name]
    assert _reporting_problems(run.daemon_log, str(run.paths[name]), cases[name], run.numbers[name]) == []


@pytest.mark.parametrize("group", ["A", "B"])
def test_daemon_counts_every_bad_line(planted_runs, cases, group):
    """copilot_otel_lines_rejected_total{reason} and copilot_otel_events_out_of_order_total{type}
    count exactly the planted lines; an unknown type is read, never rejected."""
    names = GROUP_A if group == "A" else GROUP_B
    samples = planted_runs[group].samples
    assert counters(samples, "copilot_otel_lines_rejected_total", "reason") == Counter(
        r for n in names for r in cases[n].rejected)
    assert counters(samples, "copilot_otel_events_out_of_order_total", "type") == Counter(
        t for n in names for t in cases[n].out_of_order)
    for name in names:
        for kind in cases[name].unknown:
            assert value(samples, "copilot_otel_events_read_total", type=kind) == 1


def test_replay_summary_counts_rejected_lines(planted_runs, cases):
    """replay ends with the number of lines it skipped."""
    result, _spans = planted_runs["replay"]
    total = sum(len(c.rejected) for c in cases.values())
    assert f"{total} malformed line(s) skipped" in result.stderr.decode(errors="replace")


# ------------------------------------------------------------------------ floods


def test_binary_file_and_floods_are_rate_limited(cli_corpus, tmp_path):
    """A binary file named events.jsonl and a log with 30 bad lines: every line is counted, at
    most 20 are logged, the good sessions next to them are exported, and 1000 made-up event
    types do not become 1000 metric series."""
    home, traces = tmp_path / "home", tmp_path / "traces.jsonl"
    plain = cli_corpus["plain"].events_path.read_bytes()
    state = home / "session-state"
    good = state / "good" / "events.jsonl"
    binary = state / "binary" / "events.jsonl"
    flood = state / "flood" / "events.jsonl"
    kinds = state / "made-up-types" / "events.jsonl"
    for path in (good, binary, flood, kinds):
        path.parent.mkdir(parents=True)
    good.write_bytes(plain)
    # A gzipped log renamed back to events.jsonl (deterministic: mtime 0).
    blob = gzip.compress(cli_corpus["subagent"].events_path.read_bytes() * 4, mtime=0)
    binary.write_bytes(blob + b"\n")
    real = plain.splitlines(keepends=True)
    flood.write_bytes(b"".join(real[:3]) + b"".join(b"garbage %d\n" % i for i in range(30)) + b"".join(real[3:]))
    ts = json.loads(real[1])["timestamp"]
    kinds.write_bytes(b"".join(event(f"x.made_up.{i}", ts, f"kind-{i}") + b"\n" for i in range(1000)))
    expected_binary = Counter(_classify(raw) for raw in _complete_lines(binary.read_bytes()))
    clean_flood = tmp_path / "reference" / "flood" / "events.jsonl"
    clean_flood.parent.mkdir(parents=True)
    clean_flood.write_bytes(plain)
    with DaemonProcess(home, tmp_path / "state", traces_file=traces, args=FAST) as daemon:
        wait_for_keys(traces, sorted(set(expected_keys([good])) | set(expected_keys([clean_flood]))))
        wait_until(lambda: sum(counters(daemon.scrape(), "copilot_otel_events_read_total", "type").values())
                   >= 1000 + 2 * len(real), what="the made-up event types")
        samples = daemon.scrape()
        assert _healthy(daemon)
    log = daemon.log_text()
    rejected = counters(samples, "copilot_otel_lines_rejected_total", "reason")
    assert rejected == expected_binary + Counter(not_json=30)
    assert len(skipped_lines(log)) == 20
    assert "Traceback" not in log
    types = [labels for (n, labels), _v in samples.items() if n == "copilot_otel_events_read_total"]
    assert len(types) < 300, f"{len(types)} series of copilot_otel_events_read_total: unbounded labels"


def _healthy(daemon: DaemonProcess) -> bool:
    import urllib.request

    with urllib.request.urlopen(daemon.health_url, timeout=5) as response:
        return response.status == 200


def _complete_lines(data: bytes) -> list[bytes]:
    """The complete, non-blank lines of a file, as a reader must see them."""
    out = []
    for raw in data.split(b"\n")[:-1]:
        raw = raw[:-1] if raw.endswith(b"\r") else raw
        if raw.strip():
            out.append(raw)
    return out


def _classify(raw: bytes) -> str:
    """Why a line of binary junk is rejected (an independent reading of the rules)."""
    if len(raw) > 16 * 1024 * 1024:
        return "too_long"
    if b"\x00" in raw:
        return "nul_byte"
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return "invalid_utf8"
    try:
        value_ = json.loads(text)
    except ValueError:
        return "not_json"
    return "not_object" if not isinstance(value_, dict) else "bad_type"


# ------------------------------------------------------------------------ a line of megabytes


def _peak_rss_kb(pid: int) -> int:
    with open(f"/proc/{pid}/status") as handle:
        return next(int(line.split()[1]) for line in handle if line.startswith("VmHWM:"))


GIANT = 64 << 20


def test_giant_line_is_skipped_without_reading_it_into_memory(cli_corpus, tmp_path):
    """A 64 MiB line, written in pieces while the daemon follows the file, is counted once as
    too_long and skipped; neither the daemon nor replay holds it in memory."""
    home, traces = tmp_path / "home", tmp_path / "traces.jsonl"
    path = new_session(home, "giant-line")
    lines = cli_corpus["plain"].events_path.read_bytes().splitlines(keepends=True)
    cut = len(lines) // 2
    piece = b'{"type":"session.info","data":{"pad":"' + b"x" * (GIANT // 4)
    with DaemonProcess(home, tmp_path / "state", traces_file=traces, args=FAST + ("--max-line-bytes",
                                                                                  str(MAX_LINE))) as daemon:
        append(path, b"".join(lines[:cut]))
        wait_until(lambda: value(daemon.scrape(), "copilot_otel_events_read_total", type="user.message"),
                   what="the first half")
        before = _peak_rss_kb(daemon.proc.pid)
        for _ in range(4):  # the daemon sees the line grow, with no newline yet
            append(path, piece)
            time.sleep(0.3)  # the scenario: the line grows over reads
        append(path, b'"}}\n' + b"".join(lines[cut:]))
        reference = tmp_path / "reference" / "giant-line"
        reference.mkdir(parents=True)
        (reference / "events.jsonl").write_bytes(b"".join(lines))
        wait_for_keys(traces, expected_keys([reference / "events.jsonl"]))
        samples = daemon.scrape()
        growth_mb = (_peak_rss_kb(daemon.proc.pid) - before) / 1024
    assert counters(samples, "copilot_otel_lines_rejected_total", "reason") == Counter(too_long=1)
    assert growth_mb < 24, f"the daemon's peak memory grew by {growth_mb:.0f} MiB for a {GIANT >> 20} MiB line"
    # replay: peak memory with the giant line against the same log without it.
    peak_with = _replay_peak_rss_kb(path, tmp_path / "with.jsonl")
    peak_without = _replay_peak_rss_kb(reference / "events.jsonl", tmp_path / "without.jsonl")
    grew = (peak_with - peak_without) / 1024
    assert grew < 24, f"replay's peak memory grew by {grew:.0f} MiB"


def _replay_peak_rss_kb(path: Path, traces: Path) -> int:
    code = ("import resource, runpy, sys\n"
            "sys.argv = ['copilot-otel', 'replay', sys.argv[1], '--traces-file', sys.argv[2], "
            f"'--max-line-bytes', '{MAX_LINE}']\n"
            "try:\n    runpy.run_module('copilot_otel.cli.main', run_name='__main__')\n"
            "finally:\n    print('PEAK', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr)\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "COPILOT_OTEL_"))}
    result = subprocess.run([sys.executable, "-c", code, str(path), str(traces)], capture_output=True, env=env,
                            timeout=120)
    stderr = result.stderr.decode(errors="replace")
    assert result.returncode == 0, stderr
    return int(re.search(r"PEAK (\d+)", stderr).group(1))


# ------------------------------------------------------------------------ paths


def test_symlinks_out_of_the_tree_and_fifos_are_not_followed(cli_corpus, tmp_path):
    """A session folder and an events.jsonl that are symlinks out of COPILOT_HOME/session-state are
    said once and never read; a FIFO named events.jsonl does not hang the daemon."""
    home, traces = tmp_path / "home", tmp_path / "traces.jsonl"
    outside = tmp_path / "outside"
    for name in ("folder", "file"):
        (outside / name).mkdir(parents=True)
        (outside / name / "events.jsonl").write_bytes(cli_corpus["multi_turn"].events_path.read_bytes())
    state = home / "session-state"
    (state / "inside").mkdir(parents=True)
    good = state / "inside" / "events.jsonl"
    good.write_bytes(cli_corpus["plain"].events_path.read_bytes())
    (state / "escaping-folder").symlink_to(outside / "folder", target_is_directory=True)
    (state / "escaping-file").mkdir()
    (state / "escaping-file" / "events.jsonl").symlink_to(outside / "file" / "events.jsonl")
    (state / "fifo").mkdir()
    os.mkfifo(state / "fifo" / "events.jsonl")
    with DaemonProcess(home, tmp_path / "state", traces_file=traces, args=FAST) as daemon:
        wait_for_keys(traces, expected_keys([good]))
        # Outside files keep growing; several rescans pass.
        for name in ("folder", "file"):
            append(outside / name / "events.jsonl", b"\n")
        time.sleep(1.5)  # several rescans: nothing more is sent
        samples = daemon.scrape()
        assert spans_now(traces) == sorted(expected_keys([good]))
    log = daemon.log_text()
    assert value(samples, "copilot_otel_files_watched") == 1
    for name in ("escaping-folder", "escaping-file"):
        said = [line for line in log.splitlines() if f"{state / name / 'events.jsonl'} leads outside" in line]
        assert len(said) == 1, f"{name}: {said}"
    assert "Traceback" not in log


def test_session_folder_deleted_while_read(cli_corpus, tmp_path):
    """A session folder deleted mid-session: its open spans are finished (as replay of what was
    read would finish them), a large log deleted mid-read stops cleanly, and the daemon goes on."""
    home, traces = tmp_path / "home", tmp_path / "traces.jsonl"
    lines = cli_corpus["subagent"].events_path.read_bytes().splitlines(keepends=True)
    cut = next(i for i, line in enumerate(lines) if b'"tool.execution_complete"' in line)  # inside the sub-agent
    partial = new_session(home, "deleted-mid-session")
    reference = tmp_path / "reference" / "deleted-mid-session"
    reference.mkdir(parents=True)
    (reference / "events.jsonl").write_bytes(b"".join(lines[:cut]))
    big = new_session(home, "deleted-mid-read")
    ts = json.loads(lines[0])["timestamp"]
    with DaemonProcess(home, tmp_path / "state", traces_file=traces, args=FAST) as daemon:
        append(partial, b"".join(lines[:cut]))
        wait_until(lambda: value(daemon.scrape(), "copilot_otel_events_read_total", type="subagent.started"),
                   what="the partial session")
        shutil.rmtree(partial.parent)
        wait_for_keys(traces, expected_keys([reference / "events.jsonl"]))
        filler = event("x.filler", ts, "ID").replace(b'"ID"', b'"filler-%d"')
        append(big, b"".join(filler % i + b"\n" for i in range(300_000)))
        wait_until(lambda: value(daemon.scrape(), "copilot_otel_events_read_total", type="x.filler"),
                   what="the big log being read")
        shutil.rmtree(big.parent)
        wait_until(lambda: value(daemon.scrape(), "copilot_otel_files_watched") == 0, what="both sessions forgotten")
        after = new_session(home, "after-the-deletions")
        append(after, cli_corpus["plain"].events_path.read_bytes())
        wait_until(lambda: set(spans_now(traces)) >= set(expected_keys([after])), what="a later session")
        assert _healthy(daemon)
    log = daemon.log_text()
    assert "Traceback" not in log and " ERROR copilot_otel" not in log
    assert f"{partial} was deleted; finishing session deleted-mid-session" in log


# ------------------------------------------------------------------------ unreadable paths (as an unprivileged user)


def _can_drop_privileges() -> str | None:
    """Why the unreadable-path test cannot run here, or None."""
    if os.geteuid() != 0:
        return None  # not root: chmod 000 already stops reads
    return cannot_run_as_nobody()


def _warnings(log: str) -> list[str]:
    """The text of every WARNING or ERROR message, without its timestamp."""
    return [line.split(" ", 2)[2] for line in log.splitlines() if " WARNING " in line or " ERROR " in line]


def test_unreadable_files_and_folders_are_reported_once_and_retried(cli_corpus, world_dir):
    """An unreadable session-state, session folder and events.jsonl are each reported, once
    however many rescans pass, retried, and read in full once permissions allow it."""
    reason = _can_drop_privileges()
    if reason:
        pytest.skip(reason)
    home = world_dir / "home"
    state = home / "session-state"
    files = {}
    for name in ("readable", "unreadable-file", "unreadable-folder"):
        (state / name).mkdir(parents=True)
        files[name] = state / name / "events.jsonl"
        files[name].write_bytes(cli_corpus["plain"].events_path.read_bytes())
    for path in [home, *home.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    daemon_state = world_dir / "state"
    daemon_state.mkdir()
    if os.geteuid() == 0:
        os.chown(daemon_state, 65534, 65534)  # nobody:nogroup
    traces = daemon_state / "traces.jsonl"
    state.chmod(0o000)
    files["unreadable-file"].chmod(0o000)
    files["unreadable-folder"].parent.chmod(0o000)
    # As nobody when the tests run as root, so that chmod 000 means unreadable.
    as_nobody = AS_NOBODY if os.geteuid() == 0 else ()
    with DaemonProcess(home, daemon_state, traces_file=traces, args=FAST, prefix=as_nobody) as daemon:
        time.sleep(1.5)  # several rescans of an unreadable session-state
        state.chmod(0o755)
        wait_for_keys(traces, expected_keys([files["readable"]]))
        time.sleep(1.5)  # several rescans of an unreadable file and folder
        warnings = _warnings(daemon.log_text())
        files["unreadable-file"].chmod(0o644)
        files["unreadable-folder"].parent.chmod(0o755)
        wait_for_keys(traces, expected_keys(files.values()))
    assert "Traceback" not in daemon.log_text()
    problems = [f"reported {n} times: {w}" for w, n in Counter(warnings).items() if n > 1]
    about = {
        "session-state": re.compile(re.escape(str(state)) + r"(?![/\w-])"),
        "file": re.compile(re.escape(str(files["unreadable-file"]))),
        "folder": re.compile(re.escape(str(files["unreadable-folder"].parent)) + r"(?![\w-])"),
    }
    problems += [f"the unreadable {what} was never reported" for what, pattern in about.items()
                 if not any(pattern.search(w) for w in warnings)]
    assert not problems, "\n".join(problems)
