"""The session model reads what really happened, for every recorded Copilot CLI version and provider.

Each fixture (tests/fixtures/cli/<version>/<scenario>/, written by the real CLI of that version
against the scripted provider or the Copilot-API stand-in) is replayed in this process. The
oracle for LLM calls is what the provider answered (meta.json), not our reading of the log;
tools, nudges and tokens are checked against the events and the session's own totals.
"""

from __future__ import annotations

import json
import logging
from collections import Counter, defaultdict
from pathlib import Path

import pytest

from copilot_otel.delivery.sinks import MemorySink
from copilot_otel.model.records import STATUS_ERROR
from copilot_otel.replay.runner import ReplayStats, replay_files
from copilot_otel.source.sources import resolve
from copilot_otel.vocab import ATTRIBUTED, Metric
from tests.support.provider import AUTOPILOT_NUDGES

ROOT = Path(__file__).resolve().parents[1] / "fixtures" / "cli"
FIXTURES = sorted(p.parent for p in ROOT.glob("*/*/meta.json"))


class Replayed:
    """One fixture, replayed: its events, its spans, its metric updates and the provider's record."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.version = path.parent.name
        self.meta = json.loads((path / "meta.json").read_text())
        (self.log,) = resolve([path])
        self.events = [json.loads(line) for line in self.log.read_text().splitlines() if line.strip()]
        sink = MemorySink()
        self.stats: ReplayStats = replay_files([self.log], sink, keep_metrics=True)
        self.spans = sink.records
        self.counters: Counter = Counter()
        for update in self.stats.metrics:
            self.counters[(update.metric, update.labels)] += update.value

    def of_type(self, kind: str) -> list[dict]:
        return [e for e in self.events if e["type"] == kind]

    def spans_of(self, operation: str) -> list:
        return [s for s in self.spans if s.attributes.get("gen_ai.operation.name") == operation]

    @property
    def lost_its_end(self) -> bool:
        """The CLI dropped its last events at exit (0.0.400 does): the log ends inside a turn."""
        return self.events[-1]["type"] == "assistant.turn_start"


@pytest.fixture(scope="module", params=FIXTURES, ids=[f"{p.parent.name}/{p.name}" for p in FIXTURES])
def fx(request) -> Replayed:
    logging.disable(logging.WARNING)
    try:
        return Replayed(request.param)
    finally:
        logging.disable(logging.NOTSET)


def test_every_answered_llm_call_is_one_chat_span(fx):
    """Every call the provider answered is one chat span and one copilot_llm_calls_total{success},
    in every version and with providers that reuse response ids: only calls the CLI itself lost
    from the log (0.0.400 drops its last events) are missing, and then only those."""
    answered = fx.meta["llm_requests"]["by_status"].get("200", 0)
    chats = [s for s in fx.spans_of("chat") if s.status != STATUS_ERROR]
    told = sum(v for (metric, labels), v in fx.counters.items() if metric is Metric.LLM_CALLS
               and labels[1] == "success")
    expected = answered
    if fx.lost_its_end:
        expected = len(fx.of_type("session.usage_record")) or len(fx.of_type("assistant.message"))
        assert expected < answered
    assert len(chats) == told == expected


# The CLIs that log nothing of a command's exit code: their result of `exit 3` is empty, nothing tells it failed.
NO_EXIT_CODE = {"0.0.400", "1.0.2"}


def test_every_tool_is_one_span_counted_with_its_outcome(fx):
    """One execute_tool span per tool.execution_start, counted by outcome as the CLI shows it: a completion
    with success false fails, and so does the scripted `exit 3` command (success true in the log, "Failed with
    exit code 3" on the CLI's screen) in every version that logs its exit code."""
    starts = fx.of_type("tool.execution_start")
    completions = {e["data"]["toolCallId"]: e["data"].get("success") is not False
                   for e in fx.of_type("tool.execution_complete")}
    assert len(fx.spans_of("execute_tool")) == len(starts)
    expected = Counter()
    for start in starts:
        outcome = completions.get(start["data"]["toolCallId"])
        if outcome and start["data"]["arguments"].get("command") == "exit 3" and fx.version not in NO_EXIT_CODE:
            outcome = False
        expected[(start["data"]["toolName"], "incomplete" if outcome is None else "success" if outcome
                  else "failure")] += 1
    told = Counter({labels: v for (metric, labels), v in fx.counters.items() if metric is Metric.TOOL_CALLS})
    assert told == expected


def test_a_command_that_exits_non_zero_is_a_failed_tool_with_its_exit_code(fx):
    """The `exit 3` call is an ERROR span, error.type command_nonzero_exit, status message "exit code 3",
    process.exit.code 3, with the CLI's own success (true) kept as github.copilot.tool.success."""
    commands = [s for s in fx.spans_of("execute_tool")
                if s.attributes.get("gen_ai.tool.call.id") in {
                    e["data"]["toolCallId"] for e in fx.of_type("tool.execution_start")
                    if e["data"]["arguments"].get("command") == "exit 3"}]
    if not commands or fx.version in NO_EXIT_CODE:
        pytest.skip("no `exit 3` command in this scenario, or this CLI logs no exit code")
    for span in commands:
        assert span.status == STATUS_ERROR
        assert span.status_message == "exit code 3"
        assert span.attributes["error.type"] == "command_nonzero_exit"
        assert span.attributes["process.exit.code"] == 3
        assert span.attributes["github.copilot.tool.success"] is True


def test_spans_nest_within_their_parents(fx):
    """Every parent is exported in the same trace, and no span starts before or ends after it."""
    by_id = {(s.trace_id, s.span_id): s for s in fx.spans}
    assert len(by_id) == len(fx.spans), "span ids repeat"
    for span in fx.spans:
        if span.parent_span_id is None:
            continue
        parent = by_id[(span.trace_id, span.parent_span_id)]
        assert parent.start_ns <= span.start_ns and span.end_ns <= parent.end_ns, (span.name, parent.name)


def test_subagent_work_hangs_under_its_task_call(fx):
    """A sub-agent's tools and calls hang under its invoke_agent span, under the task call, in every
    version (up to 1.0.24 its events carry only data.parentToolCallId, before 1.0.85 it writes no turns)."""
    if "subagent" not in fx.path.name:
        pytest.skip("no sub-agent in this scenario")
    by_id = {s.span_id: s for s in fx.spans}

    def ancestors(span):
        while span.parent_span_id is not None:
            span = by_id[span.parent_span_id]
            yield span

    children = [s for s in fx.spans if s.name.startswith("invoke_agent ") and s.parent_span_id is not None]
    if not fx.of_type("subagent.started"):  # 0.0.400 logs none: its work hangs under the task call itself
        children = [s for s in fx.spans if s.name == "execute_tool task"]
    (child,) = children
    assert child.name == "execute_tool task" or by_id[child.parent_span_id].name == "execute_tool task"
    child_tools = [s for s in fx.spans_of("execute_tool") if s.name != "execute_tool task"]
    assert child_tools and all(child in ancestors(tool) for tool in child_tools)
    child_chats = [s for s in fx.spans_of("chat") if child in ancestors(s)]
    assert len(child_chats) == 2  # the scripted sub-agent: one tool call, then its answer


def test_autopilot_nudges_are_counted_in_every_version(fx):
    """Nudges count whether the CLI flags them (1.0.50+) or only words them (earlier)."""
    if "autopilot" not in fx.path.name:
        pytest.skip("not an autopilot run")
    assert fx.counters[(Metric.AUTOPILOT_NUDGES, ())] == AUTOPILOT_NUDGES
    roots = [s for s in fx.spans if s.parent_span_id is None]
    assert sum(1 for r in roots if r.attributes.get("github.copilot.autopilot.continuation")) == AUTOPILOT_NUDGES


def test_tokens_add_up_to_the_sessions_own_totals(fx):
    """copilot_tokens_total equals the per-model totals of the session.shutdown events (whether the CLI
    told tokens per call, in part, or only there): the last one's from 1.0.70 on, when they cover the
    whole session; their sum before, when each covers the process that wrote it."""
    shutdowns = fx.of_type("session.shutdown")
    if not shutdowns:
        pytest.skip("this CLI wrote no session.shutdown")
    if tuple(map(int, fx.version.split("."))) >= (1, 0, 70):
        shutdowns = shutdowns[-1:]
    expected = Counter()
    for shutdown in shutdowns:
        data = shutdown["data"]
        totals = data.get("modelMetrics") or data.get("accountingSnapshot", {}).get("modelMetrics") or {}
        for model, metrics in totals.items():
            for key, label in (("inputTokens", "input"), ("outputTokens", "output"),
                               ("cacheReadTokens", "cache_read"), ("cacheWriteTokens", "cache_write")):
                if metrics["usage"].get(key):
                    expected[(model, label)] += metrics["usage"][key]
    told = Counter({labels[:2]: v for (metric, labels), v in fx.counters.items() if metric is Metric.TOKENS})
    assert told == expected


def _totals_of(fx: Replayed) -> list[dict]:
    """The session.shutdown data that hold the session's totals: the last one from 1.0.70 on (they cover
    the whole session), every one before (each covers the process that wrote it)."""
    shutdowns = [e["data"] for e in fx.of_type("session.shutdown")]
    return shutdowns[-1:] if tuple(map(int, fx.version.split("."))) >= (1, 0, 70) else shutdowns


def _counted(fx: Replayed, metric: Metric) -> Counter:
    return Counter({labels[:-1]: v for (m, labels), v in fx.counters.items() if m is metric})


def test_premium_requests_add_up_to_the_sessions_own_totals(fx):
    """copilot_premium_requests_total equals the premium requests the session's shutdowns total
    (totalPremiumRequests; from 1.0.102 also accountingSnapshot.totalPremiumRequestCost), and per model
    what modelMetrics says; where the CLI logs a cost per call (1.0.102), the calls alone make that total:
    the roots' github.copilot.premium_requests add up to it, the nudges' part is counted apart."""
    totals = _totals_of(fx)
    if not totals:
        pytest.skip("this CLI wrote no session.shutdown")
    expected = sum(data["totalPremiumRequests"] for data in totals)
    for data in totals:
        if "accountingSnapshot" in data:
            assert data["accountingSnapshot"]["totalPremiumRequestCost"] == data["totalPremiumRequests"]
    per_model = Counter()
    for data in totals:
        for model, metrics in data["modelMetrics"].items():
            if metrics["requests"]["cost"]:
                per_model[(model,)] += metrics["requests"]["cost"]
    assert _counted(fx, Metric.PREMIUM_REQUESTS) == per_model
    assert sum(per_model.values()) == expected
    if fx.of_type("session.usage_record"):  # cost per call
        roots = [s for s in fx.spans if s.parent_span_id is None]
        assert sum(r.attributes.get("github.copilot.premium_requests", 0) for r in roots) == expected
        nudged = sum(_counted(fx, Metric.AUTOPILOT_PREMIUM_REQUESTS).values())
        autopilot = fx.meta["mode"] == "copilot-api" and "autopilot" in fx.path.name
        assert nudged == (AUTOPILOT_NUDGES * fx.meta["model_multiplier"] if autopilot else 0)


def test_code_changes_add_up_to_the_sessions_own_totals(fx):
    """copilot_code_lines_total and copilot_files_modified_total equal the shutdowns' codeChanges."""
    totals = _totals_of(fx)
    if not totals:
        pytest.skip("this CLI wrote no session.shutdown")
    lines = _counted(fx, Metric.CODE_LINES)
    for change, key in (("added", "linesAdded"), ("removed", "linesRemoved")):
        assert lines[(change,)] == sum(data["codeChanges"][key] for data in totals)
    files = {path for data in totals for path in data["codeChanges"]["filesModified"]}
    assert sum(_counted(fx, Metric.FILES_MODIFIED).values()) == len(files)


def test_a_session_in_a_git_repository_says_where_on_every_span(fx):
    """git_repo (the stand-in, a fresh repository with a GitHub remote): every span carries the
    repository, its owner, branch and commit as the session.start context has them; the URL where the
    host is known (1.0.50+); every attributed metric has the repository label."""
    if fx.path.name != "git_repo":
        pytest.skip("not run in a git repository")
    context = fx.of_type("session.start")[0]["data"]["context"]
    owner, name = fx.meta["git"]["remote"].removesuffix(".git").split("/")[-2:]
    expected = {"vcs.repository.name": name, "vcs.owner.name": owner, "vcs.ref.head.name": fx.meta["git"]["branch"]}
    if "headCommit" in context:  # 1.0.24+
        expected["vcs.ref.head.revision"] = fx.meta["git"]["head"]
    if "repositoryHost" in context:  # 1.0.50+
        expected["vcs.repository.url.full"] = fx.meta["git"]["remote"].removesuffix(".git")
    assert fx.spans
    for span in fx.spans:
        assert {k: span.attributes.get(k) for k in expected} == expected, span.name
    attributed = [labels[-1] for (metric, labels) in fx.counters if metric in ATTRIBUTED]
    assert attributed and set(attributed) == {f"{owner}/{name}"}


def test_nothing_is_rejected_or_out_of_order(fx):
    """A real log of any version reads without a skipped line or an end whose start is not open."""
    assert not fx.stats.rejected and not fx.stats.out_of_order


def test_llm_data_from_every_version():
    """Every version gives chat spans with a model, and output tokens where its log has them."""
    seen = defaultdict(set)
    for path in ROOT.glob("*/plain/meta.json"):
        fixture = Replayed(path.parent)
        for chat in fixture.spans_of("chat"):
            seen[fixture.version].add((chat.attributes["gen_ai.request.model"],
                                       "gen_ai.usage.output_tokens" in chat.attributes))
    assert set(seen) == {p.parent.name for p in ROOT.glob("*/plain")}
    for version, kinds in seen.items():
        models = {model for model, _tokens in kinds}
        assert "unknown" not in models, version
    assert seen["1.0.24"] == {("test-model", True)}  # outputTokens on each assistant.message
    assert seen["1.0.102"] == {("test-model", True)}  # session.usage_record
