"""What it costs, where: the repository on every span and on the attributed metrics, the CLI's own
keys on chat spans, each invocation's totals, premium requests (live, then checked against the
shutdown totals), code changes counted once across resumes, and session.error on the spans it fails."""

from __future__ import annotations

import pytest

from copilot_otel.config import ModelOptions
from copilot_otel.model import attrs as A
from copilot_otel.model.records import STATUS_ERROR
from copilot_otel.model.sessions import SessionModel
from copilot_otel.vocab import ATTRIBUTED, END_ERROR, END_IDLE, END_INCOMPLETE, LINES_ADDED, LINES_REMOVED, Metric
from tests.support.events import MODEL, SessionLog
from tests.support.model import feed

SID = "session-1"
ROOT = "invoke_agent copilot"
GIT = {"gitRoot": "/work", "repository": "octo-org/octo-repo", "hostType": "github", "repositoryHost": "github.com",
       "branch": "feature/x", "headCommit": "43fa21d15262e2bbff98d566224c0bb1c8f45a8f"}
COPILOT = {"isByok": False, "provider": {"id": "copilot", "kind": "copilot", "label": "GitHub Copilot"}}


def in_repository(git: dict | None = GIT) -> SessionLog:
    log = SessionLog(SID)
    log.start(**(git or {}))
    log.user()
    return log


def test_every_span_of_a_session_in_a_repository_says_where_it_runs():
    """Each span carries the VCS conventions' keys: the name apart from its owner, the URL, branch, commit."""
    log = in_repository()
    log.tool_turn(("bash", "c-1"))
    log.answer()
    log.shutdown()
    fed = feed(SessionModel(SID), log.events())
    assert len(fed.spans) == 6  # the root, two turns, two chats, one tool
    for span in fed.spans:
        a = span.attributes
        assert (a[A.VCS_REPOSITORY_NAME], a[A.VCS_OWNER_NAME], a[A.VCS_PROVIDER_NAME]) == (
            "octo-repo", "octo-org", "github")
        assert a[A.VCS_REPOSITORY_URL_FULL] == "https://github.com/octo-org/octo-repo"
        assert (a[A.VCS_REF_HEAD_NAME], a[A.VCS_REF_HEAD_TYPE], a[A.VCS_REF_HEAD_REVISION]) == (
            "feature/x", "branch", GIT["headCommit"])
    root = fed.one(ROOT).attributes  # and the CLI's own keys for the same facts
    assert (root[A.COPILOT_GIT_REPOSITORY], root[A.COPILOT_GIT_BRANCH], root[A.COPILOT_GIT_COMMIT_SHA],
            root[A.COPILOT_GITHUB_ORG]) == ("octo-org/octo-repo", "feature/x", GIT["headCommit"], "octo-org")


def test_outside_a_repository_no_span_has_vcs_keys_and_the_label_is_empty():
    """Only cwd in the context: no vcs.* key anywhere, and the attributed metrics say repository ""."""
    log = in_repository(git=None)
    log.answer(cost=1.0)
    log.shutdown()
    fed = feed(SessionModel(SID), log.events())
    assert not [key for span in fed.spans for key in span.attributes if key.startswith("vcs.")]
    attributed = [u for u in fed.metrics if u.metric in ATTRIBUTED]
    assert attributed and {u.labels[-1] for u in attributed} == {""}


def test_attributed_metrics_carry_the_repository_and_the_others_do_not():
    """sessions, LLM calls, tokens and premium requests end with the repository; turns and tools do not."""
    log = in_repository()
    log.tool_turn(("bash", "c-1"))
    log.answer(cost=1.0)
    log.shutdown()
    fed = feed(SessionModel(SID), log.events())
    assert fed.total(Metric.SESSIONS_STARTED, "octo-org/octo-repo") == 1
    assert fed.total(Metric.LLM_CALLS, MODEL, "success", "octo-org/octo-repo") == 2
    assert fed.total(Metric.PREMIUM_REQUESTS, MODEL, "octo-org/octo-repo") == 1
    assert fed.total(Metric.TOKENS, MODEL, "input", "octo-org/octo-repo") == 2 * 4700
    assert fed.total(Metric.TURNS, "main") == 2 and fed.total(Metric.TOOL_CALLS, "bash", "success") == 1


def test_a_chat_span_speaks_the_cli_s_dialect():
    """Response id, time to first chunk in seconds, reasoning level, cost, initiator, and the turn and
    interaction ids under the CLI's own keys; the Copilot API is provider github."""
    log = in_repository()
    log.turn_start()
    usage = log.usage(cost=1.0, extra={**COPILOT, "reasoningEffort": "high"}, duration_ms=200)
    log.message("All done.")
    log.turn_end()
    log.shutdown()
    chat = feed(SessionModel(SID), log.events()).one(f"chat {MODEL}").attributes
    record = usage["data"]["usage"]
    assert chat[A.GEN_AI_RESPONSE_ID] == record["apiCallId"]
    assert chat[A.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK] == pytest.approx(record["timeToFirstTokenMs"] / 1000)
    assert (chat[A.COPILOT_REASONING_LEVEL], chat[A.COPILOT_COST], chat[A.COPILOT_INITIATOR]) == (
        "high", 1.0, "user")
    assert (chat[A.COPILOT_TURN_ID], chat[A.COPILOT_INTERACTION_ID]) == ("0", "interaction-1")
    assert chat[A.GEN_AI_PROVIDER_NAME] == "github"
    assert A.COPILOT_TURN_ID == "github.copilot.turn_id" and A.COPILOT_COST == "github.copilot.cost"


@pytest.mark.parametrize("usage,provider", [
    ({"isByok": True, "providerType": "openai", "modelProvider": "other"}, "openai"),
    ({"isByok": True, "providerType": "azure"}, "azure.ai.openai"),
    ({"isByok": True, "providerType": "openai", "modelProvider": "anthropic"}, "anthropic"),
    ({"isByok": True, "providerType": "local_model", "modelProvider": "ollama"}, "ollama"),
    (COPILOT, "github"),
])
def test_a_byok_provider_is_named_by_its_kind_on_every_span(usage, provider):
    """gen_ai.provider.name is the provider the calls went to, on the chat span and on the others."""
    log = in_repository(git=None)
    log.turn_start()
    log.usage(extra=usage, finish_reason="tool_calls")
    log.message(tools=["bash"])
    log.tool_start("bash", "c-1")
    log.tool_complete("c-1")
    log.turn_end()
    log.answer(extra=usage)
    log.shutdown()
    fed = feed(SessionModel(SID), log.events())
    assert len(fed.spans) == 6
    assert {span.attributes[A.GEN_AI_PROVIDER_NAME] for span in fed.spans} == {provider}


def test_the_root_holds_the_main_agent_s_totals_and_a_sub_agent_its_own():
    """Like the CLI's own spans: the root sums its main agent's turns, calls, tools, tokens, cost and
    premium requests; the sub-agent's invoke_agent span sums the sub-agent's."""
    log = in_repository()
    log.spawn("call-task", "agent-1", "helper")
    log.tool_turn(("bash", "c-1"), agent="agent-1")
    log.answer("child", agent="agent-1", cost=1.0, initiator="sub-agent", input_tokens=10, output_tokens=2)
    log.subagent_completed("call-task", "agent-1", "helper")
    log.tool_complete("call-task")
    log.turn_end()
    log.answer(cost=1.0, initiator="agent", input_tokens=100, output_tokens=5, cache_read=7, cache_write=3)
    log.shutdown()
    fed = feed(SessionModel(SID), log.events())
    root, sub = fed.one(ROOT).attributes, fed.one("invoke_agent helper").attributes
    # main: the spawning turn (its call: 4700 in, 42 out, 137 cached, cost 0, user) and the answer
    assert (root[A.COPILOT_TURN_COUNT], root[A.COPILOT_LLM_CALLS], root[A.COPILOT_TOOL_CALLS]) == (2, 2, 1)
    assert (root[A.GEN_AI_USAGE_INPUT_TOKENS], root[A.GEN_AI_USAGE_OUTPUT_TOKENS]) == (4700 + 100, 42 + 5)
    assert (root[A.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS], root[A.GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS]) == (
        137 + 7, 3)
    assert (root[A.COPILOT_COST], root[A.COPILOT_PREMIUM_REQUESTS]) == (1.0, 0.0)
    assert (sub[A.COPILOT_TURN_COUNT], sub[A.COPILOT_LLM_CALLS], sub[A.COPILOT_TOOL_CALLS]) == (2, 2, 1)
    assert (sub[A.GEN_AI_USAGE_INPUT_TOKENS], sub[A.COPILOT_COST], sub[A.COPILOT_PREMIUM_REQUESTS]) == (
        4700 + 10, 1.0, 0.0)


def test_premium_requests_count_user_initiated_calls_and_nudges_apart():
    """A prompt and two nudges at multiplier 1 cost 3, of which 2 went to autopilot; agent-initiated
    calls cost nothing; each root holds its own interaction's premium requests."""
    log = in_repository()
    log.tool_turn(("bash", "c-1"))  # the prompt's first call: cost 0 here (a BYOK-like default)
    log.answer(cost=1.0, initiator="agent")
    for _ in range(2):
        log.user(nudge=True)
        log.answer(cost=1.0)
    log.user()
    log.answer(cost=1.0)
    log.shutdown(premium={MODEL: 3.0})
    model = SessionModel(SID)
    fed = feed(model, log.events())
    assert fed.total(Metric.PREMIUM_REQUESTS, MODEL, "octo-org/octo-repo") == 3
    assert fed.total(Metric.AUTOPILOT_PREMIUM_REQUESTS, MODEL, "octo-org/octo-repo") == 2
    assert [r.attributes[A.COPILOT_PREMIUM_REQUESTS] for r in fed.named(ROOT)] == [0.0, 1.0, 1.0, 1.0]
    assert (model.tally.premium_requests, model.tally.nudge_premium_requests) == (3.0, 2.0)


def test_the_shutdown_totals_add_premium_requests_the_calls_did_not_tell():
    """A CLI that logs no cost per call (or lost a call) still counts the shutdown's premium requests per
    model, once: a resumed session's later shutdown repeats the earlier total (cumulative since 1.0.70)."""
    log = in_repository()
    log.answer(cost=1.0)
    log.shutdown(premium={MODEL: 2.0, "gpt-5": 0.33})
    log.resume()
    log.user()
    log.answer(cost=1.0)
    log.shutdown(premium={MODEL: 3.0, "gpt-5": 0.33})
    fed = feed(SessionModel(SID), log.events())
    assert fed.total(Metric.PREMIUM_REQUESTS, MODEL) == 3
    assert fed.total(Metric.PREMIUM_REQUESTS, "gpt-5") == pytest.approx(0.33)


def test_per_process_totals_of_an_old_cli_add_up():
    """CLIs before 1.0.70 total each process apart: every shutdown's premium requests count in full."""
    log = SessionLog(SID)
    log.start(version="1.0.50")
    log.user()
    log.shutdown(premium={MODEL: 1.0})
    log.resume()
    log.user()
    log.shutdown(premium={MODEL: 2.0})
    fed = feed(SessionModel(SID), log.events())
    assert fed.total(Metric.PREMIUM_REQUESTS, MODEL) == 3


def test_code_changes_count_once_across_resumes():
    """Lines and files from each shutdown's codeChanges: only the increase over the earlier shutdown;
    a file modified again after the resume is not counted twice."""
    log = in_repository()
    log.answer()
    log.shutdown(lines=(10, 2), files=("/work/a.py",))
    log.resume()
    log.user()
    log.answer()
    log.shutdown(lines=(15, 2), files=("/work/a.py", "/work/b.py"))
    fed = feed(SessionModel(SID), log.events())
    assert fed.total(Metric.CODE_LINES, LINES_ADDED, "octo-org/octo-repo") == 15
    assert fed.total(Metric.CODE_LINES, LINES_REMOVED, "octo-org/octo-repo") == 2
    assert fed.total(Metric.FILES_MODIFIED, "octo-org/octo-repo") == 2


@pytest.mark.parametrize("capture", [False, True])
def test_a_session_error_is_the_exception_event_and_status_of_what_it_fails(capture):
    """The failed turn and the root get the error's type and HTTP status as status description and an
    exception event with the CLI's error keys; its message (the provider's text may echo what was sent)
    only with content capture on: the CLI 1.0.102's own telemetry leaves it out too."""
    log = in_repository()
    log.turn_start()
    log.turn_end()
    error = log.error(status_code=500)
    log.shutdown()
    fed = feed(SessionModel(SID, ModelOptions(capture_content=capture)), log.events())
    message = error["data"]["message"]
    expected = {A.EXCEPTION_TYPE: "query", A.COPILOT_ERROR_TYPE: "query", A.COPILOT_ERROR_STATUS_CODE: 500}
    if capture:
        expected[A.EXCEPTION_MESSAGE] = message
    for span in (fed.one("turn 0"), fed.one(ROOT)):
        assert (span.status, span.status_message) == (STATUS_ERROR, "query (HTTP 500)")
        (event,) = span.events
        assert (event.name, event.time_ns, dict(event.attributes)) == ("exception", log.ns(error), expected)
    assert fed.one(ROOT).attributes[A.COPILOT_INTERACTION_END] == END_ERROR
    assert fed.total(Metric.INTERACTIONS, END_ERROR) == 1


def test_a_span_cut_off_says_why_in_its_status():
    """A span that never got its end (a crash) fails with a description, not a bare error.type."""
    log = in_repository()
    log.calling(("bash", "c-1"))
    model = SessionModel(SID)
    fed = feed(model, log.events())
    fed.add(model.finish())
    tool = fed.one("execute_tool bash")
    assert tool.status == STATUS_ERROR and tool.status_message.startswith("never ended")
    assert fed.total(Metric.INTERACTIONS, END_INCOMPLETE) == 1 and fed.total(Metric.INTERACTIONS, END_IDLE) == 0


# ------------------------------------------------------------ AI credits (issue 22)

NANO = A.COPILOT_NANO_AIU


def _credited(*calls: dict, shutdown: dict | None = None) -> tuple:
    """A session whose calls carry these usage keyword arguments, then a shutdown with ``shutdown`` totals."""
    log = in_repository()
    for call in calls:
        log.answer(**call)
    log.shutdown(nano_aiu=shutdown)
    model = SessionModel(SID)
    return feed(model, log.events()), model


def test_a_call_without_an_amount_is_no_zero_cost():
    """aiCreditsStatus unavailable (even with totalNanoAiu 0), a negative, a bool or a text amount: no credits
    counted, the call counted apart by its status, the chat span says unavailable and carries no amount."""
    fed, model = _credited(dict(nano_aiu=3_000_000_000), dict(nano_aiu=0, credits="unavailable"),
                           dict(extra={"copilotUsage": {"totalNanoAiu": -5}, "aiCreditsStatus": "complete"}),
                           dict(extra={"copilotUsage": {"totalNanoAiu": True}}),
                           dict(extra={"copilotUsage": {"totalNanoAiu": "12"}}))
    assert fed.total(Metric.AI_CREDITS) == 3.0
    assert fed.total(Metric.LLM_CALLS_WITHOUT_CREDITS, MODEL, "unavailable") == 1
    assert fed.total(Metric.LLM_CALLS_WITHOUT_CREDITS, MODEL, "complete") == 1
    assert fed.total(Metric.LLM_CALLS_WITHOUT_CREDITS, MODEL, "unreported") == 2
    chats = [s.attributes for s in fed.named(f"chat {MODEL}")]
    assert [c.get(NANO) for c in chats] == [3_000_000_000, None, None, None, None]
    assert chats[1][A.COPILOT_AI_CREDITS_STATUS] == "unavailable" and A.COPILOT_AI_CREDITS_STATUS not in chats[0]
    roots = [s.attributes for s in fed.named(ROOT)]  # each answer here is an interaction of its own
    assert [(r.get(NANO), r.get(A.COPILOT_AI_CREDITS_STATUS)) for r in roots] == [
        (3_000_000_000, None), (None, "unavailable"), (None, "unavailable"), (None, None), (None, None)]
    assert (model.summary().nano_aiu, model.summary().credits_status) == (3_000_000_000, "partial")


def test_the_shutdown_adds_what_the_calls_did_not_report_and_never_takes_back():
    """A total beyond the calls (a compaction's credits, say) is added at shutdown, exactly; a total below
    what the calls reported subtracts nothing; a model only the totals know is counted too."""
    fed, model = _credited(dict(nano_aiu=1_000_000_001), dict(nano_aiu=2_000_000_002),
                           shutdown={MODEL: 3_500_000_003, "other-model": 7})
    assert round(fed.total(Metric.AI_CREDITS, MODEL) * 1e9) == 3_500_000_003
    assert round(fed.total(Metric.AI_CREDITS, "other-model") * 1e9) == 7
    assert model.summary().nano_aiu == 3_500_000_010
    fed, _ = _credited(dict(nano_aiu=4_000_000_000), shutdown={MODEL: 1_000_000_000})
    assert fed.total(Metric.AI_CREDITS, MODEL) == 4.0


def test_checkpoints_and_shutdowns_repeat_totals_that_count_once():
    """session.usage_checkpoint holds the session's totals so far (per model, providerModelMetrics): the
    amounts the calls reported are not counted again, and a shutdown after it adds nothing more."""
    log = in_repository()
    log.answer(nano_aiu=2_000_000_000)
    entry = {"modelId": MODEL, "metrics": {"totalNanoAiu": 2_500_000_000, "aiCreditsStatus": "complete"}}
    log.add("session.usage_checkpoint", {"totalNanoAiu": 2_500_000_000, "providerModelMetrics": [entry]})
    log.add("session.usage_checkpoint", {"totalNanoAiu": 2_500_000_000, "providerModelMetrics": [entry]})
    log.shutdown(nano_aiu={MODEL: 2_500_000_000})
    model = SessionModel(SID)
    fed = feed(model, log.events())
    assert fed.total(Metric.AI_CREDITS) == 2.5
    assert (model.summary().nano_aiu, model.summary().credits_status) == (2_500_000_000, "complete")
