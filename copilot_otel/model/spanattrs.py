"""What each span carries: the attributes of the invoke_agent, turn, chat and tool spans.

Pure functions from plain values (and the typed views) to attribute dicts. Key order is part
of the output (the OTLP JSON lines keep it), so each builder writes its keys in one fixed order.
"""

from __future__ import annotations

from typing import Any

import orjson

from ..decode.payloads import SessionError, SessionFacts, Usage, as_num
from ..vocab import COMPLETE, MAIN_AGENT, PARTIAL, UNAVAILABLE
from . import attrs as A
from .open_spans import Totals

# A BYOK provider's kind (usage.modelProvider, else usage.providerType) -> gen_ai.provider.name
_BYOK_PROVIDERS = {"openai": "openai", "azure": "azure.ai.openai", "azure_openai": "azure.ai.openai",
                   "anthropic": "anthropic"}
_UNNAMED = ("", "other")  # a kind that names no provider


class Capture:
    """Prompt, argument and result text: exported only when the user opted in, cut to a length."""

    __slots__ = ("enabled", "max_chars")

    def __init__(self, enabled: bool, max_chars: int) -> None:
        self.enabled = enabled
        self.max_chars = max_chars

    def text(self, value: Any) -> str | None:
        """The text to export for ``value``, or None (capture off, or nothing there)."""
        if not self.enabled or value is None:
            return None
        text = value if isinstance(value, str) else to_json(value)
        return text[: self.max_chars]

    def value(self, value: Any) -> Any:
        """``value`` itself when its JSON fits the length (a tool call's arguments), else its JSON cut to it."""
        if not self.enabled or value is None:
            return None
        text = to_json(value)
        return value if len(text) <= self.max_chars else text[: self.max_chars]


MAX_JSON_DEPTH = 64  # deeper nesting in captured content is written as "..." (orjson stops at 254 levels)


def to_json(value: Any) -> str:
    """Compact JSON of any value (content capture of non-string fields); never raises."""
    try:
        return orjson.dumps(value, default=str).decode()
    except TypeError:  # nested too deep (or a value orjson cannot write): cut the nesting
        try:
            return orjson.dumps(_shallow(value, MAX_JSON_DEPTH), default=str).decode()
        except TypeError:
            return f"<{type(value).__name__} that cannot be written as JSON>"


def _shallow(value: Any, depth: int) -> Any:
    """``value`` with what is nested deeper than ``depth`` levels replaced by "..."."""
    if isinstance(value, dict):
        return {str(key): _shallow(item, depth - 1) for key, item in value.items()} if depth > 0 else "..."
    if isinstance(value, (list, tuple)):
        return [_shallow(item, depth - 1) for item in value] if depth > 0 else "..."
    return value


def base(operation: str, session_id: str) -> dict[str, Any]:
    """The attributes every GenAI span starts with (the provider and the repository come with the
    session's shared attributes when the span is exported: Outbox.shared)."""
    return {
        A.GEN_AI_OPERATION_NAME: operation,
        A.GEN_AI_CONVERSATION_ID: session_id,
    }


def vcs(facts: SessionFacts) -> dict[str, Any]:
    """Where the session runs, for every span of it: the repository, its owner and URL, branch, commit."""
    attributes: dict[str, Any] = {}
    repository = facts.repository
    if repository:
        owner, _, name = repository.rpartition("/")
        attributes[A.VCS_REPOSITORY_NAME] = name
        if owner:
            attributes[A.VCS_OWNER_NAME] = owner.split("/", 1)[0]
        host = facts.repository_host
        if facts.host_type == "github":
            attributes[A.VCS_PROVIDER_NAME] = "github"
        if host and owner:
            path = f"{owner}/_git/{name}" if facts.host_type == "ado" else repository
            attributes[A.VCS_REPOSITORY_URL_FULL] = f"https://{host}/{path}"
    if facts.branch:
        attributes[A.VCS_REF_HEAD_NAME] = facts.branch
        attributes[A.VCS_REF_HEAD_TYPE] = "branch"
    if facts.head_commit:
        attributes[A.VCS_REF_HEAD_REVISION] = facts.head_commit
    return attributes


def provider_name(usage: Usage) -> str | None:
    """gen_ai.provider.name of the provider that served a call: github for the Copilot API, a BYOK
    provider by its kind; None when the usage does not say."""
    fields = usage.fields
    byok = fields.get("isByok")
    if byok is False:
        return A.PROVIDER
    kind = fields.get("provider", {}).get("kind") if isinstance(fields.get("provider"), dict) else None
    if kind == "copilot":
        return A.PROVIDER
    if byok is True:
        for key in ("modelProvider", "providerType"):
            value = fields.get(key)
            if isinstance(value, str) and value not in _UNNAMED:
                return _BYOK_PROVIDERS.get(value, value)
    return kind if isinstance(kind, str) and kind else None


def interaction(session_id: str, interaction_id: str, facts: SessionFacts, agent: str = A.AGENT_NAME) -> dict[str, Any]:
    """The invoke_agent root of one interaction (``agent``: the custom agent the CLI runs as, else copilot)."""
    attributes = base(A.OP_INVOKE_AGENT, session_id)
    attributes[A.GEN_AI_AGENT_NAME] = agent
    attributes[A.COPILOT_INTERACTION_ID] = interaction_id
    if facts.model:
        attributes[A.GEN_AI_REQUEST_MODEL] = facts.model
    if facts.cwd:
        attributes[A.COPILOT_CWD] = facts.cwd
    if facts.cli_version:
        attributes[A.COPILOT_CLI_VERSION] = facts.cli_version
    if facts.repository:  # the CLI's own keys for the git context, on its invoke_agent spans
        attributes[A.COPILOT_GIT_REPOSITORY] = facts.repository
        if facts.host_type == "github" and "/" in facts.repository:
            attributes[A.COPILOT_GITHUB_ORG] = facts.repository.split("/", 1)[0]
    if facts.branch:
        attributes[A.COPILOT_GIT_BRANCH] = facts.branch
    if facts.head_commit:
        attributes[A.COPILOT_GIT_COMMIT_SHA] = facts.head_commit
    return attributes


def turn(session_id: str, agent: str, turn_id: str, interaction_id: str, *, autopilot: bool) -> dict[str, Any]:
    """One turn of the main agent or of a sub-agent."""
    attributes: dict[str, Any] = {
        A.GEN_AI_CONVERSATION_ID: session_id,
        A.GEN_AI_AGENT_NAME: A.AGENT_NAME if agent == MAIN_AGENT else agent,
        A.COPILOT_TURN_ID: turn_id,
        A.COPILOT_INTERACTION_ID: interaction_id,
    }
    if autopilot:
        attributes[A.COPILOT_AUTOPILOT_CONTINUATION] = True
    return attributes


def chat(session_id: str, agent: str, usage: Usage, model: str, turn: tuple[str, str] | None) -> tuple[
        dict[str, Any], dict[str, int]]:
    """One LLM call (in ``turn``: its turn and interaction ids): its attributes, and its token counts
    by type (copilot_tokens_total{type})."""
    attributes = base(A.OP_CHAT, session_id)
    provider = provider_name(usage)
    if provider is not None:
        attributes[A.GEN_AI_PROVIDER_NAME] = provider
    if agent != MAIN_AGENT:
        attributes[A.GEN_AI_AGENT_NAME] = agent
    fields = usage.fields
    attributes[A.GEN_AI_REQUEST_MODEL] = model
    attributes[A.GEN_AI_RESPONSE_MODEL] = model
    tokens = {}
    for key, attr, label in A.USAGE_TOKENS:
        value = fields.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            attributes[attr] = int(value)
            tokens[label] = int(value)
    finish = fields.get("finishReason")
    if isinstance(finish, str):
        attributes[A.GEN_AI_RESPONSE_FINISH_REASONS] = (finish,)
    ttft = fields.get("timeToFirstTokenMs")
    if isinstance(ttft, (int, float)) and not isinstance(ttft, bool):
        attributes[A.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK] = as_num(ttft) / 1000.0  # an int too large: inf
    for key, attr in A.USAGE_EXTRAS:
        value = fields.get(key)
        if isinstance(value, (int, float, str)) and not isinstance(value, bool) and value != "":
            attributes[attr] = value
    amount, status = usage.nano_aiu, usage.credits_status
    if amount is not None:
        attributes[A.COPILOT_NANO_AIU] = amount
    if status is not None and status != COMPLETE:
        attributes[A.COPILOT_AI_CREDITS_STATUS] = status
    if turn is not None:
        attributes[A.COPILOT_TURN_ID], attributes[A.COPILOT_INTERACTION_ID] = turn
    return attributes, tokens


def tool(session_id: str, agent: str, name: str, call_id: str, arguments: str | None) -> dict[str, Any]:
    """One tool execution."""
    attributes = base(A.OP_EXECUTE_TOOL, session_id)
    attributes[A.GEN_AI_TOOL_NAME] = name
    attributes[A.GEN_AI_TOOL_CALL_ID] = call_id
    attributes[A.GEN_AI_TOOL_TYPE] = "function"
    if agent != MAIN_AGENT:
        attributes[A.GEN_AI_AGENT_NAME] = agent
    if arguments is not None:
        attributes[A.GEN_AI_TOOL_CALL_ARGUMENTS] = arguments
    return attributes


def subagent(session_id: str, name: str, call_id: str) -> dict[str, Any]:
    """The invoke_agent span of a sub-agent, under the task call that spawned it."""
    attributes = base(A.OP_INVOKE_AGENT, session_id)
    attributes[A.GEN_AI_AGENT_NAME] = name
    attributes[A.GEN_AI_TOOL_CALL_ID] = call_id
    return attributes


def invocation_totals(totals: Totals) -> dict[str, Any]:
    """What one invoke_agent span's agent used: turns, LLM calls, tools, tokens, cost, premium requests
    (the root's are the main agent's in its interaction; a sub-agent's are on its own span)."""
    attributes: dict[str, Any] = {A.COPILOT_TURN_COUNT: totals.turns, A.COPILOT_LLM_CALLS: totals.llm_calls,
                                  A.COPILOT_TOOL_CALLS: totals.tool_calls}
    for _key, attr, label in A.USAGE_TOKENS:
        attributes[attr] = totals.tokens.get(label, 0)
    if totals.cost is not None:
        attributes[A.COPILOT_COST] = totals.cost
        attributes[A.COPILOT_PREMIUM_REQUESTS] = totals.premium_requests
    if totals.nano_aiu is not None:
        attributes[A.COPILOT_NANO_AIU] = totals.nano_aiu
    if totals.unpriced_calls:  # some calls reported no amount: the sum is not the whole cost
        attributes[A.COPILOT_AI_CREDITS_STATUS] = PARTIAL if totals.nano_aiu is not None else UNAVAILABLE
    return attributes


def session_error(error: SessionError) -> dict[str, Any]:
    """The exception event of a session.error: its type, codes and (with content capture) message."""
    attributes: dict[str, Any] = {A.EXCEPTION_TYPE: error.error_type}
    if error.message:
        attributes[A.EXCEPTION_MESSAGE] = error.message
    attributes[A.COPILOT_ERROR_TYPE] = error.error_type
    if error.error_code:
        attributes[A.COPILOT_ERROR_CODE] = error.error_code
    if error.status_code is not None:
        attributes[A.COPILOT_ERROR_STATUS_CODE] = error.status_code
    return attributes
